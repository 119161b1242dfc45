"""The state-aware error budget against Aer's own noise model and noisy density matrices."""

from __future__ import annotations

import math
import warnings

import pytest
from qiskit import QuantumCircuit
from qiskit.quantum_info import DensityMatrix, average_gate_fidelity, state_fidelity
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, depolarizing_error, thermal_relaxation_error

from kernel_server.backends.aer_sim import compact_circuit
from kernel_server.backends.compile import choose_layout, transpile_mitigated
from kernel_server.backends.devices import load_backend
from kernel_server.estimator.features import circuit_features
from kernel_server.estimator.state_noise import (
    depolarizing_probability,
    relaxation_fidelity,
    state_log_fidelity,
)


@pytest.mark.parametrize("seconds,t1,t2", [(60e-9, 100e-6, 80e-6), (660e-9, 287e-6, 160e-6)])
def test_relaxation_fidelity_is_aers(seconds: float, t1: float, t2: float) -> None:
    expected = average_gate_fidelity(thermal_relaxation_error(t1, t2, seconds))
    assert relaxation_fidelity(seconds, t1, t2) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "error,qubits,seconds", [(0.01, 2, 400e-9), (0.0004, 1, 35e-9), (0.02, 2, 660e-9)]
)
def test_depolarizing_completes_the_reported_error(
    error: float, qubits: int, seconds: float
) -> None:
    """Relaxation then depolarizing at our parameter has the gate's reported average error."""
    t1, t2 = 120e-6, 90e-6
    relax = thermal_relaxation_error(t1, t2, seconds)
    for _ in range(qubits - 1):
        relax = relax.expand(thermal_relaxation_error(t1, t2, seconds))
    p = depolarizing_probability(error, [relaxation_fidelity(seconds, t1, t2)] * qubits)
    total = relax.compose(depolarizing_error(p, qubits))
    assert 1 - average_gate_fidelity(total) == pytest.approx(error, rel=1e-6)


def test_no_depolarizing_when_relaxation_exceeds_the_error() -> None:
    assert depolarizing_probability(1e-5, [relaxation_fidelity(1e-6, 50e-6, 30e-6)]) == 0.0


def _adder_like() -> QuantumCircuit:
    # A classical-reversible circuit on a basis input: its state stays a basis state.
    qc = QuantumCircuit(3)
    qc.x(0)
    for _ in range(4):
        qc.cx(0, 1)
        qc.cx(1, 2)
        qc.ccx(0, 1, 2)
    qc.measure_all()
    return qc


def _ghz() -> QuantumCircuit:
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.cx(1, 2)
    for _ in range(3):
        qc.cx(1, 2)
        qc.cx(0, 1)
        qc.cx(0, 1)
        qc.cx(1, 2)
    qc.measure_all()
    return qc


@pytest.mark.slow
@pytest.mark.parametrize("make", [_adder_like, _ghz])
def test_budget_tracks_the_noisy_state_fidelity(make) -> None:
    """exp(budget) against the fidelity of Aer's noisy state (device noise without readout,
    ALAP-scheduled as the runs are) to the ideal one, on a small device."""
    backend = load_backend("fake_kolkata")
    circuit = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduled = transpile_mitigated(circuit, backend, choose_layout(circuit, backend))
    budget = state_log_fidelity(scheduled, backend.target)
    assert budget is not None

    bare = scheduled.remove_final_measurements(inplace=False)
    bare.save_density_matrix(qubits=list(compact_circuit(bare).physical_qubits))
    noise = NoiseModel.from_backend(backend, readout_error=False)
    noisy = AerSimulator(method="density_matrix", noise_model=noise).run(bare).result()
    clean = AerSimulator(method="density_matrix").run(bare).result()
    truth = state_fidelity(
        DensityMatrix(clean.data()["density_matrix"]),
        DensityMatrix(noisy.data()["density_matrix"]),
        validate=False,
    )
    product = circuit_features(scheduled, backend.target).cone_log_fidelity
    assert math.exp(budget) == pytest.approx(truth, abs=0.03)
    # The plain error product misses what the state shrugs off and the idling: further off.
    assert abs(math.exp(budget) - truth) <= abs(math.exp(product) - truth) + 0.005


def test_wide_circuits_have_no_budget() -> None:
    backend = load_backend("fake_kolkata")
    qc = QuantumCircuit(14)
    qc.h(0)
    for q in range(13):
        qc.cx(q, q + 1)
    qc.measure_all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = transpile_mitigated(qc, backend, choose_layout(qc, backend), schedule=False)
    assert state_log_fidelity(compiled, backend.target) is None
    assert state_log_fidelity(compiled, backend.target, max_qubits=20) is not None
