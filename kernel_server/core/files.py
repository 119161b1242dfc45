"""Atomic, owner-only file writes: the files that hold keys, users and cell code.

``jupyter_core.paths.secure_write`` (what jupyter_client writes connection files with) creates the
file 0600 and checks the mode took before anything is written; writing to a temporary name and
``os.replace``-ing it over the old file means a reader never sees half a file, and a crash
mid-write leaves the old one.
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_core.paths import secure_write


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable and writable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with secure_write(str(tmp)) as fh:
        fh.write(text)
    os.replace(tmp, path)
