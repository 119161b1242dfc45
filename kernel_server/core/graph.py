"""The workflow graph: a ``%%qonductor`` cell split into steps, with the cell's source.

The kernel's splitter (``qonductor_jupyter.splitter``) builds a ``WorkflowGraph``; requests,
images and the store carry it typed (msgspec encodes and checks these dataclasses as it does the
messages' Structs: ``CreateWorkflow.graph``), and ``to_dict`` / ``from_dict`` give the same plain
form for code that holds builtins. Both sides of the wire need the one model, so it lives in
``core``: standard library only, importable by the kernel and by every layer of the orchestrator.

What a step's ``reads`` and ``writes`` promise (writes are may-writes, reads are conservative) is
the splitter's contract: its package docstring lists the cases the orchestrator must tolerate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class StepKind(str, Enum):
    CLASSICAL = "classical"
    QUANTUM = "quantum"
    HYBRID = "hybrid"

    def __str__(self) -> str:  # plain value in messages, not "StepKind.QUANTUM"
        return self.value


@dataclass(frozen=True)
class Step:
    id: int
    kind: StepKind
    source: str
    lineno: int
    end_lineno: int
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    # Dicts are unhashable; leaving them out of the hash keeps frozen Steps usable in sets.
    producers: dict[str, int | None] = field(hash=False)
    quantum_calls: int = 0
    # Names the step may ``del``: where one is gone at its end, it is gone from the notebook too.
    deletes: tuple[str, ...] = ()
    # QPU calls a hybrid step's loop makes, as its text and the notebook's values show (the kernel
    # counts them before it sends the graph); None where it cannot tell.
    expected_calls: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "source": self.source,
            "lineno": self.lineno,
            "end_lineno": self.end_lineno,
            "reads": list(self.reads),
            "writes": list(self.writes),
            "producers": dict(self.producers),
            "quantum_calls": self.quantum_calls,
            "deletes": list(self.deletes),
            **({"expected_calls": self.expected_calls} if self.expected_calls is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        return cls(
            id=int(d["id"]),
            kind=StepKind(d["kind"]),
            source=str(d["source"]),
            lineno=int(d["lineno"]),
            end_lineno=int(d["end_lineno"]),
            reads=tuple(d["reads"]),
            writes=tuple(d["writes"]),
            producers={
                str(name): None if producer is None else int(producer)
                for name, producer in d["producers"].items()
            },
            quantum_calls=int(d.get("quantum_calls", 0)),
            deletes=tuple(d.get("deletes", ())),
            expected_calls=None if d.get("expected_calls") is None else int(d["expected_calls"]),
        )


@dataclass(frozen=True)
class WorkflowGraph:
    steps: tuple[Step, ...]
    edges: tuple[tuple[int, int], ...]
    inputs: tuple[str, ...]
    outputs: dict[str, int] = field(hash=False)
    # Outputs the cell only changes in place (``results.append(x)``) and never rebinds: the
    # notebook's own object should change, not be replaced by the copy that comes back.
    mutated_only: tuple[str, ...] = ()
    # The whole cell (tracebacks quote its lines), as the kernel sends it beside the steps.
    source: str = ""
    # Inputs ``invoke`` refuses to start without: an image's parameters. A cell run by the magic
    # has none: as in Python, a name it reads and nobody defined is a NameError where it is read.
    required_inputs: tuple[str, ...] = ()

    @property
    def has_quantum(self) -> bool:
        return any(step.kind is not StepKind.CLASSICAL for step in self.steps)

    def predecessors(self, step_id: int) -> tuple[int, ...]:
        """Ids of the steps that must finish before ``step_id`` may start."""
        return tuple(sorted(src for src, dst in self.edges if dst == step_id))

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [step.to_dict() for step in self.steps],
            "edges": [[src, dst] for src, dst in self.edges],
            "inputs": list(self.inputs),
            "outputs": dict(self.outputs),
            "mutated_only": list(self.mutated_only),
            "source": self.source,
            "required_inputs": list(self.required_inputs),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkflowGraph:
        """The graph ``to_dict`` made."""
        return cls(
            steps=tuple(Step.from_dict(step) for step in d["steps"]),
            edges=tuple((int(src), int(dst)) for src, dst in d["edges"]),
            inputs=tuple(d["inputs"]),
            outputs={str(name): int(step_id) for name, step_id in d["outputs"].items()},
            mutated_only=tuple(d.get("mutated_only", ())),
            source=str(d.get("source", "")),
            required_inputs=tuple(d.get("required_inputs", ())),
        )

    def describe(self) -> str:
        """Human-readable plan, as shown by ``%%qonductor --dry-run``."""
        if not self.steps:
            return "Qonductor workflow: empty cell (no steps)"
        counts = {kind: sum(step.kind is kind for step in self.steps) for kind in StepKind}
        lines = [
            f"Qonductor workflow: {len(self.steps)} step(s) "
            f"({counts[StepKind.CLASSICAL]} classical, {counts[StepKind.QUANTUM]} quantum, "
            f"{counts[StepKind.HYBRID]} hybrid), {len(self.edges)} edge(s)"
        ]
        width = max(len(kind.value) for kind in StepKind)
        for step in self.steps:
            first = next((line.strip() for line in step.source.splitlines() if line.strip()), "")
            if len(first) > 60:
                first = first[:57] + "..."
            lines.append(
                f"  step {step.id}: {step.kind.value:<{width}}  "
                f"lines {step.lineno}-{step.end_lineno}  "
                f"reads: {_names(self._user_reads(step))}  writes: {_names(step.writes)}  "
                f"quantum calls: {step.quantum_calls}  | {first}"
            )
        edges = ", ".join(f"{src} -> {dst}" for src, dst in self.edges)
        lines.append(f"edges: {edges or '-'}")
        lines.append(f"inputs: {_names(self.inputs)}")
        outputs = ", ".join(
            f"{name} (step {step_id})" for name, step_id in sorted(self.outputs.items())
        )
        lines.append(f"outputs: {outputs or '-'}")
        return "\n".join(lines)

    def _user_reads(self, step: Step) -> tuple[str, ...]:
        """A step's reads without builtins and primitives, which only add noise to the plan.

        A read comes from an earlier step (it has a producer) or from outside the cell; of the
        latter, the graph's ``inputs`` are exactly those the notebook provides (the splitter
        leaves builtins and primitives out of them), so the graph needs no list of builtins.
        """
        inputs = set(self.inputs)
        return tuple(n for n in step.reads if step.producers.get(n) is not None or n in inputs)


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "-"
