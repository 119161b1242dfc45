"""Where the project's shared, read-only data lives (real IBM runtimes, queue trace, calibrations).

Configured by ``QONDUCTOR_DATA`` (a folder); without it, the ``shared/data`` folder beside the
checkout, where the development layout keeps it. Never copied into the package: code that needs a
file says so with ``missing_data`` and the rest skips cleanly without it.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "QONDUCTOR_DATA"


def shared_data_dir() -> Path:
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def missing_data(path: Path) -> str:
    """What to tell a user whose data file is not where the configuration points."""
    return f"{path}: not found; set {DATA_ENV} to the folder that holds {path.name}"


SHARED_DATA_DIR = shared_data_dir()
