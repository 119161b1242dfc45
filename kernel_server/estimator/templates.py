"""Template QPUs: one model QPU per processor model in the fleet (paper §6, "QPU transpilation").

The resource estimator compiles a job for a template rather than for every device: a template adopts
its model's basis gates and coupling map, and its calibration is the mean of the members'
calibration data. That keeps estimation cost proportional to the number of processor models (a
handful), not to the number of devices.

Decisions, and why:

- **What a "model" is.** Members must share the family, the width, the undirected coupling map and
  the two-qubit gate: averaging is only meaningful entry by entry over the same hardware graph, and
  a circuit compiled for the template must be re-targetable to every member. Heron r1 (torino,
  133q) and Heron r2/r3 (fez, kingston..., 156q) therefore get separate templates ("Heron-133",
  "Heron-156"): their maps differ, and the intersection of a 133- and a 156-qubit map is a
  fragmented graph that fits neither. Same for e.g. fake_peekskill (Falcon 27q with ecr) versus the
  cx Falcons. Names are always "<family>-<width>" so they do not change when another model of the
  family joins the fleet; a suffix (two-qubit gate, then a map hash) only appears when two models
  share family and width.
- **Directions.** Eagle members have the same undirected map but different ecr directions (of 144
  couplers only 47 point the same way on sherbrooke, brisbane and kyiv). The template keeps a
  direction when at least half of the members have it, and averages each member's error on the
  coupler in whichever direction that member has: for an estimate the coupler's quality matters,
  not its orientation (the flip costs single-qubit gates of negligible error).
- **Broken entries** (error >= ``BROKEN_ERROR``, e.g. fake_sherbrooke ecr(6,5) = 1.0) are left out
  of the mean, so one dead coupler does not make the whole model look bad there. If every member
  has the entry broken, the template keeps the mean of the broken values (still >= the threshold),
  so :func:`healthy_target` drops it like on a real device.
- **Shared entries only.** Operations, qubit tuples and control-flow support are the intersection
  over members: whatever is compiled for the template runs on any member. Devices loaded through
  ``devices.load_backend`` all declare control flow (the snapshot of fake_kolkata lists none);
  a member passed in as a fresh fake backend object may not, and its template then has none.
- **Timing constraints** (dt, granularity, alignments) are not averaged: they are hardware grid
  rules, so the template takes the most common set among members (fake_brisbane's dt differs from
  the other Eagles'). Durations in the target are seconds and are averaged like errors.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeAlias, TypedDict

from qiskit.circuit import Gate
from qiskit.providers import BackendV2, Options, QubitProperties
from qiskit.transpiler import CouplingMap, InstructionProperties, Target

from kernel_server.backends.compile import BROKEN_ERROR
from kernel_server.backends.devices import calibration_id, family_of, load_backend
from kernel_server.core.circuits import DEFAULT_SHOTS

BackendLike: TypeAlias = str | BackendV2


@dataclass
class TemplateQPU:
    """The mean-calibration model of one processor model in the fleet."""

    family: str  # processor family ("Falcon", "Eagle", "Heron")
    num_qubits: int
    members: tuple[str, ...]  # backend names, sorted
    calibration_key: str  # changes whenever any member's calibration changes
    target: Target
    name: str = ""  # "<family>-<width>[-suffix]"; derived when not given
    member_calibrations: tuple[str, ...] = ()  # calibration_id of each member, same order
    _backend: TemplateBackend | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.family}-{self.num_qubits}"

    @property
    def coupling_map(self) -> CouplingMap:
        return self.target.build_coupling_map()

    @property
    def basis_gates(self) -> tuple[str, ...]:
        """Gate names of the target (no measure, reset, delay or control flow), sorted."""
        return tuple(
            sorted(
                name
                for name in self.target.operation_names
                if isinstance(self.target.operation_from_name(name), Gate)
            )
        )

    def as_backend(self) -> TemplateBackend:
        """A backend view of the template for ``transpile_for`` and ``numerical_estimate``.

        One instance per template, so the compiler cache (keyed on the calibration id, which is
        cached per target object) is hit on every call after the first.
        """
        if self._backend is None:
            self._backend = TemplateBackend(self)
        return self._backend

    def summary(self) -> dict[str, Any]:
        """JSON-ready description: identity plus the headline mean calibration numbers."""
        two_qubit: list[float] = []
        one_qubit: list[float] = []
        readout: list[float] = []
        broken = 0
        couplers: set[frozenset[int]] = set()
        for name in self.target.operation_names:
            props = self.target[name]
            operation = self.target.operation_from_name(name)
            if props is None or inspect.isclass(operation):
                continue
            for qargs, prop in props.items():
                if qargs is None or prop is None or prop.error is None:
                    continue
                if prop.error >= BROKEN_ERROR:
                    broken += 1
                    continue
                if name == "measure":
                    readout.append(prop.error)
                elif isinstance(operation, Gate) and len(qargs) == 2:
                    two_qubit.append(prop.error)
                    couplers.add(frozenset(qargs))
                elif isinstance(operation, Gate) and len(qargs) == 1 and prop.error > 0:
                    one_qubit.append(prop.error)  # virtual rz (error 0) would dilute the mean
        qprops = [q for q in (self.target.qubit_properties or ()) if q is not None]
        return {
            "name": self.name,
            "family": self.family,
            "num_qubits": self.num_qubits,
            "members": list(self.members),
            "calibration_key": self.calibration_key,
            "basis_gates": list(self.basis_gates),
            "couplers": len(couplers),
            "broken_entries": broken,
            "mean_two_qubit_error": _mean(two_qubit),
            "mean_one_qubit_error": _mean(one_qubit),
            "mean_readout_error": _mean(readout),
            "mean_t1_s": _mean([q.t1 for q in qprops if q.t1 is not None]),
            "mean_t2_s": _mean([q.t2 for q in qprops if q.t2 is not None]),
        }


class TemplateNotExecutable(TypeError):
    """A template QPU is a calibration model for estimates, not a device that runs jobs."""


class TemplateBackend(BackendV2):
    """A template seen as a backend: it compiles and estimates, but runs nothing.

    ``transpile_for``/``numerical_estimate`` read ``target``, ``name`` and ``num_qubits``;
    ``calibration_id`` reads ``name`` and ``target``; ``family_of`` reads ``configuration()``.
    """

    def __init__(self, template: TemplateQPU) -> None:
        slug = re.sub(r"[^a-z0-9]+", "_", template.name.lower()).strip("_")
        super().__init__(
            name=f"template_{slug}",
            description=f"template QPU {template.name} (mean of {', '.join(template.members)})",
            backend_version="1",
        )
        self.template = template

    @property
    def target(self) -> Target:
        return self.template.target

    @property
    def max_circuits(self) -> int | None:
        return None

    @classmethod
    def _default_options(cls) -> Options:
        return Options(shots=DEFAULT_SHOTS)

    def configuration(self) -> SimpleNamespace:
        # Only what family_of looks at; a template has no IBM configuration of its own.
        return SimpleNamespace(
            processor_type={"family": self.template.family},
            n_qubits=self.template.num_qubits,
            backend_name=self.name,
        )

    def run(self, run_input: Any, **options: Any) -> Any:
        # Templates only exist for estimation: there is no device behind one.
        raise TemplateNotExecutable(
            f"{self.name} is a template QPU (a calibration model); run on one of its members: "
            f"{', '.join(self.template.members)}"
        )


# --- grouping ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ModelKey:
    family: str
    num_qubits: int
    entanglers: frozenset[str]  # two-qubit gate names
    edges: frozenset[frozenset[int]]  # undirected coupling map

    def edges_hash(self) -> str:
        text = repr(sorted(tuple(sorted(edge)) for edge in self.edges))
        return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:6]


def _model_key(backend: BackendV2) -> _ModelKey:
    target = backend.target
    entanglers: set[str] = set()
    edges: set[frozenset[int]] = set()
    for name in target.operation_names:
        operation = target.operation_from_name(name)
        props = target[name]
        if props is None or inspect.isclass(operation) or not isinstance(operation, Gate):
            continue
        if operation.num_qubits != 2:
            continue
        entanglers.add(name)
        edges.update(frozenset(qargs) for qargs in props if qargs is not None)
    return _ModelKey(
        family_of(backend), int(backend.num_qubits), frozenset(entanglers), frozenset(edges)
    )


def _resolve(backends: Iterable[BackendLike]) -> list[BackendV2]:
    resolved = [load_backend(b) if isinstance(b, str) else b for b in backends]
    names = [b.name for b in resolved]
    duplicates = sorted(n for n, count in Counter(names).items() if count > 1)
    if duplicates:
        raise ValueError(f"backends listed twice: {', '.join(duplicates)}")
    return sorted(resolved, key=lambda b: b.name)


def _group(backends: Sequence[BackendV2]) -> dict[str, tuple[_ModelKey, list[BackendV2]]]:
    """Group backends by processor model and name each group (see the module docstring)."""
    groups: dict[_ModelKey, list[BackendV2]] = defaultdict(list)
    for backend in backends:
        groups[_model_key(backend)].append(backend)
    by_width: dict[tuple[str, int], list[_ModelKey]] = defaultdict(list)
    for key in groups:
        by_width[(key.family, key.num_qubits)].append(key)
    named: dict[str, tuple[_ModelKey, list[BackendV2]]] = {}
    for (family, width), keys in by_width.items():
        for key in keys:
            # family_of labels family-less devices "<width>q" already: no "20q-20".
            name = family if family == f"{width}q" else f"{family}-{width}"
            if len(keys) > 1:
                same_gate = [k for k in keys if k.entanglers == key.entanglers]
                name += "-" + "+".join(sorted(key.entanglers))
                if len(same_gate) > 1:
                    name += "-" + key.edges_hash()
            named[name] = (key, groups[key])
    return dict(sorted(named.items()))


# --- averaging --------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def _mean_or_none(values: Iterable[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _mean_properties(props: Sequence[InstructionProperties | None]) -> InstructionProperties | None:
    """Mean error and duration over members, leaving broken members' values out."""
    present = [p for p in props if p is not None]
    if not present:
        return None
    healthy = [p for p in present if p.error is None or p.error < BROKEN_ERROR]
    # All broken: keep them, so the mean stays >= BROKEN_ERROR and healthy_target drops it.
    pool = healthy or present
    return InstructionProperties(
        duration=_mean_or_none(p.duration for p in pool),
        error=_mean_or_none(p.error for p in pool),
    )


