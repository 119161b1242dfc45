"""What stands under a finished ``%%qonductor`` cell: where each step ran and how long it took."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _step_row(step: dict[str, Any]) -> dict[str, str]:
    jobs = step.get("qpu_jobs") or []
    lines = f"{step['lineno']}-{step['end_lineno']}"
    row = {
        "step": str(step["step_id"]),
        "kind": step["kind"],
        "lines": lines,
        "state": step["state"],
        "qpu": "-",
        "fidelity": "-",
        "queued": _fmt_s(step.get("queue_s")),
        "ran": _fmt_s(step.get("run_s")),
    }
    if jobs:
        qpus = sorted({j["qpu"] for j in jobs if j["qpu"]})
        fids = [j["est_fidelity"] for j in jobs if j["est_fidelity"] is not None]
        queued = [j["queue_s"] for j in jobs if j["queue_s"] is not None]
        ran = [j["run_s"] for j in jobs if j["run_s"] is not None]
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
    ("quantum", "QPU time"),
    ("classical", "classical time"),
    ("cost", "cost"),
)


def _plan_row(plan: dict[str, Any]) -> dict[str, str]:
    return {
        "number": ("* " if plan.get("chosen") else "") + str(plan.get("number", "")),
        "rank": str(plan["rank"]),
        "backend": plan["backend"],
        "mitigation": plan["mitigation"],
        "accelerator": "-" if plan["accelerator"] == "none" else plan["accelerator"],
        "fidelity": f"{plan['fidelity']:.3f}",
        "quantum": _fmt_s(plan["quantum_seconds"]),
        "classical": _fmt_s(plan["classical_seconds"]),
        "cost": f"${plan['cost']:.2f}",
    }


SHOWN_PLANS = 3  # plans listed under a cell (and the chosen one, wherever it ranks)


def step_plans(step: dict[str, Any], limit: int | None = SHOWN_PLANS) -> list[dict[str, Any]]:
    """The resource plans recorded for a step (on its first QPU job), best-first, or []: the
    first ``limit`` of them plus the chosen plan where it is further down."""
    for job in step.get("qpu_jobs") or []:
        if job.get("plans"):
            plans = [dict(p, number=i) for i, p in enumerate(job["plans"])]
            if limit is None or "error" in plans[0]:
                return plans
            return plans[:limit] + [p for p in plans[limit:] if p.get("chosen")]
    return []


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
    "Resource plans (Pareto rank over fidelity, time and cost; * = the plan the step ran with, "
    "none marked: it ran unmitigated on the QPU above):"
)


@dataclass
class WorkflowReport:
    workflow_id: str
    state: str
    steps: list[dict[str, Any]]
    outputs: list[str]
    placement: str = ""

    @classmethod
    def from_reply(cls, reply: Any, outputs: list[str]) -> WorkflowReport:
        return cls(
            reply.workflow_id,
            reply.state,
            reply.steps,
            outputs,
            reply.info.get("options", {}).get("placement", ""),
        )

    def rows(self) -> list[dict[str, str]]:
        return [_step_row(s) for s in self.steps]

    def plan_sections(self) -> list[tuple[str, list[dict[str, Any]] | str]]:
        """(step title, plans or an error message) for each step that has plans."""
        sections: list[tuple[str, list[dict[str, Any]] | str]] = []
        for step in self.steps:
            plans = step_plans(step)
            if not plans:
                continue
            title = f"step {step['step_id']} (lines {step['lineno']}-{step['end_lineno']})"
            if "error" in plans[0]:
                sections.append((title, f"no plans: {plans[0]['error']}"))
            else:
                sections.append((title, plans))
        return sections

    def plans_only(self) -> PlansReport:
        """The plan tables alone (``%qonductor plans ID``)."""
        return PlansReport(self.workflow_id, self.plan_sections())

    def __repr__(self) -> str:
        lines = [f"Qonductor workflow {self.workflow_id}: {self.state}"]
        lines += _text_table(COLUMNS, self.rows())
        lines += _plan_lines(self.plan_sections())
        names = ", ".join(self.outputs) if self.outputs else "(none)"
        lines.append(f"Variables set: {names}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        names = html.escape(", ".join(self.outputs) if self.outputs else "(none)")
        parts = [
            f"<div class='qonductor-report'><b>Qonductor workflow</b> "
            f"<code>{html.escape(self.workflow_id)}</code>: {html.escape(self.state)}",
            _html_table(COLUMNS, self.rows()),
        ]
        parts += _plan_html(self.plan_sections())
        parts.append(f"<div>Variables set: <code>{names}</code></div></div>")
        return "".join(parts)


Sections = list[tuple[str, list[dict[str, Any]] | str]]


def _plan_lines(sections: Sections) -> list[str]:
    lines = [PLANS_NOTE] if sections else []
    for title, plans in sections:
        lines.append(f"  {title}")
        if isinstance(plans, str):
            lines.append(f"    {plans}")
        else:
            rows = [_plan_row(p) for p in plans]
            lines += ["    " + line for line in _text_table(PLAN_COLUMNS, rows)]
    return lines


def _plan_html(sections: Sections) -> list[str]:
    parts = [f"<div>{html.escape(PLANS_NOTE)}</div>"] if sections else []
    for title, plans in sections:
        if isinstance(plans, str):
            parts.append(f"<div>{html.escape(title)}: {html.escape(plans)}</div>")
        else:
            parts.append(f"<div>{html.escape(title)}</div>")
            parts.append(_html_table(PLAN_COLUMNS, [_plan_row(p) for p in plans]))
    return parts


@dataclass
class PlansReport:
    workflow_id: str
    sections: Sections

    def __repr__(self) -> str:
        if not self.sections:
            return f"Workflow {self.workflow_id} has no resource plans (no quantum step ran yet)."
        title = f"Resource plans of workflow {self.workflow_id}"
        return "\n".join([title, *_plan_lines(self.sections)])

    def _repr_html_(self) -> str:
        if not self.sections:
            return f"<div>{html.escape(repr(self))}</div>"
        head = f"<b>Resource plans</b> of <code>{html.escape(self.workflow_id)}</code>"
        body = "".join(_plan_html(self.sections))
        return f"<div class='qonductor-plans'>{head}{body}</div>"
