"""Estimates and resource plans for one quantum step (paper §6).

:func:`estimate` answers "what would running this circuit on that QPU with that mitigation give":
the learned fidelity (``fidelity.FidelityModel``), the QPU time of every circuit the mitigation
runs (``runtime.RuntimeModel``, trained on real IBM runtimes), the classical post-processing time
of the stack on an accelerator (each technique's ``Overhead`` model over the accelerator's
speedup) and the price (``prices.PriceTable``).

:func:`resource_plans` asks that question for every (QPU template x mitigation stack x classical
accelerator) and returns the plans best-first: Pareto rank over (fidelity up, total time down,
cost down), then, within a rank, the spread ordering NSGA-II uses (the extremes of each objective
first, then the plans in the sparsest regions), so the first ``k`` show the trade-off rather than
``k`` near-copies of one plan.

Everything per circuit is computed once (the ideal distribution's summary), everything per
template once (layout, compilation, features), and the two models predict all rows in one batch.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.providers import BackendV2

from kernel_server.core.circuits import DEFAULT_SHOTS, require_shots
from kernel_server.core.circuits import check_circuit as check_circuit_for_qpu
from kernel_server.core.mcdm import pareto_ranks
from kernel_server.core.status import Plan
from kernel_server.estimator.features import CircuitFeatures, circuit_features, runtime_frame
from kernel_server.estimator.fidelity import (
    TRAINED_STACKS,
    FidelityModel,
    circuit_class_features,
    compile_for,
    model_row,
    stack_features,
)
from kernel_server.estimator.ideal import ideal_features, ideal_summary, measured_bits
from kernel_server.estimator.mitigation.stack import MitigationStack, StackSpec, parse_stack
from kernel_server.estimator.prices import PriceTable

if TYPE_CHECKING:
    from kernel_server.estimator.templates import TemplateQPU

# The stacks plans are made of: those the fidelity model was trained on.
PLAN_STACKS: tuple[str, ...] = TRAINED_STACKS

NO_ACCELERATOR = "none"  # plans without classical post-processing


class CircuitNotEstimable(ValueError):
    """A circuit the estimator cannot take as it is (unmeasured, unbound parameters, ...)."""


def check_circuit(circuit: Any) -> QuantumCircuit:
    """Raise :class:`CircuitNotEstimable` with what to do, or return the circuit."""
    label = f"circuit {getattr(circuit, 'name', '')!r}"
    try:
        check_circuit_for_qpu(circuit, True, label, "resource_plans")
    except (TypeError, ValueError) as exc:
        raise CircuitNotEstimable(str(exc)) from None
    return circuit


def has_midcircuit_measurement(circuit: QuantumCircuit) -> bool:
    """Whether some qubit is operated on after it was measured."""
    measured: set[Any] = set()
    for instruction in circuit.data:
        name = instruction.operation.name
        if name == "barrier":
            continue
        if name != "measure" and measured.intersection(instruction.qubits):
            return True
        if name == "measure":
            measured.update(instruction.qubits)
    return False


@dataclass(frozen=True)
class Estimate:
    """What one circuit on one QPU (or template) with one stack and accelerator would give."""

    backend: str
    mitigation: tuple[str, ...]  # technique names, outermost first; () is unmitigated
    accelerator: str
    shots: int
    fidelity: float  # learned model: expected Hellinger fidelity to the ideal distribution
    numerical_fidelity: float  # the baseline: product of (1 - error), blind to mitigation
    quantum_seconds: float  # QPU time of every circuit the stack runs (runtime model)
    classical_seconds: float  # post-processing wall time on the accelerator
    cost: float  # dollars, from the price table
    num_circuits: int
    total_shots: int
    transpiled: QuantumCircuit = field(repr=False, compare=False)
    features: CircuitFeatures = field(repr=False, compare=False)
    # The runtime model's 80% interval around quantum_seconds (None: a model file without one).
    quantum_seconds_low: float | None = None
    quantum_seconds_high: float | None = None

    @property
    def stack_name(self) -> str:
        return "+".join(self.mitigation) or "none"

    @property
    def seconds(self) -> float:
        """Quantum plus classical time, the runtime objective of plans."""
        return self.quantum_seconds + self.classical_seconds


@dataclass(frozen=True)
class ResourcePlan:
    """One Pareto-ranked choice for a quantum step."""

    rank: int  # 0 = on the Pareto front
    estimate: Estimate

    def __getattr__(self, name: str) -> Any:  # plan.fidelity, plan.cost, ...
        if name == "estimate":
            raise AttributeError(name)
        return getattr(self.estimate, name)

    def to_plan(self, members: Iterable[str] = ()) -> Plan:
        """The plan as status replies and the store carry it; ``members``: the QPUs of its
        template, where a job may run with it."""
        e = self.estimate
        return Plan(
            rank=self.rank,
            backend=e.backend,
            mitigation=e.stack_name,
            accelerator=e.accelerator,
            shots=e.shots,
            fidelity=e.fidelity,
            numerical_fidelity=e.numerical_fidelity,
            quantum_seconds=e.quantum_seconds,
            quantum_seconds_low=e.quantum_seconds_low,
            quantum_seconds_high=e.quantum_seconds_high,
            classical_seconds=e.classical_seconds,
            cost=e.cost,
            num_circuits=e.num_circuits,
            total_shots=e.total_shots,
            members=tuple(members),
        )


# --------------------------------------------------------------------------------------------
# Backends and models
# --------------------------------------------------------------------------------------------

_lock = threading.Lock()
_registries: dict[tuple[str, ...], Any] = {}


def templates_for(fleet: Iterable[str] | None = None) -> dict[str, TemplateQPU]:
    """Template QPUs of ``fleet`` (default: the simulated default fleet), kept per fleet and
    rebuilt where a member's calibration changed."""
    from kernel_server.backends.devices import DEFAULT_FLEET
    from kernel_server.estimator.templates import TemplateRegistry

    names = tuple(sorted(fleet if fleet is not None else DEFAULT_FLEET))
    with _lock:
        registry = _registries.get(names)
    if registry is None:
        registry = TemplateRegistry(names)
        with _lock:
            _registries[names] = registry
    else:
        # Cheap when nothing changed (calibration ids are cached per target); a member whose
        # calibration changed gets its template rebuilt before it is used.
        registry.refresh(names)
    return dict(registry.templates)


