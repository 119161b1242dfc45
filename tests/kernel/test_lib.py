"""The cell libraries (qonductor_jupyter.lib): circuits, hybrid algorithms, explicit mitigation.

Everything runs on real Qiskit and Aer. ``aer_sample`` stands in for a cell's ``sample``: same
calling convention (a circuit gives a counts dict, a list of circuits a list of dicts), fixed
seeds, and transpilation at level 0 so folded gates and DD pulses reach the simulator intact.
Mitigation tests compare against the unmitigated run of the same noise model, with margins set
from runs over several seeds (stated at each test).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import pytest
from qiskit import QuantumCircuit, transpile
from qiskit.circuit.library import real_amplitudes
from qiskit.quantum_info import SparsePauliOp, Statevector, hellinger_fidelity
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, ReadoutError, depolarizing_error

from qonductor_jupyter.lib.classical import DD, REM, ZNE, MitigatedCircuits
from qonductor_jupyter.lib.quantum import (
    GHZ,
    QAOA,
    QFT,
    VQE,
    best_cut,
    expected_cut,
    maxcut_operator,
    maxcut_value,
)

RING = [(0, 1), (1, 2), (2, 3), (3, 0)]
# p=1 angles at which the 4-ring's expected cut is 3 of 4 (found by a grid search over the
# exact state; a uniform sample averages 2).
RING_GAMMA, RING_BETA = np.pi / 4, -3 * np.pi / 8


def aer_sample(noise_model: NoiseModel | None = None, seed: int = 11) -> Callable[..., Any]:
    """A ``sample(circuits, shots=...)`` on Aer, with the cell primitive's return convention."""
    simulator = AerSimulator(noise_model=noise_model, seed_simulator=seed)

    def sample(circuits: Any, shots: int = 1000) -> Any:
        single = isinstance(circuits, QuantumCircuit)
        batch = [circuits] if single else list(circuits)
        compiled = transpile(batch, simulator, optimization_level=0)
        result = simulator.run(compiled, shots=shots).result()
        counts = [dict(result.get_counts(i)) for i in range(len(batch))]
        return counts[0] if single else counts

    return sample


def probabilities(circuit: QuantumCircuit) -> dict[str, float]:
    """Exact outcome probabilities of a measured circuit (measurements stripped)."""
    state = Statevector(circuit.remove_final_measurements(inplace=False))
    return {str(k): float(v) for k, v in state.probabilities_dict().items() if v > 1e-9}


def z_parity(counts: dict[str, int]) -> float:
    """<Z...Z> over all measured bits."""
    total = sum(counts.values())
    return sum((-1) ** key.count("1") * n for key, n in counts.items()) / total


def cx_chain(num_cx: int = 10) -> QuantumCircuit:
    """|001> pushed through a CX chain: ideal <ZZZ> is exactly -1 (final state |111>)."""
    circuit = QuantumCircuit(3, name="cx_chain")
    circuit.x(0)
    for index in range(num_cx):
        circuit.cx(index % 2, index % 2 + 1)
    circuit.measure_all()
    return circuit


# --------------------------------------------------------------------------------------------
# GHZ and QFT
# --------------------------------------------------------------------------------------------


def test_ghz_structure_and_ideal_counts() -> None:
    circuit = GHZ(4)
    ops = circuit.count_ops()
    assert (circuit.num_qubits, ops["h"], ops["cx"], ops["measure"]) == (4, 1, 3, 4)
    counts = aer_sample()(circuit, shots=2000)
    assert set(counts) == {"0000", "1111"}
    assert abs(counts["0000"] / 2000 - 0.5) < 0.05
    assert GHZ(3, measure=False).num_clbits == 0
    assert set(aer_sample()(GHZ(1), shots=200)) == {"0", "1"}


@pytest.mark.parametrize("state", ["101", "011", "000"])
def test_qft_inverse_round_trip_returns_the_basis_state(state: str) -> None:
    forward = QFT(3, initial_state=state, measure=False)
    round_trip = forward.compose(QFT(3, inverse=True))
    assert aer_sample()(round_trip, shots=300) == {state: 300}
    # The transform itself spreads a basis state over every outcome with equal weight.
    spread = probabilities(QFT(3, initial_state=state))
    assert len(spread) == 8 and max(abs(p - 1 / 8) for p in spread.values()) < 1e-9


