"""Circuit families of 17-40 qubits whose ideal outcome distribution is known at any width.

The fidelity model's ground truth elsewhere (``fidelity_data``) needs the ideal distribution of
an arbitrary circuit and a noisy simulation of it, both out of reach beyond ~16 qubits. These
families carry their ideal distribution by construction, and each belongs to a class a noisy
simulation can take at that width (``wide_data``):

* **Clifford** (``kind = "clifford"``), simulated with the device noise Pauli-twirled
  (``backends.twirl``):

  - mirror circuits: random layers U of single-qubit Cliffords and two-qubit gates, a random
    Pauli layer P, then U^-1; the ideal outcome is the one bitstring given by the X part of
    U^-1 P U (Proctor et al., "Scalable randomized benchmarking of quantum computers using
    mirror circuits", PRL 129, 150502, 2022). Families differ in the layers' two-qubit gate,
    pairing (neighbours on a line, or random pairs that need routing) and density;
  - GHZ states (a ladder, a log-depth tree, or two or three disjoint ladders): 2-8 equally
    likely outcomes, few enough that 1000-8000 shots estimate the Hellinger fidelity without
    the bias a widely spread ideal distribution would bring;
  - Bernstein-Vazirani with a random secret: the secret is the one outcome.

* **Blocks** (``kind = "blocks"``): non-Clifford mirror circuits (parametrised rotations) on
  disjoint blocks of 4-7 qubits with no gate between blocks. The device noise acts on the
  qubits of each instruction only, so the blocks' noisy outcomes are independent and the
  exact distribution is the product of small exact ones: low entanglement made exact.

Every circuit is measured at the end; ``ideal`` is keyed like counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.quantum_info import Clifford, Pauli, random_clifford

MIN_QUBITS = 17
MAX_QUBITS = 40


@dataclass(frozen=True)
class WideCircuit:
    family: str
    kind: str  # "clifford" or "blocks": how wide_data simulates it
    circuit: QuantumCircuit
    ideal: dict[str, float]  # ideal outcome distribution, keyed like counts
    blocks: tuple[tuple[int, ...], ...] = ()  # virtual qubits of each block ("blocks" kind)

    @property
    def num_qubits(self) -> int:
        return self.circuit.num_qubits


def _bitstring(bits: np.ndarray) -> str:
    """Count key of a single register whose bit i is ``bits[i]``."""
    return "".join("1" if b else "0" for b in reversed(bits))


def _pairs(n: int, pairing: str, density: float, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Disjoint qubit pairs of one layer: each candidate pair kept with ``density``."""
    if pairing == "line":
        offset = int(rng.integers(2))
        candidates = [(q, q + 1) for q in range(offset, n - 1, 2)]
    else:
        order = rng.permutation(n)
        candidates = [(int(order[i]), int(order[i + 1])) for i in range(0, n - 1, 2)]
    return [pair for pair in candidates if rng.random() < density]


def mirror_circuit(
    n: int,
    layers: int,
    density: float,
    rng: np.random.Generator,
    pairing: str = "line",
    gate: str = "cx",
) -> tuple[QuantumCircuit, str]:
    """A Clifford mirror circuit and its one ideal outcome (a count key)."""
    forward = QuantumCircuit(n)
    for _ in range(layers):
        for q in range(n):
            clifford = random_clifford(1, seed=int(rng.integers(2**31)))
            forward.compose(clifford.to_circuit(), [q], inplace=True)
        for a, b in _pairs(n, pairing, density, rng):
            getattr(forward, gate)(a, b)
    pauli = Pauli("".join(rng.choice(list("IXYZ"), n)))
    circuit = QuantumCircuit(n)
    circuit.compose(forward, inplace=True)
    # Barriers keep a compiler from cancelling U against U^-1 across the middle.
    circuit.barrier()
    circuit.append(pauli, range(n))
    circuit.barrier()
    circuit.compose(forward.inverse(), inplace=True)
    circuit.measure_all()
    # U^-1 P U |0> = +-(U^-1 P U)|0>: the X bits of that Pauli are the outcome.
    outcome = pauli.evolve(Clifford(forward), frame="h")
    return circuit, _bitstring(outcome.x)


def ghz_circuit(n: int, blocks: int = 1, tree: bool = False) -> tuple[QuantumCircuit, dict]:
    """GHZ states on ``blocks`` consecutive groups of qubits (2^blocks ideal outcomes)."""
    circuit = QuantumCircuit(n)
    bounds = np.linspace(0, n, blocks + 1).astype(int)
    groups = [list(range(bounds[i], bounds[i + 1])) for i in range(blocks)]
    for group in groups:
        circuit.h(group[0])
        if tree:  # each round doubles the qubits holding the state: depth log2(n)
            holding = 1
            while holding < len(group):
                for i in range(min(holding, len(group) - holding)):
                    circuit.cx(group[i], group[holding + i])
                holding *= 2
        else:
            for a, b in zip(group, group[1:], strict=False):
                circuit.cx(a, b)
    circuit.measure_all()
    ideal = {}
    for pattern in range(2**blocks):
        bits = np.zeros(n, dtype=bool)
        for i, group in enumerate(groups):
            bits[group] = bool((pattern >> i) & 1)
        ideal[_bitstring(bits)] = 2.0**-blocks
    return circuit, ideal