def resolve_backend(backend: Any) -> tuple[str, BackendV2]:
    """(name, backend) from a backend, a ``TemplateQPU``, a fake backend's name or a template's
    name ("Eagle-127", of the default fleet)."""
    from kernel_server.estimator.templates import TemplateQPU

    if isinstance(backend, TemplateQPU):
        return backend.name, backend.as_backend()
    if isinstance(backend, BackendV2):
        return backend.name, backend
    if isinstance(backend, str):
        templates = templates_for()
        if backend in templates:
            return backend, templates[backend].as_backend()
        from kernel_server.backends.devices import available_backends, load_backend

        try:
            loaded = load_backend(backend)
        except (KeyError, ValueError) as exc:
            raise ValueError(
                f"unknown backend {backend!r}: give a fake backend name "
                f"(e.g. {', '.join(available_backends()[:3])}), a template "
                f"({', '.join(templates)}) or a backend instance"
            ) from exc
        return loaded.name, loaded
    raise TypeError(f"a backend is a BackendV2, a TemplateQPU or a name, not {backend!r}")


def _runtime_model() -> Any:
    from kernel_server.estimator.runtime import RuntimeModel

    return RuntimeModel.load()


# --------------------------------------------------------------------------------------------
# Estimating
# --------------------------------------------------------------------------------------------


@dataclass
class _Compiled:
    name: str
    backend: BackendV2
    transpiled: QuantumCircuit
    features: CircuitFeatures


def _compile(circuit: QuantumCircuit, name: str, backend: BackendV2, shots: int) -> _Compiled:
    transpiled = compile_for(circuit, backend)
    return _Compiled(name, backend, transpiled, circuit_features(transpiled, backend.target, shots))


