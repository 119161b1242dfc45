"""Where the project's files live: the orchestrator's own folders and the shared, read-only data.

The orchestrator's state (``qonductor_home``) and its connection file's folder (``runtime_dir``)
follow Jupyter's data and runtime folders; ``QONDUCTOR_HOME`` moves both (tests use it for
isolation).

The shared data (real IBM runtimes, queue trace, calibrations) is configured by ``QONDUCTOR_DATA``
(a folder); without it, the ``shared/data`` folder beside the checkout, where the development
layout keeps it. Never copied into the package: code that needs a file says so with
``missing_data`` and the rest skips cleanly without it.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "QONDUCTOR_DATA"


def qonductor_home() -> Path:
    """Root of the orchestrator's files.

    ``QONDUCTOR_HOME`` overrides everything (tests use it for isolation); otherwise the connection
    file sits in the Jupyter runtime folder and the state in the Jupyter data folder.
    """
    env = os.environ.get("QONDUCTOR_HOME")
    if env:
        return Path(env)
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "qonductor"


def runtime_dir() -> Path:
    env = os.environ.get("QONDUCTOR_HOME")
    if env:
        return Path(env) / "runtime"
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def shared_data_dir() -> Path:
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def missing_data(path: Path) -> str:
    """What to tell a user whose data file is not where the configuration points."""
    return f"{path}: not found; set {DATA_ENV} to the folder that holds {path.name}"


SHARED_DATA_DIR = shared_data_dir()
