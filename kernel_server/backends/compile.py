"""Compiling circuits for a device, away from its broken couplers and qubits, with caches.

Two compilations, each deterministic for a seed and a calibration:

* :func:`transpile_for`: a preset pass manager (level 2 by default: noise-aware layout, routing,
  optimisation), what the numerical estimate and plain runs compile with;
* :func:`choose_layout` and :func:`transpile_mitigated`: the physical qubits chosen once for the
  circuit a mitigation stack starts from, then every circuit the stack constructs compiled at
  ``optimization_level=0`` on them, so that folds and DD pulses survive, folding an already
  transpiled circuit adds no ``sxdg``, and mitigation acts on the small virtual circuit (mitiq's
  DDD on a full-width transpiled circuit hangs).

Both compile for the device's target without its broken entries (:func:`healthy_target`). Targets,
pass managers and compiled circuits are cached by ``devices.compile_key`` (the calibration id and
the control flow the target accepts).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from qiskit import QuantumCircuit
from qiskit.circuit import Delay
from qiskit.providers import BackendV2
from qiskit.transpiler import PassManager, Target, TranspilerError, generate_preset_pass_manager

from kernel_server.backends.dynamic import has_control_flow
from kernel_server.core.cache import LRU
from kernel_server.core.isa import BROKEN_ERROR, broken_entries
from kernel_server.wire.circuits import fingerprint

# ``devices`` (qiskit_ibm_runtime: 1-3 s) is imported inside the functions that use it, so that
# importing the mitigation package, which exports the layout functions, stays cheap.

__all__ = [
    "BROKEN_ERROR",
    "DEFAULT_OPTIMIZATION_LEVEL",
    "CircuitTooWideError",
    "broken_entries",
    "check_width",
    "choose_layout",
    "device_target",
    "healthy_target",
    "transpile_for",
    "transpile_mitigated",
]


# Level 2 runs VF2Layout, which scores layouts by the target's errors; level 1 falls back to the
# trivial layout 0..n-1 on big devices and can land on a dead coupler. Level 3 gave the same
# layouts on GHZ circuits at up to twice the cost.
DEFAULT_OPTIMIZATION_LEVEL = 2


class CircuitTooWideError(ValueError):
    """The circuit needs more qubits than the device has."""

    def __init__(self, circuit_qubits: int, backend_name: str, backend_qubits: int) -> None:
        super().__init__(
            f"circuit has {circuit_qubits} qubits but {backend_name} has only {backend_qubits}"
        )
        self.circuit_qubits = circuit_qubits
        self.backend_name = backend_name
        self.backend_qubits = backend_qubits


def check_width(circuit: QuantumCircuit, backend: BackendV2) -> None:
    """Raise :class:`CircuitTooWideError` when ``circuit`` cannot fit on ``backend``."""
    if circuit.num_qubits > backend.num_qubits:
        raise CircuitTooWideError(circuit.num_qubits, backend.name, backend.num_qubits)


# --------------------------------------------------------------------------------------------
# Healthy targets
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------

_CACHE_SIZE = 64
# Guards the caches; values are built outside it, so that one slow build holds up no cache hit.
_lock = threading.Lock()
_run_lock = threading.Lock()  # passes keep per-run state: one run at a time per pass manager
V = TypeVar("V")


def _cached(cache: LRU[V], key: Hashable, build: Callable[[], V]) -> V:
    """``cache[key]``, built and stored first when missing."""
    with _lock:
        value = cache.get(key)
    if value is None:
        value = build()
        with _lock:
            cache.put(key, value)
    return value


_targets: LRU[Target] = LRU(_CACHE_SIZE)


def device_target(backend: BackendV2) -> Target:
    """``backend``'s target without its broken entries (the target itself when it has none),
    built once per calibration."""
    from kernel_server.backends.devices import compile_key

    def build() -> Target:
        dead_qubits, dead_couplers = broken_entries(backend.target)
        return healthy_target(backend.target) if dead_qubits or dead_couplers else backend.target

    return _cached(_targets, compile_key(backend), build)


# --------------------------------------------------------------------------------------------
# Full compilation
# --------------------------------------------------------------------------------------------


@dataclass
class _Compiler:
    """Pass managers for one (calibration, seed, level, scheduled) combination."""

    primary: PassManager  # on the healthy target
    fallback: PassManager | None  # on the full target, when the healthy one lost entries
    # Passes keep per-run state on themselves: one run at a time per pass manager.
    lock: threading.Lock = field(default_factory=threading.Lock)


_compilers: LRU[_Compiler] = LRU(_CACHE_SIZE)


def _compiler_for(
    backend: BackendV2, seed: int, optimization_level: int, scheduled: bool = False
) -> _Compiler:
    from kernel_server.backends.devices import compile_key

    def build() -> _Compiler:
        target = backend.target
        dead_qubits, dead_couplers = broken_entries(target)
        has_broken = bool(dead_qubits or dead_couplers)
        # Delays must be re-aligned to the device's pulse grid, which needs a schedule first
        # (without one, ConstrainedReschedule raises "not scheduled" on e.g. fake_hanoi).
        scheduling = {"scheduling_method": "alap"} if scheduled else {}
        primary = generate_preset_pass_manager(
            optimization_level=optimization_level,
            target=device_target(backend) if has_broken else target,
            seed_transpiler=seed,
            **scheduling,
        )
        # Only needed when the healthy target is too fragmented for the circuit (then a broken
        # entry is the price of running at all; the fidelity estimate will show it).
        fallback = (
            generate_preset_pass_manager(
                optimization_level=optimization_level,
                target=target,
                seed_transpiler=seed,
                **scheduling,
            )
            if has_broken
            else None
        )
        return _Compiler(primary, fallback)

    return _cached(_compilers, (compile_key(backend), seed, optimization_level, scheduled), build)


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


# --------------------------------------------------------------------------------------------
# Compilation on a fixed layout (mitigation stacks)
# --------------------------------------------------------------------------------------------

_layout_pms: LRU[PassManager] = LRU(_CACHE_SIZE)
_level0_pms: LRU[PassManager] = LRU(_CACHE_SIZE)
# Compiled circuits by content: a cell run again rebuilds the same mitigation circuits, and
# compiling them (padding idle time on every qubit of a large device) costs more than running.
_compiled: LRU[QuantumCircuit] = LRU(_CACHE_SIZE)


def choose_layout(circuit: QuantumCircuit, backend: BackendV2, seed: int = 0) -> tuple[int, ...]:
    """Physical qubit of each virtual qubit: noise-aware (VF2Layout, else Sabre), as level 2.

    Not ``transpile_for``'s layout: level 2's init stage cancels gates before choosing a layout
    (a chain of CX and its mirror image vanishes), so its layout can fit a smaller circuit than
    the level-0 one that actually runs and force routing there. Here the init stage is level 0's.
    """
    from kernel_server.backends.devices import compile_key

    check_width(circuit, backend)
    target = device_target(backend)

    def build() -> PassManager:
        pm = generate_preset_pass_manager(optimization_level=2, target=target, seed_transpiler=seed)
        pm.init = generate_preset_pass_manager(optimization_level=0, target=target).init
        # Only the layout is wanted: skip optimization and scheduling.
        pm.optimization = None
        pm.scheduling = None
        return pm

    pm = _cached(_layout_pms, (compile_key(backend), seed), build)
    with _run_lock:
        transpiled = pm.run(circuit)
    return tuple(transpiled.layout.initial_index_layout(filter_ancillas=True))


def transpile_mitigated(
    circuit: QuantumCircuit,
    backend: BackendV2,
    layout: Sequence[int],
    schedule: bool = True,
    seed: int = 0,
) -> QuantumCircuit:
    """``circuit`` on ``layout`` at optimization level 0 (folds and DD pulses survive).

    ``schedule`` adds ALAP scheduling: idle windows become delays, which the noisy simulator
    relaxes with T1/T2 (without them idle qubits suffer no noise at all). Qiskit's scheduling
    stage does not take control flow, so a dynamic circuit is never scheduled: its idle windows
    go without relaxation, as ``AerSimulator.from_backend`` runs it too.
    """
    from kernel_server.backends.devices import compile_key

    schedule = schedule and not has_control_flow(circuit)
    key = (compile_key(backend), tuple(layout), schedule, seed)
    target = device_target(backend)

    def build() -> PassManager:
        return generate_preset_pass_manager(
            optimization_level=0,
            target=target,
            initial_layout=list(layout),
            seed_transpiler=seed,
            scheduling_method="alap" if schedule else None,
        )

    content = fingerprint([circuit])
    if content:
        compiled = _cached(
            _compiled, (content, *key), lambda: _run(_cached(_level0_pms, key, build), circuit)
        )
        return compiled.copy()
    return _run(_cached(_level0_pms, key, build), circuit)


def _run(pm: PassManager, circuit: QuantumCircuit) -> QuantumCircuit:
    with _run_lock:
        return pm.run(circuit)
