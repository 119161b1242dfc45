"""What stands under a finished ``%%qonductor`` cell: where each step ran and how long it took."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from kernel_server.core.status import JobState, Plan, PlanError, StepStatus, WorkflowState
from kernel_server.wire.messages import WorkflowReply


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def plan_seconds(plan: Plan) -> str:
    """A plan's estimated QPU time, with the runtime model's 80% interval where it has one:
    "2.51 s [1.90 s, 4.04 s]"."""
    text = _fmt_s(plan.quantum_seconds)
    low, high = plan.quantum_seconds_low, plan.quantum_seconds_high
    if low is None or high is None:
        return text
    return f"{text} [{_fmt_s(low)}, {_fmt_s(high)}]"


def _step_row(step: StepStatus) -> dict[str, str]:
    jobs = step.qpu_jobs
    row = {
        "step": str(step.step_id),
        "kind": step.kind,
        "lines": f"{step.lineno}-{step.end_lineno}",
        "state": step.state.value,
        "qpu": "-",
        "fidelity": "-",
        "queued": _fmt_s(step.queue_s),
        "ran": _fmt_s(step.run_s),
    }
    if jobs:
        qpus = sorted({j.qpu for j in jobs if j.qpu})
        fids = [j.est_fidelity for j in jobs if j.est_fidelity is not None]
        queued = [j.queue_s for j in jobs if j.queue_s is not None]
        ran = [j.run_s for j in jobs if j.run_s is not None]
        row["qpu"] = ", ".join(qpus) + (f" ({len(jobs)} jobs)" if len(jobs) > 1 else "")
        row["fidelity"] = f"{sum(fids) / len(fids):.3f}" if fids else "-"
        row["queued"] = _fmt_s(sum(queued)) if queued else "-"
        row["ran"] = _fmt_s(sum(ran)) if ran else "-"
    return row


COLUMNS = (
    ("step", "step"),
    ("kind", "kind"),
    ("lines", "lines"),
    ("state", "state"),
    ("qpu", "QPU"),
    ("fidelity", "est. fidelity"),
    ("queued", "queued"),
    ("ran", "ran"),
)


PLAN_COLUMNS = (
    ("number", "plan"),
    ("rank", "rank"),
    ("backend", "QPU template"),
    ("mitigation", "mitigation"),
    ("accelerator", "post-processing"),
    ("fidelity", "est. fidelity"),
    ("quantum", "QPU time [80% interval]"),
    ("classical", "classical time"),
    ("cost", "cost"),
)


def _plan_row(number: int, plan: Plan) -> dict[str, str]:
    return {
        "number": ("* " if plan.chosen else "") + str(number),
        "rank": str(plan.rank),
        "backend": plan.backend,
        "mitigation": plan.mitigation,
        "accelerator": "-" if plan.accelerator == "none" else plan.accelerator,
        "fidelity": f"{plan.fidelity:.3f}",
        "quantum": plan_seconds(plan),
        "classical": _fmt_s(plan.classical_seconds),
        "cost": f"${plan.cost:.2f}",
    }


SHOWN_PLANS = 3  # plans listed under a cell (and the chosen one, wherever it ranks)

# A plan with its number in the step's best-first list (what --plan N and the buttons pick).
NumberedPlan = tuple[int, Plan]


def step_plans(step: StepStatus, limit: int | None = SHOWN_PLANS) -> list[NumberedPlan] | PlanError:
    """The resource plans recorded for a step (on its first QPU job), best-first, or []: the
    first ``limit`` of them plus the chosen plan where it is further down; or why it has none."""
    plans = step.plans_of_step
    if plans is None or isinstance(plans, PlanError):
        return plans or []
    numbered = list(enumerate(plans))
    if limit is None:
        return numbered
    return numbered[:limit] + [(i, p) for i, p in numbered[limit:] if p.chosen]


def _text_table(columns: tuple[tuple[str, str], ...], rows: list[dict[str, str]]) -> list[str]:
    widths = {k: max(len(t), *(len(r[k]) for r in rows)) for k, t in columns}
    head = "  ".join(t.ljust(widths[k]) for k, t in columns)
    body = ["  ".join(r[k].ljust(widths[k]) for k, _ in columns).rstrip() for r in rows]
    return [head.rstrip(), *body]


def _html_table(columns: tuple[tuple[str, str], ...], rows: list[dict[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k, _ in columns) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


PLANS_NOTE = (
    "Resource plans (Pareto rank over fidelity, time and cost; * = the plan the step ran with):"
)


@dataclass
class WorkflowReport:
    workflow_id: str
    state: WorkflowState
    steps: list[StepStatus]
    outputs: list[str]
    placement: str = ""
    notes: list[str] = field(default_factory=list)  # how names came back (changed in place...)

    @classmethod
    def from_reply(
        cls, reply: WorkflowReply, outputs: list[str], notes: list[str] | None = None
    ) -> WorkflowReport:
        return cls(
            reply.workflow_id,
            reply.state,
            reply.steps,
            outputs,
            reply.info.options.placement or "",
            list(notes or []),
        )

    def rows(self) -> list[dict[str, str]]:
        return [_step_row(s) for s in self.steps]

    def plan_sections(self) -> Sections:
        """(step title, plans or a message, lines under the table) for each step with plans."""
        sections: Sections = []
        for step in self.steps:
            plans = step_plans(step)
            if not plans:
                continue
            title = f"step {step.step_id} (lines {step.lineno}-{step.end_lineno})"
            if isinstance(plans, PlanError):
                sections.append((title, f"no plans: {plans.error}", []))
            else:
                sections.append((title, plans, plan_summary(self.workflow_id, step, plans)))
        return sections

    def plans_only(self) -> PlansReport:
        """The plan tables alone (``%qonductor plans ID``)."""
        return PlansReport(self.workflow_id, self.plan_sections(), self.waiting_for_plans())

    def waiting_for_plans(self) -> list[str]:
        """Quantum steps whose plans are not made yet, and why."""
        lines = []
        for step in self.steps:
            if step.kind == "classical" or step_plans(step) or step.state.final:
                continue
            where = f"step {step.step_id} (lines {step.lineno}-{step.end_lineno})"
            if step.state in (JobState.PENDING, JobState.QUEUED):
                lines.append(f"{where}: its plans are made when the steps it needs have run")
            else:
                lines.append(f"{where}: estimating its plans (they appear in a moment)")
        return lines

    def __repr__(self) -> str:
        lines = [f"Qonductor workflow {self.workflow_id}: {self.state.value}"]
        lines += _text_table(COLUMNS, self.rows())
        lines += _plan_lines(self.plan_sections())
        names = ", ".join(self.outputs) if self.outputs else "(none)"
        lines.append(f"Variables set: {names}")
        lines += self.notes
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        names = html.escape(", ".join(self.outputs) if self.outputs else "(none)")
        parts = [
            f"<div class='qonductor-report'><b>Qonductor workflow</b> "
            f"<code>{html.escape(self.workflow_id)}</code>: {html.escape(self.state.value)}",
            _html_table(COLUMNS, self.rows()),
        ]
        parts += _plan_html(self.plan_sections())
        parts.append(f"<div>Variables set: <code>{names}</code></div>")
        parts += [f"<div>{html.escape(note)}</div>" for note in self.notes]
        parts.append("</div>")
        return "".join(parts)


Sections = list[tuple[str, list[NumberedPlan] | str, list[str]]]


def plan_summary(workflow_id: str, step: StepStatus, plans: list[NumberedPlan]) -> list[str]:
    """What the step's plan choice meant: which plan, and what it cost over all the step's QPU
    jobs (a hybrid loop pays the plan's time on every call) against running unmitigated."""
    if any(j.awaiting_choice for j in step.qpu_jobs):
        return [
            f"waiting for your choice: %qonductor choose {workflow_id} {step.step_id} PLAN "
            "(or the buttons of the plan widget)"
        ]
    marked = [(i, p) for i, p in plans if p.chosen]
    calls = len(step.qpu_jobs)
    if not marked:
        return [f"none marked: its {calls} QPU job(s) ran unmitigated on the QPU above"]
    number, chosen = marked[0]
    unmitigated = [p.quantum_seconds for _, p in plans if p.mitigation == "none"]
    line = (
        f"ran with plan {number} ({chosen.mitigation} on {chosen.backend}): "
        f"{calls} QPU job(s) x {chosen.quantum_seconds:.2f} s estimated QPU time = "
        f"{calls * chosen.quantum_seconds:.2f} s, ${calls * chosen.cost:.2f}"
    )
    if unmitigated and chosen.mitigation != "none":
        line += f" (unmitigated: {calls * min(unmitigated):.2f} s)"
    return [line]


def _plan_lines(sections: Sections) -> list[str]:
    lines = [PLANS_NOTE] if sections else []
    for title, plans, under in sections:
        lines.append(f"  {title}")
        if isinstance(plans, str):
            lines.append(f"    {plans}")
        else:
            rows = [_plan_row(i, p) for i, p in plans]
            lines += ["    " + line for line in _text_table(PLAN_COLUMNS, rows)]
        lines += ["    " + line for line in under]
    return lines


def _plan_html(sections: Sections) -> list[str]:
    parts = [f"<div>{html.escape(PLANS_NOTE)}</div>"] if sections else []
    for title, plans, under in sections:
        if isinstance(plans, str):
            parts.append(f"<div>{html.escape(title)}: {html.escape(plans)}</div>")
        else:
            parts.append(f"<div>{html.escape(title)}</div>")
            parts.append(_html_table(PLAN_COLUMNS, [_plan_row(i, p) for i, p in plans]))
        parts += [f"<div>{html.escape(line)}</div>" for line in under]
    return parts


@dataclass
class PlansReport:
    workflow_id: str
    sections: Sections
    waiting: list[str] = field(default_factory=list)  # steps whose plans are still to come

    def __repr__(self) -> str:
        if not self.sections and not self.waiting:
            return f"Workflow {self.workflow_id} has no resource plans (no quantum step ran yet)."
        title = f"Resource plans of workflow {self.workflow_id}"
        return "\n".join([title, *_plan_lines(self.sections), *self.waiting])

    def _repr_html_(self) -> str:
        if not self.sections:
            return f"<div>{html.escape(repr(self))}</div>"
        head = f"<b>Resource plans</b> of <code>{html.escape(self.workflow_id)}</code>"
        body = "".join(_plan_html(self.sections))
        waiting = "".join(f"<div>{html.escape(line)}</div>" for line in self.waiting)
        return f"<div class='qonductor-plans'>{head}{body}{waiting}</div>"
