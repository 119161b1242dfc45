"""The numerical baseline estimator (paper §6 keeps it beside the learned models to compare to).

Fidelity is the product of (1 - error) over the transpiled circuit's gates and measurements, taken
from the device target; runtime of one shot is the critical-path length of the transpiled circuit
with the target's durations. Both are cheap (well under a millisecond for small circuits) once the
circuit is transpiled, which is why transpilation here must be fast and land on healthy qubits.
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from qiskit import QuantumCircuit
from qiskit.circuit import Delay
from qiskit.providers import BackendV2
from qiskit.transpiler import PassManager, Target, TranspilerError, generate_preset_pass_manager

from kernel_server.backends.devices import compile_key
from kernel_server.backends.dynamic import costliest_path, has_control_flow

# An instruction this bad is a dead coupler or qubit, not a noisy one: the fake backends mark
# broken entries with error 1.0 (FakeSherbrooke ecr(6,5), FakeKingston sx(96), ...).
BROKEN_ERROR = 0.5

# Level 2 runs VF2Layout, which scores layouts by the target's errors; level 1 falls back to the
# trivial layout 0..n-1 on big devices and can land on a dead coupler. Level 3 gave the same
# layouts on GHZ circuits at up to twice the cost.
DEFAULT_OPTIMIZATION_LEVEL = 2

_SKIPPED = frozenset({"barrier", "delay"})


class CircuitTooWideError(ValueError):
    """The circuit needs more qubits than the device has."""

    def __init__(self, circuit_qubits: int, backend_name: str, backend_qubits: int) -> None:
        super().__init__(
            f"circuit has {circuit_qubits} qubits but {backend_name} has only {backend_qubits}"
        )
        self.circuit_qubits = circuit_qubits
        self.backend_name = backend_name
        self.backend_qubits = backend_qubits


def broken_entries(
    target: Target, threshold: float = BROKEN_ERROR
) -> tuple[frozenset[int], frozenset[tuple[str, tuple[int, ...]]]]:
    """Dead qubits (a broken single-qubit gate or measurement) and dead couplers of a target."""
    dead_qubits: set[int] = set()
    dead_couplers: set[tuple[str, tuple[int, ...]]] = set()
    for name in target.operation_names:
        props = target[name]
        if props is None:
            continue
        for qargs, prop in props.items():
            if qargs is None or prop is None or prop.error is None or prop.error < threshold:
                continue
            if len(qargs) == 1:
                dead_qubits.add(qargs[0])
            else:
                dead_couplers.add((name, qargs))
    return frozenset(dead_qubits), frozenset(dead_couplers)


def healthy_target(target: Target, threshold: float = BROKEN_ERROR) -> Target:
    """A copy of ``target`` without its broken entries.

    A qubit whose single-qubit gate or measurement is broken leaves with every instruction on it; a
    broken coupler leaves alone. The transpiler then cannot route through or place on them, whatever
    layout method runs (VF2Layout avoids them by score, but SabreLayout, used when the circuit needs
    routing, does not look at errors). The result stays a sub-target of the original, so circuits
    compiled for it run unchanged on the device.
    """
    dead_qubits, dead_couplers = broken_entries(target, threshold)
    healthy = Target(
        description=target.description,
        num_qubits=target.num_qubits,
        dt=target.dt,
        granularity=target.granularity,
        min_length=target.min_length,
        pulse_alignment=target.pulse_alignment,
        acquire_alignment=target.acquire_alignment,
        qubit_properties=target.qubit_properties,
        concurrent_measurements=target.concurrent_measurements,
    )
    for name in target.operation_names:
        operation = target.operation_from_name(name)
        props = target[name]
        if props is None or inspect.isclass(operation):  # global ops (control flow) stay as-is
            healthy.add_instruction(operation, name=name)
            continue
        kept = {
            qargs: prop
            for qargs, prop in props.items()
            if qargs is None
            or (not dead_qubits.intersection(qargs) and (name, qargs) not in dead_couplers)
        }
        healthy.add_instruction(operation, kept, name=name)
    return healthy


@dataclass
class _Compiler:
    """Pass managers for one (calibration, seed, level, scheduled) combination."""

    primary: PassManager  # on the healthy target
    fallback: PassManager | None  # on the full target, when the healthy one lost entries
    # Passes keep per-run state on themselves: one run at a time per pass manager.
    lock: threading.Lock = field(default_factory=threading.Lock)


_COMPILER_CACHE_SIZE = 64
_compiler_lock = threading.Lock()
_compilers: OrderedDict[tuple[Any, int, int, bool], _Compiler] = OrderedDict()
_healthy_targets: dict[Any, Target] = {}


def _compiler_for(
    backend: BackendV2, seed: int, optimization_level: int, scheduled: bool = False
) -> _Compiler:
    cal = compile_key(backend)
    key = (cal, seed, optimization_level, scheduled)
    with _compiler_lock:
        cached = _compilers.get(key)
        if cached is not None:
            _compilers.move_to_end(key)
            return cached
    target = backend.target
    dead_qubits, dead_couplers = broken_entries(target)
    has_broken = bool(dead_qubits or dead_couplers)
    if has_broken:
        with _compiler_lock:
            healthy = _healthy_targets.get(cal)
        if healthy is None:
            healthy = healthy_target(target)
            with _compiler_lock:
                _healthy_targets[cal] = healthy
    # Delays must be re-aligned to the device's pulse grid, which needs a schedule first (without
    # one, ConstrainedReschedule raises "not scheduled" on e.g. fake_hanoi).
    scheduling = {"scheduling_method": "alap"} if scheduled else {}
    primary = generate_preset_pass_manager(
        optimization_level=optimization_level,
        target=healthy if has_broken else target,
        seed_transpiler=seed,
        **scheduling,
    )
    # Only needed when the healthy target is too fragmented for the circuit (then a broken entry
    # is the price of running at all; the fidelity estimate will show it).
    fallback = (
        generate_preset_pass_manager(
            optimization_level=optimization_level, target=target, seed_transpiler=seed, **scheduling
        )
        if has_broken
        else None
    )
    compiler = _Compiler(primary, fallback)
    with _compiler_lock:
        _compilers[key] = compiler
        while len(_compilers) > _COMPILER_CACHE_SIZE:
            _compilers.popitem(last=False)
    return compiler


def check_width(circuit: QuantumCircuit, backend: BackendV2) -> None:
    """Raise :class:`CircuitTooWideError` when ``circuit`` cannot fit on ``backend``."""
    if circuit.num_qubits > backend.num_qubits:
        raise CircuitTooWideError(circuit.num_qubits, backend.name, backend.num_qubits)


def transpile_for(
    circuit: QuantumCircuit,
    backend: BackendV2,
    seed: int = 0,
    optimization_level: int = DEFAULT_OPTIMIZATION_LEVEL,
) -> QuantumCircuit:
    """Compile ``circuit`` for ``backend``, away from broken couplers and qubits.

    The result has the device's full width (physical qubits) and keeps the circuit's classical
    registers. Deterministic for a given seed and calibration. 3-15 ms for GHZ circuits of 5-12
    qubits on 127-156 qubit devices (the pass manager is built once per calibration and seed).
    Circuits with control flow are never scheduled: Qiskit's scheduling stage does not take it.
    """
    check_width(circuit, backend)
    scheduled = not has_control_flow(circuit) and any(
        isinstance(ci.operation, Delay) for ci in circuit.data
    )
    compiler = _compiler_for(backend, seed, optimization_level, scheduled)
    with compiler.lock:
        try:
            return compiler.primary.run(circuit)
        except TranspilerError:
            if compiler.fallback is None:
                raise
            return compiler.fallback.run(circuit)


@dataclass
class NumericalEstimate:
    """The numerical baseline's prediction for one circuit on one device."""

    backend: str
    fidelity: float
    duration_s: float
    num_qubits: int
    depth: int
    two_qubit_gates: int
    layout: tuple[int, ...]  # physical qubit of each virtual qubit at the start of the circuit
    transpiled: QuantumCircuit

    def to_dict(self) -> dict[str, Any]:
        """The numbers only (the transpiled circuit stays with the caller)."""
        return {
            "backend": self.backend,
            "fidelity": self.fidelity,
            "duration_s": self.duration_s,
            "num_qubits": self.num_qubits,
            "depth": self.depth,
            "two_qubit_gates": self.two_qubit_gates,
            "layout": list(self.layout),
        }


