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

    def __repr__(self) -> str:
        rows = self.rows()
        widths = {k: max(len(t), *(len(r[k]) for r in rows)) for k, t in COLUMNS}
        head = "  ".join(t.ljust(widths[k]) for k, t in COLUMNS)
        body = ["  ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS).rstrip() for r in rows]
        names = ", ".join(self.outputs) if self.outputs else "(none)"
        return "\n".join(
            [
                f"Qonductor workflow {self.workflow_id}: {self.state}",
                head.rstrip(),
                *body,
                f"Variables set: {names}",
            ]
        )

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(t)}</th>" for _, t in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k, _ in COLUMNS) + "</tr>"
            for r in self.rows()
        )
        names = html.escape(", ".join(self.outputs) if self.outputs else "(none)")
        return (
            f"<div class='qonductor-report'><b>Qonductor workflow</b> "
            f"<code>{html.escape(self.workflow_id)}</code>: {html.escape(self.state)}"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<div>Variables set: <code>{names}</code></div></div>"
        )
