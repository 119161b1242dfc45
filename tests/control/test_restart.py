"""A killed orchestrator: the next call restarts it; accepted workflows are kept and finish."""

import os
import signal
import textwrap
import time

from helpers import assert_mostly_zero

import qonductor_jupyter as qj
from qonductor_jupyter.client import pid_alive, read_connection

SLOW = textwrap.dedent("""
    import time
    time.sleep(seconds)
    from qiskit import QuantumCircuit
    qc = QuantumCircuit(1)
    qc.measure_all()
    counts = sample(qc, shots=20)
""")


def test_killed_orchestrator_restarts_and_keeps_workflows(orchestrator):
    quick = qj.deploy(
        qj.create_workflow(
            "from qiskit import QuantumCircuit\nq = QuantumCircuit(1)"
            "\nq.measure_all()\nc = sample(q, shots=5)\n"
        )
    )
    done_id = qj.invoke(quick)
    qj.workflow_results(done_id, timeout=120)
    slow = qj.deploy(qj.create_workflow(SLOW))
    running_id = qj.invoke(slow, {"seconds": 3})
    time.sleep(0.5)

    old = read_connection()
    os.kill(old.pid, signal.SIGKILL)
    deadline = time.time() + 10
    while pid_alive(old.pid) and time.time() < deadline:
        time.sleep(0.1)

    # The next call finds it dead, starts a new one, and both workflows are still there.
    listed = {w.id: w.state for w in qj.list_workflows()}
    new = read_connection()
    assert new.pid != old.pid
    assert listed[done_id] == "done"
    assert running_id in listed
    # The QPUs are noisy: a readout error may flip a shot, so check the total and the majority.
    assert_mostly_zero(qj.workflow_results(running_id, timeout=180)["counts"], 20)
    assert_mostly_zero(qj.workflow_results(done_id)["c"], 5)
