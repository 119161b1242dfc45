"""Worker processes die with their orchestrator.

A pool worker whose orchestrator was killed (kill -9 leaves no chance to shut the pool down) would
otherwise live on as an orphan holding memory and, worse, could finish a paid job nobody collects.
"""

from __future__ import annotations

import os
import threading
import time


def _watch(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def start_lifeline() -> None:
    """Call in a worker process (pool initializer): exit as soon as the parent process is gone."""
    parent = os.getppid()
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="lifeline").start()
