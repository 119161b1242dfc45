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
from dataclasses import dataclass
from typing import Any

import ipywidgets as w

from kernel_server.core.status import DeviceStatus, JobState, StepStatus, WorkflowState
from kernel_server.wire.messages import Cancelled, WorkflowReply

_ORDER = {state: i for i, state in enumerate(JobState)}  # the order a step goes through them
_PROGRESS = {  # how far along a step is, by state (a step has no finer progress to report)
    JobState.PENDING: 0.0,
    JobState.ESTIMATING: 0.15,
    JobState.QUEUED: 0.3,
    JobState.RUNNING: 0.6,
    JobState.POST_PROCESSING: 0.85,
    JobState.DONE: 1.0,
    JobState.FAILED: 1.0,
    JobState.CANCELLED: 1.0,
}
_BAR_STYLE = {JobState.DONE: "success", JobState.FAILED: "danger", JobState.CANCELLED: "warning"}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


@dataclass(frozen=True)
class StepRow:
    """What one row of the job-status widget shows."""

    step: int
    kind: str
    lines: str
    state: JobState
    qpu: str
    position: str  # in its QPU's queue
    start: str  # expected seconds until it starts
    elapsed: str
    progress: float

    def cells(self) -> tuple[str, ...]:
        """The texts of the row's columns, in HEADERS order (the progress bar comes after)."""
        return (
            str(self.step),
            self.kind,
            self.lines,
            self.state.value,
            self.qpu,
            self.position,
            self.start,
            self.elapsed,
        )


def step_view(step: StepStatus, now: float, first_seen: dict[int, float]) -> StepRow:
    """What one row shows: state, QPU, queue position and estimated start, elapsed, progress."""
    jobs = step.qpu_jobs
    state = step.state
    # A quantum step's own state is coarse; its QPU jobs say where it really is.
    open_jobs = [j for j in jobs if not j.state.final]
    if state is JobState.RUNNING and open_jobs:
        state = min((j.state for j in open_jobs), key=_ORDER.__getitem__)
    qpus = sorted({j.qpu for j in jobs if j.qpu})
    queued = [j for j in jobs if j.queue_position is not None]
    sid = int(step.step_id or 0)
    if state is not JobState.PENDING and sid not in first_seen:
        first_seen[sid] = now
    elapsed = (now - first_seen[sid]) if sid in first_seen and not state.final else None
    if state.final:
        total = (step.queue_s or 0.0) + (step.run_s or 0.0)
        elapsed = total if total else None
    return StepRow(
        step=sid,
        kind=step.kind,
        lines=f"{step.lineno}-{step.end_lineno}",
        state=state,
        qpu=", ".join(qpus) or "-",
        position=str(queued[0].queue_position) if queued else "-",
        start=_s(queued[0].est_start_s) if queued else "-",
        elapsed=_s(elapsed),
        progress=_PROGRESS[state],
    )


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
        fetch: Callable[[str], WorkflowReply] | None = None,
        cancel: Callable[[str], Cancelled] | None = None,
        live: bool = True,
    ) -> None:
        from . import api

        self.workflow_id = workflow_id
        self._fetch = fetch or api.workflow_info
        self._cancel = cancel or api.cancel
        self._first_seen: dict[int, float] = {}
        self._lock = threading.Lock()
        self.state = WorkflowState.SUBMITTED
        self.rows: list[StepRow] = []
        self.title = w.HTML()
        self.grid = w.GridBox(layout=w.Layout(grid_template_columns="repeat(8, auto) 160px"))
        self.cancel_button = w.Button(description="Cancel", button_style="warning", icon="stop")
        self.cancel_button.on_click(self._on_cancel)
        self.message = w.HTML()
        super().__init__([self.title, self.grid, w.HBox([self.cancel_button, self.message])])
        self.refresh()
        if live and not self.state.final:
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
        if self.state.final:
            self._unfollow()

    def _draw(self, info: WorkflowReply) -> None:
        now = time.monotonic()
        rows = [step_view(s, now, self._first_seen) for s in info.steps]
        self.title.value = (
            f"<b>Qonductor workflow</b> <code>{html.escape(self.workflow_id)}</code>: "
            f"{html.escape(info.state.value)}"
        )
        cells: list[w.Widget] = [w.HTML(f"<b>{h}</b>") for h in self.HEADERS]
        for r in rows:
            cells += [w.HTML(html.escape(text)) for text in r.cells()]
            cells.append(
                w.FloatProgress(
                    value=r.progress,
                    min=0.0,
                    max=1.0,
                    bar_style=_BAR_STYLE.get(r.state, "info"),
                    layout=w.Layout(width="150px"),
                )
            )
        self.grid.children = cells
        self.cancel_button.disabled = info.state.final
        # A finished workflow has nothing left to cancel: hide the button rather than grey it.
        self.cancel_button.layout.display = "none" if info.state.final else None
        if info.state is WorkflowState.FAILED and info.error:
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
        self.message.value = html.escape(f"cancelled ({len(result.cancelled)} jobs)")
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


def fleet_rows(devices: list[DeviceStatus], now: float | None = None) -> list[dict[str, str]]:
    now = time.time() if now is None else now
    rows = []
    for d in devices:
        calibrated = d.calibrated_at
        hours = None if not calibrated else (now - calibrated) / 3600
        age = "-" if hours is None else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} d"
        score = d.fidelity_score
        rows.append(
            {
                "name": d.name,
                "num_qubits": str(d.num_qubits),
                "family": d.family or "-",
                "queue_length": str(d.queue_length),
                "expected_wait_s": _s(d.expected_wait_s),
                "calibration_age": age,
                "fidelity_score": "-" if score is None else f"{score:.3f}",
            }
        )
    return rows


class FleetOverview(w.VBox):
    """The QPUs with their queues, waits, calibration ages and fidelity scores, refreshed live."""

    def __init__(
        self,
        fetch: Callable[[], list[DeviceStatus]] | None = None,
        interval: float | None = 2.0,
    ) -> None:
        from . import api

        self._fetch = fetch or api.fleet
        self.devices: list[DeviceStatus] = []
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
