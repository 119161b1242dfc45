"""What a noisy simulation of a compact circuit costs each method, in machine-free work units.

Seconds are these units divided by the rates :mod:`kernel_server.backends.cost_model` measures on
the machine; the same formulas price the calibration runs, so a formula's constant factors cancel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from qiskit import QuantumCircuit

__all__ = [
    "MPS_MAX_BOND",
    "clifford_support_bits",
    "density_matrix_work",
    "gate_count",
    "mps_bonds",
    "mps_order",
    "mps_work",
    "trajectory_work",
]

_IDLE = ("barrier", "measure", "delay")
# The bond dimension beyond which the MPS is not considered (2^10 = 1024: chi^3 = 1e9 per gate).
MPS_MAX_BOND = 2**10


def _gates(circuit: QuantumCircuit) -> list[Any]:
    return [ci for ci in circuit.data if ci.operation.name not in _IDLE]


def gate_count(circuit: QuantumCircuit) -> tuple[int, int]:
    """(gates, multi-qubit gates) of a circuit, barriers, measurements and delays left out."""
    gates = _gates(circuit)
    return len(gates), sum(1 for ci in gates if len(ci.qubits) > 1)


def trajectory_work(circuit: QuantumCircuit) -> float:
    """Amplitude updates of one noisy statevector trajectory: each gate and its error, 2^k each."""
    gates, _ = gate_count(circuit)
    return 3.0 * gates * 2.0**circuit.num_qubits


def density_matrix_work(circuit: QuantumCircuit) -> float:
    """Multiply-adds of one density-matrix evolution.

    Aer fuses each multi-qubit gate with its neighbours into one 2-qubit superoperator (16 per
    entry); single-qubit-only circuits still cost one pass per qubit.
    """
    _, multi = gate_count(circuit)
    k = circuit.num_qubits
    passes = max(multi, 1) + (k if multi == 0 else 0)
    return passes * 16.0 * 4.0**k


def mps_order(circuit: QuantumCircuit) -> list[int]:
    """A line order of the qubits for the MPS: position i holds compact qubit order[i].

    The compact circuit numbers qubits by physical index, which on heavy-hex devices puts
    neighbours of the coupling graph 15 positions apart; a reverse Cuthill-McKee order of the
    interaction graph keeps interacting qubits close. The order with the smaller bond bound wins.
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    k = circuit.num_qubits
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    rows, cols = [], []
    for ci in _gates(circuit):
        if len(ci.qubits) == 2:
            a, b = (index[q] for q in ci.qubits)
            rows += [a, b]
            cols += [b, a]
    identity = list(range(k))
    if not rows:
        return identity
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(k, k))
    rcm = [int(q) for q in reverse_cuthill_mckee(graph, symmetric_mode=True)]
    return min((identity, rcm), key=lambda order: max(mps_bonds(circuit, order), default=1))


def mps_bonds(circuit: QuantumCircuit, order: list[int]) -> list[int]:
    """Upper bound of each bond dimension with qubits placed by ``order``.

    Every two-qubit gate of the IBM bases (cx, ecr, cz and rotations of Schmidt rank 2) at most
    doubles the Schmidt rank of each cut between its qubits; no cut exceeds 2^min(left, right).
    """
    k = circuit.num_qubits
    position = {q: i for i, q in enumerate(order)}
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    crossings = np.zeros(max(k - 1, 0), dtype=np.int64)
    for ci in _gates(circuit):
        if len(ci.qubits) == 2:
            a, b = sorted(position[index[q]] for q in ci.qubits)
            crossings[a:b] += 1
    cuts = np.arange(k - 1)
    limit = np.minimum(cuts + 1, k - 1 - cuts)
    exponent = np.minimum(np.minimum(crossings, limit), 60)
    return [int(2**e) for e in exponent]


def mps_work(circuit: QuantumCircuit, order: list[int] | None = None) -> tuple[float, float]:
    """(operations, chi^3 units) of one noisy MPS trajectory in ``order`` (default the best).

    Each gate is an operation and so is its error; a two-qubit gate over positions a < b costs
    the cube of the widest bond it spans for each of the b - a steps Aer moves a qubit to reach
    the other. A bound, not a prediction: the real bonds are often smaller.
    """
    order = mps_order(circuit) if order is None else order
    bonds = mps_bonds(circuit, order)
    position = {q: i for i, q in enumerate(order)}
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    ops, units = 0.0, 0.0
    for ci in _gates(circuit):
        ops += 2
        if len(ci.qubits) == 2:
            a, b = sorted(position[index[q]] for q in ci.qubits)
            widest = max(bonds[a:b], default=1)
            units += (b - a) * float(widest) ** 3
    return ops, units


def _gf2_rank(matrix: np.ndarray) -> int:
    rows = matrix.astype(bool).copy()
    rank = 0
    for column in range(rows.shape[1]):
        pivots = np.flatnonzero(rows[rank:, column])
        if not len(pivots):
            continue
        pivot = rank + int(pivots[0])
        rows[[rank, pivot]] = rows[[pivot, rank]]
        below = np.flatnonzero(rows[:, column])
        below = below[below != rank]
        rows[below] ^= rows[rank]
        rank += 1
        if rank == rows.shape[0]:
            break
    return rank


def clifford_support_bits(circuit: QuantumCircuit, measured: list[int]) -> int | None:
    """log2 of how many outcomes the ideal output of a Clifford circuit has on ``measured``
    (they are equally likely), or None for a circuit with other gates.

    A stabilizer state's outcomes on S are uniform over 2^(|S| - k), k the number of independent
    stabilizers that are Z-only and inside S: the generators' combinations that vanish on every
    X column and on the Z columns outside S, n - rank of those columns.
    """
    from qiskit.exceptions import QiskitError
    from qiskit.quantum_info import Clifford

    gates = QuantumCircuit(circuit.num_qubits)
    index = {bit: i for i, bit in enumerate(circuit.qubits)}
    for instruction in circuit.data:
        if instruction.operation.name not in _IDLE:
            gates.append(instruction.operation, [index[q] for q in instruction.qubits])
    try:
        tableau = Clifford(gates)
    except (QiskitError, TypeError, ValueError):  # a non-Clifford gate or angle
        return None
    outside = [q for q in range(circuit.num_qubits) if q not in set(measured)]
    columns = np.hstack([tableau.stab_x, tableau.stab_z[:, outside]])
    z_inside = circuit.num_qubits - _gf2_rank(columns)
    return len(measured) - z_inside