def _instruction_seconds(operation: Any, qargs: tuple[int, ...], target: Target) -> float:
    """Duration of one instruction in seconds; delays carry their own, missing entries count 0."""
    if isinstance(operation, Delay):
        if operation.unit == "dt":
            return float(operation.duration) * float(target.dt or 0.0)
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}
        return float(operation.duration) * scale.get(operation.unit, 0.0)
    props = target[operation.name] if operation.name in target.operation_names else None
    prop = props.get(qargs) if props else None
    return float(prop.duration) if prop is not None and prop.duration else 0.0


def fidelity_and_duration(transpiled: QuantumCircuit, target: Target) -> tuple[float, float]:
    """Product of (1 - error) and critical-path seconds of an already transpiled circuit.

    The critical path is an ASAP pass over the instructions: each starts when all its qubits and
    clbits are free. Its length equals the ALAP schedule's, at a tenth of the cost of running
    ``ALAPScheduleAnalysis``. Barriers synchronize their qubits and take no time. Control flow
    counts along its costliest branch (``dynamic.costliest_path``): the worst shot.
    """
    transpiled = costliest_path(transpiled, target)
    fidelity = 1.0
    qubit_free: dict[int, float] = {}
    clbit_free: dict[int, float] = {}
    for instruction in transpiled.data:
        operation = instruction.operation
        qargs = tuple(transpiled.find_bit(q).index for q in instruction.qubits)
        cargs = tuple(transpiled.find_bit(c).index for c in instruction.clbits)
        start = max(
            [qubit_free.get(q, 0.0) for q in qargs] + [clbit_free.get(c, 0.0) for c in cargs],
            default=0.0,
        )
        end = start + _instruction_seconds(operation, qargs, target)
        for q in qargs:
            qubit_free[q] = end
        for c in cargs:
            clbit_free[c] = end
        if operation.name in _SKIPPED or operation.name not in target.operation_names:
            continue
        props = target[operation.name]
        prop = props.get(qargs) if props else None
        if prop is not None and prop.error:
            fidelity *= 1.0 - float(prop.error)
    duration = max(list(qubit_free.values()) + list(clbit_free.values()), default=0.0)
    return fidelity, duration


