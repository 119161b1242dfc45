"""Circuits and hybrid algorithms for ``%%qonductor`` cells.

The builders are capitalised like the algorithms' names (as in the paper's listings), not like
Python functions. Circuits follow Qiskit's conventions: qubit 0 is the rightmost character of a
bitstring, and measured circuits end in ``measure_all`` (one register: count keys have no spaces).

Nothing here runs circuits. :class:`VQE` is handed the cell's ``sample`` function, so the
orchestrator decides where each batch runs while the optimiser loop stays in the cell; a QAOA loop
is written the same way from :func:`QAOA` and :func:`expected_cut`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import Parameter
from qiskit.quantum_info import Pauli, SparsePauliOp

__all__ = [
    "GHZ",
    "QAOA",
    "QFT",
    "VQE",
    "VQEResult",
    "best_cut",
    "expected_cut",
    "maxcut_operator",
    "maxcut_value",
]

Counts = Mapping[str, float]
# A networkx.Graph (anything with .nodes and .edges(data=True)) or a list of (u, v[, weight]).
GraphLike = Any
SampleFunction = Callable[..., Any]


# --------------------------------------------------------------------------------------------
# Input checks shared by the builders
# --------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    # bool is an Integral, but GHZ(True) is a mistake rather than a one-qubit request.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_num_qubits(num_qubits: Any) -> int:
    if not _is_int(num_qubits) or num_qubits < 1:
        raise ValueError(f"num_qubits must be an integer >= 1, got {num_qubits!r}")
    return int(num_qubits)


def _check_bitstring(bitstring: Any, width: int, what: str) -> str:
    if not isinstance(bitstring, str):
        raise ValueError(f"{what} must be a bitstring such as {'0' * width!r}, got {bitstring!r}")
    bits = bitstring.replace(" ", "")
    if len(bits) != width or set(bits) - {"0", "1"}:
        raise ValueError(
            f"{what} must be a string of {width} characters '0'/'1' (qubit 0 rightmost), "
            f"got {bitstring!r}"
        )
    return bits


# --------------------------------------------------------------------------------------------
# GHZ and QFT
# --------------------------------------------------------------------------------------------


def GHZ(num_qubits: int, measure: bool = True) -> QuantumCircuit:
    """The GHZ state (|0...0> + |1...1>)/sqrt(2): H on qubit 0, then a CX chain."""
    n = _check_num_qubits(num_qubits)
    circuit = QuantumCircuit(n, name=f"ghz_{n}")
    circuit.h(0)
    # A chain rather than a fan-out from qubit 0: it maps onto linear couplings without swaps.
    for qubit in range(n - 1):
        circuit.cx(qubit, qubit + 1)
    if measure:
        circuit.measure_all()
    return circuit


def QFT(
    num_qubits: int,
    inverse: bool = False,
    measure: bool = True,
    initial_state: str | None = None,
) -> QuantumCircuit:
    """The quantum Fourier transform (with its final swaps), or its inverse.

    ``initial_state`` is a bitstring prepared with X gates before the transform (qubit 0 is the
    rightmost character), e.g. ``QFT(3, initial_state="101")``.
    """
    from qiskit.circuit.library import QFTGate

    n = _check_num_qubits(num_qubits)
    circuit = QuantumCircuit(n, name=f"{'iqft' if inverse else 'qft'}_{n}")
    if initial_state is not None:
        bits = _check_bitstring(initial_state, n, "initial_state")
        for qubit in range(n):
            if bits[n - 1 - qubit] == "1":
                circuit.x(qubit)
    gate = QFTGate(n)
    circuit.append(gate.inverse() if inverse else gate, range(n))
    if measure:
        circuit.measure_all()
    return circuit


# --------------------------------------------------------------------------------------------
# Max-cut
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Graph:
    """A graph reduced to what max-cut needs: node count and weighted edges on 0..n-1."""

    num_nodes: int
    edges: tuple[tuple[int, int, float], ...]


def _edges_of_networkx(graph: Any) -> tuple[int, list[tuple[Any, Any, float]]]:
    nodes = list(graph.nodes)
    if not all(_is_int(node) for node in nodes) or set(nodes) != set(range(len(nodes))):
        raise ValueError(
            "graph nodes must be the integers 0..n-1 (they become qubits); relabel with "
            "networkx.convert_node_labels_to_integers(graph)"
        )
    edges = [(u, v, data.get("weight", 1.0)) for u, v, data in graph.edges(data=True)]
    return len(nodes), edges


def _edges_of_list(graph: Iterable[Any]) -> tuple[int, list[tuple[Any, Any, float]]]:
    edges = []
    for edge in graph:
        if not isinstance(edge, Sequence) or len(edge) not in (2, 3):
            raise ValueError(f"an edge is (u, v) or (u, v, weight), got {edge!r}")
        edges.append((edge[0], edge[1], edge[2] if len(edge) == 3 else 1.0))
    ends = [node for u, v, _ in edges for node in (u, v) if _is_int(node)]
    return (max(ends) + 1 if ends else 0), edges


def _as_graph(graph: GraphLike) -> _Graph:
    if isinstance(graph, _Graph):
        return graph
    if graph is None:
        raise ValueError("a graph is needed: a networkx.Graph or a list of edges (u, v[, weight])")
    if hasattr(graph, "nodes") and hasattr(graph, "edges"):
        num_nodes, raw = _edges_of_networkx(graph)
    elif isinstance(graph, Iterable) and not isinstance(graph, (str, bytes)):
        num_nodes, raw = _edges_of_list(graph)
    else:
        raise ValueError(f"a graph is a networkx.Graph or a list of edges, not {graph!r}")
    if not raw:
        raise ValueError("the graph has no edges: max-cut needs at least one")
    edges: list[tuple[int, int, float]] = []
    for u, v, weight in raw:
        if not (_is_int(u) and _is_int(v)) or u < 0 or v < 0:
            raise ValueError(f"edge ({u!r}, {v!r}): nodes must be integers >= 0 (qubit indices)")
        if u == v:
            raise ValueError(f"edge ({u}, {v}) is a self-loop, which no cut can cut")
        if not isinstance(weight, numbers.Real) or not np.isfinite(float(weight)):
            raise ValueError(f"edge ({u}, {v}): weight must be a finite number, got {weight!r}")
        edges.append((int(u), int(v), float(weight)))
    return _Graph(num_nodes, tuple(edges))


def maxcut_operator(graph: GraphLike) -> SparsePauliOp:
    """The max-cut cost operator: its diagonal entry for a bitstring is that bitstring's cut value.

    sum over edges (u, v, w) of w/2 (I - Z_u Z_v), so eigenvalues are cut values and QAOA or VQE
    maximise it (minimise ``-maxcut_operator(graph)`` with a minimiser).
    """
    g = _as_graph(graph)
    terms: list[tuple[str, list[int], float]] = []
    for u, v, weight in g.edges:
        terms.append(("", [], weight / 2))
        terms.append(("ZZ", [u, v], -weight / 2))
    return SparsePauliOp.from_sparse_list(terms, num_qubits=g.num_nodes).simplify()


def _node_bits(bitstring: str, num_nodes: int) -> str:
    return _check_bitstring(bitstring, num_nodes, "bitstring")


def maxcut_value(bitstring: str, graph: GraphLike) -> float:
    """Total weight of the edges cut by ``bitstring`` (node i is character ``-1 - i``)."""
    g = _as_graph(graph)
    bits = _node_bits(bitstring, g.num_nodes)
    side = [bits[g.num_nodes - 1 - node] for node in range(g.num_nodes)]
    return float(sum(weight for u, v, weight in g.edges if side[u] != side[v]))


def _check_counts(counts: Counts) -> None:
    if not isinstance(counts, Mapping):
        raise ValueError(f"counts must be a dict of bitstring -> count, got {type(counts)}")
    if not counts or sum(counts.values()) <= 0:
        raise ValueError("counts are empty")


def best_cut(counts: Counts, graph: GraphLike) -> tuple[str, float]:
    """The sampled bitstring with the largest cut value (the most frequent among equals)."""
    _check_counts(counts)
    g = _as_graph(graph)
    scored = [(maxcut_value(key, g), count, key.replace(" ", "")) for key, count in counts.items()]
    value, _, bitstring = max(scored, key=lambda item: (item[0], item[1]))
    return bitstring, value


def expected_cut(counts: Counts, graph: GraphLike) -> float:
    """Average cut value over the samples: the quantity a QAOA loop maximises."""
    _check_counts(counts)
    g = _as_graph(graph)
    total = float(sum(counts.values()))
    return sum(maxcut_value(key, g) * float(c) for key, c in counts.items()) / total


# --------------------------------------------------------------------------------------------
# QAOA
# --------------------------------------------------------------------------------------------


def _qaoa_circuit(cost_operator: SparsePauliOp, reps: int) -> QuantumCircuit:
    # qaoa_ansatz replaced the QAOAAnsatz class in Qiskit 2.x; older installs only have the class.
    try:
        from qiskit.circuit.library import qaoa_ansatz
    except ImportError:  # pragma: no cover - depends on the installed Qiskit
        from qiskit.circuit.library import QAOAAnsatz

        return QAOAAnsatz(cost_operator, reps=reps).decompose()
    return qaoa_ansatz(cost_operator, reps=reps)


def _angles(values: Any, reps: int, name: str) -> list[float]:
    items = [values] if isinstance(values, numbers.Real) else list(values)
    if len(items) != reps:
        raise ValueError(f"QAOA with reps={reps} needs {reps} {name}, got {len(items)}")
    return [float(v) for v in items]


def _parameters_named(circuit: QuantumCircuit, prefix: str) -> list[Parameter]:
    found = [p for p in circuit.parameters if p.name.startswith(prefix)]
    # ParameterVector elements sort as strings ("β[10]" < "β[2]"): order them by index.
    return sorted(found, key=lambda p: getattr(p, "index", 0))


def _cost_operator(graph: GraphLike, cost_operator: Any) -> SparsePauliOp:
    if (graph is None) == (cost_operator is None):
        raise ValueError("QAOA takes either a graph or a cost_operator (exactly one of them)")
    if graph is not None:
        return maxcut_operator(graph)
    if isinstance(cost_operator, (str, Pauli)):
        cost_operator = SparsePauliOp(cost_operator)
    if not isinstance(cost_operator, SparsePauliOp):
        raise ValueError(f"cost_operator must be a SparsePauliOp, got {type(cost_operator)}")
    if np.any(np.abs(np.imag(cost_operator.coeffs)) > 1e-12):
        raise ValueError("cost_operator must be Hermitian (real coefficients)")
    return cost_operator


def QAOA(
    graph: GraphLike = None,
    cost_operator: SparsePauliOp | None = None,
    reps: int = 1,
    gammas: Sequence[float] | float | None = None,
    betas: Sequence[float] | float | None = None,
    measure: bool = True,
) -> QuantumCircuit:
    """The QAOA circuit for a max-cut ``graph`` or a diagonal ``cost_operator``.

    With ``gammas`` and ``betas`` (``reps`` each: cost and mixer angles per layer) the circuit is
    bound and ready to sample; without them it keeps its parameters (``β[i]``, ``γ[i]``) for the
    caller to bind. The cost layer is exp(-i gamma C); for max-cut C is
    :func:`maxcut_operator`, whose values are cut sizes, so good angles maximise the cut.
    """
    if not _is_int(reps) or reps < 1:
        raise ValueError(f"reps must be an integer >= 1, got {reps!r}")
    operator = _cost_operator(graph, cost_operator)
    if (gammas is None) != (betas is None):
        raise ValueError("give both gammas and betas to bind the circuit, or neither")
    circuit = _qaoa_circuit(operator, int(reps))
    circuit.name = "qaoa"
    if gammas is not None:
        gamma_values = _angles(gammas, reps, "gammas")
        beta_values = _angles(betas, reps, "betas")
        bindings = dict(zip(_parameters_named(circuit, "γ"), gamma_values, strict=True))
        bindings.update(zip(_parameters_named(circuit, "β"), beta_values, strict=True))
        circuit = circuit.assign_parameters(bindings)
    if measure:
        circuit.measure_all()
    return circuit


# --------------------------------------------------------------------------------------------
# VQE
# --------------------------------------------------------------------------------------------


@dataclass
class VQEResult:
    """The outcome of :meth:`VQE.run`.

    ``energy`` is the optimiser's best estimate (a shot-noise estimate, so slightly optimistic),
    ``params`` where it was reached, ``history`` the estimated energy of every evaluation in
    order (derivative-free optimisers such as COBYLA evaluate once per iteration).
    """

    energy: float
    params: np.ndarray
    history: list[float] = field(default_factory=list)
    evaluations: int = 0
    success: bool = True
    message: str = ""


def _check_ansatz(ansatz: Any) -> QuantumCircuit:
    if not isinstance(ansatz, QuantumCircuit):
        raise ValueError(f"the ansatz must be a QuantumCircuit, got {type(ansatz).__name__}")
    if ansatz.num_parameters == 0:
        raise ValueError("the ansatz has no parameters for VQE to optimise")
    if any(instruction.operation.name == "measure" for instruction in ansatz.data):
        raise ValueError(
            "the ansatz must not measure: VQE adds the measurements its observable needs"
        )
    return ansatz


def _check_positive_int(name: str, value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


class VQE:
    """A hybrid variational eigensolver: estimate <observable> from counts, minimise classically.

    ``circuits(params)`` gives one measured circuit per group of qubit-wise commuting Pauli terms;
    ``energy(params, counts_list)`` turns their counts into <observable>; ``run(sample)`` drives
    ``scipy.optimize.minimize`` (``optimizer`` is its ``method``, ``maxiter`` its option of that
    name) and calls ``sample`` once per evaluation, so ``VQE(ansatz, H).run(sample)`` in a
    ``%%qonductor`` cell is one hybrid step.
    """

    def __init__(
        self,
        ansatz: QuantumCircuit,
        observable: SparsePauliOp | str,
        optimizer: str | Callable[..., Any] = "COBYLA",
        initial_point: Sequence[float] | None = None,
        maxiter: int = 50,
        shots: int = 1000,
        seed: int = 0,
    ) -> None:
        from kernel_server.backends.observables import as_observable, measurement_circuits

        self.ansatz = _check_ansatz(ansatz)
        if isinstance(observable, Pauli):
            observable = SparsePauliOp(observable)
        if not isinstance(observable, (str, SparsePauliOp)):
            raise ValueError(
                f"observable must be a Pauli label or SparsePauliOp, not {observable!r}"
            )
        op = as_observable(observable)
        if op.num_qubits != ansatz.num_qubits:
            raise ValueError(
                f"the observable acts on {op.num_qubits} qubits but the ansatz has "
                f"{ansatz.num_qubits}"
            )
        self.observable = op
        if not (isinstance(optimizer, str) or callable(optimizer)):
            raise ValueError(f"optimizer is a scipy.optimize.minimize method, got {optimizer!r}")
        self.optimizer = optimizer
        self.maxiter = _check_positive_int("maxiter", maxiter)
        self.shots = _check_positive_int("shots", shots)
        # Measurement circuits are built once on the parameterised ansatz and bound per call.
        pairs = measurement_circuits(ansatz, op)
        self._templates = [circuit for circuit, _ in pairs]
        self._groups = [group for _, group in pairs]
        if initial_point is None:
            # Small random angles: zero is a stationary point of some ansatzes (all-RY layers).
            rng = np.random.default_rng(seed)
            initial_point = rng.uniform(-np.pi / 4, np.pi / 4, ansatz.num_parameters)
        self.initial_point = self._check_params(initial_point, "initial_point")

    @property
    def num_parameters(self) -> int:
        return self.ansatz.num_parameters

    def _check_params(self, params: Any, name: str = "params") -> np.ndarray:
        values = np.asarray(params, dtype=float).reshape(-1)
        if values.size != self.num_parameters:
            raise ValueError(
                f"{name} has {values.size} values, the ansatz has {self.num_parameters} parameters"
            )
        return values

    def circuits(self, params: Sequence[float] | np.ndarray) -> list[QuantumCircuit]:
        """The measured circuits for ``params`` (in ``ansatz.parameters`` order).

        Empty when the observable is a multiple of the identity (nothing to measure).
        """
        values = self._check_params(params)
        return [template.assign_parameters(values) for template in self._templates]

    def energy(self, params: Sequence[float] | np.ndarray, counts_list: Sequence[Counts]) -> float:
        """<observable> from the counts of ``circuits(params)``, in the same order."""
        from kernel_server.backends.observables import expectation_from_counts

        self._check_params(params)
        if isinstance(counts_list, Mapping):
            counts_list = [counts_list]  # sample() returns a bare dict for a single circuit
        if len(counts_list) != len(self._groups):
            raise ValueError(
                f"expected {len(self._groups)} results, one per measurement circuit, "
                f"got {len(counts_list)}"
            )
        return expectation_from_counts(self.observable, self._groups, counts_list)

    def run(self, sample: SampleFunction) -> VQEResult:
        """Minimise the energy, running each evaluation's circuits with ``sample``."""
        from scipy.optimize import minimize

        if not callable(sample):
            raise ValueError("run() takes the cell's sample function, e.g. VQE(...).run(sample)")
        history: list[float] = []

        def objective(params: np.ndarray) -> float:
            circuits = self.circuits(params)
            counts = sample(circuits, shots=self.shots) if circuits else []
            value = self.energy(params, counts)
            history.append(value)
            return value

        found = minimize(
            objective, self.initial_point, method=self.optimizer, options={"maxiter": self.maxiter}
        )
        return VQEResult(
            energy=float(found.fun),
            params=np.asarray(found.x, dtype=float),
            history=history,
            evaluations=len(history),
            success=bool(found.success),
            message=str(found.message),
        )

    def __repr__(self) -> str:
        return (
            f"VQE({self.num_parameters} parameters, {len(self._templates)} measurement circuits, "
            f"optimizer={self.optimizer!r}, maxiter={self.maxiter}, shots={self.shots})"
        )
