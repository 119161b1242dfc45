"""The branching statevector: one pure state per shot, noise drawn per shot, exact samples."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import compact_program, sampling_floor, total_variation
from qiskit import QuantumCircuit
from qiskit.circuit.library import efficient_su2
from qiskit.circuit.random import random_circuit

from kernel_server.backends import aer_sim
from kernel_server.backends.branching import branching_entries
from kernel_server.backends.branching_sv import run_branching_statevector, statevector_profile
from kernel_server.backends.devices import load_backend
from kernel_server.backends.lazy_dm import format_probabilities, run_lazy


@pytest.fixture(scope="module")
def brisbane():
    # Qubits with T2 > T1 and with T2 <= T1: both ratios go through the same unravelling.
    return load_backend("fake_brisbane")


def test_samples_the_exact_noisy_distribution(brisbane) -> None:
    # Relaxation five times the device's, so that jumps and dephasing are common; a delay (its
    # relaxation alone); a qubit entangled with nothing (its own (shots, 2) state until measured);
    # one qubit unmeasured (sampled and dropped); permuted clbits, readout errors kept.
    circuit = QuantumCircuit(6, 5)
    circuit.compose(random_circuit(5, 8, max_operands=2, seed=3), range(5), inplace=True)
    circuit.delay(4, 1, unit="us")
    circuit.h(5)
    circuit.sx(5)
    circuit.measure([0, 1, 3, 4, 5], [2, 0, 4, 1, 3])
    _, program, noise = compact_program(circuit, brisbane)
    assert any(operation.name == "delay" for operation, _ in program.ops)
    errors = {
        key: replace(spec, duration=5 * spec.duration) if spec.duration else spec
        for key, spec in noise.errors.items()
    }
    strong = replace(noise, errors=errors, superops={}, simulators={})
    exact_array, clbits = run_lazy(program, strong)
    exact = format_probabilities(exact_array, clbits, program)
    shots = 100_000
    counts = run_branching_statevector(program, strong, shots, seed=5)
    assert sum(counts.values()) == shots and set(counts) <= set(exact)
    assert total_variation(counts, exact) < 1.5 * sampling_floor(exact, shots)
    again = run_branching_statevector(program, strong, 500, seed=5)
    assert again == run_branching_statevector(program, strong, 500, seed=5)


def test_relaxation_of_an_excited_qubit_decays_as_t1() -> None:
    # One qubit in |1>, then a long delay: P(1) is exp(-t/T1), whatever T2 does.
    kolkata = load_backend("fake_kolkata")
    circuit = QuantumCircuit(1, 1)
    circuit.x(0)
    circuit.delay(100, 0, unit="us")
    circuit.measure(0, 0)
    _, program, noise = compact_program(circuit, kolkata)
    quiet = replace(noise, readout={}, superops={}, simulators={})
    exact_array, clbits = run_lazy(program, quiet)
    exact = format_probabilities(exact_array, clbits, program)
    counts = run_branching_statevector(program, quiet, 40_000, seed=2)
    assert abs(counts.get("1", 0) / 40_000 - exact["1"]) < 4 * np.sqrt(0.25 / 40_000)
    assert 0.2 < exact["1"] < 0.9  # the delay matters


def test_a_routed_linear_ansatz_holds_a_state_per_shot_not_a_matrix_per_history() -> None:
    # EfficientSU2 with linear entanglement on 24 qubits routed on a 27-qubit Falcon (which has
    # no line that long): 9 qubits in flight at most, and as many histories as shots once a
    # dozen qubits are measured (65M entries as density matrices; 17-20 s in that engine).
    hanoi = load_backend("fake_hanoi")
    body = efficient_su2(24, reps=2, entanglement="linear")
    angles = np.random.default_rng(1).uniform(0, 2 * np.pi, body.num_parameters)
    circuit = body.assign_parameters(angles)
    circuit.measure_all()
    transpiled, program, noise = compact_program(circuit, hanoi)
    _, peak = statevector_profile(program)
    assert 4000 * peak * 16 <= branching_entries(program, 4000)
    plan = aer_sim.plan_noisy_run(transpiled, 4000, backend=hanoi)
    assert plan.method == "branching_statevector"
    run = aer_sim.run_noisy_detailed(hanoi, transpiled, 4000, seed=1)
    assert run.method == "branching_statevector" and sum(run.counts.values()) == 4000
