"""The device noise Pauli-twirled, for stabilizer simulation of Clifford circuits at any width.

The fleet's noise (:mod:`kernel_server.backends.noise`: depolarizing, then thermal relaxation per
gate, relaxation over delays, a readout error per measurement) is not a stabilizer channel:
amplitude damping pulls states toward |0>, and relaxation with T2 > T1 is not a mixture of
Paulis at all. Aer's ``stabilizer`` method needs Pauli errors. The Pauli twirl of a channel is
the Pauli channel with the same diagonal of the Pauli transfer matrix (PTM),
``lambda_Q = tr(Q Lambda(Q)) / 2^k``; its probabilities are ``p_P = 4^-k sum_Q s(P, Q) lambda_Q``
with ``s = +1`` where P and Q commute, -1 where they anticommute (Wallman & Emerson, PRA 94,
052325, 2016, eq. 5). What is lost is the PTM's off-diagonal part: for relaxation, the drift
toward |0>, so a qubit in |0> is flipped by the twirl where relaxation leaves it alone.

Idle windows are not all twirled (:func:`idle_windows`), because two of the three kinds can be
taken exactly:

* before a qubit's first gate it is in |0>, which relaxation at 0 K leaves as it is: no error;
* after its last gate only its populations reach the measurement, and relaxation moves them
  classically (a 1 decays to 0 with probability 1 - exp(-t / T1)): exact as a classical flip,
  folded into the qubit's readout error;
* between gates the relaxation is twirled.

Relaxation during gates is twirled too. Twirling every idle window instead made GHZ and
Bernstein-Vazirani circuits of 12 qubits lose up to 0.05 of fidelity more than exactly (qubits
wait in |0> for most of an ALAP schedule); ``wide_data.twirl_check`` measures what is left on
circuits the exact engine can still take. Readout errors are classical and stay as they are.

This is an approximation of the fleet's noise, used only to make ground truth for the fidelity
model on circuits too wide for the exact engines; no run of the fleet uses it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import Delay
from qiskit.providers import BackendV2
from qiskit_aer import AerSimulator
from qiskit_aer.noise import NoiseModel, QuantumError, ReadoutError, pauli_error

from kernel_server.backends.aer_sim import compact_circuit
from kernel_server.backends.noise import (
    CompactNoise,
    ErrorSpec,
    compact_noise,
    thermal_relaxation_superop,
)

_PAULI_1 = {
    "I": np.eye(2, dtype=complex),
    "X": np.array([[0, 1], [1, 0]], dtype=complex),
    "Y": np.array([[0, -1j], [1j, 0]], dtype=complex),
    "Z": np.array([[1, 0], [0, -1]], dtype=complex),
}
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}
# Pauli probabilities below this are dropped (and the rest renormalised): the exact twirl of a
# CPTP map is non-negative; tiny negatives are rounding.
_NEGLIGIBLE = 1e-12


@lru_cache(maxsize=4)
def pauli_labels(num_qubits: int) -> tuple[str, ...]:
    """The 4^k Pauli labels in Qiskit's order: character j acts on qarg k-1-j."""
    return tuple("".join(p) for p in itertools.product("IXYZ", repeat=num_qubits))


@lru_cache(maxsize=4)
def _pauli_matrices(num_qubits: int) -> np.ndarray:
    """Matrices of :func:`pauli_labels`, ``kron`` over the label's characters (Qiskit's order)."""
    out = []
    for label in pauli_labels(num_qubits):
        matrix = np.ones((1, 1), dtype=complex)
        for char in label:
            matrix = np.kron(matrix, _PAULI_1[char])
        out.append(matrix)
    return np.asarray(out)


@lru_cache(maxsize=4)
def _commutation_signs(num_qubits: int) -> np.ndarray:
    """+1 where the two Paulis commute, -1 where they anticommute."""
    labels = pauli_labels(num_qubits)
    signs = np.ones((len(labels), len(labels)))
    for i, a in enumerate(labels):
        for j, b in enumerate(labels):
            anticommuting = sum(x != "I" and y != "I" and x != y for x, y in zip(a, b, strict=True))
            signs[i, j] = -1.0 if anticommuting % 2 else 1.0
    return signs


