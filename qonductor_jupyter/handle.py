"""A handle on a running workflow, for ``%%qonductor --no-wait``: a ``concurrent.futures.Future``
(as ipyparallel's AsyncResult is) of the values the cell assigns. The cell returns at once; the
handle reports progress, blocks for the results when asked, cancels, and puts the values the cell
assigns into the notebook's namespace when the workflow completes. Being a Future, it works with
``concurrent.futures.wait``/``as_completed``, ``add_done_callback`` and ``asyncio.wrap_future``.

One watcher per kernel settles every handle: a daemon thread with its own client and one
subscription to the orchestrator's events (the kernel's main thread stays free, and no handle costs
a thread or a connection of its own). The watcher only waits: it settles a handle with the final
reply, whose values stay bytes until the main thread takes them. They used to be unpickled on the
watching thread, and the kernel died (SIGSEGV in ``cloudpickle.loads``) when a second handle's
values came in. The cause is the allocator qiskit 2.6's Rust extension links (mimalloc 3.3.2): the
thread that first loads qiskit becomes its "main" thread, and a later thread that reuses that
exited thread's stack is taken for it and touches a freed heap (microsoft/mimalloc#1287). So qiskit
is loaded on the kernel's main thread before any watch starts, and the values are unpickled and set
on the main thread: at once through the kernel's event loop when the kernel is idle, before the
next cell runs otherwise, or in ``result()`` when it is called first.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent import futures
from typing import Any

from kernel_server.core.status import FINAL_STATES, JobState
from kernel_server.wire.messages import Cancelled

from . import workflows

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


def _on_main_thread(handle: futures.Future) -> None:
    """Have the main thread apply the handle's results as soon as it can."""
    assert isinstance(handle, WorkflowHandle)
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
    if "qiskit._accelerate" in sys.modules or not _on_main():
        return
    import qiskit  # noqa: F401


def _on_main() -> bool:
    return threading.current_thread() is threading.main_thread()


class _Watcher:
    """The kernel's one watch over its open handles. Its thread has a client of its own (its
    requests never queue behind the notebook's) and one subscription to the orchestrator's
    events: a job's final event wakes it to ask for that workflow's state. Every SWEEP_S it asks
    for every open workflow, for what a subscription misses (an event published before it
    connected, or by an orchestrator restarted on new endpoints)."""

    SWEEP_S = 2.0

    def __init__(self) -> None:
        from .client import Client

        self._client = Client()
        self._open: dict[str, list[WorkflowHandle]] = {}
        self._due: set[str] = set()
        self._wake = threading.Condition()
        self._subscription: Any = None
        self._subscribed_to: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="qonductor-watcher")
        self.thread.start()

    def add(self, handle: WorkflowHandle) -> None:
        with self._wake:
            self._open.setdefault(handle.workflow_id, []).append(handle)
            self._due.add(handle.workflow_id)  # it may be final already: no event would come
            self._wake.notify()

    def _on_event(self, event: Any) -> None:  # on the subscription's thread
        if event.state in FINAL_STATES:
            with self._wake:
                if event.workflow_id in self._open:
                    self._due.add(event.workflow_id)
                    self._wake.notify()

    def _next_due(self, swept: float) -> tuple[list[str], float]:
        """Wait for something to ask about: the workflows due, and when the last sweep was."""
        with self._wake:
            self._wake.wait_for(lambda: self._open)  # nothing open: sleep until a handle comes
            self._wake.wait_for(
                lambda: self._due, max(0.0, swept + self.SWEEP_S - time.monotonic())
            )
            due = self._due & self._open.keys()
            self._due.clear()
            if time.monotonic() >= swept + self.SWEEP_S:
                due, swept = set(self._open), time.monotonic()
        return sorted(due), swept

    def _run(self) -> None:
        swept = time.monotonic()
        while True:
            due, swept = self._next_due(swept)
            self._follow()
            for workflow_id in due:
                self._check(workflow_id)

    def _follow(self) -> None:
        """Subscribe where the client's orchestrator publishes: at first, and again after the
        client moved to a restarted one."""
        try:
            pub = self._client.info.pub
            if pub == self._subscribed_to:
                return
            if self._subscription is not None:
                self._subscription.close()
            self._subscription = self._client.subscribe(self._on_event)
            self._subscribed_to = pub
        except Exception:  # no events for now: the sweep still settles every handle
            self._subscription = self._subscribed_to = None

    def _check(self, workflow_id: str) -> None:

        try:
            reply = workflows.final_within(workflow_id, 0.0, client=self._client)
        except Exception as exc:  # orchestrator gone (the client restarts a dead one): result()
            self._settle(workflow_id, exc)  # says so, and the handle stays
            return
        if reply is not None:
            self._settle(workflow_id, reply)

    def _settle(self, workflow_id: str, outcome: Any) -> None:
        with self._wake:
            handles = self._open.pop(workflow_id, [])
        for handle in handles:
            if isinstance(outcome, BaseException):
                handle.set_exception(outcome)
            else:
                handle.set_result(outcome)


_watcher: _Watcher | None = None
_watcher_lock = threading.Lock()


def _watch(handle: WorkflowHandle) -> None:
    global _watcher
    with _watcher_lock:
        if _watcher is None:
            _watcher = _Watcher()
    _watcher.add(handle)


def _on_watcher() -> bool:
    return _watcher is not None and threading.current_thread() is _watcher.thread


