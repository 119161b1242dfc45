"""The quantum calls a step makes through its link, as the step's code hands them over.

Shared by the step's side (``kernel_server.tasks.primitives``, which sends them as ``Sample``
requests) and the code calling it (``qonductor_jupyter``'s primitives, running in the step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernel_server.wire.messages import QpuJobReport


@dataclass
class QuantumCall:
    """One QPU job a step asks for: circuits, the rows of parameter values bound into each (a
    ``(rows, parameters)`` array, or None for bound circuits), shots, and what it pins."""

    circuits: list[Any]
    shots: int
    parameter_values: Any = None
    qpus: tuple[str, ...] = ()  # QPUs it may run on (empty: any the workflow allows)
    session: str = ""  # a primitive Session's id
    stacks: tuple[str, ...] = ()  # mitigation stacks its plan may use (empty: any)


@dataclass
class CallResult:
    """A finished QPU job: counts per circuit and row, its report, and the workflow it was in."""

    counts: list[dict[str, int]]
    report: QpuJobReport | None
    workflow_id: str
