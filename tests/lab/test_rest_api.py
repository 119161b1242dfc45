"""The sidebar's REST API against a real Jupyter server and the real orchestrator."""

import asyncio
import json

import msgspec
import pytest
from tornado.httpclient import HTTPClientError

from kernel_server.core.status import (
    CancelView,
    EventsView,
    FleetView,
    WorkflowDetail,
    WorkflowState,
    WorkflowsView,
)
from qonductor_jupyter import api
from qonductor_jupyter.client import Client
from qonductor_jupyter.labserver.manager import ManagerError, QonductorManager

SLOW_CELL = "import time\ntime.sleep(60)\nx = 1\n"
QUANTUM_CELL = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.x(0)\nq.measure_all()\n"
    "c = sample(q, shots=100)\n"
)


async def get(jp_fetch, shape, *path, **params):
    """The reply, decoded strictly as the schema shape the lab extension's types are made from
    (a field missing, extra or of the wrong type fails)."""
    response = await jp_fetch("qonductor", "api", *path, params=params or None)
    return msgspec.json.decode(response.body, type=shape, strict=True)


async def error_of(jp_fetch, *path, method="GET", **params):
    body = b"" if method == "POST" else None
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("qonductor", "api", *path, method=method, body=body, params=params or None)
    return info.value.code, json.loads(info.value.response.body)


async def wait_state(jp_fetch, workflow_id, states, seconds=90.0):
    for _ in range(int(seconds / 0.1)):
        reply = await get(jp_fetch, WorkflowDetail, "workflows", workflow_id)
        if reply.state in states:
            return reply
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} did not reach {states}")


async def test_fleet_lists_every_qpu(orchestrator, jp_fetch):
    reply = await get(jp_fetch, FleetView, "fleet")
    names = [d.name for d in reply.devices]
    assert sorted(names) == sorted(d.name for d in api.fleet())
    for device in reply.devices:
        assert device.num_qubits >= 5 and device.family
        assert device.queue_length >= 0 and device.expected_wait_s >= 0
        # Fake backends carry a calibration date in the past (the sidebar shows the age).
        assert device.calibrated_at is None or device.calibrated_at < reply.updated_at


async def test_a_finished_workflow_with_its_qpu_jct_and_steps(orchestrator, jp_fetch):
    workflow_id, _ = api.submit_cell(QUANTUM_CELL, {})
    await asyncio.get_running_loop().run_in_executor(None, api.wait, workflow_id, 120)
    listing = await get(jp_fetch, WorkflowsView, "workflows", limit=5)
    row = next(w for w in listing.workflows if w.id == workflow_id)
    assert row.state is WorkflowState.DONE and len(row.qpus) == 1
    assert row.jct_s is not None and row.jct_s > 0 and row.jobs_running == 0
    detail = await get(jp_fetch, WorkflowDetail, "workflows", workflow_id)
    assert detail.workflow_id == workflow_id  # and no outputs: strict decoding refuses extras
    jobs = [j for s in detail.steps for j in s.qpu_jobs]
    assert [j.qpu for j in jobs] == row.qpus
    assert detail.info.created_at is not None and detail.info.options.shots == 4000


async def test_cancel_a_running_workflow(orchestrator, jp_fetch):
    workflow_id, _ = api.submit_cell(SLOW_CELL, {})
    await wait_state(jp_fetch, workflow_id, {WorkflowState.RUNNING})
    listing = await get(jp_fetch, WorkflowsView, "workflows")
    row = next(w for w in listing.workflows if w.id == workflow_id)
    assert row.jct_s is None and row.state is WorkflowState.RUNNING
    response = await jp_fetch(
        "qonductor", "api", "workflows", workflow_id, "cancel", method="POST", body=b""
    )
    reply = msgspec.json.decode(response.body, type=CancelView, strict=True)
    assert reply.workflow_id == workflow_id and reply.state is WorkflowState.CANCELLED
    final = await wait_state(jp_fetch, workflow_id, {WorkflowState.CANCELLED}, 10)
    assert final.state is WorkflowState.CANCELLED


async def test_events_long_poll_wakes_on_a_new_workflow(orchestrator, jp_fetch):
    first = await get(jp_fetch, EventsView, "events", after=-1, timeout=5)
    assert first.orchestrator is True
    loop = asyncio.get_running_loop()
    poll = asyncio.ensure_future(get(jp_fetch, EventsView, "events", after=first.seq, timeout=30))
    await asyncio.sleep(0.3)
    assert not poll.done()
    started = loop.time()
    workflow_id, _ = api.submit_cell("y = 2\n", {})
    reply = await asyncio.wait_for(poll, 30)
    assert reply.seq > first.seq and loop.time() - started < 20
    await loop.run_in_executor(None, api.wait, workflow_id, 60)
    # Without news the poll returns at its timeout with the same number.
    quiet = await get(jp_fetch, EventsView, "events", after=10**9, timeout=1)
    assert quiet.seq < 10**9


async def test_bad_requests_say_what_was_wrong(orchestrator, jp_fetch):
    code, body = await error_of(jp_fetch, "workflows", "wf-nosuch")
    assert code == 404 and "no workflow 'wf-nosuch'" in body["message"]
    code, body = await error_of(jp_fetch, "workflows", "wf-nosuch", "cancel", method="POST")
    assert code == 404
    code, body = await error_of(jp_fetch, "workflows", limit=0)
    assert code == 400 and "limit" in body["message"]
    code, body = await error_of(jp_fetch, "workflows", limit="many")
    assert code == 400 and "integer" in body["message"]


async def test_requests_without_the_token_are_refused(orchestrator, jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("qonductor", "api", "fleet", headers={"Authorization": ""})
    assert info.value.code == 403


def test_no_orchestrator_is_a_503_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    manager = QonductorManager(Client(autostart=False), request_timeout=2.0)
    try:
        with pytest.raises(ManagerError) as info:
            asyncio.run(manager.fleet())
    finally:
        manager.close()
    assert info.value.status == 503 and "qonductor server start" in info.value.message


def test_the_events_poll_never_starts_an_orchestrator(tmp_path, monkeypatch):
    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    manager = QonductorManager(Client(autostart=False))
    try:
        first = asyncio.run(manager.wait_for_event(-1, 0))
        later = asyncio.run(manager.wait_for_event(first.seq, 1))
    finally:
        manager.close()
    assert first.orchestrator is False and later == first
    assert not any(tmp_path.iterdir())  # no connection file, no state: nothing was started