class WorkflowHandle(futures.Future[Any]):
    """What ``%%qonductor --no-wait`` returns (and stores under ``-o NAME``).

    As a Future it is done when the workflow is final: ``result()`` gives the values the cell
    assigned (or raises WorkflowFailed, WorkflowCancelled, or what cut the kernel off from the
    orchestrator) and ``exception()`` that error. Done callbacks run on the watcher's thread:
    keep them short; ``status()`` answers there, ``result()`` does not (the values are taken in
    on the main thread). ``on_done(handle)`` runs on the main thread once the names are set.
    """

    def __init__(
        self,
        workflow_id: str,
        namespace: dict[str, object] | None = None,
        on_done: Callable[[WorkflowHandle], None] | None = None,
    ) -> None:
        super().__init__()
        self.workflow_id = workflow_id
        self._namespace = namespace
        self._on_done = on_done
        # The values, once the main thread has unpickled them and set the names. The handle is
        # done before that: when the final reply (still bytes) arrives.
        self._applied: futures.Future[dict[str, Any]] = futures.Future()
        self.add_done_callback(_on_main_thread)
        _load_qiskit_here()
        _watch(self)

    # ------------------------------------------------------------------ settling
    def _apply(self) -> None:
        """Unpickle the results and set the names: main thread only, once."""
        if not self.done() or self._applied.done() or not _on_main():
            return

        try:
            reply = super().result()
            namespace = self._namespace if self._namespace is not None else {}
            self._applied.set_result(
                workflows.bring_back(self.workflow_id, reply, namespace).values
            )
        except Exception as exc:
            self._applied.set_exception(exc)
        with _pending_lock:
            _pending.discard(self)
        if self._on_done is not None:
            try:
                self._on_done(self)
            except Exception:  # a display callback must not break the handle
                pass

    def _final(self, timeout: float | None) -> Any:
        """The final reply; the watch's error; TimeoutError if not final within ``timeout``."""
        try:
            return super().result(timeout)
        except futures.TimeoutError:  # not the builtin before Python 3.11
            raise TimeoutError(
                f"workflow {self.workflow_id} is still {self.status()} after {timeout} s; "
                "it goes on running (call result() again, or cancel())"
            ) from None

    def _final_reply(self) -> Any:
        """The final reply if the watcher has it, else None."""
        if not self.done() or super().exception(0) is not None:
            return None
        return super().result(0)

    def _values(self, timeout: float | None) -> dict[str, Any]:
        if _on_main():
            self._apply()
        elif _on_watcher() and not self._applied.done():
            raise RuntimeError(
                f"result() of {self.workflow_id} in a done callback: the values are unpickled "
                "on the main thread; call result() there (status() answers here)"
            )
        try:
            return self._applied.result(timeout)
        except futures.TimeoutError:
            raise TimeoutError(
                f"workflow {self.workflow_id} is final, and its values wait for the main thread"
            ) from None

    # ------------------------------------------------------------------ the API
    def status(self) -> str:
        """pending, running, done, failed or cancelled (asks the orchestrator if still open)."""
        reply = self._final_reply()
        if reply is not None:
            return reply.state.value

        return workflows.workflow_status(self.workflow_id)

    def ready(self) -> bool:  # ipyparallel's name
        return self.done()

    def result(self, timeout: float | None = None, partial: bool = False) -> dict[str, Any]:
        """The values the cell assigned, by name; blocks up to ``timeout`` seconds.

        Raises ``TimeoutError`` (the workflow keeps running), ``WorkflowFailed`` with the step's
        traceback, or ``WorkflowCancelled``; with ``partial`` those two return instead the
        values assigned before the error, as a plain cell would have kept them.
        """

        deadline = None if timeout is None else time.monotonic() + timeout
        reply = self._final(timeout)
        values = self._values(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not partial:
            workflows.raise_final(reply)
        return dict(values)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What ``result()`` raises once final (None for a done workflow); TimeoutError if not
        final within ``timeout``. Off the main thread the names are not looked at."""

        try:
            reply = self._final(timeout)
            if _on_main():
                self._values(None)  # setting the names failed: result() raises that
            workflows.raise_final(reply)
        except TimeoutError:
            raise
        except Exception as exc:
            return exc
        return None

    def get(self, timeout: float | None = None) -> dict[str, Any]:  # ipyparallel's name
        return self.result(timeout)

    # The Future's cancel(), asked to cancel the run: the reply %qonductor cancel shows, which
    # is truthy where a bool is expected (asyncio cancels a wrapped handle with it).
    def cancel(self) -> Cancelled:  # type: ignore[override]
        """Cancel the workflow and every child job (queued QPU jobs included)."""

        return workflows.cancel(self.workflow_id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the workflow is final; True if it is (on the main thread its names are
        set by then)."""
        try:
            self._final(timeout)
        except TimeoutError:
            return False
        except Exception:  # final, with the watch's error: result() raises it
            return True
        if _on_main():
            self._apply()
        return True

    def wait_interactive(
        self, interval: float = 0.5, timeout: float | None = None, stream: Any = None
    ) -> None:
        """Print the workflow's progress on one line until it is final (or ``timeout``)."""

        stream = stream or sys.stdout
        start = time.monotonic()
        while True:
            info = workflows.workflow_info(self.workflow_id)
            steps = info.steps
            done = sum(s.state is JobState.DONE for s in steps)
            elapsed = time.monotonic() - start
            stream.write(
                f"\r{self.workflow_id}: {info.state.value:<9} {done}/{len(steps)} steps "
                f"done, {elapsed:5.1f} s"
            )
            stream.flush()
            if info.state.final:
                stream.write("\n")
                self.wait(5.0)
                return
            if timeout is not None and elapsed >= timeout:
                stream.write("\n")
                return
            time.sleep(interval)

    def __repr__(self) -> str:
        reply = self._final_reply()
        return f"<WorkflowHandle {self.workflow_id}: {reply.state.value if reply else 'submitted'}>"
