"""The plan-selection widget of ``%%qonductor --plan ask``.

For each quantum step waiting for a plan: its plans as a table (QPU template, mitigation stack,
accelerator, estimated fidelity, quantum and classical time, cost, Pareto rank) next to a
fidelity-vs-runtime scatter with the Pareto front marked; a preference control (fidelity /
balanced / JCT) that re-ranks the table live and marks the plan the preference recommends; and a
"Run with this plan" button per plan. A click tells the orchestrator, and the step runs.

The widget learns that plans are ready from the orchestrator's events (a daemon thread), never by
polling in the kernel's main thread. Its text form is one stable line (plain IPython, nbval).
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import numpy as np

from kernel_server.core.deployment import PRIORITIES
from kernel_server.core.status import Plan, WorkflowState
from kernel_server.wire.messages import WorkflowReply

from .report import plan_seconds
from .widgets import FollowsWorkflow


def ranked(plans: list[Plan], preference: str) -> tuple[list[int], int]:
    """Plan indices in the order the preference ranks them, and the recommended one (the same
    pseudo-weights choice ``--plan auto`` makes)."""
    from kernel_server.core.mcdm import preference_weights, pseudo_weights
    from kernel_server.core.plans import choose_plan, plan_objectives

    recommended = choose_plan(plans, "auto", preference)
    objectives = plan_objectives(plans)
    distance = np.abs(pseudo_weights(objectives) - np.asarray(preference_weights(preference)))
    # Pareto rank first (a dominated plan never outranks a front plan), then closeness.
    order = sorted(range(len(plans)), key=lambda i: (plans[i].rank, float(distance[i].sum()), i))
    if recommended is not None:
        order.remove(recommended)
        order.insert(0, recommended)
    return order, recommended if recommended is not None else order[0]


def scatter_svg(plans: list[Plan], highlight: int | None, size: int = 260) -> str:
    """Fidelity (up) against run time (right, log scale) as inline SVG; front plans filled."""
    pad = 30
    from kernel_server.core.plans import plan_objectives

    objectives = plan_objectives(plans)
    xs = np.log10(np.maximum(objectives[:, 0], 1e-3))
    ys = 1.0 - objectives[:, 1]
    x0, x1 = xs.min(), max(xs.max(), xs.min() + 1e-6)
    y0, y1 = ys.min(), max(ys.max(), ys.min() + 1e-6)

    def px(x: float, y: float) -> tuple[float, float]:
        return (
            pad + (x - x0) / (x1 - x0) * (size - 2 * pad),
            size - pad - (y - y0) / (y1 - y0) * (size - 2 * pad),
        )

    parts = [
        f"<svg width='{size}' height='{size}' xmlns='http://www.w3.org/2000/svg' "
        "style='font:10px sans-serif'>",
        f"<line x1='{pad}' y1='{size - pad}' x2='{size - pad}' y2='{size - pad}' stroke='#888'/>",
        f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{size - pad}' stroke='#888'/>",
        f"<text x='{size / 2 - 40}' y='{size - 8}'>run time (log)</text>",
        f"<text x='2' y='{pad - 10}'>fidelity</text>",
    ]
    # The line joins the plans no other plan beats on both axes shown (the 2-D front); filled
    # markers are the Pareto rank 0 over fidelity, time and cost.
    from kernel_server.core.mcdm import front_2d

    front = [px(xs[i], ys[i]) for i in front_2d(np.column_stack([xs, -ys]))]
    if len(front) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in front)
        parts.append(f"<polyline points='{path}' fill='none' stroke='#1f77b4'/>")
    for i, (x, y, p) in enumerate(zip(xs, ys, plans, strict=True)):
        cx, cy = px(x, y)
        fill = "#1f77b4" if p.rank == 0 else "none"
        stroke = "#d62728" if i == highlight else "#1f77b4"
        radius = 6 if i == highlight else 4
        parts.append(
            f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='{radius}' fill='{fill}' stroke='{stroke}'>"
            f"<title>plan {i}: {html.escape(p.backend)} {html.escape(p.mitigation)}"
            "</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


class StepPlans(w.VBox):
    """The plans of one step: preference, table with a button per plan, scatter."""

    def __init__(
        self,
        step_id: int,
        plans: list[Plan],
        on_choose: Callable[[int, int], None],
        preference: str = "balanced",
    ) -> None:
        self.step_id = step_id
        self.plans = plans
        self._on_choose = on_choose
        self.preference = w.ToggleButtons(
            options=PRIORITIES, value=preference, description="priority"
        )
        self.preference.observe(lambda _change: self.redraw(), names="value")
        self.table = w.GridBox(layout=w.Layout(grid_template_columns="repeat(9, auto)"))
        self.scatter = w.HTML()
        self.buttons: dict[int, w.Button] = {}
        self.order: list[int] = []
        self.recommended = 0
        super().__init__(
            [
                w.HTML(f"<b>step {step_id}</b>: pick a plan"),
                self.preference,
                w.HBox([self.table, self.scatter]),
            ]
        )
        self.redraw()

    def redraw(self) -> None:
        self.order, self.recommended = ranked(self.plans, self.preference.value)
        heads = ["plan", "QPU template", "mitigation", "post-processing", "est. fidelity"]
        heads += ["QPU time [80% interval]", "classical", "cost", ""]
        cells: list[w.Widget] = [w.HTML(f"<b>{h}</b>") for h in heads]
        for i in self.order:
            p = self.plans[i]
            mark = " (recommended)" if i == self.recommended else ""
            values = [
                f"{i}{mark}",
                p.backend,
                p.mitigation,
                "-" if p.accelerator == "none" else p.accelerator,
                f"{p.fidelity:.3f}",
                plan_seconds(p),
                f"{p.classical_seconds:.2f} s",
                f"${p.cost:.2f}",
            ]
            cells += [w.HTML(html.escape(v)) for v in values]
            button = self.buttons.get(i)
            if button is None:
                button = w.Button(description="Run with this plan", layout=w.Layout(width="150px"))
                button.on_click(lambda _b, i=i: self._on_choose(self.step_id, i))
                self.buttons[i] = button
            button.button_style = "success" if i == self.recommended else ""
            cells.append(button)
        self.table.children = cells
        self.scatter.value = scatter_svg(self.plans, self.recommended)

    def disable(self) -> None:
        for button in self.buttons.values():
            button.disabled = True
        self.preference.disabled = True


class PlanSelectionWidget(FollowsWorkflow, w.VBox):
    """Plans of every step of a ``--plan ask`` workflow that waits for a choice."""

    def __init__(
        self,
        workflow_id: str,
        preference: str = "balanced",
        fetch: Callable[[str], WorkflowReply] | None = None,
        choose: Callable[[str, int, int], Any] | None = None,
        live: bool = True,
    ) -> None:
        from . import api

        self.workflow_id = workflow_id
        self.default_preference = preference
        self._fetch = fetch or api.workflow_info
        self._choose = choose or api.choose_plan
        self._lock = threading.Lock()
        self.steps: dict[int, StepPlans] = {}
        self.chosen: dict[int, int] = {}
        self.state = WorkflowState.SUBMITTED
        self.status = w.HTML()
        self.box = w.VBox()
        super().__init__([self.status, self.box])
        self.refresh()
        if live and not self.state.final:
            self._follow(workflow_id, self.status)

    def refresh(self) -> None:
        with self._lock:
            try:
                info = self._fetch(self.workflow_id)
            except Exception as exc:
                self.status.value = html.escape(f"cannot reach the orchestrator: {exc}")
                return
            self.state = info.state
            for step in info.steps:
                sid = int(step.step_id or 0)
                for job in step.qpu_jobs:
                    plans = job.plans
                    if not (job.awaiting_choice and isinstance(plans, list) and plans):
                        continue
                    if sid not in self.steps and sid not in self.chosen:
                        self.steps[sid] = StepPlans(
                            sid, plans, self._on_choose, self.default_preference
                        )
            self.box.children = list(self.steps.values())
            waiting = [s for s in self.steps if s not in self.chosen]
            note = (
                f"waiting for a plan for step {', '.join(map(str, waiting))}"
                if waiting
                else "estimating plans..."
                if not self.state.final and not self.chosen
                else ""
            )
            self.status.value = (
                f"<b>Qonductor workflow</b> <code>{html.escape(self.workflow_id)}</code>: "
                f"{html.escape(self.state.value)} {html.escape(note)}"
            )
        if self.state.final:
            self._unfollow()

    def _on_choose(self, step_id: int, plan: int) -> None:
        try:
            self._choose(self.workflow_id, step_id, plan)
        except Exception as exc:  # e.g. the orchestrator restarted: say so, keep the widget
            self.status.value = html.escape(f"could not choose plan {plan}: {exc}")
            return
        self.chosen[step_id] = plan
        self.steps[step_id].disable()
        self.status.value = html.escape(f"step {step_id} runs with plan {plan}")

    def close(self) -> None:
        self._unfollow()
        super().close()

    def __repr__(self) -> str:
        return f"<Qonductor plan selection {self.workflow_id}>"
