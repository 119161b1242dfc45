"""How messages travel and are checked: the signed envelope, sealed events and the replay guard.

Two layers, kept apart on purpose (as in jupyter_client's ``session.py``):

* **payload**: a typed message (``messages.py``) travels as a msgpack map
  ``{"op", "id", "ts", "nonce", "body"}``; unknown keys of the body are ignored, so that an older
  client can talk to a newer orchestrator.
* **envelope**: ``[signature, payload]`` frames, where the signature is the HMAC-SHA256 hex digest
  of the payload under the connection key. A frame set with a missing or wrong signature is dropped.

User objects (cell inputs, outputs, circuits) are cloudpickle blobs *inside* the signed payload, so
nothing is unpickled before its signature has been checked. Both sides need all of this: kernels
and step processes to speak the protocol, the orchestrator to check it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack
import msgspec

from kernel_server.wire.errors import InvalidMessage, ProtocolError, RequestTooLarge
from kernel_server.wire.messages import MESSAGES, ErrorReply, Message

# Limits that keep one bad client from exhausting the orchestrator (configurable later).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024

# A signature frame "~<capability id>:<digest>" is signed with a workflow's capability.
CAPABILITY_MARK = "~"


def check_size(frames: list[bytes], limit: int) -> None:
    size = len(frames[-1])
    if size > limit:
        raise RequestTooLarge(
            f"this request is {size / 2**20:.1f} MiB, over the orchestrator's limit of "
            f"{limit / 2**20:.1f} MiB (limits.max_payload_bytes); pass smaller values, e.g. load "
            "large data inside the cell instead of from the notebook"
        )


@dataclass(frozen=True)
class Envelope:
    message: Message
    request_id: str
    ts: float
    nonce: str
    user: str = ""  # who signed it: "" is the orchestrator's own key, else a user's (KeyRing)
    # Signed with a workflow's capability: the one workflow the request may touch, and the
    # capability's name in the signature frame (its reply is signed with it).
    scope: str | None = None
    capability: str = ""


class Verifier(Protocol):
    """What ``decode`` checks a signature with: one key (a ``Signer``), or the orchestrator's
    key ring (``security.keyring.KeyRing``), which knows every key it accepts."""

    def identify(self, payload: bytes, signature: bytes) -> tuple[str, str | None] | None:
        """Who signed the payload ("" for the owner key) and, for a workflow's capability, that
        workflow; None for no valid signature."""


class Signer:
    """HMAC-SHA256 over the payload bytes, as in the Jupyter wire protocol.

    A user of a shared orchestrator signs with their own key, and the signature frame names them
    (``user:digest``) so the orchestrator knows which key to check it with.
    """

    def __init__(self, key: bytes, user: str = ""):
        if not key:
            raise ValueError("an empty key would make every signature valid")
        if ":" in user:
            raise ValueError("a user name cannot contain ':'")
        self._key = key
        self.user = user

    @property
    def key(self) -> bytes:
        return self._key

    def sign(self, payload: bytes) -> bytes:
        digest = hmac.new(self._key, payload, hashlib.sha256).hexdigest().encode()
        return f"{self.user}:".encode() + digest if self.user else digest

    def verify(self, payload: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.sign(payload), signature)

    def identify(self, payload: bytes, signature: bytes) -> tuple[str, str | None] | None:
        return (self.user, None) if self.verify(payload, signature) else None


def capability_signer(token: str) -> Signer:
    """How a step signs its quantum calls with the capability it was given."""
    cap_id, _, secret = token.partition(".")
    if not cap_id or not secret:
        raise ValueError("not a capability token")
    return Signer(secret.encode(), CAPABILITY_MARK + cap_id)


def new_request_id() -> str:
    return secrets.token_hex(8)


def _payload(message: Message, request_id: str, nonce: str) -> bytes:
    """The envelope every message travels in (``parse`` reads it)."""
    return msgpack.packb(
        {
            "op": message.op,
            "id": request_id,
            "ts": time.time(),
            "nonce": nonce,
            "body": message.to_dict(),
        },
        use_bin_type=True,
    )


def encode(message: Message, signer: Signer, request_id: str | None = None) -> list[bytes]:
    payload = _payload(message, request_id or new_request_id(), secrets.token_hex(8))
    return [signer.sign(payload), payload]


def decode(
    frames: list[bytes], signer: Verifier, max_payload_bytes: int = MAX_PAYLOAD_BYTES
) -> Envelope:
    """Check the size and the signature, then parse. ProtocolError for anything else."""
    if len(frames) != 2:
        raise ProtocolError(f"expected 2 frames (signature, payload), got {len(frames)}")
    signature, payload = frames
    if len(payload) > max_payload_bytes:
        raise ProtocolError(
            f"payload of {len(payload)} bytes exceeds {max_payload_bytes}", reason="oversized"
        )
    who = signer.identify(payload, signature)
    if who is None:
        raise ProtocolError("bad signature", reason="bad_signature")
    capability = signature.partition(b":")[0].decode() if who[1] is not None else ""
    return parse(payload, *who, capability=capability)


def parse(
    payload: bytes, user: str = "", scope: str | None = None, capability: str = ""
) -> Envelope:
    """The envelope of an authenticated payload; its body converted to its message class."""
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable payload: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("body"), dict):
        raise ProtocolError("payload is not a message map")
    ts, rid, nonce = data.get("ts", 0.0), data.get("id", ""), data.get("nonce", "")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise ProtocolError("payload timestamp is not a number")
    if not isinstance(rid, str) or not isinstance(nonce, str):
        raise ProtocolError("payload id and nonce must be strings")
    op = data.get("op", "")
    cls = MESSAGES.get(op) if isinstance(op, str) else None
    if cls is None:
        raise ProtocolError(f"unknown op {op!r}")
    try:
        message = cls.from_dict(data["body"])
    except msgspec.ValidationError as exc:
        invalid = InvalidMessage(cls.op, str(exc))
        invalid.envelope = Envelope(ErrorReply(), rid, float(ts), nonce, user, scope, capability)
        raise invalid from None
    return Envelope(message, rid, float(ts), nonce, user, scope, capability)


class EventSealer:
    """Events readable by their owner alone: each is encrypted and authenticated (ChaCha20-
    Poly1305, an AEAD from ``cryptography``) under a key derived from its owner's key (HKDF-
    SHA256), and published on a topic derived from it too.

    HMAC signatures (the requests' envelope) prove who sent a message but hide nothing; every
    subscriber to the event socket receives every frame, so the frames themselves must be
    unreadable to anyone but the owner. A subscriber subscribes to its own topic; frames of
    other topics would not open with its key anyway.
    """

    def __init__(self, key: bytes):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        derived = HKDF(hashes.SHA256(), 64, salt=None, info=b"qonductor events v1").derive(key)
        self._aead = ChaCha20Poly1305(derived[:32])
        self.topic = b"ev." + hashlib.sha256(derived[32:]).hexdigest()[:32].encode()

    def seal(self, message: Message) -> list[bytes]:
        payload = _payload(message, "", "")  # the AEAD's nonce below makes each frame unique
        nonce = os.urandom(12)
        return [self.topic, nonce + self._aead.encrypt(nonce, payload, self.topic)]

    def open(self, frames: list[bytes]) -> Envelope:
        """The event in frames this key sealed; ProtocolError for any other frames."""
        from cryptography.exceptions import InvalidTag

        if len(frames) != 2 or frames[0] != self.topic or len(frames[1]) < 28:
            raise ProtocolError("not an event for this key", reason="foreign")
        try:
            payload = self._aead.decrypt(frames[1][:12], frames[1][12:], self.topic)
        except InvalidTag:
            raise ProtocolError("event does not open with this key", reason="foreign") from None
        return parse(payload)


class ReplayGuard:
    """Refuses signed messages outside a time window around now, or seen before within it.

    A captured message stays validly signed forever; the window bounds how long it could be
    replayed, and the remembered nonces refuse it inside the window. Memory is bounded by the
    message rate times the window.
    """

    def __init__(self, window_s: float = 60.0, clock: Any = time.time):
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._next_prune = 0.0

    def check(self, env: Envelope) -> None:
        now = self._clock()
        if abs(now - env.ts) > self.window_s:
            raise ProtocolError(
                f"message timestamp {env.ts:.0f} is more than {self.window_s:.0f} s from now",
                reason="stale",
            )
        if not env.nonce or env.nonce in self._seen:
            raise ProtocolError("replayed message (nonce seen before)", reason="replayed")
        self._seen[env.nonce] = env.ts
        if now >= self._next_prune:
            horizon = now - 2 * self.window_s
            self._seen = {n: t for n, t in self._seen.items() if t >= horizon}
            self._next_prune = now + self.window_s / 4
