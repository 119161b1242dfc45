"""A circuit's ideal outcome distribution, and the fidelity model's columns that summarise it.

The Hellinger fidelity of a noisy run depends on the ideal distribution as much as on the noise:
a run whose ideal output is uniform keeps fidelity ~1 under depolarizing noise, a run with one ideal
outcome loses what the noise takes. :class:`IdealSummary` holds the distribution (Aer's statevector
on the circuit's active qubits) and turns it into the columns ``IDEAL_COLUMNS``:
``depolarized_hellinger`` is the fidelity under the global depolarizing approximation (noisy = f
ideal + (1 - f) uniform, f the numerical fidelity); ``approximate_hellinger`` the same picture with
readout flips, sampled shots and, as f, the state-aware error budget of ``state_noise``
(``state_fidelity``). Circuits wider than ``IDEAL_MAX_QUBITS`` measured qubits have no summary:
their columns are ``UNKNOWN`` (:func:`unknown_ideal_features`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from qiskit import QuantumCircuit

# Above this many measured qubits the ideal distribution is not computed at plan time: the
# statevector costs ~0.05 s at 16 qubits and doubles per qubit (0.5-1.6 s at 20).
IDEAL_MAX_QUBITS = 16
UNKNOWN = -1.0  # value of the ideal-distribution features when it was not computed
LOG_FIDELITY = "cone_log_fidelity"  # which error product the physics baseline starts from


@dataclass(frozen=True)
class IdealSummary:
    """The ideal outcome distribution over a circuit's measured bits (all 2^bits entries)."""

    probabilities: np.ndarray
    measured_bits: int

    @property
    def entropy_bits(self) -> float:
        p = self.probabilities[self.probabilities > 0]
        return float(-(p * np.log2(p)).sum())

    def depolarized_hellinger(self, fidelity: float) -> float:
        """Hellinger fidelity of f * ideal + (1 - f) * uniform against the ideal."""
        f = min(max(fidelity, 0.0), 1.0)
        p = self.probabilities
        uniform = 2.0 ** (-self.measured_bits)
        return float(np.sqrt(p * (f * p + (1.0 - f) * uniform)).sum() ** 2)

    def approximate_run(self, gate_fidelity: float, readout_error: float) -> np.ndarray:
        """The outcome distribution of a cheap noise picture of the run: every measured bit
        flipped with the readout error (exact for uncorrelated readout noise), and the rest of
        the noise as global depolarizing that keeps ``gate_fidelity`` of the state."""
        bits = self.measured_bits
        q = self.probabilities.reshape((2,) * bits) if bits else self.probabilities
        e = min(max(readout_error, 0.0), 0.5)
        for axis in range(bits):
            q = (1.0 - e) * q + e * np.flip(q, axis=axis)
        f = min(max(gate_fidelity, 0.0), 1.0)
        return f * q.reshape(-1) + (1.0 - f) * 2.0 ** (-bits)

    def approximate_hellinger(
        self, features: Mapping[str, float], state_log_fidelity: float | None = None
    ) -> float:
        """Hellinger fidelity to the ideal of ``shots`` samples of :meth:`approximate_run`.

        The gate fidelity is the state-aware error budget (``state_noise``) where it was computed,
        else the error product of the measurements' light cone with idling charged on top.
        Sampling (with a fixed seed, so it is a function of its inputs) carries the finite-shot
        loss that a spread-out distribution suffers at a few thousand shots.
        """
        readout = float(features["mean_readout_error"])
        if state_log_fidelity is not None:
            gate_log = state_log_fidelity
        else:
            measurements = float(features["measurements"])
            gate_log = float(features[LOG_FIDELITY]) - measurements * math.log1p(-min(readout, 0.5))
            # Idling: a qubit in a random state has on average half its population excited,
            # which decays as exp(-t / T1), so each idle second costs 1 / (2 T1) of
            # log-fidelity (on the runs of fidelity_data: 66% -> 81% within 0.05).
            gate_log -= 0.5 * float(features["idle_t1_exposure"])
        q = self.approximate_run(math.exp(min(gate_log, 0.0)), readout)
        shots = max(int(features["shots"]), 1)
        sampled = np.random.default_rng(0).multinomial(shots, q / q.sum()) / shots
        return float(np.sqrt(self.probabilities * sampled).sum() ** 2)

    def features(
        self, features: Mapping[str, float], state_log_fidelity: float | None = None
    ) -> dict[str, float]:
        """The ideal-distribution columns for a run with these circuit features (and the
        state-aware log-fidelity of its compiled circuit, where known)."""
        return {
            "measured_bits": float(self.measured_bits),
            "ideal_entropy_bits": self.entropy_bits,
            "ideal_entropy_fraction": self.entropy_bits / max(self.measured_bits, 1),
            "depolarized_hellinger": self.depolarized_hellinger(
                math.exp(float(features["log_fidelity"]))
            ),
            "state_fidelity": UNKNOWN
            if state_log_fidelity is None
            else math.exp(state_log_fidelity),
            "approximate_hellinger": self.approximate_hellinger(features, state_log_fidelity),
        }