def test_qft_gate_structure() -> None:
    ops = QFT(4, measure=False).decompose().count_ops()
    assert (ops["h"], ops["cp"], ops["swap"]) == (4, 6, 2)
    assert QFT(4, initial_state="1000", measure=False).count_ops()["x"] == 1


# --------------------------------------------------------------------------------------------
# Max-cut and QAOA
# --------------------------------------------------------------------------------------------


def test_maxcut_operator_diagonal_is_the_cut_value() -> None:
    operator = maxcut_operator(RING)
    diagonal = np.real(np.diag(operator.to_matrix()))
    assert np.allclose(operator.to_matrix(), np.diag(diagonal))
    for index in range(16):
        assert diagonal[index] == pytest.approx(maxcut_value(format(index, "04b"), RING))
    assert (maxcut_value("0101", RING), maxcut_value("0011", RING)) == (4.0, 2.0)
    assert maxcut_value("0000", RING) == 0.0


def test_maxcut_weighted_networkx_graph() -> None:
    nx = pytest.importorskip("networkx")
    graph = nx.cycle_graph(4)
    graph[0][1]["weight"] = 2.5
    operator = maxcut_operator(graph)
    diagonal = np.real(np.diag(operator.to_matrix()))
    for index in range(16):
        assert diagonal[index] == pytest.approx(maxcut_value(format(index, "04b"), graph))
    # Node 0 is the rightmost bit: "0001" cuts edges (0, 1) and (3, 0).
    assert maxcut_value("0001", graph) == 3.5
    assert maxcut_value("0001", [(0, 1, 2.5), (1, 2), (2, 3), (3, 0)]) == 3.5


def test_qaoa_bound_circuit_finds_a_maximum_cut() -> None:
    nx = pytest.importorskip("networkx")
    graph = nx.cycle_graph(4)
    circuit = QAOA(graph, gammas=[RING_GAMMA], betas=[RING_BETA])
    assert circuit.num_parameters == 0 and circuit.count_ops()["measure"] == 4
    counts = aer_sample()(circuit, shots=2000)
    bitstring, value = best_cut(counts, graph)
    assert (bitstring, value) in {("0101", 4.0), ("1010", 4.0)}
    # Good angles, not luck: a uniform sample's expected cut is 2, these angles give 3.
    assert expected_cut(counts, graph) > 2.8
    assert expected_cut(aer_sample()(QAOA(graph, gammas=[0.0], betas=[0.0])), graph) < 2.2


def test_qaoa_parameterized_and_from_cost_operator() -> None:
    circuit = QAOA(RING, reps=2, measure=False)
    assert sorted(p.name for p in circuit.parameters) == ["β[0]", "β[1]", "γ[0]", "γ[1]"]
    assert circuit.num_clbits == 0
    # The same cut from the operator as from the graph.
    from_op = QAOA(cost_operator=maxcut_operator(RING), gammas=RING_GAMMA, betas=RING_BETA)
    assert expected_cut(aer_sample()(from_op, shots=2000), RING) > 2.8


def test_best_cut_prefers_value_then_frequency() -> None:
    counts = {"0011": 900, "0101": 3, "1010": 5}
    assert best_cut(counts, RING) == ("1010", 4.0)


# --------------------------------------------------------------------------------------------
# VQE
# --------------------------------------------------------------------------------------------

HAMILTONIAN = SparsePauliOp(["ZZ", "XI"], [1.0, 0.5])


def test_vqe_circuits_and_energy_of_a_known_state() -> None:
    vqe = VQE(real_amplitudes(2, reps=1), HAMILTONIAN, shots=4000)
    zeros = np.zeros(vqe.num_parameters)
    circuits = vqe.circuits(zeros)
    # ZZ and XI disagree on qubit 1, so they need two measurement settings.
    assert len(circuits) == 2 and all(c.num_parameters == 0 for c in circuits)
    # All angles zero leave |00>: <ZZ> = 1, <XI> = 0.
    energy = vqe.energy(zeros, aer_sample()(circuits, shots=4000))
    assert energy == pytest.approx(1.0, abs=0.06)