class TimingConstraints(TypedDict):
    """A Target's pulse-grid rules (its keyword arguments of the same names)."""

    dt: float | None
    granularity: int
    min_length: int
    pulse_alignment: int
    acquire_alignment: int


def _timing_constraints(targets: Sequence[Target]) -> TimingConstraints:
    """The most common grid rules among members (ties: the first member, by name)."""
    options = [
        (t.dt, t.granularity, t.min_length, t.pulse_alignment, t.acquire_alignment) for t in targets
    ]
    counts = Counter(options)
    best = max(options, key=lambda option: counts[option])  # max keeps the first on ties
    dt, granularity, min_length, pulse_alignment, acquire_alignment = best
    return TimingConstraints(
        dt=dt,
        granularity=granularity,
        min_length=min_length,
        pulse_alignment=pulse_alignment,
        acquire_alignment=acquire_alignment,
    )


def _mean_qubit_properties(targets: Sequence[Target], num_qubits: int) -> list[QubitProperties]:
    result = []
    for qubit in range(num_qubits):
        props = [
            t.qubit_properties[qubit]
            for t in targets
            if t.qubit_properties is not None and t.qubit_properties[qubit] is not None
        ]
        result.append(
            QubitProperties(
                t1=_mean_or_none(p.t1 for p in props),
                t2=_mean_or_none(p.t2 for p in props),
                # Only averaged when every member reports one (Heron targets carry none).
                frequency=_mean_or_none(p.frequency for p in props)
                if props and all(p.frequency is not None for p in props)
                else None,
            )
        )
    return result


