"""Circuit features for the learned fidelity and runtime models (paper §6).

Features are taken from the circuit as compiled for a device or template, because that is what runs:
routing adds two-qubit gates and depth, and the layout decides which calibration numbers apply.
Counts are per circuit; ``num_circuits`` says how many circuits of this kind the job holds (the
variants a mitigation technique generates are alike in size), and :func:`runtime_frame` turns that
into the per-job sums the IBM runtime data uses. The mitigation kind, also a model input, belongs to
the caller, which knows it; it is not a property of a circuit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING, Any

from qiskit import QuantumCircuit
from qiskit.circuit import Delay, Gate
from qiskit.transpiler import Target

from kernel_server.backends.dynamic import costliest_path
from kernel_server.core.circuits import DEFAULT_SHOTS

if TYPE_CHECKING:
    import pandas as pd

# Directives and idle time: they neither fail nor count as work (as in the numerical baseline).
_SKIPPED = frozenset({"barrier", "delay"})
_NON_GATES = frozenset({"measure", "reset"})

# Floor of log-fidelity per circuit: a broken entry (error 1.0) gives fidelity 0, and -inf would
# poison any regression it reaches. exp(-50) is "certainly fails" at every scale that matters.
LOG_FIDELITY_FLOOR = -50.0

# The IBM runtime data's columns, in its order (see shared/data/README.md): the first three are
# sums over the job's circuits after transpilation, shots are per circuit.
RUNTIME_COLUMNS: tuple[str, ...] = (
    "two_qubit_gates",
    "depth",
    "num_qubits",
    "shots",
    "num_circuits",
)


@dataclass(frozen=True)
class CircuitFeatures:
    """What the models see of one compiled circuit on one target."""

    # Structure (per circuit).
    num_qubits: int  # active qubits: touched by a gate, measurement or reset
    depth: int  # without barriers and delays
    two_qubit_gates: int
    one_qubit_gates: int  # including virtual rz
    measurements: int
    # Execution.
    shots: int  # per circuit
    num_circuits: int  # circuits of this kind in the job
    # Target-dependent, over what the circuit actually uses.
    mean_two_qubit_error: float  # over the distinct couplers used
    max_two_qubit_error: float
    mean_one_qubit_error: float  # over active qubits, each qubit's worst physical 1q gate
    mean_readout_error: float  # over measured qubits
    mean_t1_s: float  # over active qubits
    mean_t2_s: float
    duration_s: float  # critical path of one shot
    # Sum over active qubits of the time each waits between its first and its last operation
    # (its measurement, usually) when scheduled as late as possible, as the runs are: a state
    # idling there relaxes (T1) and dephases (T2). Waiting in |0> before the first gate is
    # harmless and not counted.
    idle_qubit_seconds: float
    # The same idle time of each qubit over that qubit's T1, summed: exp(-x / 2) is what idle
    # relaxation leaves of a state with half its population excited.
    idle_t1_exposure: float
    log_fidelity: float  # log of the product of (1 - error), floored at LOG_FIDELITY_FLOOR
    # The same over the measurements' backward light cone only: a gate whose qubits never reach
    # a measured qubit afterwards cannot change an outcome, so its errors do not count.
    cone_log_fidelity: float

    @property
    def fidelity(self) -> float:
        """The numerical baseline's fidelity (product of 1 - error)."""
        return math.exp(self.log_fidelity)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FEATURE_COLUMNS}

    def as_row(self) -> tuple[float, ...]:
        """Values in ``FEATURE_COLUMNS`` order, as floats for a model's input matrix."""
        return tuple(float(value) for value in astuple(self))


FEATURE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(CircuitFeatures))


def _mean(values: Sequence[float]) -> float:
    # 0.0 for "nothing of the kind" (no measurement, no coupler): NaN would break scikit-learn.
    return math.fsum(values) / len(values) if values else 0.0


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}


def _delay_seconds(operation: Delay, dt: float | None) -> float:
    if operation.unit == "dt":
        return float(operation.duration) * float(dt or 0.0)
    return float(operation.duration) * _SECONDS.get(operation.unit, 0.0)


