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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import msgpack

PROTOCOL_VERSION = 1
CONNECTION_FILE_NAME = "qonductor-server.json"

# Limits that keep one bad client from exhausting the orchestrator (configurable later).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024


class ProtocolError(Exception):
    """A frame set that is not a valid, signed message; ``reason`` says which check failed."""

    def __init__(self, message: str, reason: str = "malformed"):
        super().__init__(message)
        self.reason = reason


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


@dataclass
class Message:
    op: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.op:
            if cls.op in MESSAGES:
                raise TypeError(f"duplicate message op {cls.op!r}")
            MESSAGES[cls.op] = cls

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# Requests from kernels (and the CLI) ---------------------------------------------------------


@dataclass
class Ping(Message):
    op: ClassVar[str] = "ping"


@dataclass
class Shutdown(Message):
    op: ClassVar[str] = "shutdown"


@dataclass
class CreateWorkflow(Message):
    """Register a workflow image: the split cell (graph) plus its code and configuration."""

    op: ClassVar[str] = "create_workflow"
    source: str = ""
    graph: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    # Objects bound into the image itself (the function-list form of create_workflow).
    bound: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Deploy(Message):
    op: ClassVar[str] = "deploy"
    image_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Invoke(Message):
    """Run an image. The client chooses ``workflow_id``, so a resent request is idempotent."""

    op: ClassVar[str] = "invoke"
    image_id: str = ""
    workflow_id: str = ""
    inputs: dict[str, bytes] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class GetStatus(Message):
    op: ClassVar[str] = "status"
    workflow_id: str = ""


@dataclass
class GetResults(Message):
    """Long-poll: the reply comes when the workflow is final or after ``wait_s`` seconds."""

    op: ClassVar[str] = "results"
    workflow_id: str = ""
    wait_s: float = 0.0


@dataclass
class ListImages(Message):
    op: ClassVar[str] = "list_images"


@dataclass
class ListWorkflows(Message):
    op: ClassVar[str] = "list_workflows"
    limit: int = 100


@dataclass
class Cancel(Message):
    op: ClassVar[str] = "cancel"
    workflow_id: str = ""


@dataclass
class ChoosePlan(Message):
    """The user's plan for a quantum step of a ``--plan ask`` workflow (a number, or "off")."""

    op: ClassVar[str] = "choose_plan"
    workflow_id: str = ""
    step_id: int = 0
    plan: Any = 0


@dataclass
class GetFleet(Message):
    op: ClassVar[str] = "fleet"


# Requests from classical workers (quantum calls made inside a step) -------------------------


@dataclass
class Sample(Message):
    """A step's ``sample(...)`` call: circuits (cloudpickled list) to run on one QPU."""

    op: ClassVar[str] = "sample"
    workflow_id: str = ""
    step_id: int = 0
    circuits: bytes = b""
    shots: int = 0
    num_qubits: int = 0
    kind: str = "sample"
    # workers.circuit_identity.fingerprint of the circuits ("" unknown): what estimates and
    # plans are remembered under.
    fingerprint: str = ""


# Replies ------------------------------------------------------------------------------------


@dataclass
class Ok(Message):
    op: ClassVar[str] = "ok"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class ErrorReply(Message):
    op: ClassVar[str] = "error"
    type: str = "Exception"
    message: str = ""


@dataclass
class Pong(Message):
    op: ClassVar[str] = "pong"
    pid: int = 0
    version: int = PROTOCOL_VERSION
    started_at: float = 0.0
    fleet: list[str] = field(default_factory=list)


@dataclass
class WorkflowReply(Message):
    """State of one workflow; ``outputs`` is filled once it is done and the caller asked for it."""

    op: ClassVar[str] = "workflow"
    workflow_id: str = ""
    state: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    outputs: dict[str, bytes] | None = None
    stdout: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class SampleReply(Message):
    op: ClassVar[str] = "sample_result"
    results: bytes = b""
    qpu: str = ""


# Events (PUB) --------------------------------------------------------------------------------


@dataclass
class Event(Message):
    """A state change, published on topic ``wf.<workflow_id>``."""

    op: ClassVar[str] = "event"
    workflow_id: str = ""
    job_id: str = ""
    step_id: int | None = None
    kind: str = ""
    state: str = ""
    qpu: str | None = None
    detail: str = ""
    ts: float = 0.0

    @property
    def topic(self) -> bytes:
        return f"wf.{self.workflow_id}".encode()


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

    def identify(self, payload: bytes, signature: bytes) -> str | None:
        """Who signed the payload ("" for the owner key), or None for no valid signature."""
        name, sep, _ = signature.partition(b":")
        if not sep:
            return "" if self.owner.verify(payload, signature) else None
        self._reload()
        signer = self._users.get(name.decode(errors="replace"))
        return signer.user if signer is not None and signer.verify(payload, signature) else None

    def signer_for(self, user: str) -> Signer:
        if not user:
            return self.owner
        self._reload()
        return self._users.get(user, self.owner)


def new_request_id() -> str:
    return secrets.token_hex(8)


def encode(message: Message, signer: Signer, request_id: str | None = None) -> list[bytes]:
    payload = msgpack.packb(
        {
            "op": message.op,
            "id": request_id or new_request_id(),
            "ts": time.time(),
            "nonce": secrets.token_hex(8),
            "body": message.to_dict(),
        },
        use_bin_type=True,
    )
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
        user = signer.identify(payload, signature)
    else:
        user = signer.user if signer.verify(payload, signature) else None
    if user is None:
        raise ProtocolError("bad signature", reason="bad_signature")
    try:
        data = msgpack.unpackb(payload, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable payload: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("body"), dict):
        raise ProtocolError("payload is not a message map")
    cls = MESSAGES.get(data.get("op", ""))
    if cls is None:
        raise ProtocolError(f"unknown op {data.get('op')!r}")
    try:
        message = cls.from_dict(data["body"])
    except TypeError as exc:
        raise ProtocolError(f"bad body for {cls.op!r}: {exc}") from exc
    try:
        ts = float(data.get("ts", 0.0))
    except (TypeError, ValueError):
        raise ProtocolError("payload timestamp is not a number") from None
    return Envelope(message, str(data.get("id", "")), ts, str(data.get("nonce", "")), user)


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
    # CURVE (kernel_server.curve): the server's public key and, in a user's file, their key pair;
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