def _two_qubit_entries(
    name: str, targets: Sequence[Target]
) -> dict[tuple[int, ...], InstructionProperties | None]:
    """A two-qubit gate's entries on the couplers every member has, directions by majority."""
    per_member = [dict(t[name].items()) for t in targets]
    pairs = set.intersection(
        *({frozenset(qargs) for qargs in entries if qargs is not None} for entries in per_member)
    )
    entries: dict[tuple[int, ...], InstructionProperties | None] = {}
    for pair in sorted(pairs, key=sorted):
        a, b = sorted(pair)
        for direction in ((a, b), (b, a)):
            have = sum(direction in member for member in per_member)
            if 2 * have < len(per_member):
                continue
            reverse = direction[::-1]
            values = [m[direction] if direction in m else m[reverse] for m in per_member]
            entries[direction] = _mean_properties(values)
    return entries


def _mean_target(description: str, targets: Sequence[Target]) -> Target:
    first = targets[0]
    num_qubits = first.num_qubits
    concurrent = first.concurrent_measurements
    if any(t.concurrent_measurements != concurrent for t in targets[1:]):
        concurrent = None
    template = Target(
        description=description,
        num_qubits=num_qubits,
        qubit_properties=_mean_qubit_properties(targets, num_qubits),
        concurrent_measurements=concurrent,
        **_timing_constraints(targets),
    )
    shared = set(first.operation_names).intersection(*(t.operation_names for t in targets[1:]))
    for name in sorted(shared):
        operation = first.operation_from_name(name)
        props = first[name]
        if props is None or inspect.isclass(operation):  # control flow: global, no calibration
            template.add_instruction(operation, name=name)
            continue
        if isinstance(operation, Gate) and operation.num_qubits == 2:
            entries = _two_qubit_entries(name, targets)
        else:
            per_member = [dict(t[name].items()) for t in targets]
            qargs_shared = set(per_member[0]).intersection(*per_member[1:])
            entries = {
                qargs: _mean_properties([m[qargs] for m in per_member])
                for qargs in sorted(qargs_shared, key=lambda q: q or ())
            }
        template.add_instruction(operation, entries, name=name)
    return template


