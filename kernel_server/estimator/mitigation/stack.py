"""Composing mitigation techniques: the circuits a stack constructs, and how their results combine.

A :class:`MitigationStack` applies its techniques' circuit construction in order (each technique
fans out every circuit the previous one produced) and combines results in reverse order (the last
technique combines first, per circuit of the one before it). "zne+rem" folds the circuit, then adds
readout calibration circuits to every folded circuit; combining corrects each folded circuit's
counts, reads the observable from the corrected distributions and extrapolates.

What can follow what is decided by the types flowing through ``combine``: the leaves are counts; a
distribution technique needs distributions from below it; an expectation technique takes either
(distributions are turned into expectation values of the observable); linear techniques (twirling,
DD) average whatever they get. So "rem+zne" is invalid (ZNE would hand REM expectation values),
and a technique that needs terminal measurements cannot follow cutting.

Executing a plan is the caller's: the orchestrator's QPU tasks, and the reference executor
``mitigation.run`` (tests, benchmarks, the fidelity model's training runs), which compiles with
``backends.compile.choose_layout`` and ``transpile_mitigated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.quantum_info import SparsePauliOp

from kernel_server.estimator.mitigation.base import (
    DISTRIBUTION,
    EXPECTATION,
    NO_OVERHEAD,
    Counts,
    MitigationTechnique,
    Observable,
    Overhead,
    as_observable,
    expectation_value,
    get_technique,
    measurement_map,
    normalize,
)

__all__ = [
    "QASM2_GATES",
    "MitigationPlan",
    "MitigationStack",
    "StackSpec",
    "parse_stack",
    "standard_gates",
]

TechniqueSpec = str | MitigationTechnique | type[MitigationTechnique] | tuple[Any, dict[str, Any]]


def _as_technique(spec: Any) -> MitigationTechnique:
    if isinstance(spec, MitigationTechnique):
        return spec
    if isinstance(spec, str):
        return get_technique(spec)()
    if isinstance(spec, type) and issubclass(spec, MitigationTechnique):
        return spec()
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
        base = _as_technique(spec[0])
        return type(base)(**{**base.config, **spec[1]})
    raise TypeError(
        f"a mitigation technique is a name, a MitigationTechnique (class or instance) or a "
        f"(name, config) pair, not {spec!r}"
    )


@dataclass
class _Node:
    """One circuit of the construction tree (the root is the job's circuit)."""

    circuit: QuantumCircuit
    anchor: int  # index into MitigationPlan.anchors: the circuit whose layout this one uses
    shots_ratio: float  # shots of this circuit per shot of the job
    children: list[_Node] = field(default_factory=list)
    # The config of the technique that expanded it (its own TypedDict; opaque here), and its
    # construction's context: both go back to that technique's combine_results.
    config: dict[str, object] = field(default_factory=dict)
    context: dict[str, object] = field(default_factory=dict)
    leaf: int | None = None  # index into MitigationPlan.circuits


@dataclass
class MitigationPlan:
    """The constructed circuits of one job and what combining them needs."""

    root: _Node
    circuits: list[QuantumCircuit]  # to execute, in this order
    anchor_of: list[int]  # per circuit: index into anchors
    anchors: list[QuantumCircuit]  # circuits whose layout the executed circuits share
    shots_ratios: list[float]  # per circuit: shots per shot of the job
    observable: SparsePauliOp | None

    def shots_for(self, shots: int) -> list[int]:
        """Shots of each circuit for a job of ``shots`` shots (at least 1 each)."""
        return [max(1, round(shots * ratio)) for ratio in self.shots_ratios]


class MitigationStack:
    """Techniques applied in order: construct fans out in order, combine runs in reverse."""

    def __init__(self, techniques: Sequence[Any] = ()) -> None:
        self.techniques: tuple[MitigationTechnique, ...] = tuple(
            _as_technique(t) for t in techniques
        )
        self.output_kind, self._converts = self._validate()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.techniques)

    def __repr__(self) -> str:
        return f"MitigationStack({'+'.join(self.names) or 'none'})"

    def __len__(self) -> int:
        return len(self.techniques)

    def _validate(self) -> tuple[str, bool]:
        """The kind ``combine`` returns, and whether distributions get turned into expectations
        on the way (then an observable is needed). Raises ``ValueError`` on invalid stacks."""
        names = self.names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"mitigation stack {'+'.join(names)}: {duplicates} appear twice")
        cutter = None
        for technique in self.techniques:
            if cutter is not None and technique.terminal_measurements_only:
                raise ValueError(
                    f"mitigation stack {'+'.join(names)}: {technique.name!r} needs terminal "
                    f"measurements but follows {cutter!r}, whose subexperiments measure "
                    f"mid-circuit; put {technique.name!r} before {cutter!r}"
                )
            if technique.adds_midcircuit_measurements:
                cutter = technique.name
        flowing = DISTRIBUTION  # the leaves are counts
        converts = False
        for position in reversed(range(len(self.techniques))):
            technique = self.techniques[position]
            if technique.linear:
                continue
            if technique.kind == DISTRIBUTION and flowing == EXPECTATION:
                inner = "+".join(names[position + 1 :])
                raise ValueError(
                    f"mitigation stack {'+'.join(names)}: {technique.name!r} combines counts, "
                    f"but {inner!r} after it hands back expectation values; list "
                    f"{technique.name!r} after the expectation techniques (e.g. "
                    f"'{inner}+{technique.name}')"
                )
            if technique.kind == EXPECTATION and flowing == DISTRIBUTION:
                converts = True
            flowing = technique.produces
        return flowing, converts

    def unsupported_reason(self, circuit: QuantumCircuit) -> str | None:
        """Why the stack cannot mitigate ``circuit`` (its first technique that cannot), or None.

        Techniques after one that makes new circuits (cutting's subexperiments) are not asked:
        they see those circuits, not ``circuit``."""
        for technique in self.techniques:
            reason = technique.unsupported_reason(circuit)
            if reason is not None:
                return reason
            if not technique.same_qubits:
                break
        return None

    def needs_observable(self) -> bool:
        """Whether :meth:`construct` needs an observable."""
        return (
            self._converts
            or self.output_kind == EXPECTATION
            or any(t.needs_observable for t in self.techniques)
        )

    def _config(self, technique: MitigationTechnique, observable: Any) -> dict[str, object]:
        config = dict(technique.config)
        if technique.needs_observable and config.get("observable") is None:
            config["observable"] = observable
        return config

    # -- construct / combine -------------------------------------------------------------

    def construct(
        self,
        circuit: QuantumCircuit,
        observable: Observable | None = None,
        *,
        per_outcome: bool = False,
    ) -> MitigationPlan:
        """All circuits to run for ``circuit`` (virtual, with measurements).

        ``per_outcome`` plans for :meth:`combine_distribution` (no observable needed)."""
        reason = self.unsupported_reason(circuit)
        if reason is not None:
            raise ValueError(f"{self!r}: {reason}")
        if per_outcome:
            if any(t.adds_midcircuit_measurements for t in self.techniques):
                raise ValueError(
                    f"{self!r}: no outcome distribution through a technique that measures "
                    "mid-circuit (its subexperiments do not measure the job's outcomes)"
                )
            if observable is not None:
                raise ValueError("per-outcome combination takes no observable")
        elif observable is None and self.needs_observable():
            raise ValueError(f"{self!r} returns or combines expectation values: give an observable")
        spo = None if observable is None else as_observable(observable)
        if spo is not None and (self._converts or self.output_kind == DISTRIBUTION):
            # Read from counts: Z-basis terms only (cutting measures other bases itself).
            for pauli in spo.paulis:
                if np.any(pauli.x):
                    raise ValueError(
                        f"observable term {pauli.to_label()} is not diagonal; {self!r} reads it "
                        "from counts: add the basis change to the circuit and measure Z"
                    )
        circuit = standard_gates(circuit)
        anchors = [circuit]
        root = _Node(circuit, anchor=0, shots_ratio=1.0)
        leaves: list[_Node] = []

        def expand(node: _Node, level: int) -> None:
            if level == len(self.techniques):
                node.leaf = len(leaves)
                leaves.append(node)
                return
            technique = self.techniques[level]
            node.config = self._config(technique, spo)
            constructed = technique.construct_circuits(node.circuit, node.config)
            node.context = constructed.context
            for child_circuit in constructed:
                anchor = node.anchor
                if not technique.same_qubits:
                    anchor = len(anchors)
                    anchors.append(child_circuit)
                child = _Node(child_circuit, anchor, node.shots_ratio * constructed.shots_ratio)
                node.children.append(child)
                expand(child, level + 1)

        expand(root, 0)
        return MitigationPlan(
            root=root,
            circuits=[leaf.circuit for leaf in leaves],
            anchor_of=[leaf.anchor for leaf in leaves],
            anchors=anchors,
            shots_ratios=[leaf.shots_ratio for leaf in leaves],
            observable=spo,
        )

    def combine(self, results: Sequence[Counts], plan: MitigationPlan) -> Any:
        """The mitigated result from the counts of ``plan.circuits`` (same order).

        A float when the stack ends in an expectation value or an observable was given, else a
        distribution (``dict[str, float]`` summing to 1).
        """
        if len(results) != len(plan.circuits):
            raise ValueError(f"{len(results)} results for {len(plan.circuits)} circuits")

        def to_expectation(value: Any, node: _Node) -> float:
            if plan.observable is None:
                raise ValueError("an observable is needed to turn distributions into values")
            return expectation_value(value, plan.observable, measurement_map(node.circuit))

        def value_of(node: _Node, level: int) -> tuple[Any, str]:
            if node.leaf is not None:
                return results[node.leaf], DISTRIBUTION
            technique = self.techniques[level]
            values, kinds = zip(*(value_of(c, level + 1) for c in node.children), strict=True)
            kind = kinds[0]
            if not technique.linear and technique.kind == EXPECTATION and kind == DISTRIBUTION:
                values = tuple(
                    to_expectation(v, c) for v, c in zip(values, node.children, strict=True)
                )
                kind = EXPECTATION
            combined = technique.combine_results(list(values), node.config, node.context)
            return combined, (kind if technique.linear else technique.produces)

        value, kind = value_of(plan.root, 0)
        if kind == DISTRIBUTION:
            if plan.observable is not None:
                return to_expectation(value, plan.root)
            return normalize(value)
        return float(value)

    def combine_distribution(self, results: Sequence[Counts], plan: MitigationPlan) -> Counts:
        """The mitigated outcome distribution, for a plan made with ``per_outcome=True``.

        The probability of each outcome is the expectation value of its projector, so an
        expectation technique (ZNE, PEC) combines each outcome's probability separately: ZNE
        extrapolates every probability to zero noise, PEC takes the signed quasi-probability sum
        of every probability. Linear and distribution techniques work as in :meth:`combine`.
        Negative estimates are clipped and the rest renormalised (the fidelity model's ground
        truth for expectation techniques is the Hellinger fidelity of this distribution).
        """
        if len(results) != len(plan.circuits):
            raise ValueError(f"{len(results)} results for {len(plan.circuits)} circuits")

        def value_of(node: _Node, level: int) -> dict[str, float]:
            if node.leaf is not None:
                return normalize(results[node.leaf])
            technique = self.techniques[level]
            values = [value_of(child, level + 1) for child in node.children]
            if technique.linear or technique.kind == DISTRIBUTION:
                return normalize(technique.combine_results(values, node.config, node.context))
            keys = sorted(set().union(*values))
            return {
                key: technique.combine_results(
                    [v.get(key, 0.0) for v in values], node.config, node.context
                )
                for key in keys
            }

        combined = {k: v for k, v in value_of(plan.root, 0).items() if v > 0}
        if not combined:
            raise ValueError(f"{self!r}: every outcome's estimate is negative or zero")
        return normalize(combined)

    def overhead(self, circuit: QuantumCircuit, observable: Observable | None = None) -> Overhead:
        """Circuits and shots multiply through the stack; classical time adds up, each inner
        technique's counted once per circuit it is applied to. Each technique is costed on the
        job's circuit (not on what the techniques before it made of it), an underestimate for
        what follows folding or cutting."""
        total = NO_OVERHEAD
        spo = None if observable is None else as_observable(observable)
        for technique in self.techniques:
            total = total.then(technique.overhead(circuit, self._config(technique, spo)))
        return total


