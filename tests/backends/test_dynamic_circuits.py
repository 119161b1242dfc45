"""Dynamic circuits (mid-circuit measurement with feed-forward) on the simulated fleet.

Every simulated QPU takes control flow, the estimators and plans read it, and the noisy execution
agrees with ``AerSimulator.from_backend`` of the same device. The circuits are kept at 2-3 qubits
and a few thousand shots: noisy Aer is the expensive part.
"""

from __future__ import annotations

import math
import textwrap

import cloudpickle
import pytest
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.circuit.classical import expr
from qiskit_ibm_runtime.fake_provider import FakeKolkataV2

import qonductor_jupyter as qj
from kernel_server.backends import aer_sim
from kernel_server.backends.compile import transpile_for
from kernel_server.backends.devices import (
    CONTROL_FLOW,
    SMALL_FLEET,
    calibration_id,
    compile_key,
    load_backend,
)
from kernel_server.backends.dynamic import costliest_path, has_control_flow
from kernel_server.estimator.mitigation import (
    REM,
    TECHNIQUES,
    choose_layout,
    run_mitigated,
    transpile_mitigated,
)
from kernel_server.estimator.numerical import fidelity_and_duration
from kernel_server.estimator.plans import CircuitNotEstimable, estimate, excluded_stacks
from kernel_server.tasks import qpu
from kernel_server.wire.circuits import dump_circuits

THETA = 1.1  # the state teleported: ry(THETA)|0>


def if_test_circuit() -> QuantumCircuit:
    """The textbook feed-forward: the conditional X makes the second bit equal the first."""
    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    qc.measure(1, 1)
    return qc


def teleportation_circuit() -> QuantumCircuit:
    """Teleport ry(THETA)|0> from qubit 0 to qubit 2, then undo the rotation: ideally out = 0."""
    q = QuantumRegister(3, "q")
    m = ClassicalRegister(2, "m")
    out = ClassicalRegister(1, "out")
    qc = QuantumCircuit(q, m, out)
    qc.ry(THETA, 0)
    qc.h(1)
    qc.cx(1, 2)
    qc.cx(0, 1)
    qc.h(0)
    qc.measure(0, m[0])
    qc.measure(1, m[1])
    with qc.if_test((m[1], 1)):
        qc.x(2)
    with qc.if_test((m[0], 1)):
        qc.z(2)
    qc.ry(-THETA, 2)
    qc.measure(2, out[0])
    return qc