def circuit_features(
    transpiled: QuantumCircuit, target: Target, shots: int = DEFAULT_SHOTS, num_circuits: int = 1
) -> CircuitFeatures:
    """Features of a circuit already compiled for ``target`` (physical qubit indices).

    One pass over the instructions (:func:`_walk`) computes what ``fidelity_and_duration`` and
    ``QuantumCircuit.depth`` would (the same numbers: the tests compare them) at a third of the
    cost of calling them: ~1 ms for a 20-qubit GHZ on a 156-qubit device, ~4 us per instruction
    in general. Control flow counts along its costliest branch (``dynamic.costliest_path``): the
    features of the worst shot.
    """
    walk = _walk(costliest_path(transpiled, target), target)
    one_qubit_errors, readout = _qubit_errors(target, walk.active, walk.measured)
    qprops = target.qubit_properties or []
    t1 = [p.t1 for q in walk.active if q < len(qprops) and (p := qprops[q]) is not None and p.t1]
    t2 = [p.t2 for q in walk.active if q < len(qprops) and (p := qprops[q]) is not None and p.t2]
    coupler_errors = list(walk.couplers.values())
    idle = _alap_idle_seconds(walk.timeline)
    return CircuitFeatures(
        num_qubits=len(walk.active),
        depth=walk.depth,
        two_qubit_gates=walk.two_qubit,
        one_qubit_gates=walk.one_qubit,
        measurements=walk.measurements,
        shots=int(shots),
        num_circuits=int(num_circuits),
        mean_two_qubit_error=_mean(coupler_errors),
        max_two_qubit_error=max(coupler_errors, default=0.0),
        mean_one_qubit_error=_mean(one_qubit_errors),
        mean_readout_error=_mean(readout),
        mean_t1_s=_mean(t1),
        mean_t2_s=_mean(t2),
        duration_s=walk.duration,
        idle_qubit_seconds=sum(idle.values()),
        idle_t1_exposure=sum(
            seconds / p.t1
            for q, seconds in idle.items()
            if q < len(qprops) and (p := qprops[q]) is not None and p.t1
        ),
        log_fidelity=max(walk.log_fidelity, LOG_FIDELITY_FLOOR),
        cone_log_fidelity=max(_cone_log_fidelity(walk.timeline), LOG_FIDELITY_FLOOR),
    )


Timeline = Sequence[tuple[str, tuple[int, ...], float, float]]


@dataclass
class _Walk:
    """What the pass over a compiled circuit's instructions counted."""

    active: set[int]  # qubits touched by a gate, measurement or reset
    measured: set[int]
    couplers: dict[tuple[str, tuple[int, ...]], float]  # error of each distinct coupler used
    two_qubit: int
    one_qubit: int
    measurements: int
    depth: int
    duration: float
    log_fidelity: float
    # (name, qubits, log-fidelity term, seconds) per instruction: light cone and ALAP idle time.
    timeline: list[tuple[str, tuple[int, ...], float, float]]


def _walk(transpiled: QuantumCircuit, target: Target) -> _Walk:
    """Depth, critical path, counts and the error product in one pass over the instructions."""
    qindex = {bit: i for i, bit in enumerate(transpiled.qubits)}
    cindex = {bit: i for i, bit in enumerate(transpiled.clbits)}
    q_level = [0] * len(qindex)  # depth layer reached on each bit
    c_level = [0] * len(cindex)
    q_free = [0.0] * len(qindex)  # seconds at which each bit is free (ASAP critical path)
    c_free = [0.0] * len(cindex)
    operation_names = set(target.operation_names)
    # (name, qargs) -> (error or None, seconds): a circuit reuses few distinct entries.
    calibration: dict[tuple[str, tuple[int, ...]], tuple[float | None, float]] = {}

    active: set[int] = set()
    measured: set[int] = set()
    couplers: dict[tuple[str, tuple[int, ...]], float] = {}
    two_qubit = one_qubit = measurements = 0
    log_fidelity = 0.0
    # (name, qubits, log-fidelity term, seconds) per instruction: light cone and ALAP idle time.
    timeline: list[tuple[str, tuple[int, ...], float, float]] = []
    for instruction in transpiled.data:
        operation = instruction.operation
        name = operation.name
        qargs = tuple(qindex[q] for q in instruction.qubits)
        cargs = tuple(cindex[c] for c in instruction.clbits)

        key = (name, qargs)
        entry = calibration.get(key)
        if entry is None:
            entry = calibration[key] = _calibration(target, operation_names, name, qargs)
        error, seconds = entry
        if isinstance(operation, Delay):
            seconds = _delay_seconds(operation, target.dt)

        # Filtered instructions still synchronize their bits, as in QuantumCircuit.depth.
        skipped = name in _SKIPPED
        level = max([q_level[q] for q in qargs] + [c_level[c] for c in cargs], default=0)
        level += 0 if skipped else 1
        start = max([q_free[q] for q in qargs] + [c_free[c] for c in cargs], default=0.0)
        end = start + seconds
        for q in qargs:
            q_level[q] = level
            q_free[q] = end
        for c in cargs:
            c_level[c] = level
            c_free[c] = end
        if skipped:
            if name == "barrier":  # it synchronises the schedule the idle time is read from
                timeline.append((name, qargs, 0.0, 0.0))
            continue

        term = 0.0
        if error:
            term = math.log1p(-error) if error < 1.0 else LOG_FIDELITY_FLOOR
            log_fidelity += term
        timeline.append((name, qargs, term, seconds))
        active.update(qargs)
        if name == "measure":
            measurements += 1
            measured.update(qargs)
        elif name in _NON_GATES:
            continue
        elif len(qargs) >= 2:
            two_qubit += 1
            couplers[key] = error or 0.0
        else:
            one_qubit += 1

    return _Walk(
        active=active,
        measured=measured,
        couplers=couplers,
        two_qubit=two_qubit,
        one_qubit=one_qubit,
        measurements=measurements,
        depth=max(q_level + c_level, default=0),
        duration=max(q_free + c_free, default=0.0),
        log_fidelity=log_fidelity,
        timeline=timeline,
    )


