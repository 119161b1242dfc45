"""A worker process's connection back to the orchestrator, for its steps' quantum calls.

Each thread has its own DEALER socket (a ZeroMQ socket must not be shared between threads, and a
Dask worker may run steps on several), signing with the capability of the step it runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from kernel_server.tasks.process import others_may_run
from kernel_server.wire.envelope import (
    MAX_PAYLOAD_BYTES,
    capability_signer,
    check_size,
    decode,
    encode,
    new_request_id,
)
from kernel_server.wire.errors import RequestTooLarge
from kernel_server.wire.messages import ErrorReply, Message

# Each thread's link (a WorkerLink) and the orchestrator's router endpoint they connect to.
_links = threading.local()
_endpoint: str | None = None


class QuantumCallError(RuntimeError):
    """The orchestrator refused or failed a sample/estimate call."""


def connect_to(router_endpoint: str) -> None:
    """Point this process's quantum calls at an orchestrator's router (connect lazily)."""
    global _endpoint
    _endpoint = router_endpoint
    _links.__dict__.clear()


def in_worker() -> bool:
    """True in a process that runs workflow steps (a pool worker or a configured Dask worker)."""
    return _endpoint is not None


class WorkerLink:
    """DEALER socket from a worker process to the orchestrator's ROUTER, signing with one
    workflow's capability."""

    def __init__(self, endpoint: str, capability: str, max_payload_bytes: int | None = None):
        import zmq

        self.max_payload_bytes = max_payload_bytes or MAX_PAYLOAD_BYTES
        self._zmq = zmq
        self.signer = capability_signer(capability)
        self.ctx: zmq.Context = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.pid = os.getpid()
        self.config = (endpoint, capability)

    def close(self) -> None:
        self.sock.close()

    def request(self, message: Message) -> Any:
        reply = self.request_all([message])[0]
        if isinstance(reply, QuantumCallError):
            raise reply
        return reply

    def request_all(self, messages: Sequence[Message]) -> list[Any]:
        """Send every message at once and wait for all their replies (in the same order): the
        PUBs of one primitive call run side by side. A refused or failed one gives its
        QuantumCallError in its place; the others are kept."""
        rids = []
        for message in messages:
            rid = new_request_id()
            frames = encode(message, self.signer, rid)
            try:
                check_size(frames, self.max_payload_bytes)
            except RequestTooLarge as exc:
                raise QuantumCallError(str(exc)) from None
            rids.append((rid, frames))
        for _, frames in rids:
            self.sock.send_multipart(frames)
        replies: dict[str, Any] = {}
        with others_may_run():
            while len(replies) < len(rids):
                env = decode(self.sock.recv_multipart(), self.signer)
                if env.request_id not in {rid for rid, _ in rids}:
                    continue  # a late reply to an abandoned request
                if isinstance(env.message, ErrorReply):
                    error = f"{env.message.type}: {env.message.message}"
                    replies[env.request_id] = QuantumCallError(error)
                else:
                    replies[env.request_id] = env.message
        return [replies[rid] for rid, _ in rids]


def get_link(capability: str) -> WorkerLink:
    """This thread's link for the step's capability (a new one when the step changed)."""
    link = getattr(_links, "link", None)
    if link is None or link.pid != os.getpid() or link.config != (_endpoint, capability):
        if _endpoint is None:
            raise RuntimeError("worker was not initialised with the orchestrator's address")
        if not capability:
            raise QuantumCallError("this step was given no capability for quantum calls")
        if link is not None and link.pid == os.getpid():
            link.close()
        link = _links.link = WorkerLink(_endpoint, capability)
    return link
