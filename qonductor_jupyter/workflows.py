"""Talking to workflows that exist: their state, their results, cancel and plan choice, and
bringing a final workflow's values back into the notebook.

Apart from ``api`` (which makes workflows from cells and functions) so that a ``WorkflowHandle``
settles itself through these without importing the module that creates handles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from kernel_server.core.dataflow import DELETED
from kernel_server.core.status import DeviceStatus, ImageSummary, WorkflowState, WorkflowSummary
from kernel_server.wire.errors import RemoteError, RequestTooLarge
from kernel_server.wire.messages import (
    Cancel,
    Cancelled,
    ChoosePlan,
    GetFleet,
    GetResults,
    GetStatus,
    ListImages,
    ListWorkflows,
    Message,
    R,
    Request,
    WorkflowReply,
    reply_type,
)

from .client import get_client
from .errors import (
    InputError,
    OrchestratorError,
    WorkflowCancelled,
    WorkflowFailed,
    from_remote,
)
from .namespace_update import Applied, apply_outputs
from .splitter import WorkflowGraph


def _request(message: Message, timeout: float = 60.0, client: Any = None) -> Message:
    try:
        return (client or get_client()).request(message, timeout=timeout)
    except RemoteError as exc:
        raise from_remote(exc) from None
    except RequestTooLarge as exc:
        raise InputError(str(exc)) from None


def _ask(message: Request[R], timeout: float = 60.0, client: Any = None) -> R:
    """The orchestrator's reply to ``message``, of the type the request promises."""
    reply = _request(message, timeout, client)
    expected = reply_type(message)
    if not isinstance(reply, expected):
        raise OrchestratorError(
            f"{message.op}: the orchestrator answered {reply.op!r}, not {expected.op!r}"
        )
    return reply  # type: ignore[return-value]  # the isinstance above is R's


def _workflow_reply(
    message: GetStatus | GetResults, timeout: float = 60.0, client: Any = None
) -> WorkflowReply:
    """The orchestrator's WorkflowReply to a status or results request."""
    return _ask(message, timeout, client)


# -------------------------------------------------------------------- images
def workflow_status(workflow_id: str) -> str:
    """The workflow's state as text: submitted, running, done, failed or cancelled."""
    return workflow_info(workflow_id).state.value


def workflow_info(workflow_id: str) -> WorkflowReply:
    return _workflow_reply(GetStatus(workflow_id=workflow_id))


def wait(
    workflow_id: str,
    timeout: float | None = None,
    on_poll: Callable[[WorkflowReply], None] | None = None,
    client: Any = None,
) -> WorkflowReply:
    """Block until the workflow is final (long-polling); raises TimeoutError after ``timeout``.

    A background waiter passes its own ``client``: a long poll holds its client's socket, and on
    the shared one it would stall every other request of the kernel until the workflow ends.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"workflow {workflow_id} did not finish within {timeout} s")
        reply = _workflow_reply(
            GetResults(workflow_id=workflow_id, wait_s=left), timeout=left + 30.0, client=client
        )
        if on_poll is not None:
            on_poll(reply)
        if reply.state.final:
            return reply


def final_within(workflow_id: str, seconds: float, client: Any = None) -> WorkflowReply | None:
    """One long poll of at most ``seconds``: the final reply (with values), or None."""
    reply = _workflow_reply(
        GetResults(workflow_id=workflow_id, wait_s=seconds), seconds + 30.0, client
    )
    return reply if reply.state.final else None


def _raise_for(reply: WorkflowReply) -> None:
    if reply.state is WorkflowState.FAILED:
        raise WorkflowFailed(reply)
    if reply.state is WorkflowState.CANCELLED:
        raise WorkflowCancelled(f"workflow {reply.workflow_id} was cancelled; it has no results")


def workflow_results(
    workflow_id: str, timeout: float | None = None, partial: bool = False
) -> dict[str, Any]:
    """Wait for the workflow and return the values its code assigned, by name.

    A failed or cancelled workflow raises, unless ``partial``: then the values assigned before
    the error (or the cancel) come back, as a plain Python cell would have left them: the names
    of every step before the failing one, and what the failing step assigned before it raised.
    """
    reply = wait(workflow_id, timeout)
    if not partial:
        _raise_for(reply)
    return {
        name: cloudpickle.loads(blob)
        for name, blob in (reply.outputs or {}).items()
        if blob != DELETED  # ``del name`` ran in the cell: like Python, the name is gone
    }


def cancel(workflow_id: str) -> Cancelled:
    """Cancel the workflow and every child job; the reply says its state and the jobs stopped."""
    return _ask(Cancel(workflow_id=workflow_id))


def choose_plan(workflow_id: str, step_id: int, plan: int | str) -> Any:
    """Answer a ``--plan ask`` step: run it with plan number ``plan`` (or "off")."""
    return _ask(ChoosePlan(workflow_id=workflow_id, step_id=int(step_id), plan=plan)).plan


def list_images() -> list[ImageSummary]:
    return _ask(ListImages()).images


def list_workflows(limit: int = 100) -> list[WorkflowSummary]:
    """The newest workflows, newest first."""
    return _ask(ListWorkflows(limit=limit)).workflows


def fleet() -> list[DeviceStatus]:
    """The fleet's QPUs now: description, whether online, queue."""
    return _ask(GetFleet()).devices


@dataclass
class Submission:
    """What the kernel sent for a cell: to bring its results back the way Python would leave
    them (unchanged inputs keep their identity, in-place changes land on the notebook's own
    objects, cell functions find their source)."""

    source: str
    graph: WorkflowGraph
    blobs: dict[str, bytes] = field(default_factory=dict)


_submissions: dict[str, Submission] = {}
_submissions_lock = threading.Lock()


def raise_final(reply: WorkflowReply, applied: Applied | None = None) -> None:
    """WorkflowFailed or WorkflowCancelled for a workflow that did not finish, saying what the
    notebook kept (``applied``); nothing for a done one."""
    if reply.state is WorkflowState.FAILED:
        raise WorkflowFailed(reply, applied)
    if reply.state is WorkflowState.CANCELLED:
        kept = f"; names set before it stopped: {', '.join(applied.names)}" if applied else ""
        raise WorkflowCancelled(f"workflow {reply.workflow_id} was cancelled{kept}")


def bring_back(workflow_id: str, reply: WorkflowReply, namespace: dict[str, object]) -> Applied:
    """Set the names a final workflow left behind in the namespace (main thread only: values
    are unpickled here, and qiskit objects must not be built beside the user's own code)."""
    with _submissions_lock:
        submission = _submissions.pop(workflow_id, None)
    return apply_outputs(
        workflow_id,
        reply.outputs or {},
        namespace,
        sent=submission.blobs if submission else {},
        mutated_only=submission.graph.mutated_only if submission else (),
        source=submission.source if submission else None,
    )
