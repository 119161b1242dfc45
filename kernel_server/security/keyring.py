"""The orchestrator's key ring: every key it accepts a signature from, and what each may do.

Its own key has full rights; each user of a shared orchestrator has a key of their own; and each
running workflow's steps get a capability, a key good for that workflow's quantum calls only. Only
the orchestrator holds a key ring: kernels and step processes sign with one key (``Signer``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from kernel_server.wire.envelope import CAPABILITY_MARK, Signer


@dataclass(frozen=True)
class Capability:
    workflow_id: str
    user: str
    secret: str
    signer: Signer


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
        return self.signer_for(user).key

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
