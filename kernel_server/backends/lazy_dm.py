"""Lazy density matrix: exact noisy simulation of a small circuit in numpy.

What it is: the density matrix of the circuit's qubits evolved once, exactly (no per-shot
trajectories, no truncation), under the same noise channels Aer simulates for the device -
depolarizing then thermal relaxation after each gate, thermal relaxation over each delay, a
readout error on each measurement - with the numbers of :mod:`kernel_server.backends.noise`.
Those channels are built here in closed form as superoperators rather than taken from the
``QuantumError`` objects Aer is given (building those costs ~4 ms each), so the match with Aer
rests on the tests below, not on shared objects.

What makes it cheap: qubits come in late and leave early. A qubit enters the state only at its
first multi-qubit gate (single-qubit channels before that are buffered and applied to |0><0|),
and right after its last gate it leaves: collapsed to its measurement-basis diagonal if
measured, traced out if not. Gates are reordered (respecting dependencies) to delay each qubit's
entry. The state then holds 4^(qubits in flight) x 2^(qubits done) entries instead of 4^k; a GHZ
ladder never has more than a few qubits in flight. The outcome distribution comes out with
readout error applied; shots are drawn from it.

What it takes: unitary gates and delays, then terminal measurements (:func:`plan_lazy` returns
the reason for anything else: mid-circuit measurement, reset, control flow, unbound parameters).

How it was checked against Aer (tests/backends/test_aer_sim.py): ``test_lazy_engine_is_exact``
compares its distribution with Aer's ``density_matrix`` method running the compact ``NoiseModel`` (a
4-qubit random circuit on fake_kolkata; largest difference < 1e-9);
``test_compact_noise_matches_from_backend`` checks that noise model channel by channel against
``NoiseModel.from_backend``; ``test_aer_methods_agree_with_the_lazy_engine`` and
``test_delays_relax_as_in_from_backend`` compare it with sampled Aer runs (the latter with
delays, against the full ``from_backend`` simulator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import Delay, Gate, Measure
from qiskit.result.postprocess import format_counts_memory

from kernel_server.backends.noise import CompactNoise, tensor_superops, thermal_relaxation_superop

_SKIPPED = frozenset({"barrier"})

# State: one complex array whose axes are labelled (qubit, kind). A qubit in flight has two axes,
# kind "r" (ket index) and "c" (bra index); a finished, measured qubit has one axis "d" holding the
# diagonal. Operations are superoperators M (4^k x 4^k) acting on the row-major vectorisation of a
# k-qubit density matrix, vec index a * 2^k + b for rho[a, b], with a and b little-endian over the
# operation's qargs as in Qiskit. ``np.tensordot`` contracts M's input axes with the state's
# axes and leaves M's output axes in front; the label list follows, so nothing is transposed back.


def _embed_pair(first: np.ndarray | None, second: np.ndarray | None) -> np.ndarray:
    """Superop of ``first`` on qarg 0 and ``second`` on qarg 1 (identity where None), 16 x 16."""
    eye = np.eye(4, dtype=complex)
    return tensor_superops([eye if first is None else first, eye if second is None else second])


@dataclass
class LazyProgram:
    """A compact circuit the engine can run: unitary gates, then terminal measurements."""

    ops: list[tuple[Any, tuple[int, ...]]]  # (operation, compact qargs), in engine order
    last_op: dict[int, int]  # qubit -> index in ops of its last gate
    measured: dict[int, int]  # qubit -> clbit
    num_qubits: int
    num_clbits: int
    creg_sizes: list[list[Any]]
    cost_cma: float  # complex multiply-adds of one evolution, for method selection
    peak_entries: int
    # The same with measured qubits sampled as they leave (kernel_server.backends.branching):
    # per measured-qubits-done count d, the multiply-adds and the peak entries of one branch
    # while d qubits are done (a state holds at most min(shots, 2^d) branches).
    branch_profile: tuple[tuple[int, float, int], ...] = ()


def _lazy_order(ops: list[tuple[Any, tuple[int, ...]]]) -> list[int]:
    """A topological order of ``ops`` that delays each qubit's first multi-qubit gate.

    Greedy: among ready operations, run those that bring no new qubit into the state first
    (single-qubit gates are buffered anyway), then the one bringing the fewest; ties keep circuit
    order. Everything that can happen on the qubits in flight happens before the state grows.
    """
    previous: dict[int, int] = {}
    blockers: list[int] = []
    successors: list[list[int]] = [[] for _ in ops]
    for i, (_, qargs) in enumerate(ops):
        preds = {previous[q] for q in qargs if q in previous}
        blockers.append(len(preds))
        for p in preds:
            successors[p].append(i)
        for q in qargs:
            previous[q] = i
    ready = [i for i, n in enumerate(blockers) if n == 0]
    in_state: set[int] = set()
    order: list[int] = []
    while ready:
        best = min(
            ready,
            key=lambda i: (
                0 if len(ops[i][1]) == 1 else sum(q not in in_state for q in ops[i][1]),
                i,
            ),
        )
        ready.remove(best)
        order.append(best)
        if len(ops[best][1]) > 1:
            in_state.update(ops[best][1])
        for s in successors[best]:
            blockers[s] -= 1
            if blockers[s] == 0:
                ready.append(s)
    return order


def plan_lazy(circuit: QuantumCircuit) -> LazyProgram | str:
    """Analyse a compact circuit for the engine; return the reason when it cannot take it."""
    qindex = {bit: i for i, bit in enumerate(circuit.qubits)}
    cindex = {bit: i for i, bit in enumerate(circuit.clbits)}
    ops: list[tuple[Any, tuple[int, ...]]] = []
    measured: dict[int, int] = {}
    written: set[int] = set()
    for instruction in circuit.data:
        operation = instruction.operation
        qargs = tuple(qindex[q] for q in instruction.qubits)
        if operation.name in _SKIPPED:
            continue
        if any(q in measured for q in qargs):
            return f"{operation.name} after a measurement (mid-circuit measurement)"
        if isinstance(operation, Measure):
            clbit = cindex[instruction.clbits[0]]
            if clbit in written:
                return "a clbit written twice"
            measured[qargs[0]] = clbit
            written.add(clbit)
            continue
        is_delay = isinstance(operation, Delay)
        if not (isinstance(operation, Gate) or is_delay):
            return f"non-gate instruction {operation.name!r}"
        if operation.is_parameterized():
            return f"unbound parameters in {operation.name!r}"
        ops.append((operation, qargs))
    if not measured:
        return "no measurements"
    order = _lazy_order(ops)
    ops = [ops[i] for i in order]
    last_op: dict[int, int] = {}
    for i, (_, qargs) in enumerate(ops):
        for q in qargs:
            last_op[q] = i
    # Dry run of the state's size to cost the evolution before choosing a method.
    in_flight: set[int] = set()
    done = 0
    cost = 0.0
    peak = 1
    branch: dict[int, list[float]] = {}  # done -> [multiply-adds, peak entries] of one branch
    for i, (_, qargs) in enumerate(ops):
        if len(qargs) > 1:
            in_flight.update(qargs)
            size = 4 ** len(in_flight)
            peak = max(peak, size * 2**done)
            cost += size * 2**done * 4 ** len(qargs)
            step = branch.setdefault(done, [0.0, 1])
            step[0] += size * 4 ** len(qargs)
            step[1] = max(step[1], size)
        for q in qargs:
            if last_op[q] == i:
                if q in in_flight:
                    in_flight.discard(q)
                    cost += 4 ** (len(in_flight) + 1) * 2**done * 4
                    branch.setdefault(done, [0.0, 1])[0] += 4 ** (len(in_flight) + 1) * 4
                done += q in measured
                peak = max(peak, 4 ** len(in_flight) * 2**done)
    return LazyProgram(
        ops=ops,
        last_op=last_op,
        measured=measured,
        num_qubits=circuit.num_qubits,
        num_clbits=circuit.num_clbits,
        creg_sizes=[[creg.name, creg.size] for creg in circuit.cregs],
        cost_cma=cost,
        peak_entries=peak,
        branch_profile=tuple((d, work, int(top)) for d, (work, top) in sorted(branch.items())),
    )


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}


def delay_seconds(noise: CompactNoise, operation: Delay) -> float:
    """A delay's duration in seconds (``dt`` units by the device's dt)."""
    scale = noise.dt if operation.unit == "dt" else _SECONDS[operation.unit]
    return float(operation.duration) * float(scale or 0.0)


def _op_superop(noise: CompactNoise, operation: Any, qargs: tuple[int, ...]) -> np.ndarray:
    """Superoperator of ``operation`` on ``qargs`` followed by its device error.

    A delay is thermal relaxation over its duration, as from_backend's RelaxationNoisePass has it.
    Cached per (name, qargs) for parameterless gates; a parameterised gate (rz angles differ
    from job to job in a VQE loop) reuses only its cached error, so the cache stays bounded.
    """
    if isinstance(operation, Delay):
        seconds = delay_seconds(noise, operation)
        return thermal_relaxation_superop(noise.t1s[qargs[0]], noise.t2s[qargs[0]], seconds)
    key = (operation.name, qargs)
    if not operation.params:
        cached = noise.superops.get(key)
        if cached is not None:
            return cached
    unitary = np.asarray(operation.to_matrix(), dtype=complex)
    superop = np.kron(unitary, unitary.conj())
    error = noise.error_superop(operation.name, qargs)
    if error is not None:
        superop = error @ superop
    if not operation.params:
        noise.superops[key] = superop
    return superop


class LazyState:
    """The engine's state and its axis labels."""

    def __init__(self, dtype: type) -> None:
        self.tensor: np.ndarray = np.ones((), dtype=dtype)
        self.labels: list[tuple[int, str]] = []

    def activate(self, qubit: int, rho: np.ndarray) -> None:
        self.tensor = self.tensor[..., None, None] * rho.astype(self.tensor.dtype)
        self.labels += [(qubit, "r"), (qubit, "c")]

    def apply(self, superop: np.ndarray, qargs: tuple[int, ...]) -> None:
        k = len(qargs)
        tensor_m = superop.astype(self.tensor.dtype, copy=False).reshape([2] * (4 * k))
        # M's axes: out rows, out cols, in rows, in cols; each block big-endian over qargs.
        m_in = [3 * k - 1 - j for j in range(k)] + [4 * k - 1 - j for j in range(k)]
        s_in = [self.labels.index((q, "r")) for q in qargs]
        s_in += [self.labels.index((q, "c")) for q in qargs]
        self.tensor = np.tensordot(tensor_m, self.tensor, axes=(m_in, s_in))
        contracted = set(s_in)
        rest = [label for i, label in enumerate(self.labels) if i not in contracted]
        out_rows = [(qargs[k - 1 - j], "r") for j in range(k)]
        out_cols = [(qargs[k - 1 - j], "c") for j in range(k)]
        self.labels = out_rows + out_cols + rest

    def finish(self, qubit: int, keep: bool) -> None:
        """Collapse a qubit that has no gates left to its diagonal (``keep``) or trace it out."""
        row, col = self.labels.index((qubit, "r")), self.labels.index((qubit, "c"))
        reduce = np.diagonal if keep else np.trace
        self.tensor = reduce(self.tensor, axis1=row, axis2=col)
        self.labels = [label for label in self.labels if label[0] != qubit or label[1] == "d"]
        if keep:
            self.labels.append((qubit, "d"))  # np.diagonal puts the diagonal last


