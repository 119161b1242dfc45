"""Accepted workflows survive a kill -9 of the orchestrator or of a worker, and cancellation
reaches every child job."""

import os
import signal
import time

import pytest
from helpers import orchestrator_in, wait_for

from qonductor_jupyter import api
from qonductor_jupyter import client as client_module
from qonductor_jupyter.client import pid_alive, read_connection


def _cell(seconds: float, shots: int = 20) -> str:
    return (
        f"import time\ntime.sleep({seconds})\nfrom qiskit import QuantumCircuit\n"
        f"q = QuantumCircuit(1)\nq.x(0)\nq.measure_all()\nc = sample(q, shots={shots})\n"
    )


@pytest.fixture
def own_orchestrator(tmp_path):
    """An orchestrator in a home of its own: these tests kill it."""
    with orchestrator_in(tmp_path) as info:
        yield info


def test_kill_9_with_20_workflows_queued_or_running(own_orchestrator):
    ids = [api.submit_cell(_cell(0.5 + (i % 4) * 0.5), {})[0] for i in range(20)]
    wait_for(lambda: any(w.state == "running" for w in api.list_workflows(limit=20)), 60)
    os.kill(own_orchestrator.pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(own_orchestrator.pid), 10)

    # The next request starts a new orchestrator, which resumes every accepted workflow.
    replies = [api.wait(i, 240) for i in ids]
    assert read_connection().pid != own_orchestrator.pid
    assert [r.state for r in replies] == ["done"] * 20, [(r.state, r.error) for r in replies]
    for workflow_id in ids:
        counts = api.workflow_results(workflow_id)["c"]
        assert sum(counts.values()) == 20  # each result retrievable, from exactly one run
    listed = [w.id for w in api.list_workflows(limit=100)]
    assert sorted(listed) == sorted(ids)  # none lost, none duplicated


def test_a_killed_step_worker_process_does_not_lose_the_workflow(own_orchestrator, tmp_path):
    marker = tmp_path / "pid"
    cell = (
        "import os, time\nopen(marker, 'w').write(str(os.getpid()))\ntime.sleep(3)\nok = 1\n"
        + _cell(0)
    )
    workflow_id, _ = api.submit_cell(cell, {"marker": str(marker)})
    wait_for(lambda: marker.exists() and marker.read_text().strip(), 60)
    victim = int(marker.read_text())
    os.kill(victim, signal.SIGKILL)
    reply = api.wait(workflow_id, 120)
    assert reply.state == "done", reply.error
    assert int(marker.read_text()) != victim  # it ran again, in a fresh worker process


def test_cancel_reaches_a_job_waiting_in_a_qpu_queue(tmp_path):
    # Other users keep the only QPU busy (background load), so our job surely waits in its queue.
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "simulated: [fake_kolkata]\nbackground: {jobs_per_hour: 7200, mean_runtime_s: 4}\n"
    )
    with orchestrator_in(tmp_path, fleet=str(fleet)):
        workflow_id, _ = api.submit_cell(_cell(0), {})

        def qpu_jobs():
            return [j for s in api.workflow_info(workflow_id).steps for j in s.qpu_jobs]

        wait_for(lambda: [j.state for j in qpu_jobs()] == ["queued"], 120)
        api.cancel(workflow_id)
        assert api.wait(workflow_id, 30).state == "cancelled"
        time.sleep(3)  # long enough for the QPU to have reached it, had it stayed queued
        (job,) = qpu_jobs()
        assert job.state == "cancelled" and job.run_s is None  # it never ran


def test_a_job_running_on_a_billed_qpu_is_not_run_again_after_a_crash(tmp_path, monkeypatch):
    """kill -9 while a job runs on a billed IBM QPU (local testing mode, billed like a real one):
    after the restart its workflow fails with the reason instead of running (and paying) twice."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "simulated: [fake_kolkata]\n"
        "ibm: {backends: [fake_manila], local_testing: true, billed: true}\n"
    )
    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    monkeypatch.setenv("QONDUCTOR_FLEET", str(fleet))  # the restarted orchestrator's fleet too
    info = client_module.start_server()
    monkeypatch.setattr(client_module, "_default", client_module.Client(info=info))
    try:
        cell = (
            "from qiskit import QuantumCircuit\nq = QuantumCircuit(5)\nq.h(0)\n"
            "for i in range(4):\n    q.cx(i, i + 1)\nq.measure_all()\n"
            "counts = sample([q] * 8, shots=200000)\n"  # a few seconds on the QPU
        )
        workflow_id, _ = api.submit_cell(cell, {}, config={"qpu": {"backends": ["fake_manila"]}})

        def qpu_jobs():
            return [j for s in api.workflow_info(workflow_id).steps for j in s.qpu_jobs]

        wait_for(lambda: [j.state for j in qpu_jobs()] == ["running"], 120)
        os.kill(info.pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(info.pid), 10)

        reply = api.wait(workflow_id, 120)  # this request starts the new orchestrator
        assert read_connection().pid != info.pid
        assert reply.state == "failed" and "not paid for twice" in reply.error
        assert [j.state for j in qpu_jobs()] == ["failed"]
    finally:
        client_module.stop_server()
