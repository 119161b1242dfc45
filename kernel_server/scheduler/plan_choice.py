"""Which resource plan a quantum step runs with (``%%qonductor --plan auto|N|off``).

``auto`` (the default) picks among the plans of Pareto rank 0 the one whose pseudo-weights over
(run time, error) are closest to the workflow's priority (the same decision-making as the QPU
scheduler's selection: ``fidelity`` leans to the most faithful plan, ``jct`` to the fastest);
``N`` takes plan N of the best-first list shown under the cell; ``off`` runs unmitigated on the
scheduler's choice of QPU, with the plans shown as advice; ``ask`` waits for the user to pick one
(the plan-selection widget, or ``%qonductor choose``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernel_server.scheduler.nsga2 import select


class PlanChoiceError(ValueError):
    pass


def parse_plan_option(value: Any) -> str | int:
    """ "auto" / "off" / a non-negative plan number (int or digit string)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        raise PlanChoiceError(f"--plan takes auto, ask, off or a plan number, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise PlanChoiceError(f"--plan takes a plan number from 0, got {value}")
        return value
    text = str(value).strip().lower()
    if text in ("auto", "off", "ask"):
        return text
    if text.isdigit():
        return int(text)
    raise PlanChoiceError(
        f"--plan takes auto, ask, off or a plan number (0, 1, ...), got {value!r}"
    )


def plan_objectives(plans: Sequence[dict[str, Any]]) -> np.ndarray:
    """(n, 2) minimised objectives of plans: run time (quantum + classical s) and error."""
    seconds = [float(p["quantum_seconds"]) + float(p["classical_seconds"]) for p in plans]
    errors = [1.0 - float(p["fidelity"]) for p in plans]
    return np.column_stack([seconds, errors]) if plans else np.zeros((0, 2))


def choose_plan(
    plans: Sequence[dict[str, Any]], mode: str | int, priority: Any = "balanced"
) -> int | None:
    """Index of the plan to run with, or None (mode off, or no usable plans)."""
    usable = [p for p in plans if "error" not in p]
    if mode == "off" or not usable:
        return None
    if isinstance(mode, int):
        if mode >= len(usable):
            raise PlanChoiceError(
                f"--plan {mode}: this step has {len(usable)} plans (0-{len(usable) - 1}); "
                "see them with %qonductor plans ID or run with --plan auto"
            )
        return mode
    best = [i for i, p in enumerate(usable) if int(p.get("rank", 0)) == 0] or list(
        range(len(usable))
    )
    return best[select(plan_objectives([usable[i] for i in best]), priority)]