def _estimates(
    circuit: QuantumCircuit,
    compiled: Sequence[_Compiled],
    stacks: Sequence[MitigationStack],
    accelerators: Sequence[str],
    shots: int,
    prices: PriceTable,
    fidelity_model: FidelityModel,
    runtime_model: Any,
) -> list[Estimate]:
    try:
        ideal = ideal_summary(circuit)
    except ValueError:  # mid-circuit measurement: no single outcome distribution to summarise
        ideal = None
    bits = measured_bits(circuit)
    circuit_class = circuit_class_features(circuit)
    per_stack = [
        (stack, stack_features(stack, circuit), stack.overhead(circuit)) for stack in stacks
    ]
    rows, jobs, meta = [], [], []
    for c in compiled:
        ideal_row = ideal_features(
            ideal, bits, c.features.to_dict(), c.transpiled, c.backend.target
        )
        for stack, s_features, overhead in per_stack:
            total_shots = max(1, round(shots * overhead.shots_factor))
            per_circuit = max(1, math.ceil(total_shots / overhead.num_circuits))
            rows.append(model_row(c.features.to_dict(), ideal_row, s_features, circuit_class))
            jobs.append(replace(c.features, shots=per_circuit, num_circuits=overhead.num_circuits))
            meta.append((c, stack, overhead, total_shots))
    fidelities = fidelity_model.predict(rows)
    frame = runtime_frame(jobs)
    seconds = np.asarray(runtime_model.predict(frame), dtype=float)
    low, high = _runtime_interval(runtime_model, frame, len(seconds))
    out: list[Estimate] = []
    for (c, stack, overhead, total_shots), fid, q_seconds, q_low, q_high in zip(
        meta, fidelities, seconds, low, high, strict=True
    ):
        # With no classical work the accelerator changes nothing: one plan, without one.
        for accelerator in accelerators if overhead.classical_seconds > 0 else [NO_ACCELERATOR]:
            c_seconds, dollars = prices.cost(
                float(q_seconds), overhead.classical_seconds, accelerator
            )
            out.append(
                Estimate(
                    backend=c.name,
                    mitigation=stack.names,
                    accelerator=accelerator,
                    shots=shots,
                    fidelity=float(fid),
                    numerical_fidelity=c.features.fidelity,
                    quantum_seconds=float(q_seconds),
                    classical_seconds=c_seconds,
                    cost=dollars,
                    num_circuits=overhead.num_circuits,
                    total_shots=total_shots,
                    transpiled=c.transpiled,
                    features=c.features,
                    quantum_seconds_low=q_low,
                    quantum_seconds_high=q_high,
                )
            )
    return out


RUNTIME_COVERAGE = 0.8  # the interval plans show around their QPU time


def _runtime_interval(model: Any, frame: Any, n: int) -> tuple[list[Any], list[Any]]:
    """The model's interval per job, or None each where its file has none."""
    if getattr(model, "intervals", None) is None:
        return [None] * n, [None] * n
    low, high = model.predict_interval(frame, RUNTIME_COVERAGE)
    return [float(v) for v in low], [float(v) for v in high]


def estimate(
    circuit: QuantumCircuit,
    backend: Any,
    mitigation: StackSpec = None,
    shots: int = DEFAULT_SHOTS,
    *,
    accelerator: str = "standard-vm",
    prices: PriceTable | dict | None = None,
    fidelity_model: FidelityModel | None = None,
) -> Estimate:
    """Estimate one run of ``circuit`` (measured, parameters bound) on ``backend``.

    ``backend``: a backend instance, a fake backend's name, a ``TemplateQPU`` or a template name.
    ``mitigation``: None, a technique name ("zne"), a stack ("twirl+rem+dd") or a list of names.
    Raises ``CircuitNotEstimable``, ``CircuitTooWideError``, ``UnknownMitigation`` (a
    ``ValueError`` naming the valid techniques) or ``ModelFileError`` with what to do.
    """
    shots = require_shots(shots)
    check_circuit(circuit)
    name, device = resolve_backend(backend)
    stack = parse_stack(mitigation)
    reason = stack.unsupported_reason(circuit)
    if reason is not None:
        raise CircuitNotEstimable(reason)
    table = prices if isinstance(prices, PriceTable) else PriceTable.from_dict(prices)
    table.accelerator(accelerator)  # unknown accelerator: a clear error before any work
    model = fidelity_model or FidelityModel.load()
    runtime_model = _runtime_model()
    compiled = [_compile(circuit, name, device, shots)]
    return _estimates(
        circuit, compiled, [stack], [accelerator], shots, table, model, runtime_model
    )[0]


