"""The fast noisy execution path against Aer's from_backend reference (Falcon devices, <= 5
qubits, <= 1000 shots), and expectation values from counts."""

from __future__ import annotations

import numpy as np
import pytest
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.circuit.random import random_circuit
from qiskit.quantum_info import SparsePauliOp, Statevector, SuperOp, hellinger_fidelity
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel

from kernel_server.backends import aer_sim
from kernel_server.backends.compile import transpile_for
from kernel_server.backends.devices import load_backend
from kernel_server.backends.observables import (
    PauliGroup,
    expectation_from_counts,
    measurement_circuits,
)

SHOTS = 1000


@pytest.fixture(scope="module")
def kolkata():
    return load_backend("fake_kolkata")


def ghz(num_qubits: int) -> QuantumCircuit:
    circuit = QuantumCircuit(num_qubits)
    circuit.h(0)
    for q in range(num_qubits - 1):
        circuit.cx(q, q + 1)
    circuit.measure_all()
    return circuit


def two_registers() -> QuantumCircuit:
    """Bits scattered over two registers, one bit never written."""
    qr = QuantumRegister(4, "q")
    alpha, beta = ClassicalRegister(3, "alpha"), ClassicalRegister(2, "beta")
    circuit = QuantumCircuit(qr, alpha, beta)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.cx(1, 2)
    circuit.x(3)
    circuit.measure(0, beta[1])
    circuit.measure(1, alpha[0])
    circuit.measure(2, alpha[2])
    circuit.measure(3, beta[0])
    return circuit


def partial_measurement() -> QuantumCircuit:
    """Five qubits in use, two measured into a wider register."""
    circuit = QuantumCircuit(5, 4)
    circuit.h(0)
    for q in range(4):
        circuit.cx(q, q + 1)
    circuit.ry(0.7, 4)
    circuit.measure(4, 0)
    circuit.measure(1, 2)
    return circuit


def key_shape(key: str) -> list[int]:
    return [len(part) for part in key.split(" ")]


# -- compaction and noise -------------------------------------------------------------------


def test_compaction_keeps_classical_layout(kolkata) -> None:
    transpiled = transpile_for(two_registers(), kolkata, seed=0)
    compact = aer_sim.compact_circuit(transpiled)
    assert compact.circuit.num_qubits == 4
    assert len(compact.physical_qubits) == 4
    assert compact.circuit.clbits == transpiled.clbits
    assert [r.name for r in compact.circuit.cregs] == ["alpha", "beta"]


def test_compact_noise_matches_from_backend(kolkata) -> None:
    physical = (0, 1, 2, 4, 7)
    compact = aer_sim.build_compact_noise(kolkata, physical)
    full = NoiseModel.from_backend(kolkata)
    compared = 0
    for (name, cargs), error in compact.quantum_errors().items():
        reference = full._local_quantum_errors[name][tuple(physical[i] for i in cargs)]
        assert np.allclose(
            SuperOp(error.to_quantumchannel()).data, SuperOp(reference.to_quantumchannel()).data
        )
        compared += 1
    # Every from_backend error on these qubits is there (5 gate kinds per qubit + 4 couplers x 2).
    expected = sum(
        1
        for qubit_map in full._local_quantum_errors.values()
        for qargs in qubit_map
        if set(qargs) <= set(physical)
    )
    assert compared == expected > 0
    for i, p in enumerate(physical):
        assert np.allclose(
            compact.readout[i], full._local_readout_errors[(p,)].probabilities, atol=1e-12
        )


def test_noise_model_cache_hit(kolkata) -> None:
    aer_sim.clear_caches()
    transpiled = transpile_for(ghz(3), kolkata, seed=0)
    aer_sim.run_noisy(kolkata, transpiled, 100, seed=1)
    first = aer_sim.noise_cache_info()
    assert (first.hits, first.misses, first.size) == (0, 1, 1)
    aer_sim.run_noisy(kolkata, transpiled, 100, seed=2)
    second = aer_sim.noise_cache_info()
    assert (second.hits, second.misses, second.size) == (1, 1, 1)


# -- counts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [ghz, two_registers, partial_measurement])
def test_count_keys_match_the_reference(kolkata, make) -> None:
    circuit = make(3) if make is ghz else make()
    transpiled = transpile_for(circuit, kolkata, seed=0)
    fast = aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=3)
    reference = aer_sim.run_reference(kolkata, transpiled, SHOTS, seed=3)
    ideal = aer_sim.ideal_probabilities(circuit)
    assert sum(fast.values()) == sum(reference.values()) == SHOTS
    shapes = {tuple(key_shape(k)) for k in list(fast) + list(reference) + list(ideal)}
    assert len(shapes) == 1
    # The dominant outcomes are the ideal ones, under the same keys on both paths.
    top = max(ideal, key=ideal.__getitem__)
    assert fast.get(top, 0) > 0.3 * SHOTS and reference.get(top, 0) > 0.3 * SHOTS