@pytest.mark.slow
def test_vqe_reaches_the_ground_energy() -> None:
    exact = float(np.linalg.eigvalsh(HAMILTONIAN.to_matrix())[0])
    vqe = VQE(real_amplitudes(2, reps=1), HAMILTONIAN, maxiter=50, shots=1000)
    result = vqe.run(aer_sample(seed=5))
    assert result.evaluations <= 60 and len(result.history) == result.evaluations
    assert abs(result.energy - exact) < 0.1
    # The parameters themselves are good, not just one lucky shot-noise estimate.
    bound = real_amplitudes(2, reps=1).assign_parameters(result.params)
    true_energy = float(np.real(Statevector(bound).expectation_value(HAMILTONIAN)))
    assert abs(true_energy - exact) < 0.1
    assert result.history[0] > result.energy + 0.3


# --------------------------------------------------------------------------------------------
# ZNE
# --------------------------------------------------------------------------------------------


def cx_depolarizing(p: float = 0.02) -> NoiseModel:
    model = NoiseModel()
    model.add_all_qubit_quantum_error(depolarizing_error(p, 2), ["cx"])
    return model


def test_zne_mitigated_circuits() -> None:
    mitigated = ZNE.apply(cx_chain())
    assert isinstance(mitigated, MitigatedCircuits) and isinstance(mitigated, list)
    assert len(mitigated) == 3 and list(mitigated) == mitigated.circuits
    assert mitigated.stack_names == ("zne",) and mitigated.technique == "zne"
    assert mitigated.config["noise_factors"] == (1, 3, 5)
    # Odd factors fold every gate: CX count scales with the factor.
    assert [c.count_ops()["cx"] for c in mitigated] == [10, 30, 50]
    # sample() compiles at an optimising level, which would cancel unprotected folds.
    compiled = transpile(list(mitigated), basis_gates=["cx", "u"], optimization_level=2)
    assert [c.count_ops()["cx"] for c in compiled] == [10, 30, 50]
    tags = [c.metadata["qonductor_mitigation_index"] for c in mitigated]
    assert tags == [0, 1, 2] and mitigated[0].metadata["qonductor_mitigation"] == "zne"


def test_zne_moves_the_value_toward_the_ideal() -> None:
    # Over seeds 0-3: unmitigated <ZZZ> -0.825..-0.845 (error ~0.16), linear ZNE -0.91..-0.93
    # (error ~0.08).
    circuit = cx_chain()
    mitigated = ZNE.apply(circuit, extrapolation="linear")
    raw_errors, zne_errors = [], []
    for seed in range(3):
        sample = aer_sample(cx_depolarizing(), seed=seed)
        raw_errors.append(abs(z_parity(sample(circuit, shots=4000)) + 1.0))
        zne_errors.append(abs(ZNE.infer(mitigated, sample(mitigated, shots=4000), "ZZZ") + 1.0))
    assert np.mean(raw_errors) > 0.1
    assert np.mean(zne_errors) < 0.7 * np.mean(raw_errors)


def test_zne_distribution_and_pickling() -> None:
    circuit = cx_chain()
    # Values cross step boundaries by cloudpickle: the plan must survive the trip.
    mitigated = cloudpickle.loads(cloudpickle.dumps(ZNE.apply(circuit, extrapolation="richardson")))
    assert mitigated.stack_names == ("zne",) and len(mitigated) == 3
    sample = aer_sample(cx_depolarizing(), seed=1)
    raw = sample(circuit, shots=4000)["111"] / 4000
    distribution = ZNE.infer_distribution(mitigated, sample(mitigated, shots=4000))
    assert sum(distribution.values()) == pytest.approx(1.0)
    assert distribution["111"] > raw + 0.03
    value = ZNE.infer(mitigated, sample(mitigated, shots=4000), SparsePauliOp("ZZZ"))
    assert value < -0.95


# --------------------------------------------------------------------------------------------
# REM
# --------------------------------------------------------------------------------------------


def test_rem_improves_the_ghz_distribution() -> None:
    model = NoiseModel()
    model.add_all_qubit_readout_error(ReadoutError([[0.92, 0.08], [0.15, 0.85]]))
    circuit = GHZ(3)
    mitigated = REM.apply(circuit)
    assert mitigated.stack_names == ("rem",) and len(mitigated) == 3
    ideal = {"000": 0.5, "111": 0.5}
    raw_fidelities, rem_fidelities = [], []
    for seed in range(2):
        sample = aer_sample(model, seed=seed)
        counts = sample(mitigated, shots=4000)
        corrected = REM.correct(mitigated, counts)
        assert sum(corrected.values()) == pytest.approx(1.0) and min(corrected.values()) >= 0
        raw_fidelities.append(hellinger_fidelity(counts[0], ideal))
        rem_fidelities.append(hellinger_fidelity(corrected, ideal))
    # Seed 1 of this model: 0.69 raw, 0.99 corrected.
    assert np.mean(raw_fidelities) < 0.75
    assert np.mean(rem_fidelities) > 0.95