def pauli_transfer_diagonal(superop: np.ndarray, num_qubits: int) -> np.ndarray:
    """``tr(P Lambda(P)) / 2^k`` for every Pauli P of :func:`pauli_labels`.

    ``superop`` acts on the row-major vectorisation of the density matrix, as
    :mod:`kernel_server.backends.noise` builds them (``vec(rho)[a * d + b] = rho[a, b]``).
    """
    dim = 2**num_qubits
    paulis = _pauli_matrices(num_qubits)
    images = (superop @ paulis.reshape(len(paulis), -1).T).T.reshape(len(paulis), dim, dim)
    return np.real(np.einsum("pij,pji->p", paulis, images)) / dim


def twirl_probabilities(diagonal: np.ndarray, num_qubits: int) -> np.ndarray:
    """Probabilities, per Pauli of :func:`pauli_labels`, of the Pauli channel with this PTM
    diagonal."""
    probabilities = _commutation_signs(num_qubits) @ np.asarray(diagonal, dtype=float)
    probabilities /= 4**num_qubits
    probabilities[probabilities < _NEGLIGIBLE] = 0.0
    return probabilities / probabilities.sum()


def twirled_channel(superop: np.ndarray, num_qubits: int) -> QuantumError:
    """The Pauli twirl of a channel given as a (row-major) superoperator, as an Aer error."""
    probabilities = twirl_probabilities(pauli_transfer_diagonal(superop, num_qubits), num_qubits)
    labels = pauli_labels(num_qubits)
    return pauli_error([(labels[i], float(p)) for i, p in enumerate(probabilities) if p > 0])


def twirled_error(spec: ErrorSpec) -> QuantumError:
    """The Pauli twirl of one instruction's device error (depolarizing, then relaxation)."""
    return twirled_channel(spec.superop(), spec.num_qubits)


@lru_cache(maxsize=4096)
def twirled_relaxation(t1: float, t2: float, seconds: float) -> QuantumError:
    """The Pauli twirl of thermal relaxation over ``seconds`` (T2 already <= 2 T1): a qubit
    flips (X or Y, each ``(1 - e^-t/T1) / 4``) and dephases."""
    return twirled_channel(thermal_relaxation_superop(t1, t2, seconds), 1)


def _delay_seconds(operation: Delay, noise: CompactNoise) -> float:
    scale = noise.dt if operation.unit == "dt" else _SECONDS[operation.unit]
    return float(operation.duration) * float(scale or 0.0)


@dataclass(frozen=True)
class IdleWindows:
    """How the delays of a compact circuit are simulated."""

    # Instruction indices of the delays between a qubit's first and last gate: twirled.
    twirled: frozenset[int]
    # Per qubit, the probability that a 1 decays to 0 while it waits for its measurement.
    terminal_decay: dict[int, float]

    def readout(self, noise: CompactNoise) -> dict[int, np.ndarray]:
        """``noise``'s readout matrices (P[true, measured]) with the terminal decay in front."""
        out = {}
        for qubit in sorted(set(noise.readout) | set(self.terminal_decay)):
            matrix = noise.readout.get(qubit, np.eye(2))
            gamma = self.terminal_decay.get(qubit, 0.0)
            decay = np.array([[1.0, 0.0], [gamma, 1.0 - gamma]])
            out[qubit] = decay @ matrix
        return out