def bernstein_vazirani(n: int, rng: np.random.Generator) -> tuple[QuantumCircuit, str]:
    """BV on n - 1 data qubits and one ancilla (the last qubit); only the data is measured."""
    secret = rng.integers(2, size=n - 1).astype(bool)
    if not secret.any():
        secret[int(rng.integers(n - 1))] = True
    qreg, creg = QuantumRegister(n, "q"), ClassicalRegister(n - 1, "c")
    circuit = QuantumCircuit(qreg, creg)
    circuit.x(n - 1)
    circuit.h(range(n))
    for q in np.flatnonzero(secret):
        circuit.cx(int(q), n - 1)
    circuit.h(range(n - 1))
    circuit.measure(range(n - 1), range(n - 1))
    return circuit, _bitstring(secret)


def _block_sizes(n: int, rng: np.random.Generator, low: int = 4, high: int = 7) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(low, high + 1)))
    sizes[-1] -= sum(sizes) - n
    if sizes[-1] < 2:  # fold a too-small remainder into the previous block
        remainder = sizes.pop()
        sizes[-1] += remainder
    return sizes


def _rotation_layers(size: int, layers: int, rng: np.random.Generator) -> QuantumCircuit:
    block = QuantumCircuit(size)
    for _ in range(layers):
        for q in range(size):
            block.ry(float(rng.uniform(0, 2 * np.pi)), q)
            block.rz(float(rng.uniform(0, 2 * np.pi)), q)
        for a, b in _pairs(size, "line", 0.8, rng):
            block.cx(a, b)
    return block


def _su2_layer(size: int, layers: int, rng: np.random.Generator) -> QuantumCircuit:
    from qiskit.circuit.library import efficient_su2

    ansatz = efficient_su2(size, reps=layers, entanglement="linear")
    return ansatz.assign_parameters(rng.uniform(0, 2 * np.pi, ansatz.num_parameters))


def block_mirror_circuit(
    n: int,
    layers: int,
    rng: np.random.Generator,
    make_block: Callable[[int, int, np.random.Generator], QuantumCircuit],
) -> tuple[QuantumCircuit, str, tuple[tuple[int, ...], ...]]:
    """Non-Clifford mirror circuits on disjoint blocks, each ending in X on random qubits."""
    circuit = QuantumCircuit(n)
    flips = rng.integers(2, size=n).astype(bool)
    blocks = []
    start = 0
    for size in _block_sizes(n, rng):
        qubits = list(range(start, start + size))
        forward = make_block(size, layers, rng)
        circuit.compose(forward, qubits, inplace=True)
        circuit.barrier(qubits)
        circuit.compose(forward.inverse(), qubits, inplace=True)
        for q in qubits:
            if flips[q]:
                circuit.x(q)
        blocks.append(tuple(qubits))
        start += size
    circuit.measure_all()
    return circuit, _bitstring(flips), tuple(blocks)


# family -> (kind, maker of one circuit from (width, rng))
def _mirror(pairing: str, gate: str, density: float, max_layers: int) -> Callable:
    def make(n: int, rng: np.random.Generator) -> WideCircuit:
        layers = int(rng.integers(1, max_layers + 1))
        circuit, outcome = mirror_circuit(n, layers, density, rng, pairing, gate)
        return WideCircuit("", "clifford", circuit, {outcome: 1.0})

    return make


def _ghz(blocks: int | None, tree: bool) -> Callable:
    def make(n: int, rng: np.random.Generator) -> WideCircuit:
        count = blocks if blocks is not None else int(rng.integers(2, 4))
        circuit, ideal = ghz_circuit(n, count, tree)
        return WideCircuit("", "clifford", circuit, ideal)

    return make


def _bv(n: int, rng: np.random.Generator) -> WideCircuit:
    circuit, outcome = bernstein_vazirani(n + 1, rng)  # n measured qubits
    return WideCircuit("", "clifford", circuit, {outcome: 1.0})


def _blocks(make_block: Callable, max_layers: int) -> Callable:
    def make(n: int, rng: np.random.Generator) -> WideCircuit:
        layers = int(rng.integers(1, max_layers + 1))
        circuit, outcome, blocks = block_mirror_circuit(n, layers, rng, make_block)
        return WideCircuit("", "blocks", circuit, {outcome: 1.0}, blocks)

    return make


FAMILIES: dict[str, Callable[[int, np.random.Generator], WideCircuit]] = {
    "mirror_line_cx": _mirror("line", "cx", 0.5, 3),
    "mirror_brick_cz": _mirror("line", "cz", 1.0, 2),
    "mirror_random_cx": _mirror("random", "cx", 0.25, 2),
    "mirror_sparse_cx": _mirror("line", "cx", 0.15, 4),
    "ghz_ladder": _ghz(1, tree=False),
    "ghz_tree": _ghz(1, tree=True),
    "ghz_blocks": _ghz(None, tree=False),
    "bv": _bv,
    "blocks_rotations": _blocks(_rotation_layers, 2),
    "blocks_su2": _blocks(_su2_layer, 1),
}


def wide_circuit(family: str, num_qubits: int, seed: int) -> WideCircuit:
    """One circuit of ``family`` with ``num_qubits`` measured qubits, rebuilt from its seed."""
    if family not in FAMILIES:
        raise ValueError(f"unknown wide family {family!r}; choose from {', '.join(FAMILIES)}")
    rng = np.random.default_rng([seed, num_qubits, sorted(FAMILIES).index(family)])
    made = FAMILIES[family](num_qubits, rng)
    return WideCircuit(family, made.kind, made.circuit, made.ideal, made.blocks)