_ZERO = np.array([[1, 0], [0, 0]], dtype=complex)


def evolve(
    program: LazyProgram,
    noise: CompactNoise,
    state: LazyState,
    check: Callable[[float], None] | None = None,
) -> None:
    """Run the program's operations on ``state``; each qubit is finished (``state.finish``)
    right after its last gate. Qubits that no gate touched are left out."""
    pending: dict[int, np.ndarray] = {}  # buffered single-qubit superops, not yet applied
    active: set[int] = set()

    def flush(qubit: int) -> None:
        # Apply a qubit's buffered single-qubit channel; a qubit not in the state enters it.
        superop = pending.pop(qubit, None)
        if qubit in active:
            if superop is not None:
                state.apply(superop, (qubit,))
            return
        rho = _ZERO if superop is None else (superop @ _ZERO.reshape(4)).reshape(2, 2)
        state.activate(qubit, rho)
        active.add(qubit)

    for i, (operation, qargs) in enumerate(program.ops):
        if check is not None:
            check(i / len(program.ops))
        superop = _op_superop(noise, operation, qargs)
        if len(qargs) == 1:
            q = qargs[0]
            pending[q] = superop if q not in pending else superop @ pending[q]
        elif len(qargs) == 2:
            # New qubits enter with their buffered channel applied to |0><0|; buffered channels
            # of qubits in flight are folded into the gate's superop (one tensordot, not three).
            folded: list[np.ndarray | None] = [None, None]
            for j, q in enumerate(qargs):
                if q in active:
                    folded[j] = pending.pop(q, None)
                else:
                    flush(q)
            if folded[0] is not None or folded[1] is not None:
                superop = superop @ _embed_pair(folded[0], folded[1])
            state.apply(superop, qargs)
        else:
            for q in qargs:
                flush(q)
            state.apply(superop, qargs)
        for q in qargs:
            if program.last_op[q] == i:
                flush(q)
                state.finish(q, keep=q in program.measured)