def idle_windows(circuit: QuantumCircuit, noise: CompactNoise) -> IdleWindows:
    """Which delays of ``circuit`` are twirled, and the exact decay of those after the last gate
    (the delays before a qubit's first gate are left out: relaxation keeps |0> as it is)."""
    qindex = {bit: i for i, bit in enumerate(circuit.qubits)}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, instruction in enumerate(circuit.data):
        if instruction.operation.name in ("barrier", "delay", "measure"):
            continue
        for q in instruction.qubits:
            first.setdefault(qindex[q], i)
            last[qindex[q]] = i
    twirled: set[int] = set()
    terminal: dict[int, float] = {}
    for i, instruction in enumerate(circuit.data):
        operation = instruction.operation
        if not isinstance(operation, Delay):
            continue
        q = qindex[instruction.qubits[0]]
        if q not in first or i < first[q]:
            continue
        if i < last[q]:
            twirled.add(i)
        else:
            terminal[q] = terminal.get(q, 0.0) + _delay_seconds(operation, noise)
    decay = {
        q: float(1.0 - np.exp(-seconds / noise.t1s[q])) if np.isfinite(noise.t1s[q]) else 0.0
        for q, seconds in terminal.items()
    }
    return IdleWindows(frozenset(twirled), decay)


def twirled_noise_model(
    noise: CompactNoise, readout: dict[int, np.ndarray] | None = None
) -> NoiseModel:
    """``noise`` (on compact qubits) with every gate error Pauli-twirled; readout as ``readout``
    gives it (default: unchanged)."""
    model = NoiseModel(basis_gates=list(noise.basis_gates))
    for (name, qargs), spec in noise.errors.items():
        model.add_quantum_error(twirled_error(spec), name, list(qargs))
    for qubit, matrix in sorted((noise.readout if readout is None else readout).items()):
        model.add_readout_error(ReadoutError(matrix), [qubit])
    return model


def twirl_delays(
    circuit: QuantumCircuit, noise: CompactNoise, windows: IdleWindows
) -> QuantumCircuit:
    """``circuit`` (compact) with the delays ``windows`` twirls replaced by the twirl of the
    relaxation the fleet applies over them (``aer_sim`` relaxes delays with
    ``RelaxationNoisePass``), the others dropped."""
    out = circuit.copy_empty_like()
    for i, instruction in enumerate(circuit.data):
        operation = instruction.operation
        if not isinstance(operation, Delay):
            out.append(operation, instruction.qubits, instruction.clbits, copy=False)
            continue
        seconds = _delay_seconds(operation, noise)
        if i in windows.twirled and seconds > 0:
            qubit = circuit.find_bit(instruction.qubits[0]).index
            error = twirled_relaxation(
                float(noise.t1s[qubit]), float(noise.t2s[qubit]), round(seconds, 15)
            )
            out.append(error.to_instruction(), instruction.qubits)
    return out


def run_twirled_stabilizer(
    backend: BackendV2, transpiled: QuantumCircuit, shots: int, seed: int | None = None
) -> dict[str, int]:
    """Counts of a Clifford ``transpiled`` circuit (``transpile_for`` or ``transpile_mitigated``
    output) under ``backend``'s twirled noise, with Aer's stabilizer method on its active qubits.

    Same count keys as ``aer_sim.run_noisy``; raises ``ValueError`` for a non-Clifford circuit.
    Aer draws a noisy circuit per shot: ~4 ms a shot at 40 qubits and ~1,700 instructions (a
    4000-shot run 16-21 s on 2 cores), which is why :func:`sample_twirled` exists.
    """
    compact = compact_circuit(transpiled)
    noise = compact_noise(backend, compact.physical_qubits)
    windows = idle_windows(compact.circuit, noise)
    circuit = twirl_delays(compact.circuit, noise, windows)
    model = twirled_noise_model(noise, windows.readout(noise))
    simulator = AerSimulator(method="stabilizer", noise_model=model)
    options = {} if seed is None else {"seed_simulator": int(seed)}
    result = simulator.run(circuit, shots=shots, **options).result()
    if not result.success:
        raise ValueError(f"stabilizer simulation failed: {result.status}")
    return dict(result.get_counts(0))


# --------------------------------------------------------------------------------------------
# Pauli-frame sampling: the same distribution as run_twirled_stabilizer, vectorised over shots
# --------------------------------------------------------------------------------------------
#
# Under Pauli noise a Clifford circuit's state is P C|0>, with P the errors pushed forward
# through the gates (P -> G P G^dagger, a linear map of P's X and Z bits). With every
# measurement at the end, a computational-basis outcome is then a noiseless sample of C|0>
# XOR the X bits of P (its Z bits change no outcome), and readout flips come on top. Each shot's
# P is drawn independently from the same per-gate Pauli channels Aer's stabilizer method draws
# from, so the distributions agree exactly (the tests compare the two); the frames of all shots
# are propagated at once, as bit arrays, and only one noiseless stabilizer run is needed.


