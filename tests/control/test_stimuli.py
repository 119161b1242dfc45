"""Stimulus ids and the debug-mode log: what the machine handled replays into a new machine."""

from __future__ import annotations

import pytest
from test_machine_properties import PLANS, _adoption, _summary

from kernel_server.control.events import (
    CancelRequested,
    PlansReady,
    QpuJobEstimating,
    QpuJobFinished,
    QpuJobPlaced,
    QpuJobStarted,
    SampleRequested,
    StartQpuJob,
    StepFinished,
)
from kernel_server.control.machine import UserError, WorkflowMachine
from kernel_server.control.stimuli import StimulusLog, read_log, replay
from kernel_server.tasks.step import StepOutcome

pytestmark = pytest.mark.unit

CALLER = (b"worker", "rid-1", "cap")


def test_a_logged_session_replays_to_the_same_instructions(tmp_path):
    path = tmp_path / "stimuli.log"
    log = StimulusLog(path)
    machine = WorkflowMachine(clock=log.clock, ids=log.ids)
    seen = []

    def feed(event):
        out = log.handle(machine, event)
        seen.append(out)
        return out

    feed(_adoption("wf0", ["classical", "quantum"], "auto"))
    feed(StepFinished("wf0", 0, "classical", StepOutcome(True, outputs={"x0": b"v"})))
    job_id = next(
        i for i in feed(SampleRequested("wf0", 1, 100, CALLER)) if isinstance(i, StartQpuJob)
    ).job.id
    for event in (
        QpuJobEstimating(job_id),
        PlansReady(job_id, PLANS),
        QpuJobPlaced(job_id, "fake_a", 0.9, 1.0, 1, "on fake_a"),
        QpuJobStarted(job_id),
        QpuJobFinished(job_id, ["aer"], {"0": 100}),
        StepFinished("wf0", 1, "quantum", StepOutcome(True, outputs={"x1": b"w"})),
        CancelRequested("wf0"),  # too late: nothing to cancel
    ):
        feed(event)
    with pytest.raises(UserError):  # the workflow is over: refused, and logged as refused
        log.handle(machine, SampleRequested("wf0", 1, 100, CALLER))
    seen.append([])
    log.close()

    entries = list(read_log(path))
    assert [e.stimulus_id for e in entries][:3] == [
        "WorkflowAdopted-1",
        "StepFinished-2",
        "SampleRequested-3",
    ]
    assert entries[-1].raised and entries[2].ids == [job_id]
    assert [[_summary(i) for i in out] for out in replay(entries)] == [
        [_summary(i) for i in out] for out in seen
    ]


def test_without_a_path_events_are_only_stamped(tmp_path):
    log = StimulusLog()
    machine = WorkflowMachine(clock=log.clock, ids=log.ids)
    event = _adoption("wf0", ["classical"], "auto")
    log.handle(machine, event)
    assert event.stimulus_id == "WorkflowAdopted-1" and not log.recording
