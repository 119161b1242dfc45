"""The MPS bond probe: a capped ideal run measures the bond the structural bound overstates,
and the method chooser prices MPS trajectories by it."""

from __future__ import annotations

import numpy as np
import pytest
from qiskit import QuantumCircuit

from kernel_server.backends import methods, mps_probe
from kernel_server.backends.calibration import calibration_noise
from kernel_server.backends.work import mps_bonds, mps_order


def zigzag_ghz(n: int) -> QuantumCircuit:
    """A GHZ state whose CNOTs hop across the register: every cut is crossed many times (the
    bound is large) while the state's Schmidt rank across any cut stays 2."""
    qc = QuantumCircuit(n)
    qc.h(0)
    half = n // 2
    order = [q for pair in zip(range(half), range(half, n), strict=False) for q in pair]
    for a, b in zip(order, order[1:], strict=False):
        qc.cx(a, b)
    for a, b in zip(order, order[1:], strict=False):  # undo and redo: more crossings, same state
        qc.cx(a, b)
        qc.cx(a, b)
    qc.measure_all()
    return qc


def test_the_probe_measures_a_bond_far_below_the_bound():
    qc = zigzag_ghz(12)
    assert max(mps_bonds(qc, list(range(12)))) >= 32
    probe = mps_probe.measured_bond(qc)
    assert probe.bond == 2
    assert probe.seconds > 0
    assert mps_probe.measured_bond(qc) is probe  # remembered per circuit content


def test_a_circuit_that_reaches_the_cap_keeps_the_bound(monkeypatch):
    monkeypatch.setattr(mps_probe, "PROBE_CAP", 4)
    rng = np.random.default_rng(1)
    qc = QuantumCircuit(8)
    for layer in range(8):
        for q in range(layer % 2, 7, 2):
            qc.rx(float(rng.uniform(0, np.pi)), q)
            qc.cx(q, q + 1)
    assert mps_probe.measured_bond(qc).bond is None


def test_the_chooser_prices_mps_by_the_measured_bond(monkeypatch):
    qc = zigzag_ghz(12)
    noise = calibration_noise()
    qubits = tuple(range(qc.num_qubits))
    before, _ = methods.plan_methods(qc, noise, qubits, 4000, "auto")
    monkeypatch.setattr(methods, "PROBE_MIN_QUBITS", 10)
    monkeypatch.setattr(methods, "PROBE_WORTH_S", 0.0)
    monkeypatch.setattr(methods, "PROBE_CAP", 4)
    after, _ = methods.plan_methods(qc, noise, qubits, 4000, "auto")
    bound = max(mps_bonds(qc, mps_order(qc)))
    assert bound > 4
    # Memory is priced at twice the measured bond (2), not at the bound.
    assert after.estimated_memory["mps_reuse"] == 64.0 * 12 * 4**2 * 16
    if "mps_reuse" in before.estimated_memory:
        assert before.estimated_memory["mps_reuse"] > after.estimated_memory["mps_reuse"]
    # An estimate that may not spend a probe prices the bound, as before.
    monkeypatch.setattr(methods, "measured_bond", lambda circuit: pytest.fail("probed"))
    unprobed, _ = methods.plan_methods(qc, noise, qubits, 4000, "auto", probe=False)
    assert unprobed.estimated_memory["mps_reuse"] > after.estimated_memory["mps_reuse"]


def test_each_probe_reads_only_its_own_run():
    # Aer's MPS log keeps every earlier run of the process: a wide bond seen before must not
    # show in a later probe of a narrow circuit.
    rng = np.random.default_rng(0)
    wide = QuantumCircuit(12)
    wide.h(range(4))
    for _ in range(5):
        pairs = rng.permutation(12)
        for i in range(0, 12, 2):
            wide.cx(int(pairs[i]), int(pairs[i + 1]))
    assert mps_probe.measured_bond(wide).bond >= 8
    assert mps_probe.measured_bond(zigzag_ghz(10)).bond == 2


def test_a_statevector_that_would_not_fit_memory_makes_the_probe_worth_it(monkeypatch):
    # Statevector reuse is quick here but over the guard's memory ceiling: the MPS must then be
    # priced by its measured bond, or a circuit both could run would be refused.
    qc = zigzag_ghz(12)
    noise = calibration_noise()
    qubits = tuple(range(qc.num_qubits))
    monkeypatch.setattr(methods, "PROBE_MIN_QUBITS", 10)
    monkeypatch.setattr(methods, "PROBE_WORTH_S", 1e9)
    monkeypatch.setattr(methods, "PROBE_CAP", 4)
    quick, _ = methods.plan_methods(qc, noise, qubits, 4000, "auto")
    assert quick.estimated_memory["mps_reuse"] > 64.0 * 12 * 4**2 * 16  # the bound, no probe
    monkeypatch.setenv("QONDUCTOR_NOISY_GUARD", "max_memory_gb=0.0001")
    tight, _ = methods.plan_methods(qc, noise, qubits, 4000, "auto")
    assert tight.estimated_memory["mps_reuse"] == 64.0 * 12 * 4**2 * 16