def resource_plans(
    circuit: QuantumCircuit,
    k: int | None = 3,
    *,
    backends: Iterable[Any] | None = None,
    stacks: Iterable[StackSpec] = PLAN_STACKS,
    accelerators: Iterable[str] | None = None,
    shots: int = DEFAULT_SHOTS,
    prices: PriceTable | dict | None = None,
    fidelity_model: FidelityModel | None = None,
) -> list[ResourcePlan]:
    """The best ``k`` plans (all of them when ``k`` is None), best-first.

    ``backends``: QPUs or templates to consider (default: the templates of the default fleet);
    those narrower than the circuit are left out, and if none is wide enough the error says so.
    """
    shots = require_shots(shots)
    check_circuit(circuit)
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1 (or None for every plan), got {k}")
    candidates = [
        resolve_backend(b) for b in (backends if backends is not None else templates_for().values())
    ]
    fitting = [(n, b) for n, b in candidates if b.num_qubits >= circuit.num_qubits]
    if not fitting:
        from kernel_server.backends.compile import CircuitTooWideError

        widest = max(candidates, key=lambda nb: nb[1].num_qubits)
        raise CircuitTooWideError(circuit.num_qubits, widest[0], widest[1].num_qubits)
    parsed = [parse_stack(s) for s in stacks]
    if has_midcircuit_measurement(circuit):
        # Only stacks that can run such a circuit (REM can; folding, twirling, DD and PEC need
        # the measurements at the end).
        parsed = [s for s in parsed if not any(t.terminal_measurements_only for t in s.techniques)]
    # And only those that can take it at all: a dynamic circuit leaves REM and no mitigation
    # (excluded_stacks says why the others go).
    parsed = [s for s in parsed if s.unsupported_reason(circuit) is None]
    table = prices if isinstance(prices, PriceTable) else PriceTable.from_dict(prices)
    names = list(accelerators) if accelerators is not None else list(table.accelerators)
    for accelerator in names:
        table.accelerator(accelerator)
    model = fidelity_model or FidelityModel.load()
    runtime_model = _runtime_model()
    compiled = [_compile(circuit, n, b, shots) for n, b in fitting]
    estimates = _estimates(circuit, compiled, parsed, names, shots, table, model, runtime_model)
    plans = rank_plans(estimates)
    return plans if k is None else plans[:k]


def excluded_stacks(
    circuit: QuantumCircuit, stacks: Iterable[StackSpec] = PLAN_STACKS
) -> dict[str, str]:
    """The stacks :func:`resource_plans` leaves out for ``circuit``, each with why (a dynamic
    circuit: every stack with ZNE, PEC, DD or twirling)."""
    out: dict[str, str] = {}
    for spec in stacks:
        stack = parse_stack(spec)
        reason = stack.unsupported_reason(circuit)
        if reason is None and has_midcircuit_measurement(circuit):
            needs_terminal = [t.name for t in stack.techniques if t.terminal_measurements_only]
            if needs_terminal:
                reason = f"{needs_terminal[0]} needs every measurement at the end"
        if reason is not None:
            out["+".join(stack.names) or "none"] = reason
    return out


def rank_plans(estimates: Sequence[Estimate]) -> list[ResourcePlan]:
    """Pareto rank over (fidelity up, seconds down, cost down), spread order within a rank."""
    if not estimates:
        return []
    objectives = np.asarray([[-e.fidelity, e.seconds, e.cost] for e in estimates], dtype=float)
    ranks = np.asarray(pareto_ranks(objectives))
    order: list[int] = []
    for rank in range(int(ranks.max()) + 1):
        members = np.flatnonzero(ranks == rank)
        crowding = _crowding(objectives[members])
        # Widest spread first; ties (and the interior) by fidelity.
        ranked = sorted(
            members, key=lambda i: (-crowding[list(members).index(i)], objectives[i][0])
        )
        order.extend(int(i) for i in ranked)
    return [ResourcePlan(int(ranks[i]), estimates[i]) for i in order]


def _crowding(points: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance (boundary points infinite)."""
    n = len(points)
    if n <= 2:
        return np.full(n, np.inf)
    distance = np.zeros(n)
    for m in range(points.shape[1]):
        order = np.argsort(points[:, m], kind="stable")
        span = points[order[-1], m] - points[order[0], m]
        distance[order[0]] = distance[order[-1]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (points[order[2:], m] - points[order[:-2], m]) / span
    return distance