def sample_twirled(
    backend: BackendV2, transpiled: QuantumCircuit, shots: int, seed: int | None = None
) -> dict[str, int]:
    """Counts of a Clifford circuit under ``backend``'s twirled noise, like
    :func:`run_twirled_stabilizer` but by Pauli frames (40 qubits, 4000 shots: ~0.2 s).

    Needs every measurement at the end; raises ``ValueError`` otherwise or for a non-Clifford
    gate.
    """
    compact = compact_circuit(transpiled)
    noise = compact_noise(backend, compact.physical_qubits)
    return sample_pauli_frames(compact.circuit, noise, shots, seed)


@lru_cache(maxsize=512)
def _symplectic(name: str, params: tuple[float, ...]) -> np.ndarray:
    """Matrix taking a Pauli's bits (x of each qarg, then z) to its image under the gate."""
    from qiskit.circuit.library import get_standard_gate_name_mapping
    from qiskit.quantum_info import Clifford

    gate = get_standard_gate_name_mapping()[name]
    if params:
        gate = gate.base_class(*params)
    try:
        return Clifford(gate).symplectic_matrix.astype(np.uint8)
    except Exception as exc:  # qiskit raises QiskitError for a non-Clifford gate
        raise ValueError(f"{name}{list(params)} is not a Clifford gate") from exc


@lru_cache(maxsize=4)
def _label_bits(num_qubits: int) -> tuple[np.ndarray, np.ndarray]:
    """X and Z bits, per qarg, of each Pauli of :func:`pauli_labels` (shape 4^k x k)."""
    labels = pauli_labels(num_qubits)
    x = np.array([[c in "XY" for c in reversed(label)] for label in labels])
    z = np.array([[c in "ZY" for c in reversed(label)] for label in labels])
    return x, z


class _Frames:
    """X and Z bits of every shot's Pauli frame, per qubit (shape qubits x shots)."""

    def __init__(self, num_qubits: int, shots: int, rng: np.random.Generator) -> None:
        self.x = np.zeros((num_qubits, shots), dtype=np.uint8)
        self.z = np.zeros((num_qubits, shots), dtype=np.uint8)
        self.rng = rng
        self.shots = shots

    def conjugate(self, matrix: np.ndarray, qargs: list[int]) -> None:
        k = len(qargs)
        bits = np.concatenate([self.x[qargs], self.z[qargs]])
        image = (matrix.T @ bits) & 1
        self.x[qargs], self.z[qargs] = image[:k], image[k:]

    def add_errors(self, probabilities: np.ndarray, qargs: list[int]) -> None:
        """Multiply in a Pauli drawn per shot from ``probabilities`` (over ``pauli_labels``)."""
        hit = np.flatnonzero(self.rng.random(self.shots) >= probabilities[0])
        if not len(hit):
            return
        rest = probabilities[1:] / probabilities[1:].sum()
        drawn = 1 + self.rng.choice(len(rest), size=len(hit), p=rest)
        label_x, label_z = _label_bits(len(qargs))
        for j, q in enumerate(qargs):
            self.x[q, hit] ^= label_x[drawn, j]
            self.z[q, hit] ^= label_z[drawn, j]


def _gate_probabilities(
    noise: CompactNoise, name: str, qargs: tuple[int, ...], cache: dict
) -> np.ndarray | None:
    key = (name, qargs)
    if key not in cache:
        spec = noise.errors.get(key)
        cache[key] = (
            None
            if spec is None
            else twirl_probabilities(
                pauli_transfer_diagonal(spec.superop(), spec.num_qubits), spec.num_qubits
            )
        )
    return cache[key]