def heavy_branch_circuit() -> QuantumCircuit:
    """A branch whose noise shows: 12 CX that compose to the identity, run only when c0 = 1."""
    qc = QuantumCircuit(2, 2)
    qc.x(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        for _ in range(6):
            qc.cx(0, 1)
            qc.cx(0, 1)
    qc.measure(1, 1)
    return qc


def all_constructs_circuit() -> QuantumCircuit:
    """while_loop, for_loop, switch and an expression condition; ideally always "1 11"."""
    q, c, flag = QuantumRegister(3, "q"), ClassicalRegister(2, "c"), ClassicalRegister(1, "flag")
    qc = QuantumCircuit(q, c, flag)
    qc.h(0)
    qc.measure(0, flag[0])
    with qc.while_loop((flag[0], 1)):  # repeat until the coin reads 0
        qc.reset(0)
        qc.h(0)
        qc.measure(0, flag[0])
    with qc.for_loop(range(2)):
        qc.x(1)  # twice: back to |0>
    qc.x(2)
    qc.measure(1, c[0])
    qc.measure(2, c[1])
    with qc.switch(c) as case:  # c = 0b10
        with case(2):
            qc.x(0)
        with case(0, 1, 3):
            qc.h(0)
    with qc.if_test(expr.logic_and(expr.equal(c, 2), expr.logic_not(flag[0]))):
        qc.x(1)
    qc.measure(0, flag[0])
    qc.measure(1, c[0])
    return qc


def _fraction(counts: dict, predicate) -> float:
    return sum(v for k, v in counts.items() if predicate(k)) / sum(counts.values())


def _agree(p: float, q: float, shots_p: int, shots_q: int) -> None:
    """Two binomial estimates of one probability agree within 4 standard errors."""
    pooled = (p * shots_p + q * shots_q) / (shots_p + shots_q)
    sigma = math.sqrt(max(pooled * (1 - pooled), 1e-4) * (1 / shots_p + 1 / shots_q))
    assert abs(p - q) <= 4 * sigma, (p, q, 4 * sigma)


# -- devices ----------------------------------------------------------------------------------


def test_every_simulated_device_takes_control_flow() -> None:
    for name in (*SMALL_FLEET, "fake_torino"):
        target = load_backend(name).target
        assert set(CONTROL_FLOW) <= set(target.operation_names), name
    # fake_kolkata's snapshot lists no control flow; the calibration id is the snapshot's all
    # the same, and compiled-circuit caches tell the two targets apart.
    fresh, loaded = FakeKolkataV2(), load_backend("fake_kolkata")
    assert "if_else" not in fresh.target.operation_names
    assert calibration_id(fresh) == calibration_id(loaded)
    assert compile_key(fresh) != compile_key(loaded)


def test_a_fresh_backend_does_not_leave_a_compiler_without_control_flow() -> None:
    static = QuantumCircuit(2)
    static.h(0)
    static.cx(0, 1)
    static.measure_all()
    transpile_for(static, FakeKolkataV2())  # cached under the snapshot's calibration first
    transpiled = transpile_for(if_test_circuit(), load_backend("fake_kolkata"))
    assert "if_else" in transpiled.count_ops()


# -- estimates --------------------------------------------------------------------------------


def test_costliest_path_reads_inside_the_blocks() -> None:
    qc = QuantumCircuit(2, 1)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)) as orelse:
        qc.x(1)
    with orelse:
        qc.cx(0, 1)
    with qc.for_loop(range(3)) as i:
        qc.rz(0.5 * i, 1)
    assert has_control_flow(qc)
    path = costliest_path(qc)
    names = [ci.operation.name for ci in path.data]
    assert names == ["measure", "cx", "rz", "rz", "rz"]  # the else branch weighs more
    assert [float(ci.operation.params[0]) for ci in path.data[2:]] == [0.0, 0.5, 1.0]
    # What a branch does waits for the bit its condition reads; the loop reads none.
    assert list(path.data[1].clbits) == [qc.clbits[0]]
    assert not any(ci.clbits for ci in path.data[2:])
    assert costliest_path(path) is path  # a static circuit comes back as it is


@pytest.mark.parametrize("device", SMALL_FLEET)
def test_estimate_on_device_counts_the_conditional_gates(device: str) -> None:
    backend = load_backend(device)
    dynamic = if_test_circuit()
    estimate_ = qpu.estimate_on_device(dump_circuits([dynamic]), device)
    (transpiled,) = cloudpickle.loads(estimate_.transpiled)
    assert "if_else" in transpiled.count_ops()
    assert 0.9 < estimate_.fidelity < 1.0
    # The branch counts: more error than without it, and it starts after the measurement.
    static = QuantumCircuit(2, 2)
    static.h(0)
    static.measure(0, 0)
    static.measure(1, 1)
    without, _ = fidelity_and_duration(transpile_for(static, backend), backend.target)
    assert estimate_.fidelity < without
    measure_s = max(p.duration for p in backend.target["measure"].values() if p is not None)
    assert estimate_.duration_s > measure_s


