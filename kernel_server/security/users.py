"""Users of a shared orchestrator: each gets a key of their own and sees only their workflows.

``qonductor server add-user NAME`` writes the key to ``<home>/users.json`` (owner-only; the running
orchestrator re-reads it) and a connection file for that user, ``<home>/users/NAME.json``, to hand
over; the user points their kernel at it with ``QONDUCTOR_CONNECTION_FILE``. Their requests are
signed with their key, their workflows are theirs: another user's do not exist for them, and the
events of a workflow are signed with its owner's key, so nobody else can read them. The
orchestrator's own key (its connection file) keeps full rights.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from kernel_server.core.files import write_private
from kernel_server.core.paths import qonductor_home
from kernel_server.wire.connection import ConnectionInfo, new_key, server_connection_file_path

USER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def users_file() -> Path:
    return qonductor_home() / "users.json"


def _read() -> dict[str, str]:
    try:
        return json.loads(users_file().read_text())
    except FileNotFoundError:
        return {}


def _write(users: dict[str, str]) -> None:
    write_private(users_file(), json.dumps(users, indent=1))


def add_user(name: str) -> Path:
    """Give ``name`` a key; return the path of their connection file."""
    if not USER_NAME.match(name):
        raise ValueError(
            f"user names are 1-64 letters, digits, '_', '.' or '-'; {name!r} is not one"
        )
    owner = ConnectionInfo.read(server_connection_file_path())
    users = _read()
    users[name] = new_key()
    _write(users)
    path = qonductor_home() / "users" / f"{name}.json"
    mine = dataclasses.replace(owner, key=users[name], user=name)
    if owner.public_router:  # a shared orchestrator: the user comes in over CURVE
        import zmq

        from kernel_server.security.curve import read_allow_list, write_allow_list

        public_key, secret_key = zmq.curve_keypair()
        allowed = read_allow_list(qonductor_home())
        allowed[name] = public_key.decode()
        write_allow_list(qonductor_home(), allowed)
        mine = dataclasses.replace(
            mine,
            router=owner.public_router,
            pub=owner.public_pub,
            curve_public_key=public_key.decode(),
            curve_secret_key=secret_key.decode(),
            public_router="",
            public_pub="",
        )
    mine.write(path)
    return path


def remove_user(name: str) -> bool:
    from kernel_server.security.curve import read_allow_list, write_allow_list

    users = _read()
    if users.pop(name, None) is None:
        return False
    _write(users)
    allowed = read_allow_list(qonductor_home())
    if allowed.pop(name, None) is not None:
        write_allow_list(qonductor_home(), allowed)
    (qonductor_home() / "users" / f"{name}.json").unlink(missing_ok=True)
    return True