def _propagate(
    circuit: QuantumCircuit, noise: CompactNoise, windows: IdleWindows, frames: _Frames
) -> tuple[dict[int, int], dict[int, np.ndarray]]:
    """Push every shot's errors through ``circuit``; returns the measured qubit of each clbit
    and the frames' X bits on it when it was measured (the flips of that clbit)."""
    qindex = {bit: i for i, bit in enumerate(circuit.qubits)}
    cindex = {bit: i for i, bit in enumerate(circuit.clbits)}
    measured: dict[int, int] = {}
    flips: dict[int, np.ndarray] = {}
    probabilities: dict = {}
    for i, instruction in enumerate(circuit.data):
        operation = instruction.operation
        qargs = [qindex[q] for q in instruction.qubits]
        if operation.name == "barrier":
            continue
        if any(q in measured.values() for q in qargs):
            raise ValueError("Pauli-frame sampling needs every measurement at the end")
        if operation.name == "measure":
            clbit = cindex[instruction.clbits[0]]
            measured[clbit] = qargs[0]
            flips[clbit] = frames.x[qargs[0]].copy()
            continue
        if isinstance(operation, Delay):
            seconds = _delay_seconds(operation, noise)
            q = qargs[0]
            if i in windows.twirled and seconds > 0:
                relaxation = thermal_relaxation_superop(noise.t1s[q], noise.t2s[q], seconds)
                frames.add_errors(
                    twirl_probabilities(pauli_transfer_diagonal(relaxation, 1), 1), qargs
                )
            continue
        params = tuple(round(float(p), 12) for p in operation.params)
        frames.conjugate(_symplectic(operation.name, params), qargs)
        p = _gate_probabilities(noise, operation.name, tuple(qargs), probabilities)
        if p is not None:
            frames.add_errors(p, qargs)
    return measured, flips


def sample_pauli_frames(
    circuit: QuantumCircuit, noise: CompactNoise, shots: int, seed: int | None = None
) -> dict[str, int]:
    """Counts of a compact Clifford ``circuit`` under the twirl of ``noise``."""
    from qiskit.result.postprocess import format_counts_memory

    rng = np.random.default_rng(seed)
    frames = _Frames(circuit.num_qubits, shots, rng)
    windows = idle_windows(circuit, noise)
    readout = windows.readout(noise)
    measured, flips = _propagate(circuit, noise, windows, frames)
    clbits = sorted(measured)
    bits = _noiseless_memory(circuit, shots, seed)[:, clbits]
    for j, clbit in enumerate(clbits):
        bits[:, j] ^= flips[clbit].astype(bool)
    for j, clbit in enumerate(clbits):
        matrix = readout.get(measured[clbit])
        if matrix is not None:  # P[true, measured]: flip a 0 with p01, a 1 with p10
            flip = np.where(bits[:, j], matrix[1, 0], matrix[0, 1])
            bits[:, j] ^= rng.random(shots) < flip
    memory = np.zeros(shots, dtype=object)
    for j, clbit in enumerate(clbits):
        memory = memory + bits[:, j].astype(object) * (1 << clbit)
    values, counts = np.unique(memory, return_counts=True)
    header = {
        "creg_sizes": [[creg.name, creg.size] for creg in circuit.cregs],
        "memory_slots": circuit.num_clbits,
    }
    return {
        format_counts_memory(hex(int(v)), header): int(c)
        for v, c in zip(values, counts, strict=True)
    }


def _noiseless_memory(circuit: QuantumCircuit, shots: int, seed: int | None) -> np.ndarray:
    """Noiseless outcomes per shot (shots x clbits, clbit i in column i), Aer's stabilizer."""
    options = {} if seed is None else {"seed_simulator": int(seed)}
    result = (
        AerSimulator(method="stabilizer").run(circuit, shots=shots, memory=True, **options).result()
    )
    if not result.success:
        raise ValueError(f"stabilizer simulation failed: {result.status}")
    memory = [m.replace(" ", "")[::-1] for m in result.get_memory(0)]
    return np.array([[c == "1" for c in m] for m in memory], dtype=bool).reshape(
        shots, circuit.num_clbits
    )
