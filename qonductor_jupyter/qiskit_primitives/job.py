"""A primitive's job: qiskit's ``BasePrimitiveJob`` over one workflow of the orchestrator.

Outside a ``%%qonductor`` cell each ``run`` is a workflow of one quantum step, and the job follows
it (``job_id()`` is the workflow id): its status, its cancel, its result when it is final, and in
a notebook the live job-status widget while ``result()`` waits. Inside a cell ``run`` is a quantum
call of the running step, so its job is done when ``run`` returns.
"""

from __future__ import annotations

import sys
from typing import Any

from qiskit.primitives import BasePrimitiveJob
from qiskit.providers import JobStatus

# A job still running after this long shows the live status widget while result() waits.
SLOW_AFTER_S = 0.5

_STATES = {
    "submitted": JobStatus.QUEUED,
    "running": JobStatus.RUNNING,
    "done": JobStatus.DONE,
    "failed": JobStatus.ERROR,
    "cancelled": JobStatus.CANCELLED,
}


class QonductorJob(BasePrimitiveJob[Any, JobStatus]):
    """The job of one ``run``: a workflow of the orchestrator (``job_id()`` is its id)."""

    def __init__(self, workflow_id: str, result: Any = None) -> None:
        super().__init__(workflow_id)
        self._result = result
        self._reply: Any = None

    def _final(self, timeout: float | None) -> Any:
        from .. import workflows

        if self._reply is None:
            reply = None
            if _in_notebook() and timeout is None:
                reply = workflows.final_within(self._job_id, SLOW_AFTER_S)
                if reply is None:
                    _show_live(self._job_id)
            self._reply = reply or workflows.wait(self._job_id, timeout)
        return self._reply

    def result(self, timeout: float | None = None) -> Any:
        """The ``PrimitiveResult``, waiting for it; the step's error if the job failed."""
        if self._result is None:
            import cloudpickle

            from .. import workflows

            reply = self._final(timeout)
            workflows._raise_for(reply)
            self._result = cloudpickle.loads((reply.outputs or {})["value"])
        return self._result

    def status(self) -> JobStatus:
        if self._result is not None:
            return JobStatus.DONE
        from .. import workflows

        return _STATES.get(workflows.workflow_status(self._job_id), JobStatus.QUEUED)

    def done(self) -> bool:
        return self.status() is JobStatus.DONE

    def running(self) -> bool:
        return self.status() is JobStatus.RUNNING

    def cancelled(self) -> bool:
        return self.status() is JobStatus.CANCELLED

    def in_final_state(self) -> bool:
        return self.status() in (JobStatus.DONE, JobStatus.ERROR, JobStatus.CANCELLED)

    def cancel(self) -> bool:
        """Cancel the workflow and its QPU jobs; False if it had already ended."""
        if self.in_final_state():
            return False
        from .. import workflows

        workflows.cancel(self._job_id)
        return True

    def wait_interactive(self) -> None:
        """The live job-status widget in a notebook (text elsewhere) until the job ends."""
        if _in_notebook():
            _show_live(self._job_id)
        self._final(None)

    def __repr__(self) -> str:
        return f"<QonductorJob {self._job_id}>"


def _in_notebook() -> bool:
    """In a kernel with a frontend, and the live status not turned off (``%config
    Qonductor.live_status = False``, read from the config where the extension is not loaded)."""
    shell = sys.modules.get("IPython")
    ipython: Any = shell.get_ipython() if shell is not None else None  # type: ignore[attr-defined]
    if ipython is None or getattr(ipython, "kernel", None) is None:
        return False
    settings = next((c for c in ipython.configurables if type(c).__name__ == "Qonductor"), None)
    if settings is not None:
        return bool(settings.live_status)
    return bool(ipython.config.get("Qonductor", {}).get("live_status", True))


def _show_live(workflow_id: str) -> None:
    from IPython.display import display

    from ..widgets import JobStatusWidget

    display(JobStatusWidget(workflow_id))