def _calibration_key(name: str, member_calibrations: Sequence[str]) -> str:
    digest = hashlib.sha1("|".join(member_calibrations).encode(), usedforsecurity=False)
    return f"{name}@{digest.hexdigest()[:12]}"


def _build(name: str, key: _ModelKey, members: Sequence[BackendV2]) -> TemplateQPU:
    names = tuple(b.name for b in members)
    calibrations = tuple(calibration_id(b) for b in members)
    target = _mean_target(
        f"template {name}: mean of {', '.join(names)}", [b.target for b in members]
    )
    return TemplateQPU(
        family=key.family,
        num_qubits=key.num_qubits,
        members=names,
        calibration_key=_calibration_key(name, calibrations),
        target=target,
        name=name,
        member_calibrations=calibrations,
    )


def build_templates(backend_names: Iterable[BackendLike]) -> dict[str, TemplateQPU]:
    """One template per processor model among ``backend_names``, keyed by template name.

    Accepts names (anything :func:`load_backend` takes) or backend objects (a modified copy of a
    device, say).
    """
    return {
        name: _build(name, key, members)
        for name, (key, members) in _group(_resolve(backend_names)).items()
    }


class TemplateRegistry:
    """The current templates of a fleet, rebuilt only when a member's calibration changes.

    ``calibration_id`` is cached per target object: after changing a target in place, call
    ``devices.forget_calibration(backend)`` or the change goes unnoticed here too.
    """

    def __init__(self, backends: Iterable[BackendLike] = ()) -> None:
        self._lock = threading.Lock()
        self._templates: dict[str, TemplateQPU] = {}
        self._member_of: dict[str, str] = {}
        backends = list(backends)
        if backends:
            self.refresh(backends)

    def refresh(self, backends: Iterable[BackendLike]) -> list[str]:
        """Regroup the fleet ``backends``; rebuild templates whose members or calibrations changed.

        Returns the names of the templates (re)built, sorted. Templates whose members all left the
        fleet are dropped.
        """
        groups = _group(_resolve(backends))
        with self._lock:
            current = dict(self._templates)
        rebuilt: list[str] = []
        templates: dict[str, TemplateQPU] = {}
        for name, (key, members) in groups.items():
            calibrations = tuple(calibration_id(b) for b in members)
            existing = current.get(name)
            if existing is not None and existing.calibration_key == _calibration_key(
                name, calibrations
            ):
                templates[name] = existing
                continue
            templates[name] = _build(name, key, members)
            rebuilt.append(name)
        with self._lock:
            self._templates = templates
            self._member_of = {m: name for name, t in templates.items() for m in t.members}
        return rebuilt

    @property
    def templates(self) -> dict[str, TemplateQPU]:
        with self._lock:
            return dict(self._templates)

    def get(self, name: str) -> TemplateQPU | None:
        with self._lock:
            return self._templates.get(name)

    def template_of(self, backend_name: str) -> TemplateQPU | None:
        """The template a device belongs to."""
        with self._lock:
            name = self._member_of.get(backend_name)
            return None if name is None else self._templates.get(name)

    def __getitem__(self, name: str) -> TemplateQPU:
        with self._lock:
            return self._templates[name]

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._templates

    def __iter__(self) -> Iterator[str]:
        return iter(self.templates)

    def __len__(self) -> int:
        with self._lock:
            return len(self._templates)
