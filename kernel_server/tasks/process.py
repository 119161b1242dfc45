"""What the work running in one worker process shares: the lock that lets one thread at a time
run it, and the process's address (where a step or a QPU job ran)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

# One thread at a time runs our work in a process: a Dask worker with several threads would
# otherwise run qiskit and Aer concurrently in one process, which we saw end in SIGSEGV (with
# seceded step threads). A step lets go of it only while it waits for a QPU job.
EXCLUSIVE = threading.Lock()

# The thread that holds EXCLUSIVE: a thread the step's own code started has nothing to let go.
_exclusive_owner: int | None = None


@contextlib.contextmanager
def exclusive() -> Any:
    """Hold EXCLUSIVE for a step, remembering which thread holds it (see ``others_may_run``)."""
    global _exclusive_owner
    with EXCLUSIVE:
        _exclusive_owner = threading.get_ident()
        try:
            yield
        finally:
            _exclusive_owner = None


@contextlib.contextmanager
def others_may_run() -> Any:
    """Let other work of this process run while the step waits for its QPU job."""
    global _exclusive_owner
    if _exclusive_owner != threading.get_ident():
        yield
        return
    _exclusive_owner = None
    EXCLUSIVE.release()
    try:
        yield
    finally:
        EXCLUSIVE.acquire()
        _exclusive_owner = threading.get_ident()


def worker_address() -> str:
    """Where this code runs: the Dask worker's address, or ``local:<pid>`` in a local pool."""
    distributed = sys.modules.get("distributed")  # imported only where Dask runs us
    if distributed is not None:
        try:
            return distributed.get_worker().address
        except ValueError:  # not inside a Dask task
            pass
    return f"local:{os.getpid()}"