# --------------------------------------------------------------------------------------------
# DD
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kolkata() -> Any:
    from kernel_server.backends.devices import load_backend

    return load_backend("fake_kolkata")


def idle_circuit() -> QuantumCircuit:
    """Qubit 0 is excited, then idles through 10 CX on qubits 1 and 2."""
    circuit = QuantumCircuit(3, name="idle")
    circuit.x(0)
    circuit.h(1)
    for _ in range(10):
        circuit.cx(1, 2)
    circuit.measure_all()
    return circuit


def test_dd_adds_pulses_and_keeps_the_distribution(kolkata: Any) -> None:
    circuit = idle_circuit()
    padded = DD.apply(circuit, kolkata)
    assert padded.num_qubits == 3
    assert padded.size() > circuit.size()
    assert padded.count_ops().get("y", 0) >= 2  # xyxy put Y pulses on the idle qubit
    expected = probabilities(circuit)
    got = probabilities(padded)
    assert got.keys() == expected.keys()
    assert all(abs(got[k] - expected[k]) < 1e-9 for k in expected)
    assert padded.metadata["qonductor_mitigation"] == "dd"
    # A name gives the same circuit as the instance.
    assert DD.apply(circuit, "fake_kolkata") == padded


def test_dd_scheduled_for_the_device(kolkata: Any) -> None:
    physical = DD.apply(idle_circuit(), kolkata, rule="xx", scheduled=True)
    ops = physical.count_ops()
    assert physical.num_qubits == kolkata.num_qubits
    assert ops["delay"] > 0 and ops["x"] >= 3  # the circuit's X plus the two DD pulses
    counts = aer_sample()(physical, shots=500)
    assert set(counts) == {"001", "011"}


def test_dd_warns_when_nothing_fits(kolkata: Any) -> None:
    with pytest.warns(UserWarning, match="no idle window"):
        padded = DD.apply(GHZ(2), kolkata)
    assert padded.size() == GHZ(2).size()


# --------------------------------------------------------------------------------------------
# Error messages
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: GHZ(0), "num_qubits must be an integer >= 1"),
        (lambda: GHZ(2.5), "num_qubits must be an integer >= 1"),
        (lambda: QFT(3, initial_state="12"), "initial_state must be a string of 3"),
        (lambda: QFT(3, initial_state="1"), "initial_state must be a string of 3"),
        (lambda: QAOA(graph=[]), "the graph has no edges"),
        (lambda: QAOA(graph=[(0, 0)]), "self-loop"),
        (lambda: QAOA(), "either a graph or a cost_operator"),
        (lambda: QAOA(RING, cost_operator=SparsePauliOp("ZZ")), "exactly one"),
        (lambda: QAOA(RING, gammas=[0.1, 0.2], betas=[0.1, 0.2]), "needs 1 gammas, got 2"),
        (lambda: QAOA(RING, reps=2, gammas=[0.1, 0.2], betas=[0.3]), "needs 2 betas, got 1"),
        (lambda: QAOA(RING, gammas=[0.1]), "give both gammas and betas"),
        (lambda: QAOA(RING, reps=0), "reps must be an integer >= 1"),
        (lambda: maxcut_value("010", RING), "bitstring must be a string of 4"),
        (lambda: best_cut({}, RING), "counts are empty"),
        (lambda: VQE(real_amplitudes(2), "ZZZ"), "acts on 3 qubits but the ansatz has 2"),
        (lambda: VQE(QuantumCircuit(2), "ZZ"), "no parameters"),
        (lambda: VQE(real_amplitudes(2, reps=1), "ZZ", initial_point=[0.0]), "initial_point"),
        (lambda: VQE(real_amplitudes(2, reps=1), "ZZ", shots=0), "shots must be"),
    ],
)
def test_quantum_errors(build: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_vqe_rejects_a_measuring_ansatz_and_wrong_result_counts() -> None:
    measured = real_amplitudes(2, reps=1)
    measured.measure_all()
    with pytest.raises(ValueError, match="must not measure"):
        VQE(measured, "ZZ")
    vqe = VQE(real_amplitudes(2, reps=1), HAMILTONIAN)
    with pytest.raises(ValueError, match="expected 2 results, one per measurement circuit, got 1"):
        vqe.energy(np.zeros(4), [{"00": 10}])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"extrapolation": "cubic"}, "extrapolation must be one of"),
        ({"noise_factors": (3,)}, "at least two distinct numbers >= 1"),
        ({"noise_factors": (0.5, 1, 3)}, "at least two distinct numbers >= 1"),
        ({"noise_factors": (1, 1, 3)}, "at least two distinct numbers >= 1"),
        ({"noise_factors": 3}, "noise_factors must be a sequence"),
        ({"scaling": "local"}, "scaling must be one of"),
    ],
)
def test_zne_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZNE.apply(cx_chain(2), **kwargs)


