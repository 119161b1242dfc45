"""Every request says which reply it gets (what a client's typed request returns)."""

from __future__ import annotations

import pytest

from kernel_server.wire.messages import (
    MESSAGES,
    Cancel,
    Cancelled,
    GetStatus,
    Message,
    Request,
    WorkflowReply,
    reply_type,
)

pytestmark = pytest.mark.unit


def test_every_request_promises_a_reply_that_is_no_request() -> None:
    requests = [cls for cls in MESSAGES.values() if issubclass(cls, Request)]
    assert {cls.op for cls in requests} >= {"invoke", "deploy", "cancel", "fleet", "sample"}
    for cls in requests:
        promised = reply_type(cls)
        assert issubclass(promised, Message) and not issubclass(promised, Request)
        assert MESSAGES[promised.op] is promised  # decodable by its op
    assert reply_type(Cancel(workflow_id="wf")) is Cancelled
    assert reply_type(GetStatus(workflow_id="wf")) is WorkflowReply