def run_lazy(
    program: LazyProgram, noise: CompactNoise, check: Callable[[float], None] | None = None
) -> tuple[np.ndarray, list[int]]:
    """Evolve the density matrix; return measured-outcome probabilities and their clbits.

    The probability array has one axis per measured qubit, readout error applied, axes in the
    order of the returned clbit list. ``check(done)`` is called between operations with the share
    of them done (a run's budget: it raises to stop the run).
    """
    dtype = np.complex64 if program.peak_entries > 4**10 else np.complex128
    state = LazyState(dtype)
    evolve(program, noise, state, check)
    # Measured qubits that no gate touched are still |0>.
    present = {label[0] for label in state.labels}
    for q in program.measured:
        if q not in present:
            state.tensor = state.tensor[..., None] * np.array([1, 0], dtype=state.tensor.dtype)
            state.labels.append((q, "d"))
    probabilities = np.clip(state.tensor.real.astype(np.float64), 0.0, None)
    labels = [label[0] for label in state.labels]
    for axis, q in enumerate(labels):
        matrix = noise.readout.get(q)
        if matrix is not None:
            # p'[m] = sum_t P[t, m] p[t]; the new axis comes first, so put it back in place.
            mixed = np.tensordot(matrix, probabilities, axes=([0], [axis]))
            probabilities = np.moveaxis(mixed, 0, axis)
    return probabilities, [program.measured[q] for q in labels]


