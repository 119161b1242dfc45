"""Worker processes die with their orchestrator.

A pool worker whose orchestrator was killed (kill -9 leaves no chance to shut the pool down) would
otherwise live on as an orphan holding memory and, worse, could finish a paid job nobody collects.

The orchestrator passes its own pid to the pool initializer. A spawned worker runs its initializer
only after its imports (seconds under load): reading ``os.getppid()`` there would, if the
orchestrator died meanwhile, remember the reaper (init or a subreaper) as the parent and watch it
for ever. With the pid from the parent the worker sees at once that its orchestrator is gone.

On Linux the kernel also kills the worker the moment the orchestrator dies (``PR_SET_PDEATHSIG``),
even when it is busy in C code holding the GIL, where the watching thread could not run. Two
documented caveats: it fires when the *thread* that started the worker ends (the pools start their
workers from the orchestrator's event-loop thread, which lives as long as the orchestrator), and a
parent that died before the call sends nothing, hence the ``getppid()`` check after setting it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 0.5


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os._exit(0)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def start_lifeline(parent: int | None = None) -> None:
    """Call in a worker process (pool initializer): exit as soon as the parent process is gone.

    ``parent`` is the pid of the process that started the pool (its ``os.getpid()``, passed in the
    initializer's arguments). Without it the parent is read here, which is only right if it is still
    alive now.
    """
    if parent is None:
        parent = os.getppid()
    die_with_parent()
    # After the prctl: a parent that died before it sends no signal (and died before we ran at all
    # if it is not our parent now).
    if os.getppid() != parent:
        os._exit(0)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="lifeline").start()
