"""Errors a notebook user sees. Each renders as a short message under the cell, not a traceback
through our internals (IPython calls ``_render_traceback_`` when an exception defines it)."""

from __future__ import annotations

from typing import Any

from kernel_server.protocol import RemoteError


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
    """A step raised. Carries the step's own traceback (with the cell's line numbers)."""

    title = "Qonductor workflow"

    def __init__(self, reply: Any):
        self.reply = reply
        self.workflow_id = reply.workflow_id
        failed = [s for s in reply.steps if s["state"] == "failed"]
        self.step = failed[0] if failed else None
        where = ""
        if self.step is not None:
            where = (
                f" in step {self.step['step_id']} ({self.step['kind']}, "
                f"line {self.step['lineno']}-{self.step['end_lineno']})"
            )
        self.user_traceback = reply.error or "unknown error"
        super().__init__(f"workflow {reply.workflow_id} failed{where}:\n{self.user_traceback}")

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines()
        return [
            f"\x1b[31mQonductor workflow error:\x1b[0m {lines[0]}",
            *lines[1:],
            "Other workflows are not affected; fix the cell and run it again.",
        ]


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
