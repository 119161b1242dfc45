"""Wire protocol between notebook kernels, classical workers and the orchestrator.

Two layers, kept apart on purpose (as in jupyter_client's ``session.py``):

* **payload**: every message is a typed dataclass with a class-level ``op``; it travels as a msgpack
  map ``{"op", "id", "ts", "nonce", "body"}``. ``from_dict`` ignores unknown keys so that an older
  client can talk to a newer orchestrator.
* **envelope**: ``[signature, payload]`` frames, where the signature is the HMAC-SHA256 hex digest
  of the payload under the connection key. A frame set with a missing or wrong signature is dropped.

User objects (cell inputs, outputs, circuits) are cloudpickle blobs *inside* the signed payload, so
nothing is unpickled before its signature has been checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import msgpack
import msgspec

PROTOCOL_VERSION = 1
CONNECTION_FILE_NAME = "qonductor-server.json"

# Limits that keep one bad client from exhausting the orchestrator (configurable later).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024


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


def check_size(frames: list[bytes], limit: int) -> None:
    size = len(frames[-1])
    if size > limit:
        raise RequestTooLarge(
            f"this request is {size / 2**20:.1f} MiB, over the orchestrator's limit of "
            f"{limit / 2**20:.1f} MiB (limits.max_payload_bytes); pass smaller values, e.g. load "
            "large data inside the cell instead of from the notebook"
        )


class RemoteError(Exception):
    """An error the orchestrator reported for a request (its type name and message)."""

    def __init__(self, type_name: str, message: str):
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------

MESSAGES: dict[str, type[Message]] = {}

# Bounds every decoded message is checked against before a handler sees it.
# Ids name files and rows: letters, digits, "_", "-" and "." (never ".."), at most 128.
Id = Annotated[str, msgspec.Meta(pattern=r"^(?!.*\.\.)[A-Za-z0-9_.-]{0,128}$")]
StepId = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
Shots = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=86_400.0)]


class Message(msgspec.Struct, kw_only=True):
    """A typed message body. Decoding converts the body into the class of its ``op`` and
    refuses wrong types and out-of-range values (msgspec's strict conversion); unknown keys are
    ignored, so that an older client can talk to a newer orchestrator."""

    op: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.op:
            if cls.op in MESSAGES:
                raise TypeError(f"duplicate message op {cls.op!r}")
            MESSAGES[cls.op] = cls

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The body as this class; ``msgspec.ValidationError`` names the first bad field."""
        # msgpack carries bytes natively: a str where bytes belong is a wrong type, not base64.
        return msgspec.convert(data, cls, builtin_types=(bytes, bytearray))


# Requests from kernels (and the CLI) ---------------------------------------------------------


class Ping(Message):
    op: ClassVar[str] = "ping"


class Shutdown(Message):
    op: ClassVar[str] = "shutdown"


class CreateWorkflow(Message):
    """Register a workflow image: the split cell (graph) plus its code and configuration."""

    op: ClassVar[str] = "create_workflow"
    source: str = ""
    graph: dict[str, Any] = {}
    config: dict[str, Any] = {}
    name: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    # Objects bound into the image itself (the function-list form of create_workflow).
    bound: dict[str, bytes] = {}


class Deploy(Message):
    op: ClassVar[str] = "deploy"
    image_id: Id = ""
    config: dict[str, Any] = {}


class Invoke(Message):
    """Run an image. The client chooses ``workflow_id``, so a resent request is idempotent."""

    op: ClassVar[str] = "invoke"
    image_id: Id = ""
    workflow_id: Id = ""
    inputs: dict[str, bytes] = {}
    options: dict[str, Any] = {}


class GetStatus(Message):
    op: ClassVar[str] = "status"
    workflow_id: Id = ""


class GetResults(Message):
    """Long-poll: the reply comes when the workflow is final or after ``wait_s`` seconds."""

    op: ClassVar[str] = "results"
    workflow_id: Id = ""
    wait_s: Seconds = 0.0


class ListImages(Message):
    op: ClassVar[str] = "list_images"


class ListWorkflows(Message):
    op: ClassVar[str] = "list_workflows"
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100


class Cancel(Message):
    op: ClassVar[str] = "cancel"
    workflow_id: Id = ""


class ChoosePlan(Message):
    """The user's plan for a quantum step of a ``--plan ask`` workflow (a number, or "off")."""

    op: ClassVar[str] = "choose_plan"
    workflow_id: Id = ""
    step_id: StepId = 0
    plan: Annotated[int, msgspec.Meta(ge=0)] | Annotated[str, msgspec.Meta(max_length=32)] = 0


class GetFleet(Message):
    op: ClassVar[str] = "fleet"


# Requests from classical workers (quantum calls made inside a step) -------------------------


class Sample(Message):
    """A step's ``sample(...)`` call: circuits (QPY, a data format: nothing in it is code) to run
    on one QPU.

    ``num_qubits`` and ``fingerprint`` are the orchestrator's: it reads them off the circuits
    themselves when the request arrives and overwrites whatever a client sent.
    """

    op: ClassVar[str] = "sample"
    workflow_id: Id = ""
    step_id: StepId = 0
    circuits: bytes = b""
    shots: Shots = 1
    kind: Annotated[str, msgspec.Meta(max_length=32)] = "sample"
    num_qubits: int = 0
    # workers.circuit_identity.fingerprint of the circuits ("" unknown): what estimates and
    # plans are remembered under.
    fingerprint: str = ""


# Replies ------------------------------------------------------------------------------------


class Ok(Message):
    op: ClassVar[str] = "ok"
    data: dict[str, Any] = {}


class ErrorReply(Message):
    op: ClassVar[str] = "error"
    type: str = "Exception"
    message: str = ""


class Pong(Message):
    op: ClassVar[str] = "pong"
    pid: int = 0
    version: int = PROTOCOL_VERSION
    started_at: float = 0.0
    fleet: list[str] = []


class WorkflowReply(Message):
    """State of one workflow; ``outputs`` is filled once it is done and the caller asked for it."""

    op: ClassVar[str] = "workflow"
    workflow_id: str = ""
    state: str = ""
    steps: list[dict[str, Any]] = []
    error: str | None = None
    outputs: dict[str, bytes] | None = None
    stdout: str = ""
    info: dict[str, Any] = {}


class SampleReply(Message):
    op: ClassVar[str] = "sample_result"
    results: bytes = b""
    qpu: str = ""


# Events (PUB) --------------------------------------------------------------------------------


class Event(Message):
    """A state change of a workflow, published to its owner (see ``EventSealer``)."""

    op: ClassVar[str] = "event"
    workflow_id: str = ""
    job_id: str = ""
    step_id: int | None = None
    kind: str = ""
    state: str = ""
    qpu: str | None = None
    detail: str = ""
    ts: float = 0.0


# --------------------------------------------------------------------------------------------
# Envelope: signing and (de)serialization
# --------------------------------------------------------------------------------------------


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

    def sign(self, payload: bytes) -> bytes:
        digest = hmac.new(self._key, payload, hashlib.sha256).hexdigest().encode()
        return f"{self.user}:".encode() + digest if self.user else digest

    def verify(self, payload: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.sign(payload), signature)


class KeyRing:
    """The orchestrator's keys: its own (full rights) and one per user of a shared orchestrator.

    Users are listed in ``users.json`` (name -> key, owner-only), re-read when it changes, so a
    user added with ``qonductor server add-user`` can connect without a restart.
    """

    def __init__(self, owner: Signer, users_file: Path | None = None):
        self.owner = owner
        self.users_file = users_file
        self._users: dict[str, Signer] = {}
        self._mtime: float | None = None
        # Live workflows' capabilities, by id (in memory only: a restart revokes them all).
        self._capabilities: dict[str, Capability] = {}
        self._reload()

    def _reload(self) -> None:
        if self.users_file is None:
            return
        try:
            mtime = self.users_file.stat().st_mtime
        except OSError:
            self._users, self._mtime = {}, None
            return
        if mtime == self._mtime:
            return
        try:
            data = json.loads(self.users_file.read_text())
            self._users = {name: Signer(key.encode(), name) for name, key in data.items()}
            self._mtime = mtime
        except (OSError, ValueError, AttributeError):
            pass  # a half-written file: keep the users we had

    def identify(self, payload: bytes, signature: bytes) -> tuple[str, str | None] | None:
        """Who signed the payload ("" for the owner key) and, for a workflow's capability, that
        workflow; None for no valid signature."""
        name, sep, _ = signature.partition(b":")
        if not sep:
            return ("", None) if self.owner.verify(payload, signature) else None
        text = name.decode(errors="replace")
        if text.startswith(CAPABILITY_MARK):
            cap = self._capabilities.get(text[1:])
            if cap is None or not cap.signer.verify(payload, signature):
                return None
            return cap.user, cap.workflow_id
        self._reload()
        signer = self._users.get(text)
        if signer is None or not signer.verify(payload, signature):
            return None
        return signer.user, None

    def signer_for(self, user: str) -> Signer:
        if user.startswith(CAPABILITY_MARK):
            cap = self._capabilities.get(user[1:])
            return cap.signer if cap is not None else self.owner
        if not user:
            return self.owner
        self._reload()
        return self._users.get(user, self.owner)

    def user_key(self, user: str) -> bytes:
        """The key ``user`` signs with (the owner's for ""): what their events are sealed with."""
        return self.signer_for(user)._key

    # Capabilities ---------------------------------------------------------------------------
    def issue(self, workflow_id: str, user: str) -> str:
        """A capability for one workflow's steps: it signs that workflow's quantum calls and
        nothing else, and is revoked when the workflow ends. The token is ``id.secret``."""
        for cap_id, cap in self._capabilities.items():
            if cap.workflow_id == workflow_id:
                return f"{cap_id}.{cap.secret}"
        cap_id, secret = secrets.token_hex(8), secrets.token_hex(32)
        signer = Signer(secret.encode(), CAPABILITY_MARK + cap_id)
        self._capabilities[cap_id] = Capability(workflow_id, user, secret, signer)
        return f"{cap_id}.{secret}"

    def revoke(self, workflow_id: str) -> None:
        for cap_id in [k for k, c in self._capabilities.items() if c.workflow_id == workflow_id]:
            del self._capabilities[cap_id]


# A signature frame "~<capability id>:<digest>" is signed with a workflow's capability.
CAPABILITY_MARK = "~"


@dataclass(frozen=True)
class Capability:
    workflow_id: str
    user: str
    secret: str
    signer: Signer


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
    frames: list[bytes], signer: Signer | KeyRing, max_payload_bytes: int = MAX_PAYLOAD_BYTES
) -> Envelope:
    """Check the size and the signature, then parse. ProtocolError for anything else."""
    if len(frames) != 2:
        raise ProtocolError(f"expected 2 frames (signature, payload), got {len(frames)}")
    signature, payload = frames
    if len(payload) > max_payload_bytes:
        raise ProtocolError(
            f"payload of {len(payload)} bytes exceeds {max_payload_bytes}", reason="oversized"
        )
    if isinstance(signer, KeyRing):
        who = signer.identify(payload, signature)
    else:
        who = (signer.user, None) if signer.verify(payload, signature) else None
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