def test_two_register_keys(kolkata) -> None:
    transpiled = transpile_for(two_registers(), kolkata, seed=0)
    counts = aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=0)
    # beta (2 bits) leftmost, then alpha (3 bits); alpha[1] is never written.
    assert all(key_shape(k) == [2, 3] and k[4] == "0" for k in counts)
    assert counts.get("01 000", 0) + counts.get("11 101", 0) > 0.8 * SHOTS


def test_fidelity_close_to_reference(kolkata) -> None:
    circuit = ghz(3)
    transpiled = transpile_for(circuit, kolkata, seed=0)
    ideal = aer_sim.ideal_probabilities(circuit)
    fast, reference = [], []
    for seed in range(3):
        fast.append(hellinger_fidelity(aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed), ideal))
        reference.append(
            hellinger_fidelity(aer_sim.run_reference(kolkata, transpiled, SHOTS, seed), ideal)
        )
    assert abs(np.mean(fast) - np.mean(reference)) < 0.05
    assert 0.8 < np.mean(fast) < 1.0


def test_lazy_engine_is_exact(kolkata) -> None:
    """The numpy engine's distribution equals Aer's density matrix under the same noise."""
    circuit = random_circuit(4, 5, max_operands=2, seed=7)
    circuit.measure_all()
    transpiled = transpile_for(circuit, kolkata, seed=0)
    engine = aer_sim.noisy_probabilities(kolkata, transpiled)
    compact = aer_sim.compact_circuit(transpiled)
    noise = aer_sim.compact_noise(kolkata, compact.physical_qubits)
    # Aer's exact probabilities: measurements replaced by save_probabilities, readout by hand.
    qubit_of = {
        compact.circuit.find_bit(ci.clbits[0]).index: compact.circuit.find_bit(ci.qubits[0]).index
        for ci in compact.circuit.data
        if ci.operation.name == "measure"
    }
    qubits = [qubit_of[c] for c in range(compact.circuit.num_clbits)]
    unitary = compact.circuit.remove_final_measurements(inplace=False)
    unitary.save_probabilities(qubits)
    simulator = AerSimulator(method="density_matrix", noise_model=noise.noise_model)
    probabilities = np.asarray(simulator.run(unitary).result().data(0)["probabilities"])
    tensor = probabilities.reshape([2] * len(qubits))  # axis j is clbit len - 1 - j
    for j, q in enumerate(reversed(qubits)):
        tensor = np.moveaxis(np.tensordot(noise.readout[q], tensor, axes=([0], [j])), 0, j)
    aer = {format(i, f"0{len(qubits)}b"): p for i, p in enumerate(tensor.reshape(-1))}
    assert set(engine) <= set(aer)
    assert max(abs(engine.get(k, 0.0) - aer[k]) for k in aer) < 1e-9


@pytest.mark.parametrize("method", ["density_matrix", "statevector"])
def test_aer_methods_agree_with_the_lazy_engine(kolkata, method) -> None:
    transpiled = transpile_for(ghz(3), kolkata, seed=0)
    exact = aer_sim.noisy_probabilities(kolkata, transpiled)
    counts = aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=5, method=method)
    assert sum(counts.values()) == SHOTS
    assert hellinger_fidelity(counts, exact) > 0.99


def test_mid_circuit_measurement_goes_to_aer(kolkata) -> None:
    circuit = QuantumCircuit(2, 2)
    circuit.h(0)
    circuit.measure(0, 0)
    circuit.cx(0, 1)
    circuit.measure(1, 1)
    transpiled = transpile_for(circuit, kolkata, seed=0)
    plan = aer_sim.plan_noisy_run(transpiled, SHOTS)
    assert plan.method != "lazy_density_matrix" and "mid-circuit" in plan.lazy_unsupported
    counts = aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=0)
    assert counts.get("00", 0) + counts.get("11", 0) > 0.85 * SHOTS
    with pytest.raises(ValueError, match="mid-circuit"):
        aer_sim.run_noisy(kolkata, transpiled, SHOTS, method="lazy_density_matrix")