def test_every_construct_compiles_estimates_and_runs_on_every_device() -> None:
    blob = dump_circuits([all_constructs_circuit()])
    for device in SMALL_FLEET:
        estimate_ = qpu.estimate_on_device(blob, device)
        assert 0.8 < estimate_.fidelity < 1.0 and estimate_.duration_s > 0
        execution = qpu.execute_on_device(device, estimate_.transpiled, 300, seed=2)
        (counts,) = cloudpickle.loads(execution.counts)
        assert sum(counts.values()) == 300
        assert counts.get("1 11", 0) > 0.85 * 300, (device, counts)
    plans = qpu.plan_step(blob, list(SMALL_FLEET), shots=300)
    assert isinstance(plans, list), plans
    assert {p.mitigation for p in plans} == {"none", "rem"}, plans


def test_plans_keep_only_what_can_mitigate_a_dynamic_circuit() -> None:
    blob = dump_circuits([teleportation_circuit()])
    plans = qpu.plan_step(blob, list(SMALL_FLEET), shots=1000)
    assert isinstance(plans, list) and plans, plans
    assert {p.mitigation for p in plans} == {"none", "rem"}
    for plan in plans:
        assert 0 < plan.fidelity <= 1 and plan.quantum_seconds > 0
    excluded = excluded_stacks(teleportation_circuit())
    assert set(excluded) == {"dd", "dd+rem", "twirl", "twirl+rem+dd", "zne", "zne+rem", "pec"}
    assert all("control flow" in reason for reason in excluded.values())
    backend = load_backend("fake_auckland")
    with pytest.raises(CircuitNotEstimable, match="zne cannot mitigate a circuit with control"):
        estimate(if_test_circuit(), backend, "zne", shots=1000)
    with pytest.raises(ValueError, match="control flow"):
        run_mitigated(if_test_circuit(), backend, "zne+rem", shots=100)


def test_each_technique_says_whether_it_takes_control_flow() -> None:
    dynamic = if_test_circuit()
    for name, technique in TECHNIQUES.items():
        reason = technique().unsupported_reason(dynamic)
        if name == "rem":
            assert reason is None
        else:
            assert reason and "control flow" in reason, name


def test_rem_corrects_outcome_bits_and_leaves_feed_forward_bits() -> None:
    constructed = REM().construct_circuits(if_test_circuit())
    assert constructed.context["clbits"] == [1]  # clbit 0 steers the branch
    calibration = constructed[2]
    assert not has_control_flow(calibration)
    assert [calibration.find_bit(ci.clbits[0]).index for ci in calibration.data if ci.clbits] == [1]
    # Clbit 1 reads 0 as 1 in 10% of shots and 1 as 0 in 20%; clbit 0 is left as recorded.
    cal0, cal1 = {"00": 90, "10": 10}, {"10": 80, "00": 20}
    counts = {"00": 450, "10": 50, "11": 400, "01": 100}
    mitigated = REM().combine_results([counts, cal0, cal1], context=constructed.context)
    assert mitigated == pytest.approx({"00": 0.5, "11": 0.5}, abs=1e-9)
    # Nothing left to correct when every measured bit steers what follows.
    steering = QuantumCircuit(2, 1)
    steering.h(0)
    steering.measure(0, 0)
    with steering.if_test((steering.clbits[0], 1)):
        steering.x(1)
    assert "steers control flow" in REM().unsupported_reason(steering)


# -- execution --------------------------------------------------------------------------------

SHOTS = 2000


