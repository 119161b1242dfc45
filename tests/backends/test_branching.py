"""The branching density-matrix engine: exact samples, measuring each qubit as it leaves."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compact_program, sampling_floor, total_variation
from qiskit import QuantumCircuit
from qiskit.circuit.random import random_circuit

from kernel_server.backends import aer_sim
from kernel_server.backends.branching import branching_entries, run_branching
from kernel_server.backends.devices import load_backend


@pytest.fixture(scope="module")
def kolkata():
    return load_backend("fake_kolkata")


def test_samples_the_exact_noisy_distribution(kolkata) -> None:
    # Measured into permuted clbits, one qubit left unmeasured (traced out), one measured qubit
    # that no gate touches (reads 0 before its readout error), a spare clbit never written.
    circuit = QuantumCircuit(6, 6)
    circuit.compose(random_circuit(5, 5, max_operands=2, seed=11), range(5), inplace=True)
    circuit.measure([0, 1, 2, 3, 5], [4, 0, 3, 1, 2])
    transpiled, program, noise = compact_program(circuit, kolkata)
    exact = aer_sim.noisy_probabilities(kolkata, transpiled)
    shots = 100_000
    counts = run_branching(program, noise, shots, seed=5)
    assert sum(counts.values()) == shots and set(counts) <= set(exact)
    assert total_variation(counts, exact) < 1.5 * sampling_floor(exact, shots)
    assert run_branching(program, noise, 500, seed=5) == run_branching(program, noise, 500, seed=5)


def w_state(n: int) -> QuantumCircuit:
    """|W_n> by a cascade: qubit k keeps amplitude 1/sqrt(n - k) and hands the rest on."""
    qc = QuantumCircuit(n)
    qc.x(0)
    for k in range(n - 1):
        theta = 2 * np.arccos(np.sqrt(1 / (n - k)))
        qc.cry(theta, k, k + 1)
        qc.cx(k + 1, k)
    qc.measure_all()
    return qc


def test_a_wide_w_state_runs_as_branches_not_as_two_to_the_width() -> None:
    torino = load_backend("fake_torino")
    transpiled, program, noise = compact_program(w_state(20), torino)
    # The lazy engine would end holding every outcome; the branches hold at most a state per
    # shot of the few qubits in flight.
    assert program.peak_entries >= 2**20
    assert branching_entries(program, 4000) < 2**20
    plan = aer_sim.plan_noisy_run(transpiled, 4000, backend=torino)
    assert plan.method == "branching_density_matrix"
    run = aer_sim.run_noisy_detailed(torino, transpiled, 4000, seed=1)
    assert run.method == "branching_density_matrix" and sum(run.counts.values()) == 4000
    one_hot = sum(n for key, n in run.counts.items() if key.count("1") == 1) / 4000
    # Each one-hot outcome ideally 1/20; the noise keeps most of the weight on them.
    assert one_hot > 0.5
    per_outcome = [run.counts.get("0" * (19 - k) + "1" + "0" * k, 0) / 4000 for k in range(20)]
    assert min(per_outcome) > 0.01 and max(per_outcome) < 0.1
