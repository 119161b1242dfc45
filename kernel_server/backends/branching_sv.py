"""Branching statevector: one pure state per shot over the qubits in flight, measured as they leave.

The branching density-matrix engine (:mod:`kernel_server.backends.branching`) keeps one density
matrix of the qubits in flight (4^k entries) per distinct history of outcomes. Once the histories
are as many as the shots, keeping one *pure* state per shot instead (2^k entries) holds 2^k times
less and does 2^k times less work per gate: EfficientSU2 on 24 qubits routed on a Falcon has 7
qubits in flight and 4000 histories after 12 measurements, 65M entries as density matrices and
0.5M as state vectors.

Each shot is a quantum trajectory of the same channels the other engines apply (after each gate
its depolarizing Pauli, then each qubit's thermal relaxation, as :class:`ErrorSpec` orders them):

* depolarizing with parameter p: a uniformly drawn non-identity Pauli with probability
  p (4^n - 1) / 4^n, the mixture ``depolarizing_error`` defines;
* thermal relaxation at 0 K (populations decay as d = exp(-t/T1), coherences as e = exp(-t/T2),
  T2 <= 2 T1): amplitude damping, whose jump sqrt(1 - d)|0><1| a shot takes with probability
  (1 - d) P(1) of its own state (else diag(1, sqrt d)), then Z with probability
  (1 - e / sqrt d) / 2. That composition is the channel ``thermal_relaxation_error`` builds
  (same populations, coherences sqrt(d) (1 - 2 q) = e), whatever the ratio of T2 to T1.

A qubit stays a separate (shots, 2) state until its first multi-qubit gate and is measured (or,
if unmeasured, sampled and dropped, which leaves the others as tracing it out would) right after
its last gate. The shots are therefore independent exact samples of the noisy circuit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from qiskit.circuit import Delay

from kernel_server.backends.branching import read_out
from kernel_server.backends.lazy_dm import LazyProgram, delay_seconds
from kernel_server.backends.noise import CompactNoise, relaxation_factors

__all__ = ["run_branching_statevector", "statevector_profile"]


def statevector_profile(program: LazyProgram) -> tuple[float, int]:
    """(amplitudes touched per shot over the run, most amplitudes a shot holds).

    Each operation passes over the state of the qubits in flight a few times (the gate, then
    its noise); a qubit not yet entangled costs 2 per single-qubit operation."""
    in_flight: set[int] = set()
    touched = 0.0
    peak = 1
    for i, (_, qargs) in enumerate(program.ops):
        if len(qargs) > 1 or qargs[0] in in_flight:
            in_flight.update(qargs)
            size = 2 ** len(in_flight)
            peak = max(peak, size)
            touched += size * 2 ** len(qargs)
        else:
            touched += 2
        for q in qargs:
            if program.last_op[q] == i:
                in_flight.discard(q)
    return touched, peak


class ShotStates:
    """Per shot: the state vector of the entangled qubits in flight (axis 0 is the shot, then
    one axis per qubit of ``qubits``, kept unnormalised with its squared norm in ``norm2``),
    and the (shots, 2) states of qubits not yet entangled."""

    def __init__(self, shots: int, num_clbits: int, dtype: type, rng: np.random.Generator) -> None:
        self.tensor: np.ndarray = np.ones((shots,), dtype=dtype)
        self.qubits: list[int] = []
        self.norm2: np.ndarray = np.ones(shots)
        self.loose: dict[int, np.ndarray] = {}
        self.bits = np.zeros((shots, num_clbits), dtype=np.uint8)
        self.rng = rng
        self.shots = shots

    # -- where a qubit lives -------------------------------------------------------------------

    def _single(self, qubit: int) -> np.ndarray | None:
        """The (shots, 2) state of a qubit not entangled yet (a new qubit starts in |0>)."""
        if qubit in self.qubits:
            return None
        if qubit not in self.loose:
            fresh = np.zeros((self.shots, 2), dtype=self.tensor.dtype)
            fresh[:, 0] = 1.0
            self.loose[qubit] = fresh
        return self.loose[qubit]

    def _axis(self, qubit: int) -> int:
        return 1 + self.qubits.index(qubit)

    def _slices(self, qubit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(state array, its |0> part, its |1> part) for the qubit, wherever it lives."""
        single = self._single(qubit)
        if single is not None:
            return single, single[:, 0], single[:, 1]
        axis = self._axis(qubit)
        index0 = (slice(None),) * axis + (0,)
        index1 = (slice(None),) * axis + (1,)
        return self.tensor, self.tensor[index0], self.tensor[index1]

    def _enter(self, qubit: int) -> None:
        single = self._single(qubit)
        if single is None:
            return
        del self.loose[qubit]
        shape = (self.shots,) + (1,) * len(self.qubits) + (2,)
        self.tensor = self.tensor[..., None] * single.reshape(shape)
        self.qubits.append(qubit)

    # -- operations ----------------------------------------------------------------------------

    def gate(self, unitary: np.ndarray, qargs: tuple[int, ...]) -> None:
        """Apply ``unitary`` (little-endian over ``qargs``, as Qiskit's ``to_matrix``)."""
        matrix = unitary.astype(self.tensor.dtype, copy=False)
        if len(qargs) == 1:
            single = self._single(qargs[0])
            if single is not None:
                self.loose[qargs[0]] = single @ matrix.T
                return
        for q in qargs:
            self._enter(q)
        # Bring the qargs' axes last, highest qarg first: the flat index of those axes is then
        # Qiskit's little-endian index. The array stays in that order; the labels follow.
        moved = [self._axis(q) for q in reversed(qargs)]
        rest = [a for a in range(self.tensor.ndim) if a not in moved]
        tensor = self.tensor.transpose(rest + moved)
        shape = tensor.shape
        flat = tensor.reshape(-1, 2 ** len(qargs)) @ matrix.T
        self.tensor = flat.reshape(shape)
        others = [self.qubits[a - 1] for a in rest[1:]]
        self.qubits = others + list(reversed(qargs))

    def paulis(self, qubit: int, shots: np.ndarray, letters: np.ndarray) -> None:
        """Apply X (1), Y (2) or Z (3) to the qubit in each of ``shots`` (global phases aside)."""
        array, _, _ = self._slices(qubit)
        axis = 1 if qubit in self.loose else self._axis(qubit)
        flip = shots[(letters == 1) | (letters == 2)]
        if len(flip):
            array[flip] = np.flip(array[flip], axis=axis)
        phase = shots[(letters == 2) | (letters == 3)]
        if len(phase):
            part = array[phase]
            part[(slice(None),) * axis + (1,)] *= -1
            array[phase] = part

    def depolarize(self, qargs: tuple[int, ...], param: float) -> None:
        n = len(qargs)
        hit = np.flatnonzero(self.rng.random(self.shots) < param * (4**n - 1) / 4**n)
        if not len(hit):
            return
        labels = self.rng.integers(1, 4**n, size=len(hit))
        for j, q in enumerate(qargs):
            letters = (labels >> (2 * j)) & 3
            if letters.any():
                self.paulis(q, hit, letters)

    def relax(self, qubit: int, decay: float, dephase: float) -> None:
        """Thermal relaxation of one qubit (module docstring), drawn per shot."""
        if decay >= 1.0 and dephase >= 1.0:
            return
        array, _, one = self._slices(qubit)
        loose = qubit in self.loose
        excited = _weights(one)
        norm2 = np.ones(self.shots) if loose else self.norm2
        jump = self.rng.random(self.shots) * norm2 < (1.0 - decay) * excited
        jumped = np.flatnonzero(jump)
        # No jump: |1> amplitudes times sqrt(d); the squared norm loses (1 - d) P(1).
        one *= np.asarray(math.sqrt(decay), dtype=array.real.dtype)
        if not loose:
            self.norm2 = norm2 - (1.0 - decay) * excited
        if len(jumped):
            axis = 1 if loose else self._axis(qubit)
            part = array[jumped]
            index0 = (slice(None),) * axis + (0,)
            index1 = (slice(None),) * axis + (1,)
            scale = 1.0 / np.sqrt(np.maximum(excited[jumped] * decay, np.finfo(float).tiny))
            shape = (-1,) + (1,) * (part.ndim - 2)
            part[index0] = part[index1] * scale.astype(array.real.dtype).reshape(shape)
            part[index1] = 0
            array[jumped] = part
            if not loose:
                self.norm2[jumped] = 1.0
        if loose:
            self.loose[qubit] = array / np.sqrt(_weights(array)).astype(array.real.dtype)[:, None]
        flip = (1.0 - min(dephase / math.sqrt(decay), 1.0)) / 2.0
        if flip > 0:
            hit = np.flatnonzero(self.rng.random(self.shots) < flip)
            if len(hit):
                self.paulis(qubit, hit, np.full(len(hit), 3))

    def finish(self, qubit: int, clbit: int | None) -> None:
        """Measure a qubit with no gates left, per shot; record it in ``clbit`` (None: drop it)."""
        array, zero, one = self._slices(qubit)
        loose = qubit in self.loose
        total = _weights(array) if loose else self.norm2
        p1 = np.clip(_weights(one) / np.maximum(total, np.finfo(float).tiny), 0.0, 1.0)
        outcome = self.rng.random(self.shots) < p1
        if clbit is not None:
            self.bits[:, clbit] = outcome
        if loose:
            del self.loose[qubit]
            return
        shape = (-1,) + (1,) * (zero.ndim - 1)
        kept = np.where(outcome.reshape(shape), one, zero)
        norm = np.sqrt(np.maximum(np.where(outcome, p1, 1.0 - p1) * total, np.finfo(float).tiny))
        self.tensor = kept / norm.astype(kept.real.dtype).reshape(shape)
        self.norm2 = np.ones(self.shots)
        self.qubits.remove(qubit)