@pytest.mark.parametrize(
    ("make", "ideal"),
    [
        (if_test_circuit, lambda key: key[0] == key[1]),  # the two bits agree
        (teleportation_circuit, lambda key: key.split(" ")[0] == "0"),  # out is 0
        (heavy_branch_circuit, lambda key: key == "01"),
    ],
    ids=["if_test", "teleportation", "heavy_branch"],
)
def test_noisy_run_agrees_with_from_backend(make, ideal) -> None:
    backend = load_backend("fake_kolkata")
    circuit = make()
    # Level 0 (as mitigated runs compile), so that the heavy branch's CX pairs stay.
    transpiled = transpile_mitigated(circuit, backend, choose_layout(circuit, backend))
    run = aer_sim.run_noisy_detailed(backend, transpiled, SHOTS, seed=11)
    assert run.method in ("statevector", "density_matrix")
    assert "if_else" in aer_sim.plan_noisy_run(transpiled, SHOTS).lazy_unsupported
    reference = aer_sim.run_reference(backend, transpiled, SHOTS, seed=12)
    assert sum(run.counts.values()) == SHOTS
    # Same keys as from_backend gives, spaces between registers included.
    assert {len(k) for k in run.counts} == {len(k) for k in reference}
    assert {k.count(" ") for k in run.counts} == {k.count(" ") for k in reference}
    fast, slow = _fraction(run.counts, ideal), _fraction(reference, ideal)
    _agree(fast, slow, SHOTS, SHOTS)
    assert fast > 0.75  # the heavy branch keeps ~85% on fake_kolkata; the others ~97%


def test_rem_runs_a_dynamic_circuit() -> None:
    backend = load_backend("fake_kolkata")
    mitigated = run_mitigated(teleportation_circuit(), backend, "rem", shots=SHOTS, seed=5)
    assert _fraction(mitigated, lambda key: key.split(" ")[0] == "0") > 0.9


# -- end to end -------------------------------------------------------------------------------

TELEPORT_CELL = textwrap.dedent(f"""
    from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
    from qiskit.circuit.classical import expr
    q, m, out = QuantumRegister(3, "q"), ClassicalRegister(2, "m"), ClassicalRegister(1, "out")
    tc = QuantumCircuit(q, m, out)
    tc.ry({THETA}, 0)
    tc.h(1); tc.cx(1, 2)
    tc.cx(0, 1); tc.h(0)
    tc.measure(0, m[0]); tc.measure(1, m[1])
    with tc.if_test((m[1], 1)):
        tc.x(2)
    with tc.if_test((m[0], 1)):
        tc.z(2)
    tc.ry(-{THETA}, 2)
    tc.measure(2, out[0])
    teleported = sample(tc, shots=600)
    p_out0 = sum(v for k, v in teleported.items() if k.split(" ")[0] == "0") / 600
""")

IF_TEST_CELL = textwrap.dedent("""
    from qiskit import QuantumCircuit
    qc = QuantumCircuit(2, 2)
    qc.h(0); qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    qc.measure(1, 1)
    c4 = sample(qc, shots=600)
    p_equal = (c4.get("00", 0) + c4.get("11", 0)) / 600
""")


def test_dynamic_cells_run_through_the_orchestrator(shell) -> None:
    result = shell.run_cell(f"%%qonductor --seed 4\n{IF_TEST_CELL}")
    assert result.error_in_exec is None, result.error_in_exec
    c4 = shell.user_ns["c4"]
    assert sum(c4.values()) == 600 and set(c4) <= {"00", "01", "10", "11"}
    assert shell.user_ns["p_equal"] > 0.9  # ideally 1: readout error on bit 1 only
    assert 0.35 < c4.get("11", 0) / 600 < 0.65  # the first bit is a fair coin

    result = shell.run_cell(f"%%qonductor --seed 4\n{TELEPORT_CELL}")
    assert result.error_in_exec is None, result.error_in_exec
    teleported = shell.user_ns["teleported"]
    assert sum(teleported.values()) == 600
    assert all(len(k) == 4 and k[1] == " " for k in teleported)  # "out m1m0", as Aer writes it
    assert shell.user_ns["p_out0"] > 0.85  # ideally 1

    # The plans of the teleportation step: no technique that cannot take control flow.
    wid = qj.list_workflows()[0].id
    (job,) = [j for s in qj.workflow_info(wid).steps for j in s.qpu_jobs]
    assert isinstance(job.plans, list) and job.plans, job.plans
    assert {p.mitigation for p in job.plans} <= {"none", "rem"}
