"""Errors a notebook user sees. Each renders as a short message under the cell, not a traceback
through our internals (IPython calls ``_render_traceback_`` when an exception defines it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_server.core.status import JobState
from kernel_server.wire.errors import RemoteError

if TYPE_CHECKING:
    from kernel_server.wire.messages import WorkflowReply


class QonductorError(Exception):
    """Base class: something the user can fix; the message says what and how."""

    title = "Qonductor"

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{self.title} error:\x1b[0m {self}"]


class InputError(QonductorError):
    title = "Qonductor input"


class ConfigurationError(QonductorError):
    title = "Qonductor configuration"


class WorkflowCancelled(QonductorError):
    title = "Qonductor"


class WorkflowFailed(QonductorError):
    """A step raised. Carries the step's own traceback (with the cell's line numbers) and what
    was kept: the names the cell had assigned before the error (``applied``)."""

    title = "Qonductor workflow"

    def __init__(self, reply: WorkflowReply, applied: Any = None):
        self.reply = reply
        self.workflow_id = reply.workflow_id
        self.applied = applied
        failed = [s for s in reply.steps if s.state is JobState.FAILED]
        # The earliest failing step in the cell is the error Python would have raised.
        self.step = min(failed, key=lambda s: s.step_id or 0) if failed else None
        where = ""
        if self.step is not None:
            step = self.step
            lines = f"line {step.lineno}"
            if step.end_lineno != step.lineno:
                lines = f"lines {step.lineno}-{step.end_lineno}"
            where = f" in step {step.step_id} ({step.kind}, {lines})"
        self.user_traceback = reply.error or "unknown error"
        self.error_type = _last_error_type(self.user_traceback)
        super().__init__(f"workflow {reply.workflow_id} failed{where}:\n{self.user_traceback}")

    def kept(self) -> list[str]:
        """Lines on what the failure left in the notebook."""
        if self.applied is None:
            return []
        if not self.applied:
            return ["No names were set: the error came before the cell assigned any."]
        return [
            "Names set before the error (as plain Python keeps them): "
            + ", ".join(self.applied.names),
            *self.applied.notes(),
        ]

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines()
        return [
            f"\x1b[31mQonductor workflow error:\x1b[0m {lines[0]}",
            *lines[1:],
            *self.kept(),
            f"They stay available as qonductor_jupyter.workflow_results({self.workflow_id!r}, "
            "partial=True). Other workflows are not affected.",
        ]


def _last_error_type(traceback_text: str) -> str | None:
    """The exception's type name from the last line of a formatted traceback."""
    for line in reversed(traceback_text.strip().splitlines()):
        head = line.split(":", 1)[0].strip()
        if head and not line.startswith(" ") and head.replace(".", "").replace("_", "").isalnum():
            return head.rsplit(".", 1)[-1]
    return None


class OrchestratorError(QonductorError):
    title = "Qonductor orchestrator"


_REMOTE_USER_ERRORS = {
    "UserError",
    "UnknownWorkflow",
    "CircuitTooWide",
    "ConfigError",
    "UnknownImage",
    "ValueError",
    "KeyError",
}


def from_remote(exc: RemoteError) -> QonductorError:
    if exc.type_name in ("ConfigError",):
        return ConfigurationError(exc.message)
    if exc.type_name in _REMOTE_USER_ERRORS:
        return QonductorError(exc.message.strip("'\""))
    return OrchestratorError(f"{exc.type_name}: {exc.message}")
