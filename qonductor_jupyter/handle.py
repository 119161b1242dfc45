"""A handle on a running workflow, for ``%%qonductor --no-wait`` (in the manner of ipyparallel's
AsyncResult and qiskit-serverless's job): the cell returns at once; the handle reports progress,
blocks for the results when asked, cancels, and puts the values the cell assigns into the
notebook's namespace when the workflow completes.

The completion watch runs on a daemon thread that long-polls the orchestrator (the kernel's main
thread stays free). Writing the namespace from that thread is a dict update, the same thing a
cell does; it happens once, when the workflow is done.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

FINAL = ("done", "failed", "cancelled")


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
        self._finished = threading.Event()
        self._reply: Any = None
        self._outputs: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if watch:
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
        try:
            while True:
                try:
                    reply = api.wait(self.workflow_id, timeout=None, client=client)
                    break
                except TimeoutError:
                    continue
                except Exception as exc:  # orchestrator gone: say so on result(), keep handle
                    self._settle(None, exc)
                    return
        finally:
            client.close()
        self._settle(reply, None)

    def _settle(self, reply: Any, error: BaseException | None) -> None:
        from . import api

        outputs: dict[str, Any] | None = None
        if reply is not None and error is None:
            try:
                if self._namespace is not None and reply.state == "done":
                    _, outputs = api.collect(self.workflow_id, self._namespace, timeout=5.0)
                elif reply.state == "done":
                    outputs = api.workflow_results(self.workflow_id, timeout=5.0)
            except Exception as exc:
                error = exc
        with self._lock:
            self._reply, self._outputs, self._error = reply, outputs, error
        self._finished.set()
        if self._on_done is not None:
            try:
                self._on_done(self)
            except Exception:  # a display callback must not break the handle
                pass

    # ------------------------------------------------------------------ the API
    def status(self) -> str:
        """pending, running, done, failed or cancelled (asks the orchestrator if still open)."""
        if self._finished.is_set() and self._reply is not None:
            return str(self._reply.state)
        from . import api

        return api.workflow_status(self.workflow_id)

    def done(self) -> bool:
        return self.status() in FINAL

    def ready(self) -> bool:  # ipyparallel's name
        return self.done()

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """The values the cell assigned, by name; blocks up to ``timeout`` seconds.

        Raises ``TimeoutError`` (the workflow keeps running), ``WorkflowFailed`` with the step's
        traceback, or ``WorkflowCancelled``.
        """
        from . import api

        if self._thread is None:  # not watched: fetch directly
            return api.workflow_results(self.workflow_id, timeout)
        if not self._finished.wait(timeout):
            raise TimeoutError(
                f"workflow {self.workflow_id} is still {self.status()} after {timeout} s; "
                "it goes on running (call result() again, or cancel())"
            )
        with self._lock:
            reply, outputs, error = self._reply, self._outputs, self._error
        if error is not None:
            raise error
        api._raise_for(reply)
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
        return self._finished.wait(timeout)

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
                return
            if timeout is not None and elapsed >= timeout:
                stream.write("\n")
                return
            time.sleep(interval)

    def __repr__(self) -> str:
        state = self._reply.state if self._finished.is_set() and self._reply else "submitted"
        return f"<WorkflowHandle {self.workflow_id}: {state}>"