@pytest.mark.slow
def test_delays_relax_as_in_from_backend() -> None:
    backend = load_backend("fake_hanoi")  # its pulse alignment makes delays need a schedule
    circuits = []
    for delay_ns in (0, 30_000):
        circuit = QuantumCircuit(3, 3)
        circuit.h(0)
        circuit.cx(0, 1)
        circuit.cx(1, 2)
        if delay_ns:
            circuit.delay(delay_ns, 1, unit="ns")
        circuit.measure(range(3), range(3))
        circuits.append(circuit)
    ideal = aer_sim.ideal_probabilities(circuits[0])
    fidelities = []
    for circuit in circuits:
        transpiled = transpile_for(circuit, backend, seed=0)
        assert aer_sim.plan_noisy_run(transpiled, SHOTS).method == "lazy_density_matrix"
        exact = aer_sim.noisy_probabilities(backend, transpiled)
        reference = aer_sim.run_reference(backend, transpiled, SHOTS, seed=0)
        assert hellinger_fidelity(exact, reference) > 0.99
        fidelities.append(hellinger_fidelity(exact, ideal))
    assert fidelities[1] < fidelities[0] - 0.1  # 30 us idle on a GHZ qubit costs coherence


def test_seeded_runs_repeat_and_bad_arguments_fail(kolkata) -> None:
    transpiled = transpile_for(ghz(3), kolkata, seed=0)
    assert aer_sim.run_noisy(kolkata, transpiled, SHOTS, seed=11) == aer_sim.run_noisy(
        kolkata, transpiled, SHOTS, seed=11
    )
    with pytest.raises(ValueError, match="unknown method"):
        aer_sim.run_noisy(kolkata, transpiled, SHOTS, method="mps")
    with pytest.raises(ValueError, match="shots"):
        aer_sim.run_noisy(kolkata, transpiled, 0)


def test_ideal_distribution() -> None:
    bell = QuantumCircuit(2)
    bell.h(0)
    bell.cx(0, 1)
    bell.measure_all()
    assert aer_sim.ideal_probabilities(bell) == pytest.approx({"00": 0.5, "11": 0.5})
    counts = aer_sim.ideal_counts(bell, SHOTS, seed=1)
    assert set(counts) == {"00", "11"} and sum(counts.values()) == SHOTS
    assert aer_sim.fidelity_to_ideal(counts, bell) > 0.99


# -- expectation values ---------------------------------------------------------------------


def bell() -> QuantumCircuit:
    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.cx(0, 1)
    return circuit


@pytest.mark.parametrize(("observable", "value"), [("ZZ", 1.0), ("XX", 1.0), ("YY", -1.0)])
def test_bell_expectations_noiseless(observable: str, value: float) -> None:
    groups = measurement_circuits(bell(), observable)
    assert len(groups) == 1
    counts = [aer_sim.ideal_counts(circuit, SHOTS, seed=0) for circuit, _ in groups]
    assert expectation_from_counts(observable, [m for _, m in groups], counts) == pytest.approx(
        value, abs=1e-9
    )


def test_qubit_wise_grouping_and_exact_value() -> None:
    circuit = random_circuit(3, 3, seed=2)
    observable = SparsePauliOp(["ZZI", "ZIZ", "XXI", "IYY", "III"], [0.5, -0.3, 0.8, 0.2, 1.5])
    groups = measurement_circuits(circuit, observable)
    assert len(groups) == 3  # {ZZI, ZIZ}, {XXI}, {IYY}; the identity needs no circuit
    assert all(isinstance(meta, PauliGroup) for _, meta in groups)
    distributions = [aer_sim.ideal_probabilities(c) for c, _ in groups]
    value = expectation_from_counts(observable, [m for _, m in groups], distributions)
    assert value == pytest.approx(Statevector(circuit).expectation_value(observable).real)


def test_bell_expectation_on_a_noisy_device(kolkata) -> None:
    observable = [("ZZ", 1.0), ("XX", 1.0)]
    groups = measurement_circuits(bell(), observable)
    counts = [
        aer_sim.run_noisy(kolkata, transpile_for(circuit, kolkata), SHOTS, seed=0)
        for circuit, _ in groups
    ]
    value = expectation_from_counts(observable, [m for _, m in groups], counts)
    assert 1.6 < value < 2.0


def test_measurement_circuits_reject_measured_circuits() -> None:
    with pytest.raises(ValueError, match="without measurements"):
        measurement_circuits(ghz(2), "ZZ")
    with pytest.raises(ValueError, match="Hermitian"):
        measurement_circuits(bell(), SparsePauliOp(["ZZ"], [1j]))
