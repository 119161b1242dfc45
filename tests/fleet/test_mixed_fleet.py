"""A fleet of simulated and IBM QPUs from one fleet.yaml; IBM in qiskit-ibm-runtime's local testing
mode (a fake backend as the Sampler's mode: the code path that talks to IBM, without network)."""

import asyncio

import pytest
from helpers import orchestrator_in

from kernel_server.backends.ibm import DeviceChange
from kernel_server.control.app import Orchestrator
from kernel_server.core.jobs import JobRecord
from kernel_server.fleet.queues import QueuedJob
from kernel_server.fleet.spec import FleetSpec, IBMFleet
from qonductor_jupyter import api

FLEET = """\
simulated: [fake_kolkata]
ibm:
  backends: [fake_manila]
  local_testing: true
  execution_mode: job
  queue_refresh_s: 1
"""


@pytest.fixture(scope="module")
def mixed_orchestrator(tmp_path_factory):
    home = tmp_path_factory.mktemp("mixed-home")
    fleet = home / "fleet.yaml"
    fleet.write_text(FLEET)
    with orchestrator_in(home, fleet=str(fleet)):
        yield


def test_the_fleet_lists_simulated_and_ibm_qpus(mixed_orchestrator):
    devices = {d.name: d for d in api.fleet()}
    assert set(devices) == {"fake_kolkata", "fake_manila"}
    assert devices["fake_manila"].kind == "ibm" and devices["fake_manila"].local_testing
    assert devices["fake_kolkata"].kind != "ibm"


def test_a_job_on_the_ibm_qpu_goes_through_the_sampler(mixed_orchestrator):
    cell = (
        "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.x(0)\nq.measure_all()\n"
        "counts = sample(q, shots=200)\n"
    )
    namespace = {}
    workflow_id, _ = api.submit_cell(cell, namespace, config={"qpu": {"backends": ["fake_manila"]}})
    _, outputs = api.collect(workflow_id, namespace, timeout=180)
    counts = outputs["counts"]
    assert sum(counts.values()) == 200 and counts.get("01", 0) >= 150  # bit 0 set, little noise
    (job,) = [j for s in api.workflow_info(workflow_id).steps for j in s.qpu_jobs]
    assert job.qpu == "fake_manila" and job.worker == "ibm:fake_manila"
    assert job.method == "local-testing:sampler-job"


def _orchestrator(tmp_path):
    spec = FleetSpec(("fake_kolkata",), IBMFleet(("fake_manila",), local_testing=True))
    return Orchestrator(tmp_path, spec)


def test_ibm_changes_reach_the_fleet(tmp_path):
    async def scenario():
        orch = _orchestrator(tmp_path)
        orch.loop = asyncio.get_running_loop()
        info = await orch.loop.run_in_executor(None, orch.ibm.load)
        from kernel_server.fleet.queues import SimulatedQPU

        q = orch.qpus["fake_manila"] = SimulatedQPU("fake_manila", info[0])
        q.ema_run_s = 2.0
        orch._apply_ibm_change(DeviceChange("fake_manila", "queue", {"pending_jobs": 7}))
        waits = (q.queue_length(), q.expected_wait_s())
        orch._apply_ibm_change(DeviceChange("fake_manila", "offline", {"message": "maint"}))
        offline = q.online
        orch._apply_ibm_change(DeviceChange("fake_manila", "online", {}))
        # A job waiting on a QPU that IBM retires fails with the reason, and the QPU leaves.
        waiting = QueuedJob(JobRecord("j1", "wf", "qpu"), b"", 10, None, orch.loop.create_future())
        q.queue.put_nowait(waiting)
        orch._apply_ibm_change(DeviceChange("fake_manila", "retired", {}))
        with pytest.raises(RuntimeError, match="retired by IBM Quantum"):
            await waiting.done
        orch.store.close()
        return waits, offline, q.online, "fake_manila" in orch.qpus

    waits, offline, online_after_retire, still_there = asyncio.run(scenario())
    assert waits == (7, 14.0)  # other users' 7 pending jobs count in the wait
    assert offline is False and online_after_retire is False and not still_there
