"""How a client finds and reaches the orchestrator: the connection file and what it holds.

The orchestrator writes its endpoints and key to a connection file (owner-only) in the runtime
folder; a shared orchestrator's user gets a file of their own (``security.users``), which may also
carry a CURVE key pair for connecting from another machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_server.core.paths import runtime_dir
from kernel_server.wire.envelope import MAX_PAYLOAD_BYTES, Signer
from kernel_server.wire.messages import PROTOCOL_VERSION

CONNECTION_FILE_NAME = "qonductor-server.json"


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
