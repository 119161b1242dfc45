"""Every noisy-simulation method against the exact distribution, and which method the measured
cost model picks for which kind of circuit (small cases: <= 6 qubits run, wider ones only priced).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import numpy as np
import pytest
from helpers import ghz
from qiskit import QuantumCircuit
from qiskit.circuit.library import efficient_su2
from qiskit.circuit.random import random_circuit
from qiskit.providers import QubitProperties
from qiskit.quantum_info import Statevector, hellinger_fidelity
from qiskit_aer import AerSimulator

from kernel_server.backends import aer_sim, cost_model, trajectories
from kernel_server.backends.compile import transpile_for
from kernel_server.backends.devices import load_backend
from kernel_server.backends.lazy_dm import plan_lazy
from kernel_server.backends.methods import METHODS, _branching_estimate, stabilizer_exact
from kernel_server.backends.work import clifford_support_bits, mps_bonds, mps_order

SHOTS = 4000


@pytest.fixture(scope="module")
def kolkata():
    return load_backend("fake_kolkata")


@pytest.fixture(scope="module")
def torino():
    return load_backend("fake_torino")


@pytest.fixture(scope="module")
def pauli_relaxing(kolkata):
    """fake_kolkata with every T2 cut to T1: its relaxation is a mixture of I, Z and reset."""
    backend = copy.deepcopy(kolkata)
    backend.target.qubit_properties = [
        QubitProperties(t1=p.t1, t2=min(p.t2, p.t1), frequency=p.frequency)
        for p in backend.target.qubit_properties
    ]
    return backend


def qaoa_ring(n: int) -> QuantumCircuit:
    qc = QuantumCircuit(n)
    qc.h(range(n))
    for i in range(n):
        qc.rzz(0.9, i, (i + 1) % n)
    qc.rx(0.7, range(n))
    qc.measure_all()
    return qc


def there_and_back(n: int) -> QuantumCircuit:
    """A chain of rzz up and back down: every qubit waits for the way back (all in flight), while
    the bond across any cut stays small."""
    qc = QuantumCircuit(n)
    qc.h(range(n))
    for q in range(n - 1):
        qc.rzz(0.9, q, q + 1)
    for q in reversed(range(n - 1)):
        qc.rzz(0.4, q, q + 1)
    qc.rx(0.7, range(n))
    qc.measure_all()
    return qc


def spread(n: int, depth: int = 10) -> QuantumCircuit:
    qc = random_circuit(n, depth, max_operands=2, seed=0)
    qc.measure_all()
    return qc


@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("auto", "stabilizer")])
def test_each_method_samples_the_exact_noisy_distribution(kolkata, method) -> None:
    circuit = random_circuit(4, 4, max_operands=2, seed=7)
    circuit.measure_all()
    transpiled = transpile_for(circuit, kolkata, seed=0)
    exact = aer_sim.noisy_probabilities(kolkata, transpiled)
    run = aer_sim.run_noisy_detailed(kolkata, transpiled, SHOTS, seed=3, method=method)
    assert run.method == method and sum(run.counts.values()) == SHOTS
    # 16 outcomes at 4000 shots: two exact samples sit at ~0.998; a wrong method far below.
    assert hellinger_fidelity(run.counts, exact) > 0.993


def test_stabilizer_is_offered_only_where_exact_and_is_exact(kolkata, pauli_relaxing) -> None:
    transpiled = transpile_for(ghz(5), pauli_relaxing, seed=0)
    compact = aer_sim.compact_circuit(transpiled)
    assert (
        stabilizer_exact(
            compact.circuit, aer_sim.compact_noise(pauli_relaxing, compact.physical_qubits)
        )
        is None
    )
    exact = aer_sim.noisy_probabilities(pauli_relaxing, transpiled)
    run = aer_sim.run_noisy_detailed(pauli_relaxing, transpiled, SHOTS, seed=1, method="stabilizer")
    assert hellinger_fidelity(run.counts, exact) > 0.993
    # The real device's T2 > T1 on some qubits: relaxation is no Pauli mixture there.
    real = transpile_for(ghz(5), kolkata, seed=0)
    assert (
        "stabilizer" not in aer_sim.plan_noisy_run(real, SHOTS, backend=kolkata).estimated_seconds
    )
    with pytest.raises(ValueError, match="T2 > T1"):
        aer_sim.run_noisy(kolkata, real, SHOTS, method="stabilizer")
    rotated = QuantumCircuit(1)
    rotated.rx(0.3, 0)
    rotated.measure_all()
    non_clifford = transpile_for(rotated, pauli_relaxing, seed=0)
    with pytest.raises(ValueError, match="non-Clifford"):
        aer_sim.run_noisy(pauli_relaxing, non_clifford, SHOTS, method="stabilizer")


def test_mps_sampler_draws_the_state_distribution() -> None:
    circuit = QuantumCircuit(6)
    circuit.h(0)
    circuit.cx(0, 5)  # long-range: Aer moves qubits inside its MPS
    circuit.ry(0.4, 4)
    circuit.cx(5, 4)
    circuit.h(3)
    circuit.cx(3, 1)
    circuit.x(2)
    ideal = Statevector(circuit).probabilities()
    circuit.save_matrix_product_state(pershot=True)
    result = AerSimulator(method="matrix_product_state").run(circuit, shots=1).result()
    state = result.data(0)["matrix_product_state"][0]
    values, probability = trajectories.sample_mps(state, 100_000, np.random.default_rng(0))
    empirical = np.bincount(values, minlength=64) / len(values)
    assert np.abs(empirical - ideal).max() < 0.006
    assert np.allclose(probability, ideal[values])


def test_trajectory_count_follows_the_variance_bound() -> None:
    needed = trajectories.needed_trajectories
    # Spread output (collision 2^-16): one trajectory is enough for 4000 shots.
    assert needed(2.0**-16, 4000) == 1
    # A GHZ state (collision 1/2) needs one trajectory per shot.
    assert needed(0.5, 4000) == 4000
    # In between: M = collision / (bound (1 - collision) / shots).
    assert needed(1e-3, 4000, 0.1) == int(np.ceil(1e-3 * 4000 / (0.1 * (1 - 1e-3))))


def test_reuse_draws_few_trajectories_for_spread_outputs(kolkata) -> None:
    from qiskit.circuit.library import QFTGate

    qft = QuantumCircuit(8)
    qft.x([0, 3])
    qft.append(QFTGate(8), range(8))  # a basis state's QFT: every outcome equally likely
    qft.measure_all()
    transpiled = transpile_for(qft, kolkata, seed=0)
    run = aer_sim.run_noisy_detailed(kolkata, transpiled, SHOTS, seed=2, method="statevector_reuse")
    assert run.trajectories is not None and run.trajectories < SHOTS / 4
    exact = aer_sim.noisy_probabilities(kolkata, transpiled)
    reference = aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=9, method="lazy_density_matrix")
    # Within the floor: as close to the exact distribution as an exact 4000-shot sample.
    assert hellinger_fidelity(run.counts, exact) > hellinger_fidelity(reference, exact) - 0.02


# --------------------------------------------------------------------------------------------
# The cost model's choices (planning only: nothing is simulated)
# --------------------------------------------------------------------------------------------


def _method(circuit: QuantumCircuit, backend) -> str:
    transpiled = transpile_for(circuit, backend, seed=0)
    return aer_sim.plan_noisy_run(transpiled, SHOTS, backend=backend).method


def test_cost_model_picks_each_method_for_its_kind_of_circuit(torino, pauli_relaxing) -> None:
    # Qubits that enter and leave one by one: the numpy density matrix.
    assert _method(ghz(12), torino) == "lazy_density_matrix"
    # 16 entangled qubits with a spread-out output: statevector trajectories, reused.
    assert _method(spread(16), torino) == "statevector_reuse"
    # 24 qubits each in flight briefly, all measured: the branching engine (measuring each as it
    # leaves) where the lazy engine would hold 2^24 outcomes.
    assert _method(qaoa_ring(24), torino) == "branching_density_matrix"
    # 24 qubits of low entanglement all in flight at once (a chain entangled there and back):
    # matrix product states, reused.
    assert _method(there_and_back(24), torino) == "mps_reuse"
    # Clifford gates under Pauli-and-reset noise: the stabilizer method, exact there.
    # (The transpiler must leave every rz at a multiple of pi/2: cx networks do, merged H and S
    # runs often do not, and those are then priced for the other methods.)
    network = QuantumCircuit(20)
    network.h(range(4))
    rng = np.random.default_rng(0)
    for _ in range(5):
        pairs = rng.permutation(20)
        for i in range(0, 20, 2):
            network.cx(int(pairs[i]), int(pairs[i + 1]))
    network.measure_all()
    assert _method(network, pauli_relaxing) == "stabilizer"
    # Mid-circuit measurement of 14 qubits: only Aer's trajectories can run it.
    wide = ghz(14).remove_final_measurements(inplace=False)
    wide.measure_all()
    wide.h(0)
    wide.measure_all()
    assert _method(wide, torino) == "statevector"


def test_a_clifford_output_counts_its_outcomes_from_the_tableau() -> None:
    # GHZ: two outcomes on all three qubits, and a uniform bit on any one of them.
    g = QuantumCircuit(3)
    g.h(0)
    g.cx(0, 1)
    g.cx(1, 2)
    assert clifford_support_bits(g, [0, 1, 2]) == 1
    assert clifford_support_bits(g, [2]) == 1
    # Two Hadamards: four outcomes, two of them on one qubit; a T gate is not Clifford.
    p = QuantumCircuit(3)
    p.h([0, 1])
    p.rz(np.pi / 2, 0)
    assert clifford_support_bits(p, [0, 1, 2]) == 2
    assert clifford_support_bits(p, [1, 2]) == 1
    p.t(0)
    assert clifford_support_bits(p, [0, 1, 2]) is None
    # Against the exact distribution: a random Clifford network of 8 qubits.
    rng = np.random.default_rng(3)
    net = QuantumCircuit(8)
    net.h([0, 3, 5])
    for _ in range(12):
        a, b = (int(q) for q in rng.choice(8, 2, replace=False))
        net.cx(a, b)
        net.s(a)
    for measured in ([0, 1, 2, 3, 4, 5, 6, 7], [1, 4, 6]):
        probabilities = Statevector(net).probabilities(measured)
        support = int(np.count_nonzero(probabilities > 1e-9))
        assert 2 ** clifford_support_bits(net, measured) == support


def test_mps_order_follows_the_interaction_graph() -> None:
    # A ring numbered out of order: the RCM order's bonds stay small, the identity's do not.
    n = 12
    perm = [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]
    ring = QuantumCircuit(n)
    for i in range(n):
        ring.cx(perm[i], perm[(i + 1) % n])
    order = mps_order(ring)
    assert max(mps_bonds(ring, order)) <= 4 < max(mps_bonds(ring, list(range(n))))


def test_rates_are_measured_once_and_kept_per_machine(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path))
    monkeypatch.delenv(cost_model.COST_MODEL_ENV, raising=False)
    monkeypatch.setattr(cost_model, "_rates", None)
    rates = cost_model.machine_rates()
    assert rates.measured and rates.fingerprint == cost_model.fingerprint()
    assert min(rates.lazy_cma_per_s, rates.aer_sv_amp_per_s, rates.aer_mps_chi3_per_s) > 0
    stored = json.loads((tmp_path / "cost_model.json").read_text())
    assert stored["fingerprint"] == rates.fingerprint
    # Another machine's file is measured again; the built-in figures only when asked for.
    stored["fingerprint"] = "another machine"
    stored["lazy_cma_per_s"] = 1.0
    (tmp_path / "cost_model.json").write_text(json.dumps(stored))
    monkeypatch.setattr(cost_model, "_rates", None)
    assert cost_model.machine_rates().lazy_cma_per_s > 1.0
    monkeypatch.setenv(cost_model.COST_MODEL_ENV, "builtin")
    monkeypatch.setattr(cost_model, "_rates", None)
    assert not cost_model.machine_rates().measured


def test_states_past_the_caches_are_priced_at_the_large_state_rate() -> None:
    # A wide circuit whose branches reach tens of millions of entries on a Falcon, and a narrow
    # one that stays in the caches: halving the large-state rate doubles the first's work only.
    kolkata = load_backend("fake_kolkata")
    rates = cost_model.machine_rates()
    slower = replace(rates, lazy_big_cma_per_s=rates.lazy_big_cma_per_s / 2)
    wide = efficient_su2(24, reps=2, entanglement="linear")
    wide = wide.assign_parameters(np.linspace(0.1, 2.0, wide.num_parameters))
    wide.measure_all()
    for circuit, grows in ((wide, True), (ghz(5), False)):
        program = plan_lazy(
            aer_sim.compact_circuit(transpile_for(circuit, kolkata, seed=0)).circuit
        )
        assert not isinstance(program, str)
        fast, slow = (_branching_estimate(program, SHOTS, r) for r in (rates, slower))
        assert (slow > 1.5 * fast) is grows


def test_processes_that_need_the_rates_at_once_measure_them_once(tmp_path, monkeypatch) -> None:
    import threading
    import time

    calls = []

    def calibrate():
        calls.append(1)
        time.sleep(0.2)  # long enough for the others to find no file yet
        return cost_model._BUILTIN

    monkeypatch.setattr(cost_model, "calibrate", calibrate)
    monkeypatch.setenv(cost_model.COST_MODEL_ENV, str(tmp_path / "rates.json"))
    # Threads lock the file as processes do (each opens its own lock file description).
    found = []
    threads = [
        threading.Thread(target=lambda: found.append(cost_model._load_or_measure()))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(found) == 3
    assert {rates.fingerprint for rates in found} == {"builtin"}
