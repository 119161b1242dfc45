"""Oversized requests are refused before any work starts; a step that never ends is stopped."""

import pytest
from helpers import orchestrator_in

from qonductor_jupyter import api
from qonductor_jupyter.errors import InputError, QonductorError

FLEET = """\
simulated: [fake_kolkata]
limits:
  max_qubits: 3
  max_shots: 1000
  max_payload_bytes: 200000
  step_timeout_s: 30
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    home = tmp_path_factory.mktemp("limited-home")
    (home / "fleet.yaml").write_text(FLEET)
    with orchestrator_in(home, fleet=str(home / "fleet.yaml")) as info:
        yield info


def _circuit_cell(qubits, shots):
    return (
        f"from qiskit import QuantumCircuit\nq = QuantumCircuit({qubits})\nq.measure_all()\n"
        f"c = sample(q, shots={shots})\n"
    )


def test_the_connection_file_tells_clients_the_payload_limit(limited):
    assert limited.max_payload_bytes == 200000


def test_too_many_shots_are_refused_at_submission(limited):
    with pytest.raises(QonductorError, match="5000 shots exceed this orchestrator's limit of 1000"):
        api.submit_cell(_circuit_cell(1, 10), {}, shots=5000)


def test_a_too_wide_circuit_or_too_many_shots_fail_their_step_before_running(limited):
    wide, _ = api.submit_cell(_circuit_cell(4, 10), {})
    reply = api.wait(wide, 60)
    assert reply.state == "failed" and "4 qubits exceeds this orchestrator's limit of 3" in (
        reply.error
    )
    assert not [j for s in api.workflow_info(wide).steps for j in s.qpu_jobs]  # no QPU job
    many, _ = api.submit_cell(_circuit_cell(1, 2000), {})
    reply = api.wait(many, 60)
    assert reply.state == "failed" and "2000 shots exceed" in reply.error


def test_an_oversized_input_is_refused_before_it_is_sent(limited):
    blob = b"x" * 300_000
    with pytest.raises(InputError, match="over the orchestrator's limit of 0.2 MiB"):
        api.submit_cell("n = len(blob)\n" + _circuit_cell(1, 10), {"blob": blob})


def test_a_step_that_never_ends_is_stopped_by_its_timeout(limited):
    cell = "import time\nwhile True:\n    time.sleep(0.05)\n" + _circuit_cell(1, 10)
    workflow_id, _ = api.submit_cell(cell, {}, config={"step_timeout_s": 2})
    reply = api.wait(workflow_id, 60)
    assert reply.state == "failed" and "longer than its timeout of 2 s" in reply.error


def test_user_code_cannot_swallow_the_timeout(limited):
    cell = (
        "import time\nfor _ in range(1000):\n    try:\n        time.sleep(0.05)\n"
        "    except Exception:\n        pass\n" + _circuit_cell(1, 10)
    )
    workflow_id, _ = api.submit_cell(cell, {}, config={"step_timeout_s": 1.5})
    reply = api.wait(workflow_id, 60)
    assert reply.state == "failed" and "timeout of 1.5 s" in reply.error
    # The worker that ran it is free again: the next workflow runs.
    namespace = {}
    again, _ = api.submit_cell(_circuit_cell(1, 10), namespace)
    assert sum(api.collect(again, namespace, timeout=120)[1]["c"].values()) == 10
