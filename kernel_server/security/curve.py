"""ZeroMQ CURVE for an orchestrator shared across machines.

Loopback stays plain (the HMAC signatures guard it; the connection file is owner-only). With a
public host, the orchestrator also listens there, and those endpoints speak CURVE: traffic is
encrypted, and a client is let in only if its public key is on the allow-list
(``<home>/curve_clients.json``, name -> public key, written by ``qonductor server add-user``).
Each user's connection file carries their key pair and the server's public key.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_server.core.files import write_private

ZAP_DOMAIN = b"qonductor"


def allow_list_file(home: Path) -> Path:
    return home / "curve_clients.json"


def read_allow_list(home: Path) -> dict[str, str]:
    try:
        return json.loads(allow_list_file(home).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def write_allow_list(home: Path, keys: dict[str, str]) -> None:
    write_private(allow_list_file(home), json.dumps(keys, indent=1))


class AllowList:
    """The ZAP credentials provider: a client key is allowed while it is on the list (re-read on
    each connection, so adding or removing a user needs no restart)."""

    def __init__(self, home: Path):
        self.home = home
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = key.decode(errors="replace") in read_allow_list(self.home).values()
        if not allowed:
            self.refused += 1
        return allowed
