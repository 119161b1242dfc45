"""Users of a shared orchestrator see, follow and cancel only their own workflows."""

import threading

import pytest
from helpers import wait_for

from kernel_server.security import users
from kernel_server.wire.connection import ConnectionInfo
from kernel_server.wire.messages import ListWorkflows
from qonductor_jupyter import api
from qonductor_jupyter import client as client_module
from qonductor_jupyter.errors import QonductorError

SLOW = "import time\ntime.sleep(30)\nfrom qiskit import QuantumCircuit\nq = QuantumCircuit(1)\n"
SLOW += "q.measure_all()\nc = sample(q, shots=5)\n"


@pytest.fixture
def shared(tmp_path, monkeypatch):
    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    owner = client_module.start_server()
    clients = {"owner": client_module.Client(autostart=False, info=owner)}
    for name in ("alice", "bob"):
        info = ConnectionInfo.read(users.add_user(name))
        assert info.user == name and info.key != owner.key
        clients[name] = client_module.Client(autostart=False, info=info)
    try:
        yield clients
    finally:
        for c in clients.values():
            c.close()
        client_module.stop_server()


def as_user(monkeypatch, clients, name):
    monkeypatch.setattr(client_module, "_default", clients[name])


def test_each_user_sees_and_cancels_only_their_own(shared, monkeypatch):
    as_user(monkeypatch, shared, "alice")
    mine, _ = api.submit_cell(SLOW, {})
    wait_for(lambda: api.workflow_status(mine) == "running", 60)

    as_user(monkeypatch, shared, "bob")
    assert mine not in [w.id for w in api.list_workflows()]
    for attempt in (lambda: api.workflow_status(mine), lambda: api.cancel(mine)):
        with pytest.raises(QonductorError, match="no workflow"):
            attempt()

    as_user(monkeypatch, shared, "owner")  # the orchestrator's own key sees everything
    assert api.workflow_status(mine) == "running"

    as_user(monkeypatch, shared, "alice")
    assert [w.id for w in api.list_workflows()] == [mine]
    api.cancel(mine)
    assert api.wait(mine, 30).state == "cancelled"


def test_events_reach_only_the_workflow_s_owner(shared, monkeypatch):
    seen = {"alice": [], "bob": []}
    subscriptions = [
        shared[name].subscribe(lambda ev, name=name: seen[name].append(ev.workflow_id))
        for name in ("alice", "bob")
    ]
    try:
        as_user(monkeypatch, shared, "alice")
        workflow_id, _ = api.submit_cell("x = 1\n" + SLOW.replace("30", "0"), {})
        assert api.wait(workflow_id, 120).state == "done"
        wait_for(lambda: workflow_id in seen["alice"], 10)
        threading.Event().wait(0.5)
        assert seen["bob"] == []  # signed with alice's key: bob's client cannot read them
    finally:
        for s in subscriptions:
            s.close()


def test_a_bad_user_name_and_an_unknown_user(shared, tmp_path):
    with pytest.raises(ValueError, match="user names are"):
        users.add_user("eve:admin")
    forged = ConnectionInfo.read(users.add_user("mallory"))
    users.remove_user("mallory")  # her key no longer opens anything
    client = client_module.Client(autostart=False, info=forged)
    try:
        with pytest.raises(client_module.OrchestratorUnavailable):
            client.request(ListWorkflows(), timeout=1, retries=0)
    finally:
        client.close()


def test_a_public_endpoint_speaks_curve_to_allowed_keys_only(tmp_path, monkeypatch):
    import zmq

    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    owner = client_module.start_server(public_host="127.0.0.1")
    try:
        assert owner.public_router and owner.curve_server_key
        carol = ConnectionInfo.read(users.add_user("carol"))
        assert carol.router == owner.public_router and carol.curve_secret_key
        client = client_module.Client(autostart=False, info=carol)
        assert client.request(ListWorkflows(), timeout=10).workflows == []
        assert client.info.user == "carol"  # over CURVE, not by falling back to the owner's file
        client.close()
        # A key pair that is not on the allow-list, and a client without CURVE, get nothing.
        public, secret = zmq.curve_keypair()
        stranger = ConnectionInfo(**{**carol.__dict__, "curve_public_key": public.decode(),
                                       "curve_secret_key": secret.decode()})  # fmt: skip
        plain = ConnectionInfo(**{**carol.__dict__, "curve_server_key": ""})
        for info in (stranger, plain):
            other = client_module.Client(autostart=False, info=info)
            with pytest.raises(client_module.OrchestratorUnavailable):
                other.request(ListWorkflows(), timeout=1, retries=0)
            other.close()
        # Removing the user takes the key off the allow-list for new connections.
        users.remove_user("carol")
        late = client_module.Client(autostart=False, info=carol)
        with pytest.raises(client_module.OrchestratorUnavailable):
            late.request(ListWorkflows(), timeout=1, retries=0)
        late.close()
        # The loopback endpoints stay plain for the owner.
        assert client_module.ping(owner, 5) is not None
    finally:
        client_module.stop_server()