def _calibration(
    target: Target, operation_names: set[str], name: str, qargs: tuple[int, ...]
) -> tuple[float | None, float]:
    """(error or None, seconds) of ``name`` on ``qargs`` in ``target``."""
    props = target[name] if name in operation_names else None
    prop = props.get(qargs) if props else None
    return (
        None if prop is None or prop.error is None else float(prop.error),
        float(prop.duration) if prop is not None and prop.duration else 0.0,
    )


def _qubit_errors(
    target: Target, active: set[int], measured: set[int]
) -> tuple[list[float], list[float]]:
    """Each active qubit's worst physical single-qubit gate error, and each measured qubit's
    readout error (where the target has them)."""
    # Each qubit's physical single-qubit gate quality (sx/x; rz is virtual, error 0), whichever
    # of them the circuit happened to use: it describes the qubits the layout chose.
    single_gates = [
        name
        for name in target.operation_names
        if isinstance(op := target.operation_from_name(name), Gate) and op.num_qubits == 1
    ]
    one_qubit_errors = []
    for qubit in active:
        errors = [e for name in single_gates if (e := _error(target, name, (qubit,))) is not None]
        if errors:
            one_qubit_errors.append(max(errors))
    readout = [e for q in measured if (e := _error(target, "measure", (q,))) is not None]
    return one_qubit_errors, readout


def _cone_log_fidelity(timeline: Timeline) -> float:
    """Log-fidelity of the instructions in the measurements' backward light cone."""
    cone: set[int] = set()
    total = 0.0
    for name, qargs, term, _ in reversed(timeline):
        if name == "barrier":
            continue
        if name == "measure":
            cone.update(qargs)
            total += term
        elif cone.intersection(qargs):
            cone.update(qargs)
            total += term
    return total


def _alap_idle_seconds(timeline: Timeline) -> dict[int, float]:
    """Idle time inside each qubit's window, per qubit, with operations as late as possible.

    The runs are scheduled ALAP, so a qubit waits in |0> before its first gate (harmless) rather
    than in its computed state before its measurement; an ASAP reading of the same circuit
    counted that wait as harmful (on the fidelity runs: 81% within 0.05 against 79%).
    """
    free: dict[int, float] = {}  # time from the end of the shot, walking backwards
    busy: dict[int, float] = {}
    last: dict[int, float] = {}  # end (from the end of the shot) of each qubit's last operation
    for name, qargs, _, seconds in reversed(timeline):
        start = max((free.get(q, 0.0) for q in qargs), default=0.0)
        end = start + seconds
        for q in qargs:
            free[q] = end
            if name != "barrier":
                busy[q] = busy.get(q, 0.0) + seconds
                last.setdefault(q, start)
    return {q: max(0.0, free[q] - last[q] - busy[q]) for q in busy}


def _error(target: Target, name: str, qargs: tuple[int, ...]) -> float | None:
    props = target[name] if name in target.operation_names else None
    prop = props.get(qargs) if props else None
    return None if prop is None or prop.error is None else float(prop.error)


def runtime_row(job: CircuitFeatures | Sequence[CircuitFeatures]) -> dict[str, int]:
    """One job's row in the IBM runtime data's terms.

    ``job`` is either one ``CircuitFeatures`` standing for ``num_circuits`` circuits like it, or
    the features of the job's distinct circuits (each again standing for its ``num_circuits``).
    Structure columns are summed over all circuits; shots are per circuit, so they must agree.
    """
    parts = [job] if isinstance(job, CircuitFeatures) else list(job)
    if not parts:
        raise ValueError("a job needs at least one circuit")
    shots = {p.shots for p in parts}
    if len(shots) > 1:
        # IBM runs every circuit of a job with the job's shots: mixed shots are two jobs.
        raise ValueError(f"circuits of one job have different shots: {sorted(shots)}")
    return {
        "two_qubit_gates": sum(p.two_qubit_gates * p.num_circuits for p in parts),
        "depth": sum(p.depth * p.num_circuits for p in parts),
        "num_qubits": sum(p.num_qubits * p.num_circuits for p in parts),
        "shots": shots.pop(),
        "num_circuits": sum(p.num_circuits for p in parts),
    }


def runtime_frame(jobs: Iterable[CircuitFeatures | Sequence[CircuitFeatures]]) -> pd.DataFrame:
    """The runtime model's input: one row per job, exactly ``RUNTIME_COLUMNS``."""
    import pandas as pd  # imported here: ~0.3 s, and only the models need it

    rows = [runtime_row(job) for job in jobs]
    return pd.DataFrame(rows, columns=list(RUNTIME_COLUMNS)).astype("int64")
