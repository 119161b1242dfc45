"""The job-status and fleet widgets, driven headlessly against the real orchestrator."""

from __future__ import annotations

import pytest
from helpers import wait_for

from kernel_server.core.status import JobState, JobStatus, StepStatus, WorkflowState
from kernel_server.wire.messages import WorkflowReply
from qonductor_jupyter import api
from qonductor_jupyter.widgets import FleetOverview, JobStatusWidget, fleet_rows, step_view

SLOW = (
    "import time\ntime.sleep(20)\nfrom qiskit import QuantumCircuit\nq = QuantumCircuit(1)\n"
    "q.measure_all()\nc = sample(q, shots=10)\n"
)
QUICK = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.h(0)\nq.cx(0, 1)\n"
    "q.measure_all()\nc = sample(q, shots=50)\nn = sum(c.values())\n"
)


def test_status_widget_follows_a_workflow_live_to_done(orchestrator):
    wid, _ = api.submit_cell(QUICK, {})
    widget = JobStatusWidget(wid)
    try:
        assert len(widget.rows) == 3  # classical, quantum, classical
        # No polling from the test: the widget's subscription redraws it on events.
        wait_for(lambda: widget.state == "done")
        assert [r.state for r in widget.rows] == ["done"] * len(widget.rows)
        assert any(r.qpu != "-" for r in widget.rows)  # the quantum step shows its QPU
        bars = [c for c in widget.grid.children if type(c).__name__ == "FloatProgress"]
        assert len(bars) == len(widget.rows) and all(b.value == 1.0 for b in bars)
        assert widget.cancel_button.disabled  # nothing left to cancel
        assert widget.cancel_button.layout.display == "none"
        assert repr(widget) == f"<Qonductor job status {wid}>"
    finally:
        widget.close()


def test_cancel_button_cancels_every_child_job(orchestrator):
    wid, _ = api.submit_cell(SLOW, {})
    widget = JobStatusWidget(wid)
    try:
        assert not widget.cancel_button.disabled
        widget.cancel_button.click()
        assert "cancelled" in widget.message.value
        wait_for(lambda: widget.state == "cancelled", 30)
        assert api.workflow_status(wid) == "cancelled"
        assert widget.cancel_button.disabled
    finally:
        widget.close()


def test_cancel_after_the_orchestrator_forgot_says_so_without_a_traceback():
    def gone(_wid):
        raise ConnectionError("orchestrator restarted")

    def info(_wid: str) -> WorkflowReply:
        return WorkflowReply(workflow_id="wf-x", state=WorkflowState.RUNNING)

    widget = JobStatusWidget("wf-x", fetch=info, cancel=gone, live=False)
    widget.cancel_button.click()
    assert "cancel failed: orchestrator restarted" in widget.message.value


def test_step_view_reports_queue_position_and_state_of_open_qpu_jobs():
    queued = JobStatus(
        id="qj-1",
        kind="qpu",
        state=JobState.QUEUED,
        qpu="fake_fez",
        queue_position=2,
        est_start_s=7.5,
    )
    step = StepStatus(
        id="wf.s1",
        kind="quantum",
        step_id=1,
        lineno=3,
        end_lineno=3,
        state=JobState.RUNNING,
        qpu_jobs=[queued],
    )
    seen: dict[int, float] = {}
    row = step_view(step, now=100.0, first_seen=seen)
    assert (row.state, row.qpu, row.position, row.start) == (
        JobState.QUEUED,
        "fake_fez",
        "2",
        "7.5 s",
    )
    assert step_view(step, now=104.0, first_seen=seen).elapsed == "4.0 s"
    assert row.progress == pytest.approx(0.3)


def test_fleet_overview_lists_every_qpu(orchestrator):
    widget = FleetOverview(interval=None)
    try:
        names = {d.name for d in api.fleet()}
        assert {d.name for d in widget.devices} == names
        for name in names:
            assert name in widget.table.value
        rows = fleet_rows(widget.devices)
        assert all(r["fidelity_score"] != "-" and r["calibration_age"] != "-" for r in rows)
        assert repr(widget) == f"<Qonductor fleet: {len(names)} QPUs>"
    finally:
        widget.close()
