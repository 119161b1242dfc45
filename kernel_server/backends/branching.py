"""Branching density matrix: the numpy engine that measures each qubit as it leaves.

The lazy density-matrix engine (:mod:`kernel_server.backends.lazy_dm`) keeps a finished measured
qubit as a diagonal axis, so its state grows as 2^(qubits done): a 24-qubit W state, with never
more than three qubits in flight, still ends holding 2^24 outcome probabilities. This engine
measures a qubit instead, right after its last gate: what remains to run acts on other qubits
only, so measuring now gives the same joint distribution as measuring at the end (the chain rule
P(x1..xn) = P(x1) P(x2 | x1) ..., each factor read off the state conditioned on the outcomes
before it). Shots that agree on every outcome so far share one state (a *branch*, with its shot
count); at each measurement a branch's shots split between the two outcomes by a binomial draw
and each half continues with the state conditioned on its outcome. A run holds at most
min(shots, 2^d) branches with d qubits measured, each of 4^(qubits in flight) entries.

What it gives: exact samples of the noisy circuit (no trajectories, no truncation), the same
noise channels as the lazy engine, readout errors drawn on each shot's recorded bits.
What it suits: many qubits of which few are in flight at once (W states, GHZ ladders, graph
states of small bandwidth), where the trajectory methods need one trajectory per shot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from qiskit.result.postprocess import format_counts_memory

from kernel_server.backends.lazy_dm import LazyProgram, LazyState, evolve
from kernel_server.backends.noise import CompactNoise

__all__ = ["BranchingState", "branching_entries", "branching_work", "read_out", "run_branching"]

# The branch axis's label among the (qubit, kind) labels of the state's axes.
_BRANCH = (-1, "b")


class BranchingState(LazyState):
    """The engine's state with a leading branch axis: one density matrix of the qubits in flight
    per distinct history of outcomes, with the shots that history holds and its recorded bits."""

    def __init__(self, shots: int, program: LazyProgram, rng: np.random.Generator) -> None:
        # Single precision once the branches are large (as the lazy engine): each operation is
        # bound by memory traffic there, and sampling needs no more than 1e-7 in a probability.
        dtype = np.complex64 if branching_entries(program, shots) > 4**10 else np.complex128
        super().__init__(dtype)
        self.tensor = np.ones((1,), dtype=dtype)
        self.labels = [_BRANCH]
        self.counts = np.array([shots], dtype=np.int64)
        self.bits: np.ndarray = np.zeros((1, program.num_clbits), dtype=np.uint8)
        self.clbit_of = program.measured
        self.rng = rng

    def finish(self, qubit: int, keep: bool) -> None:
        """Trace out an unmeasured qubit; measure a measured one, splitting each branch."""
        super().finish(qubit, keep)
        if not keep:
            return
        rows = [label for label in self.labels if label[1] == "r"]
        cols = [(q, "c") for q, _ in rows]
        order = [self.labels.index(_BRANCH), len(self.labels) - 1]
        order += [self.labels.index(label) for label in rows + cols]
        tensor = self.tensor.transpose(order)
        size = 2 ** len(rows)
        square = tensor.reshape(len(self.counts), 2, size, size)
        weights = np.clip(np.einsum("bdii->bd", square).real, 0.0, None)
        totals = np.maximum(weights.sum(axis=1), np.finfo(float).tiny)
        ones = self.rng.binomial(self.counts, np.clip(weights[:, 1] / totals, 0.0, 1.0))
        parts, counts, bits = [], [], []
        for outcome, drawn in ((0, self.counts - ones), (1, ones)):
            chosen = np.flatnonzero(drawn)
            if not len(chosen):
                continue
            # Conditioned on the outcome: that half of the state, renormalised to trace one.
            scale = 1.0 / np.maximum(weights[chosen, outcome], np.finfo(float).tiny)
            scale = scale.astype(tensor.real.dtype)  # keep single precision single
            parts.append(tensor[chosen, outcome] * scale.reshape((-1,) + (1,) * (tensor.ndim - 2)))
            counts.append(drawn[chosen])
            recorded = self.bits[chosen]
            recorded[:, self.clbit_of[qubit]] = outcome
            bits.append(recorded)
        self.tensor = np.concatenate(parts)
        self.counts = np.concatenate(counts)
        self.bits = np.concatenate(bits)
        self.labels = [_BRANCH, *rows, *cols]


def run_branching(
    program: LazyProgram,
    noise: CompactNoise,
    shots: int,
    seed: int | None,
    check: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Counts of ``shots`` exact samples, keyed as Aer keys them. ``check(done)`` is called
    between operations with the share of them done (a run's budget: it raises to stop it)."""
    rng = np.random.default_rng(seed)
    state = BranchingState(shots, program, rng)
    evolve(program, noise, state, check)
    # Measured qubits that no gate touched read 0 before their readout error, as do the bits of
    # a history; each shot's recorded bit then flips with the readout error's probability.
    return read_out(np.repeat(state.bits, state.counts, axis=0), program, noise, rng)


def read_out(
    bits: np.ndarray, program: LazyProgram, noise: CompactNoise, rng: np.random.Generator
) -> dict[str, int]:
    """Counts, keyed as Aer keys them, of per-shot recorded bits (shots x clbits), each bit of a
    measured qubit flipped with its readout error's probability (in place)."""
    for qubit, clbit in program.measured.items():
        matrix = noise.readout.get(qubit)
        if matrix is None:
            continue
        true = bits[:, clbit].astype(np.intp)
        flip = np.asarray(matrix)[true, 1 - true]  # P[true, measured]
        bits[:, clbit] ^= (rng.random(len(bits)) < flip).astype(np.uint8)
    rows, counts = np.unique(bits, axis=0, return_counts=True)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    out: dict[str, int] = {}
    for row, count in zip(rows, counts, strict=True):
        value = sum(1 << clbit for clbit in np.flatnonzero(row))
        out[format_counts_memory(hex(value), header)] = int(count)
    return out


def branching_work(program: LazyProgram, shots: int) -> float:
    """Complex multiply-adds of a run at most (every history distinct as soon as it can be)."""
    return sum(min(shots, 2**done) * work for done, work, _ in program.branch_profile)


def branching_entries(program: LazyProgram, shots: int) -> int:
    """Entries the state holds at its peak, at most."""
    return max((min(shots, 2**done) * top for done, _, top in program.branch_profile), default=1)
