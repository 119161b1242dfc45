"""Who a request comes from and what it may touch: workflow owners and workflow capabilities.

A request signed with the orchestrator's own key has full rights. A shared orchestrator's user
sees and touches only their own workflows; a step's capability signs only its own workflow's
quantum calls, while that workflow runs.
"""

from __future__ import annotations

import contextvars

from kernel_server.control.machine import UnknownWorkflow, UserError
from kernel_server.control.manager import JobManager
from kernel_server.control.store import Store
from kernel_server.wire.envelope import Envelope
from kernel_server.wire.messages import Sample

# Who signed the request being handled ("" is the orchestrator's own key: full rights).
CURRENT_USER: contextvars.ContextVar[str] = contextvars.ContextVar("qonductor_user", default="")
# Whose key signs the replies to it: the user's, or the capability's the request was signed with.
CURRENT_SIGNER: contextvars.ContextVar[str] = contextvars.ContextVar("qonductor_signer", default="")


def signer_name(env: Envelope) -> str:
    """Whose key signs the reply: the capability the request came with, else its user."""
    return env.user if env.scope is None else env.capability


class Ownership:
    """The owner of each workflow (from the store, remembered) and the checks made with it."""

    def __init__(self, store: Store, manager: JobManager):
        self.store = store
        self.manager = manager
        self._owners: dict[str, str] = {}

    def owner_of(self, workflow_id: str) -> str:
        owner = self._owners.get(workflow_id)
        if owner is None:  # a workflow's owner never changes: ask the store once
            owner = self._owners[workflow_id] = self.store.workflow_owner(workflow_id) or ""
        return owner

    def check_owner(self, workflow_id: str) -> None:
        """A user sees and touches only their own workflows; to them others' do not exist."""
        user = CURRENT_USER.get()
        if user and self.owner_of(workflow_id) != user:
            raise UnknownWorkflow(f"no workflow {workflow_id!r}; list them with list_workflows()")

    def check_capability(self, env: Envelope) -> None:
        """A workflow's capability signs that workflow's quantum calls while it runs: nothing
        else (no listing, no status, no cancel, not another workflow)."""
        message = env.message
        run = self.manager.runs.get(env.scope or "")
        if (
            not isinstance(message, Sample)
            or message.workflow_id != env.scope
            or run is None
            or run.state.final
        ):
            raise UserError(
                f"a step's capability only runs quantum calls of its own workflow while it runs; "
                f"{message.op!r} is not one"
            )
