"""Classical steps and simulated-QPU runs on a real Dask cluster (LocalCluster, 2 workers)."""

import os
import signal
import time

import distributed
import pytest
from helpers import orchestrator_in, wait_for

from qonductor_jupyter import api
from qonductor_jupyter import client as client_module

BELL = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.h(0)\nq.cx(0, 1)\n"
    "q.measure_all()\ncounts = sample(q, shots=100)\nn = sum(counts.values())\n"
)


@pytest.fixture(scope="module")
def dask_orchestrator(tmp_path_factory):
    """An orchestrator of its own whose steps and simulations go to a 2-worker LocalCluster."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
    )
    dask = distributed.Client(cluster)
    try:
        with orchestrator_in(
            tmp_path_factory.mktemp("dask-home"), cluster=cluster.scheduler_address
        ):
            yield dask
    finally:
        dask.close()
        cluster.close()


def _steps(workflow_id):
    return api.workflow_info(workflow_id).steps


def test_steps_and_simulations_land_on_dask_workers(dask_orchestrator):
    workers = set(dask_orchestrator.scheduler_info()["workers"])
    namespace = {}
    workflow_id, _ = api.submit_cell(BELL, namespace)
    _, outputs = api.collect(workflow_id, namespace, timeout=180)
    assert outputs["n"] == 100
    steps = _steps(workflow_id)
    classical = [s for s in steps if s.kind == "classical"]
    assert classical and {s.worker for s in classical} <= workers, steps
    # The step that calls sample() waits on the orchestrator's own step pool (see DaskCompute).
    assert all(s.worker.startswith("local:") for s in steps if s.kind != "classical")
    (job,) = [j for s in steps for j in s.qpu_jobs]
    assert job.worker in workers and job.state == "done"


def test_a_step_error_reads_as_on_the_local_pools(dask_orchestrator):
    workflow_id, _ = api.submit_cell(
        "from qiskit import QuantumCircuit\nq = QuantumCircuit(1)\nq.measure_all()\n"
        "c = sample(q, shots=10)\nx = 1 / 0\n",
        {},
    )
    reply = api.wait(workflow_id, 120)
    assert reply.state == "failed" and "ZeroDivisionError" in reply.error
    assert "line 5" in reply.error  # the user's own line number, as on the local pools


def test_a_killed_worker_s_step_finishes_on_another(dask_orchestrator):
    dask = dask_orchestrator
    cell = "import time\ntime.sleep(6)\nslept = True\n" + BELL
    workflow_id, _ = api.submit_cell(cell, {})

    def running_step_worker():
        busy = {w: keys for w, keys in dask.processing().items() if keys}
        steps = [k for keys in busy.values() for k in keys if str(k).startswith("step-")]
        return next((w for w, keys in busy.items() if steps and steps[0] in keys), None)

    wait_for(lambda: running_step_worker() is not None, 60)
    victim = running_step_worker()
    time.sleep(1.0)  # well inside the step's sleep
    pids = dask.run(os.getpid, workers=[victim])
    os.kill(pids[victim], signal.SIGKILL)

    reply = api.wait(workflow_id, 180)
    assert reply.state == "done", reply.error
    first = _steps(workflow_id)[0]
    assert first.worker and first.worker != victim
    assert first.worker in set(dask.scheduler_info()["workers"])


def test_cancel_behaves_as_on_the_local_pools(dask_orchestrator):
    workflow_id, _ = api.submit_cell("import time\ntime.sleep(30)\n" + BELL, {})
    wait_for(lambda: _steps(workflow_id)[0].state == "running", 60)
    api.cancel(workflow_id)
    assert api.wait(workflow_id, 30).state == "cancelled"
    # The cluster still serves the next workflow.
    namespace = {}
    again, _ = api.submit_cell(BELL, namespace)
    assert api.collect(again, namespace, timeout=180)[1]["n"] == 100


def test_the_classical_scheduler_sees_the_dask_workers(dask_orchestrator):
    from kernel_server.wire.messages import GetFleet

    compute = client_module.get_client().request(GetFleet()).compute
    workers = set(dask_orchestrator.scheduler_info()["workers"])
    dask_nodes = [n for n in compute.nodes if n.name in workers]
    assert compute.backend == "dask" and len(dask_nodes) == 2
    assert all(n.cores == 1 and n.memory_gb > 0 for n in dask_nodes)
    # A step asking for a GPU: no Dask worker declares one, and the error says so.
    workflow_id, _ = api.submit_cell(
        "x = 1\ny = x + 1\n" + BELL, {}, config={"classical": {"accelerator": "gpu"}}
    )
    reply = api.wait(workflow_id, 60)
    assert reply.state == "failed" and "gpu" in reply.error and "tcp://" in reply.error


def test_dask_workers_become_classical_nodes_with_their_resources():
    from kernel_server.compute.dask import dask_nodes
    from kernel_server.core.resources import ClassicalRequest
    from kernel_server.scheduler.classical import ClassicalCluster

    nodes = dask_nodes(
        {
            "tcp://10.0.0.1:4000": {"nthreads": 8, "memory_limit": 32 * 2**30, "host": "10.0.0.1"},
            "tcp://10.0.0.2:4000": {
                "nthreads": 4,
                "memory_limit": 16 * 2**30,
                "resources": {"GPU": 2},
                "host": "10.0.0.2",
            },
        }
    )
    assert [(n.cores, n.memory_gb, dict(n.accelerators)) for n in nodes] == [
        (8, 32.0, {}),
        (4, 16.0, {"gpu": 2}),
    ]
    placed = ClassicalCluster(nodes).place(ClassicalRequest(cores=2, accelerator="gpu")).node
    assert placed.address == "tcp://10.0.0.2:4000"
