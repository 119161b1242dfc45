"""Live widgets: a workflow's job status and the fleet overview (ipywidgets).

Both refresh from the orchestrator off the kernel's main thread: the job status on the
orchestrator's events (a ZeroMQ subscription delivers them on a daemon thread), the fleet on a
timer thread. Each has a stable one-line text form, which is what plain IPython and nbval see.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from kernel_server.core.jobs import FINAL_STATES, FINAL_WORKFLOW_STATES, JobState

STEP_STATES = tuple(state.value for state in JobState)  # in the order a step goes through them
_PROGRESS = {  # how far along a step is, by state (a step has no finer progress to report)
    "pending": 0.0,
    "estimating": 0.15,
    "queued": 0.3,
    "running": 0.6,
    "post-processing": 0.85,
    "done": 1.0,
    "failed": 1.0,
    "cancelled": 1.0,
}
_BAR_STYLE = {"done": "success", "failed": "danger", "cancelled": "warning"}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def step_view(step: dict[str, Any], now: float, first_seen: dict[int, float]) -> dict[str, Any]:
    """What one row shows: state, QPU, queue position and estimated start, elapsed, progress."""
    jobs = step.get("qpu_jobs") or []
    state = step["state"]
    # A quantum step's own state is coarse; its QPU jobs say where it really is.
    open_jobs = [j for j in jobs if j["state"] not in FINAL_STATES]
    if state == "running" and open_jobs:
        order = {s: i for i, s in enumerate(STEP_STATES)}
        state = min((j["state"] for j in open_jobs), key=lambda s: order.get(s, 0))
    qpus = sorted({j["qpu"] for j in jobs if j.get("qpu")})
    queued = [j for j in jobs if j.get("queue_position") is not None]
    sid = int(step["step_id"])
    if state not in ("pending",) and sid not in first_seen:
        first_seen[sid] = now
    elapsed = (now - first_seen[sid]) if sid in first_seen and state not in FINAL_STATES else None
    if state in FINAL_STATES:
        total = (step.get("queue_s") or 0.0) + (step.get("run_s") or 0.0)
        elapsed = total if total else None
    return {
        "step": sid,
        "kind": step["kind"],
        "lines": f"{step['lineno']}-{step['end_lineno']}",
        "state": state,
        "qpu": ", ".join(qpus) or "-",
        "position": str(queued[0]["queue_position"]) if queued else "-",
        "start": _s(queued[0]["est_start_s"]) if queued else "-",
        "elapsed": _s(elapsed),
        "progress": _PROGRESS.get(state, 0.0),
    }


class FollowsWorkflow:
    """Redraws a widget on its workflow's events: a ZeroMQ subscription whose daemon thread
    calls the widget's own ``refresh`` (the kernel's main thread never polls)."""

    _subscription: Any = None
    refresh: Callable[[], None]  # each widget's redraw

    def _follow(self, workflow_id: str, note: w.HTML) -> None:
        from .client import get_client

        try:
            self._subscription = get_client().subscribe(lambda _event: self.refresh(), workflow_id)
        except Exception as exc:  # no live updates; the widget still shows a snapshot
            note.value = html.escape(f"live updates unavailable: {exc}")
        self.refresh()  # an event may have passed while subscribing

    def _unfollow(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None


class JobStatusWidget(FollowsWorkflow, w.VBox):
    """One row per step of a workflow, updated live; Cancel cancels every child job."""

    HEADERS = ("step", "kind", "lines", "state", "QPU", "queue pos.", "est. start", "elapsed", "")

    def __init__(
        self,
        workflow_id: str,
        fetch: Callable[[str], Any] | None = None,
        cancel: Callable[[str], Any] | None = None,
        live: bool = True,
    ) -> None:
        from . import api

        self.workflow_id = workflow_id
        self._fetch = fetch or api.workflow_info
        self._cancel = cancel or api.cancel
        self._first_seen: dict[int, float] = {}
        self._lock = threading.Lock()
        self.state = "submitted"
        self.title = w.HTML()
        self.grid = w.GridBox(layout=w.Layout(grid_template_columns="repeat(8, auto) 160px"))
        self.cancel_button = w.Button(description="Cancel", button_style="warning", icon="stop")
        self.cancel_button.on_click(self._on_cancel)
        self.message = w.HTML()
        super().__init__([self.title, self.grid, w.HBox([self.cancel_button, self.message])])
        self.refresh()
        if live and self.state not in FINAL_WORKFLOW_STATES:
            self._follow(workflow_id, self.message)

    def refresh(self) -> None:
        """Fetch the workflow and redraw (safe from any thread)."""
        # Fetch and draw under one lock: two refreshes racing must not draw the older snapshot
        # last (the final state would then never show).
        with self._lock:
            try:
                info = self._fetch(self.workflow_id)
            except Exception as exc:
                self.message.value = html.escape(f"cannot reach the orchestrator: {exc}")
                return
            self._draw(info)
        if self.state in FINAL_WORKFLOW_STATES:
            self._unfollow()

    def _draw(self, info: Any) -> None:
        now = time.monotonic()
        rows = [step_view(s, now, self._first_seen) for s in info.steps or []]
        self.title.value = (
            f"<b>Qonductor workflow</b> <code>{html.escape(self.workflow_id)}</code>: "
            f"{html.escape(info.state)}"
        )
        cells: list[w.Widget] = [w.HTML(f"<b>{h}</b>") for h in self.HEADERS]
        for r in rows:
            for key in ("step", "kind", "lines", "state", "qpu", "position", "start", "elapsed"):
                cells.append(w.HTML(html.escape(str(r[key]))))
            cells.append(
                w.FloatProgress(
                    value=r["progress"],
                    min=0.0,
                    max=1.0,
                    bar_style=_BAR_STYLE.get(r["state"], "info"),
                    layout=w.Layout(width="150px"),
                )
            )
        self.grid.children = cells
        self.cancel_button.disabled = info.state in FINAL_WORKFLOW_STATES
        # A finished workflow has nothing left to cancel: hide the button rather than grey it.
        self.cancel_button.layout.display = "none" if info.state in FINAL_WORKFLOW_STATES else None
        if info.state == "failed" and info.error:
            self.message.value = f"<pre>{html.escape(info.error)}</pre>"
        # Last, so whoever sees the new state also sees the rows drawn for it.
        self.rows = rows
        self.state = info.state

    def _on_cancel(self, _button: Any = None) -> None:
        try:
            result = self._cancel(self.workflow_id)
        except Exception as exc:  # e.g. the orchestrator restarted and forgot nothing, or is down
            self.message.value = html.escape(f"cancel failed: {exc}")
            return
        cancelled = len(result.get("cancelled", [])) if isinstance(result, dict) else 0
        self.message.value = html.escape(f"cancelled ({cancelled} jobs)")
        self.refresh()

    def close(self) -> None:
        self._unfollow()
        super().close()

    def __repr__(self) -> str:
        # No state here: the text form is what a notebook saves, and it must not depend on
        # when the widget was displayed (the widget itself shows the state).
        return f"<Qonductor job status {self.workflow_id}>"


FLEET_COLUMNS = (
    ("name", "QPU"),
    ("num_qubits", "qubits"),
    ("family", "family"),
    ("queue_length", "queue"),
    ("expected_wait_s", "est. wait"),
    ("calibration_age", "calibration age"),
    ("fidelity_score", "fidelity score"),
)


def fleet_rows(devices: list[dict[str, Any]], now: float | None = None) -> list[dict[str, str]]:
    now = time.time() if now is None else now
    rows = []
    for d in devices:
        calibrated = d.get("calibrated_at")
        hours = None if not calibrated else (now - float(calibrated)) / 3600
        age = "-" if hours is None else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} d"
        score = d.get("fidelity_score")
        rows.append(
            {
                "name": str(d["name"]),
                "num_qubits": str(d["num_qubits"]),
                "family": str(d.get("family", "-")),
                "queue_length": str(d.get("queue_length", 0)),
                "expected_wait_s": _s(d.get("expected_wait_s")),
                "calibration_age": age,
                "fidelity_score": "-" if score is None else f"{float(score):.3f}",
            }
        )
    return rows


class FleetOverview(w.VBox):
    """The QPUs with their queues, waits, calibration ages and fidelity scores, refreshed live."""

    def __init__(
        self,
        fetch: Callable[[], list[dict[str, Any]]] | None = None,
        interval: float | None = 2.0,
    ) -> None:
        from . import api

        self._fetch = fetch or api.fleet
        self.devices: list[dict[str, Any]] = []
        self.table = w.HTML()
        self.note = w.HTML()
        super().__init__([self.table, self.note])
        self._stop = threading.Event()
        self.refresh()
        if interval:
            threading.Thread(target=self._loop, args=(interval,), daemon=True).start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.refresh()

    def refresh(self) -> None:
        try:
            self.devices = self._fetch()
        except Exception as exc:
            self.note.value = html.escape(f"cannot reach the orchestrator: {exc}")
            return
        rows = fleet_rows(self.devices)
        head = "".join(f"<th>{html.escape(t)}</th>" for _, t in FLEET_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(r[k])}</td>" for k, _ in FLEET_COLUMNS) + "</tr>"
            for r in rows
        )
        self.table.value = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        self.note.value = ""

    def close(self) -> None:
        self._stop.set()
        super().close()

    def __repr__(self) -> str:
        return f"<Qonductor fleet: {len(self.devices)} QPUs>"