# --------------------------------------------------------------------------------------------
# Where things live: connection file, state folder
# --------------------------------------------------------------------------------------------


def qonductor_home() -> Path:
    """Root of the orchestrator's files.

    ``QONDUCTOR_HOME`` overrides everything (tests use it for isolation); otherwise the connection
    file sits in the Jupyter runtime folder and the state in the Jupyter data folder.
    """
    env = os.environ.get("QONDUCTOR_HOME")
    if env:
        return Path(env)
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "qonductor"


def runtime_dir() -> Path:
    env = os.environ.get("QONDUCTOR_HOME")
    if env:
        return Path(env) / "runtime"
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def connection_file_path() -> Path:
    """The orchestrator's connection file; ``QONDUCTOR_CONNECTION_FILE`` points a client at
    another one (a shared orchestrator's user file)."""
    env = os.environ.get("QONDUCTOR_CONNECTION_FILE")
    return Path(env) if env else server_connection_file_path()


def server_connection_file_path() -> Path:
    """Where the orchestrator writes its own connection file (its owner's)."""
    return runtime_dir() / CONNECTION_FILE_NAME


@dataclass(frozen=True)
class ConnectionInfo:
    router: str
    pub: str
    key: str
    pid: int
    started_at: float
    signature_scheme: str = "hmac-sha256"
    version: int = PROTOCOL_VERSION
    # The largest payload the orchestrator accepts: clients refuse bigger ones before sending.
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    # A shared orchestrator's user this file belongs to ("": the orchestrator's owner).
    user: str = ""
    # CURVE (security.curve): the server's public key and, in a user's file, their key pair;
    # in the owner's file, the endpoints on the public host (empty without one).
    curve_server_key: str = ""
    curve_public_key: str = ""
    curve_secret_key: str = ""
    public_router: str = ""
    public_pub: str = ""

    def signer(self) -> Signer:
        return Signer(self.key.encode(), self.user)

    def write(self, path: Path) -> None:
        """Write atomically and owner-only (0600): the key in it is the only credential."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(dataclasses.asdict(self), fh, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> ConnectionInfo:
        data = json.loads(path.read_text())
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def new_key() -> str:
    return secrets.token_hex(32)


def apply_client_keys(sock: Any, info: Any) -> None:
    """Make a client socket speak CURVE when its connection file holds a client key pair (a
    user's file; the owner's file names the public endpoints but connects over loopback)."""
    if getattr(info, "curve_server_key", "") and getattr(info, "curve_secret_key", ""):
        sock.curve_serverkey = info.curve_server_key.encode()
        sock.curve_publickey = info.curve_public_key.encode()
        sock.curve_secretkey = info.curve_secret_key.encode()
