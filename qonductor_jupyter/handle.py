"""A handle on a running workflow, for ``%%qonductor --no-wait`` (in the manner of ipyparallel's
AsyncResult and qiskit-serverless's job): the cell returns at once; the handle reports progress,
blocks for the results when asked, cancels, and puts the values the cell assigns into the
notebook's namespace when the workflow completes.

The completion watch runs on a daemon thread that long-polls the orchestrator (the kernel's main
thread stays free). It only waits: the results stay bytes until the main thread takes them. They
used to be unpickled on the watch thread, and the kernel died (SIGSEGV in ``cloudpickle.loads``)
when a second handle's values came in. The cause is the allocator qiskit 2.6's Rust extension
links (mimalloc 3.3.2): the thread that first loads qiskit becomes its "main" thread, and a later
thread that reuses that exited thread's stack is taken for it and touches a freed heap
(microsoft/mimalloc#1287). So qiskit is loaded on the kernel's main thread before any watch
starts, and the values are unpickled and set on the main thread: at once through the kernel's
event loop when the kernel is idle, before the next cell runs otherwise, or in ``result()`` when
it is called first.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

FINAL = ("done", "failed", "cancelled")

# Handles whose results arrived and wait for the main thread (see _on_main_thread).
_pending: weakref.WeakSet[WorkflowHandle] = weakref.WeakSet()
_pending_lock = threading.Lock()
_hooked: set[int] = set()


def apply_arrived() -> None:
    """Bring every arrived workflow's values into its namespace (call on the main thread)."""
    with _pending_lock:
        handles = list(_pending)
    for handle in handles:
        handle._apply()


def _on_main_thread(handle: WorkflowHandle) -> None:
    """Have the main thread apply the handle's results as soon as it can."""
    with _pending_lock:
        _pending.add(handle)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None:
        return  # plain Python: result() applies them
    if id(shell) not in _hooked:
        # Before any cell runs, so that it sees the names (a shell without a kernel loop too).
        shell.events.register("pre_run_cell", lambda *_: apply_arrived())
        _hooked.add(id(shell))
    loop = getattr(getattr(shell, "kernel", None), "io_loop", None)
    if loop is not None:
        loop.add_callback(apply_arrived)  # thread-safe; runs on the kernel's main thread


def _load_qiskit_here() -> None:
    """Load qiskit's Rust extension on the main thread (see the module docstring): no thread
    that ends may be the first to load it."""
    if (
        "qiskit._accelerate" in sys.modules
        or threading.current_thread() is not threading.main_thread()
    ):
        return
    import qiskit  # noqa: F401