def test_mitigation_result_errors() -> None:
    mitigated = ZNE.apply(cx_chain(2))
    two = [{"111": 10}, {"111": 10}]
    with pytest.raises(ValueError, match="expected 3 results, one per folded circuit, got 2"):
        ZNE.infer(mitigated, two, "ZZZ")
    with pytest.raises(ValueError, match="expected 3 results, one per folded circuit, got 2"):
        ZNE.infer_distribution(mitigated, two)
    three = [{"111": 10}] * 3
    with pytest.raises(ValueError, match="acts on 2 qubits but the circuit has 3"):
        ZNE.infer(mitigated, three, "ZZ")
    with pytest.raises(ValueError, match="not diagonal"):
        ZNE.infer(mitigated, three, "XZZ")
    with pytest.raises(ValueError, match="list of counts dicts"):
        ZNE.infer(mitigated, {"111": 10}, "ZZZ")
    with pytest.raises(ValueError, match="come from 'zne'"):
        REM.correct(mitigated, three)
    with pytest.raises(ValueError, match="expected 3 results, the circuit's"):
        REM.correct(REM.apply(GHZ(2)), [{"11": 5}])
    with pytest.raises(ValueError, match="no measurements"):
        ZNE.apply(GHZ(2, measure=False))
    with pytest.raises(ValueError, match="unbound parameters"):
        ZNE.apply(QAOA(RING))


def test_dd_errors(kolkata: Any) -> None:
    with pytest.raises(ValueError, match="rule must be one of"):
        DD.apply(idle_circuit(), kolkata, rule="xzx")
    with pytest.raises(ValueError, match="unknown backend 'fake_nowhere'"):
        DD.apply(idle_circuit(), "fake_nowhere")
    with pytest.raises(ValueError, match="circuit has 28 qubits but fake_kolkata has only 27"):
        DD.apply(GHZ(28), kolkata)
    with pytest.raises(ValueError, match="backend must be a BackendV2"):
        DD.apply(idle_circuit(), 27)


# --------------------------------------------------------------------------------------------
# Import cost
# --------------------------------------------------------------------------------------------


def test_importing_the_libraries_stays_light() -> None:
    code = (
        "import sys\n"
        "import qonductor_jupyter.lib\n"
        "assert 'qiskit' not in sys.modules, 'lib/__init__ imported qiskit'\n"
        "import qonductor_jupyter.lib.classical, qonductor_jupyter.lib.quantum\n"
        "heavy = [m for m in ('mitiq', 'kernel_server', 'qiskit_aer', 'scipy.optimize') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_mitigation_by_hand_runs_laid_out_once_and_pins_the_plan(shell):
    """REM.apply in a cell: its calibration circuits run on the qubits of the circuit they
    calibrate (one layout for the batch), and the step's plan stays unmitigated."""
    import qonductor_jupyter as qj

    cell = (
        "from qonductor_jupyter.lib.quantum import GHZ\n"
        "from qonductor_jupyter.lib.classical import REM\n"
        "m = REM.apply(GHZ(3))\n"
        "raw = sample(m, shots=2000)\n"
        "p = REM.correct(m, raw)\n"
    )
    result = shell.run_cell(f"%%qonductor --seed 2\n{cell}")
    assert result.error_in_exec is None
    p = shell.user_ns["p"]
    assert p.get("000", 0) + p.get("111", 0) > 0.9
    wid = qj.list_workflows()[0].id
    (job,) = [j for s in qj.workflow_info(wid).steps for j in s.qpu_jobs]
    assert {plan.mitigation for plan in job.plans} == {"none"}
    assert "mitigated" not in (job.method or "")
