"""What goes wrong on the wire: frames that are not a valid signed message, a request that is too
large to send, and an error the orchestrator reported in its reply."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_server.wire.envelope import Envelope


class ProtocolError(Exception):
    """A frame set that is not a valid, signed message; ``reason`` says which check failed."""

    def __init__(self, message: str, reason: str = "malformed"):
        super().__init__(message)
        self.reason = reason


class InvalidMessage(ProtocolError):
    """A correctly signed request whose body has a field of the wrong type or out of range.

    The sender is known (the signature checked out), so unlike other protocol errors it gets a
    reply saying which field was wrong, and the request runs no handler.
    """

    def __init__(self, op: str, problem: str):
        super().__init__(f"bad {op!r} request: {problem}", reason="invalid")
        self.op = op
        self.problem = problem
        self.envelope: Envelope | None = None


class RequestTooLarge(ValueError):
    """A request bigger than the orchestrator accepts; refused before it is sent."""


class RemoteError(Exception):
    """An error the orchestrator reported for a request (its type name and message)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
