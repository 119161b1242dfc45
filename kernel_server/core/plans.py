"""Which resource plan a quantum step runs with (``%%qonductor --plan auto|N|off``).

``auto`` (the default) picks among the plans of Pareto rank 0 the one whose pseudo-weights over
(run time, error) are closest to the workflow's priority (the same decision-making as the QPU
scheduler's selection: ``fidelity`` leans to the most faithful plan, ``jct`` to the fastest);
``N`` takes plan N of the best-first list shown under the cell; ``off`` runs unmitigated on the
scheduler's choice of QPU, with the plans shown as advice; ``ask`` waits for the user to pick one
(the plan-selection widget, or ``%qonductor choose``).

A hybrid step (a loop calling ``sample``) pays its plan's time on every call but gives the user one
answer, like a single call does. So ``auto`` first makes the one-call choice, and then gives the
whole loop the extra time that choice accepted over the fastest plan for its one result: with
``calls`` calls, only plans whose ``calls x`` (time - fastest time) stays within that budget
remain, and the priority picks among them. Pseudo-weights alone could not do it: they are blind
to how many times a plan is paid for (scaling every plan's time by ``calls`` leaves them equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel_server.core.mcdm import front_2d, select

if TYPE_CHECKING:  # core.status imports the run options, which parse --plan here
    from kernel_server.core.status import Plan, Plans

PLAN_LIMIT = 12  # plans kept per step (best-first): what --plan N can pick from
# Calls a hybrid step is taken to make when its cell does not say (an optimizer's loop).
ASSUMED_LOOP_CALLS = 100


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


def plan_objectives(plans: Sequence[Plan]) -> np.ndarray:
    """(n, 2) minimised objectives of plans: run time (quantum + classical s) and error."""
    seconds = [p.seconds for p in plans]
    errors = [1.0 - p.fidelity for p in plans]
    return np.column_stack([seconds, errors]) if plans else np.zeros((0, 2))


def choose_plan(
    plans: Plans, mode: str | int, priority: Any = "balanced", calls: int = 1
) -> int | None:
    """Index of the plan to run with, or None (mode off, or no plans). ``calls``: how
    many QPU jobs the step makes with it (see the module docstring)."""
    usable = plans if isinstance(plans, list) else []
    if mode == "off" or not usable:
        return None
    if isinstance(mode, int):
        if mode >= len(usable):
            raise PlanChoiceError(
                f"--plan {mode}: this step has {len(usable)} plans (0-{len(usable) - 1}); "
                "see them with %qonductor plans ID or run with --plan auto"
            )
        return mode
    front = [i for i, p in enumerate(usable) if p.rank == 0] or list(range(len(usable)))
    # The priority trades time against error: a rank-0 plan that another one beats on both
    # (it is on the front for its cost alone) is not a choice it could make.
    keep = front_2d(plan_objectives([usable[i] for i in front]))
    best = [front[k] for k in sorted(keep)]
    objectives = plan_objectives([usable[i] for i in best])
    single = select(objectives, priority)
    if calls <= 1:
        return best[single]
    seconds = objectives[:, 0]
    budget = seconds[single] - seconds.min()  # what the one-call choice pays for one answer
    within = [k for k in range(len(best)) if calls * (seconds[k] - seconds.min()) <= budget + 1e-9]
    return best[within[select(objectives[within], priority)]]