def ideal_features(
    ideal: IdealSummary | None,
    bits: int,
    features: Mapping[str, float],
    transpiled: QuantumCircuit,
    target: Any,
) -> dict[str, float]:
    """The ideal-distribution columns of one compiled run (all UNKNOWN without ``ideal``)."""
    from kernel_server.estimator.state_noise import state_log_fidelity

    if ideal is None:
        return unknown_ideal_features(bits)
    return ideal.features(features, state_log_fidelity(transpiled, target))


IDEAL_COLUMNS: tuple[str, ...] = (
    "measured_bits",
    "ideal_entropy_bits",
    "ideal_entropy_fraction",
    "depolarized_hellinger",
    "state_fidelity",
    "approximate_hellinger",
)


def unknown_ideal_features(measured_bits: int) -> dict[str, float]:
    return {name: UNKNOWN for name in IDEAL_COLUMNS} | {"measured_bits": float(measured_bits)}


def measured_bits(circuit: QuantumCircuit) -> int:
    return len({ci.clbits[0] for ci in circuit.data if ci.operation.name == "measure"})


def ideal_summary(
    circuit: QuantumCircuit, max_qubits: int = IDEAL_MAX_QUBITS
) -> IdealSummary | None:
    """The ideal distribution of a measured circuit, or None when it measures too many qubits.

    Aer's statevector on the circuit's active qubits, probabilities of the measured ones only
    (no outcome labels: the features need the values alone). Entry ``i`` is the outcome whose
    bit ``j`` is the ``j``-th measured qubit's.
    """
    from qiskit_aer import AerSimulator

    from kernel_server.backends.aer_sim import compact_circuit
    from kernel_server.backends.dynamic import has_control_flow

    if has_control_flow(circuit):
        # Which gates run depends on outcomes within the shot: no one unitary to take it from.
        raise ValueError("the ideal distribution of a circuit with control flow is not computed")
    bits = measured_bits(circuit)
    if bits > max_qubits:
        return None
    compact = compact_circuit(circuit).circuit
    unitary = QuantumCircuit(compact.num_qubits)
    measured: list[int] = []
    for instruction in compact.data:
        qargs = [compact.find_bit(q).index for q in instruction.qubits]
        name = instruction.operation.name
        if name in ("barrier", "delay"):
            continue
        if name == "measure":
            measured.extend(q for q in qargs if q not in measured)
            continue
        if any(q in measured for q in qargs):
            raise ValueError("the ideal distribution needs every measurement at the end")
        unitary.append(instruction.operation, qargs)
    if not measured:
        raise ValueError("circuit has no measurements")
    from kernel_server.estimator.mitigation.stack import standard_gates

    # Library gates (qft_dg, ...) and ch are unknown to Aer's statevector: unroll them.
    unitary = standard_gates(unitary, exclude=("ch",))
    unitary.save_probabilities(measured, label="p")
    result = AerSimulator(method="statevector").run(unitary, shots=1).result()
    p = np.asarray(result.data(0)["p"], dtype=float)
    p[p < 1e-12] = 0.0
    return IdealSummary(p / p.sum(), len(measured))