class WorkflowHandle:
    """What ``%%qonductor --no-wait`` returns (and stores under ``-o NAME``)."""

    def __init__(
        self,
        workflow_id: str,
        namespace: dict[str, Any] | None = None,
        on_done: Callable[[WorkflowHandle], None] | None = None,
        watch: bool = True,
    ) -> None:
        self.workflow_id = workflow_id
        self._namespace = namespace
        self._on_done = on_done
        self._lock = threading.Lock()
        self._arrived = threading.Event()  # the final reply is here (still bytes)
        self._finished = threading.Event()  # its values are unpickled (and set)
        self._reply: Any = None
        self._outputs: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if watch:
            _load_qiskit_here()
            self._thread = threading.Thread(
                target=self._watch, daemon=True, name=f"qonductor-{workflow_id}"
            )
            self._thread.start()

    # ------------------------------------------------------------------ the watch
    def _watch(self) -> None:
        from . import api
        from .client import Client

        # Its own connection: the long poll must not hold the kernel's shared client.
        client = Client()
        reply = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    reply = api.wait(self.workflow_id, timeout=None, client=client)
                    break
                except TimeoutError:
                    continue
                except Exception as exc:  # orchestrator gone: say so on result(), keep handle
                    error = exc
                    break
        finally:
            client.close()
        with self._lock:
            self._reply, self._error = reply, error
        self._arrived.set()
        _on_main_thread(self)

    def _apply(self) -> None:
        """Unpickle the results and set the names: main thread only, once."""
        if not self._arrived.is_set() or threading.current_thread() is not threading.main_thread():
            return
        with self._lock:
            if self._finished.is_set():
                return
            reply, error, outputs = self._reply, self._error, None
            if reply is not None and error is None:
                from . import api

                try:
                    applied = api.bring_back(self.workflow_id, reply, self._namespace or {})
                    outputs = applied.values
                except Exception as exc:
                    error = exc
            self._outputs, self._error = outputs, error
            self._finished.set()
        with _pending_lock:
            _pending.discard(self)
        if self._on_done is not None:
            try:
                self._on_done(self)
            except Exception:  # a display callback must not break the handle
                pass

    def _settled(self, timeout: float | None) -> bool:
        """Wait for the results; on the main thread, take them in right away."""
        if threading.current_thread() is threading.main_thread():
            if not self._arrived.wait(timeout):
                return False
            self._apply()
            return True
        return self._finished.wait(timeout)

    # ------------------------------------------------------------------ the API
    def status(self) -> str:
        """pending, running, done, failed or cancelled (asks the orchestrator if still open)."""
        if self._arrived.is_set() and self._reply is not None:
            return str(self._reply.state)
        from . import api

        return api.workflow_status(self.workflow_id)

    def done(self) -> bool:
        return self.status() in FINAL

    def ready(self) -> bool:  # ipyparallel's name
        return self.done()

    def result(self, timeout: float | None = None, partial: bool = False) -> dict[str, Any]:
        """The values the cell assigned, by name; blocks up to ``timeout`` seconds.

        Raises ``TimeoutError`` (the workflow keeps running), ``WorkflowFailed`` with the step's
        traceback, or ``WorkflowCancelled``; with ``partial`` those two return instead the
        values assigned before the error, as a plain cell would have kept them.
        """
        from . import api

        if self._thread is None:  # not watched: fetch directly
            return api.workflow_results(self.workflow_id, timeout, partial=partial)
        if not self._settled(timeout):
            raise TimeoutError(
                f"workflow {self.workflow_id} is still {self.status()} after {timeout} s; "
                "it goes on running (call result() again, or cancel())"
            )
        with self._lock:
            reply, outputs, error = self._reply, self._outputs, self._error
        if error is not None:
            raise error
        if not partial:
            api.raise_final(reply)
        return dict(outputs or {})

    def get(self, timeout: float | None = None) -> dict[str, Any]:  # ipyparallel's name
        return self.result(timeout)

    def cancel(self) -> dict[str, Any]:
        """Cancel the workflow and every child job (queued QPU jobs included)."""
        from . import api

        return api.cancel(self.workflow_id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the workflow is final; True if it is."""
        if self._thread is None:
            from . import api

            try:
                api.wait(self.workflow_id, timeout)
                return True
            except TimeoutError:
                return False
        return self._settled(timeout)

    def wait_interactive(
        self, interval: float = 0.5, timeout: float | None = None, stream: Any = None
    ) -> None:
        """Print the workflow's progress on one line until it is final (or ``timeout``)."""
        from . import api

        stream = stream or sys.stdout
        start = time.monotonic()
        while True:
            info = api.workflow_info(self.workflow_id)
            steps = info.steps or []
            done = sum(s["state"] == "done" for s in steps)
            elapsed = time.monotonic() - start
            stream.write(
                f"\r{self.workflow_id}: {info.state:<9} {done}/{len(steps)} steps "
                f"done, {elapsed:5.1f} s"
            )
            stream.flush()
            if info.state in FINAL:
                stream.write("\n")
                self._settled(5.0)
                return
            if timeout is not None and elapsed >= timeout:
                stream.write("\n")
                return
            time.sleep(interval)

    def __repr__(self) -> str:
        state = self._reply.state if self._arrived.is_set() and self._reply else "submitted"
        return f"<WorkflowHandle {self.workflow_id}: {state}>"