def _weights(part: np.ndarray) -> np.ndarray:
    """Per shot (axis 0), the squared norm of ``part``."""
    flat = part.reshape(part.shape[0], -1)
    return np.einsum("si,si->s", flat.real, flat.real) + np.einsum("si,si->s", flat.imag, flat.imag)


def _apply_noise(state: ShotStates, noise: CompactNoise, operation: Any, qargs: tuple) -> None:
    if isinstance(operation, Delay):
        q = qargs[0]
        seconds = delay_seconds(noise, operation)
        state.relax(q, *relaxation_factors(float(noise.t1s[q]), float(noise.t2s[q]), seconds))
        return
    spec = noise.errors.get((operation.name, tuple(qargs)))
    if spec is None:
        return
    if spec.depolarizing:
        state.depolarize(qargs, spec.depolarizing)
    if spec.duration:
        for q, t1, t2 in zip(qargs, spec.t1s, spec.t2s, strict=True):
            state.relax(q, *relaxation_factors(t1, t2, spec.duration))


def run_branching_statevector(
    program: LazyProgram,
    noise: CompactNoise,
    shots: int,
    seed: int | None,
    check: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Counts of ``shots`` exact samples, keyed as Aer keys them. ``check(done)`` is called
    between operations with the share of them done (a run's budget: it raises to stop it)."""
    rng = np.random.default_rng(seed)
    _, peak = statevector_profile(program)
    # Single precision once the states are large: each operation is bound by memory traffic.
    dtype = np.complex64 if shots * peak > 2**20 else np.complex128
    state = ShotStates(shots, program.num_clbits, dtype, rng)
    matrices: dict[str, np.ndarray] = {}
    for i, (operation, qargs) in enumerate(program.ops):
        if check is not None:
            check(i / len(program.ops))
        if not isinstance(operation, Delay):
            matrix = matrices.get(operation.name) if not operation.params else None
            if matrix is None:
                matrix = np.asarray(operation.to_matrix(), dtype=complex)
                if not operation.params:
                    matrices[operation.name] = matrix
            state.gate(matrix, tuple(qargs))
        _apply_noise(state, noise, operation, tuple(qargs))
        for q in qargs:
            if program.last_op[q] == i:
                state.finish(q, program.measured.get(q))
    # Measured qubits that no gate touched read 0 before their readout error.
    return read_out(state.bits, program, noise, rng)