# OpenQASM 2 standard gates: mitiq converts circuits through QASM 2 (and into Cirq), so library
# gates (QFT, QPE's controlled powers, MQT Bench's custom blocks) must be unrolled first.
QASM2_GATES = frozenset(
    "u u1 u2 u3 p id x y z h s sdg t tdg sx sxdg rx ry rz cx cy cz ch swap ccx cswap crx cry "
    "crz cu1 cu3 cp rxx rzz ecr measure barrier reset delay".split()
)


def standard_gates(circuit: QuantumCircuit, exclude: Sequence[str] = ()) -> QuantumCircuit:
    """``circuit`` with every gate outside ``QASM2_GATES`` (less ``exclude``) unrolled into them,
    or unchanged when it has none."""
    allowed = QASM2_GATES - set(exclude)
    if set(circuit.count_ops()) <= allowed:
        return circuit
    from qiskit import transpile

    basis = sorted(allowed - {"measure", "barrier", "reset", "delay"})
    return transpile(circuit, basis_gates=basis, optimization_level=0)


# What parse_stack (and run_mitigated) take.
StackSpec = TechniqueSpec | Sequence[TechniqueSpec] | MitigationStack | None


def parse_stack(spec: StackSpec) -> MitigationStack:
    """A stack from None, a name ("zne"), a "+"-joined string ("twirl+rem+dd"), a technique, or
    a list of those. Raises ``UnknownMitigation`` (a ``ValueError``) on unknown names and
    ``ValueError`` on invalid combinations."""
    if spec is None:
        return MitigationStack()
    if isinstance(spec, MitigationStack):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text.lower() in ("", "none"):
            return MitigationStack()
        names = [part.strip() for part in text.split("+")]
        if any(not name for name in names):
            raise ValueError(f"empty technique name in mitigation stack {spec!r}")
        return MitigationStack(names)
    if isinstance(spec, (list, tuple)) and not (
        isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict)
    ):
        items: list[Any] = []
        for item in spec:
            items.extend(parse_stack(item).techniques if isinstance(item, str) else [item])
        return MitigationStack(items)
    return MitigationStack([spec])