def _memory_values(clbits: list[int]) -> np.ndarray:
    """Memory value (clbit c -> bit c) of each flat index of a probability array whose axes are
    the measured qubits, axis j read into ``clbits[j]``; C order puts axis 0 on the top bit."""
    width = len(clbits)
    positions = np.arange(2**width, dtype=np.int64)
    memory = np.zeros(2**width, dtype=np.int64)
    for axis, clbit in enumerate(clbits):
        memory |= ((positions >> (width - 1 - axis)) & 1) << clbit
    return memory


def sample_counts(
    probabilities: np.ndarray,
    clbits: list[int],
    program: LazyProgram,
    shots: int,
    seed: int | None,
) -> dict[str, int]:
    """Draw ``shots`` outcomes and format them as Aer formats counts (same keys, same spaces)."""
    flat = probabilities.reshape(-1)
    draws = np.random.default_rng(seed).multinomial(shots, flat / flat.sum())
    memory = _memory_values(clbits)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    return {
        format_counts_memory(hex(int(memory[i])), header): int(draws[i])
        for i in np.flatnonzero(draws)
    }


def format_probabilities(
    probabilities: np.ndarray, clbits: list[int], program: LazyProgram, cutoff: float = 1e-12
) -> dict[str, float]:
    flat = probabilities.reshape(-1)
    flat = flat / flat.sum()
    memory = _memory_values(clbits)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    return {
        format_counts_memory(hex(int(memory[i])), header): float(flat[i])
        for i in np.flatnonzero(flat > cutoff)
    }
