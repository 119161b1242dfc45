"""Where the project's shared, read-only data lives: ``../shared/data`` beside the repository
(real IBM runtimes, queue trace, calibrations). Never copied in; code skips cleanly without it."""

from __future__ import annotations

from pathlib import Path

SHARED_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