def numerical_estimate(
    circuit: QuantumCircuit, backend: BackendV2, seed: int = 0
) -> NumericalEstimate:
    """Transpile ``circuit`` for ``backend`` and estimate its fidelity and one-shot duration."""
    transpiled = transpile_for(circuit, backend, seed=seed)
    fidelity, duration = fidelity_and_duration(transpiled, backend.target)
    if transpiled.layout is not None:
        layout = tuple(transpiled.layout.initial_index_layout(filter_ancillas=True))
    else:
        layout = tuple(range(circuit.num_qubits))
    view = costliest_path(transpiled, backend.target)
    two_qubit_gates = sum(
        1
        for instruction in view.data
        if len(instruction.qubits) >= 2 and instruction.operation.name not in _SKIPPED
    )
    depth = view.depth(lambda instruction: instruction.operation.name not in _SKIPPED)
    return NumericalEstimate(
        backend=backend.name,
        fidelity=fidelity,
        duration_s=duration,
        num_qubits=circuit.num_qubits,
        depth=depth,
        two_qubit_gates=two_qubit_gates,
        layout=layout,
        transpiled=transpiled,
    )


class NumericalEstimator:
    """The numerical baseline as a named, pluggable estimator."""

    name: ClassVar[str] = "numerical"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def estimate(self, circuit: QuantumCircuit, backend: BackendV2) -> NumericalEstimate:
        return numerical_estimate(circuit, backend, seed=self.seed)

    __call__ = estimate
