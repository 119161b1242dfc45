"""The workflow state machine under random event sequences (hypothesis).

A driver model feeds the machine what a real driver could deliver, in any interleaving: workflows
adopted, steps finishing or failing, sample() calls, each QPU job's pipeline events in their
order (estimating, plans, the user's choice, placement, start, the end) and cancellations at any
moment, with the pipeline's late events still arriving after a cancel. After every event the
instructions so far must keep the invariants: no QPU job queued twice (billed twice), no worker
answered twice, no job leaving a final state, every step's result saved once, a workflow made
final once and nothing started for it afterwards. And the machine takes its clock and ids from
outside: the same events replayed into a new machine give the same instructions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_machine import PLANS, graph

from kernel_server.control.events import (
    CancelRequested,
    Enqueue,
    Event,
    Instruction,
    Persist,
    PlanChosen,
    PlanDecided,
    PlansReady,
    QpuJobCancelled,
    QpuJobEstimating,
    QpuJobFailed,
    QpuJobFinished,
    QpuJobPlaced,
    QpuJobStarted,
    ReleaseQpuJob,
    Reply,
    RunStep,
    SampleRequested,
    SaveStepOutputs,
    StartQpuJob,
    StepFinished,
    WorkflowAdopted,
    WorkflowFinal,
)
from kernel_server.control.machine import UserError, WorkflowMachine
from kernel_server.core.deployment import run_options
from kernel_server.core.jobs import WorkflowRun
from kernel_server.tasks.step import StepOutcome

pytestmark = pytest.mark.unit


def _adoption(wid: str, kinds: list[str], plan: str) -> WorkflowAdopted:
    run = WorkflowRun.new(wid, "img", graph(*kinds))
    return WorkflowAdopted(run, {"seed": b"s"}, run_options({"plan": plan}))


# A QPU job's pipeline, in the order the driver reports it.
_NEXT = {"started": "estimating", "estimating": "planned", "placed": "running"}


def _machine() -> WorkflowMachine:
    """A machine on a counting clock and counting ids (the driver passes the wall clock and
    random ids)."""
    ticks, made = iter(range(10**9)), iter(range(10**9))
    return WorkflowMachine(
        classical_slots=2,
        quantum_step_slots=2,
        clock=lambda: float(next(ticks)),
        ids=lambda prefix: f"{prefix}-{next(made)}",
    )


def _summary(i: Instruction) -> tuple[Any, ...]:
    """What an instruction says, comparable between two machines (its jobs by id and state)."""
    if isinstance(i, Persist):
        return ("Persist", i.job.id, i.state.value, i.job.finished_at, i.cause)
    if isinstance(i, RunStep):
        return ("RunStep", i.spec.workflow_id, i.spec.step_id, tuple(sorted(i.spec.inputs)))
    if isinstance(i, StartQpuJob):
        return ("StartQpuJob", i.job.id, i.seed, i.job.created_at)
    return (type(i).__name__, *(repr(v) for k, v in sorted(vars(i).items()) if k != "run"))


class MachineUnderRandomEvents(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = _machine()
        # What was fed, to replay: ("adopt", id, kinds, plan), an event, or ("raised", event).
        self.fed: list[Any] = []
        self.log: list[Instruction] = []
        self.workflows: list[str] = []
        self.running: list[tuple[str, int, str]] = []  # steps a RunStep started, not finished
        self.jobs: dict[str, dict[str, Any]] = {}  # job id -> its pipeline's progress
        self.decided: set[tuple[str, int]] = set()  # steps with a PlanDecided
        self.released: set[str] = set()
        self.calls = 0

    # ------------------------------------------------------------------------ the driver
    def feed(self, event: Event) -> list[Instruction]:
        try:
            out = self.m.handle(event)
        except UserError:
            self.fed.append(("raised", event))
            raise
        if not isinstance(event, WorkflowAdopted):
            self.fed.append(event)
        self.log.extend(out)
        for i in out:
            if isinstance(i, RunStep):
                self.running.append((i.spec.workflow_id, i.spec.step_id, i.lane))
            elif isinstance(i, StartQpuJob):
                self.jobs[i.job.id] = {"stage": "started", "wid": i.job.workflow_id}
                self.jobs[i.job.id]["step"] = i.job.step_id or 0
            elif isinstance(i, PlanDecided):
                self.decided.add((i.workflow_id, i.step_id))
            elif isinstance(i, Enqueue) and i.job_id in self.jobs:
                self.jobs[i.job_id]["stage"] = "placed"
            elif isinstance(i, ReleaseQpuJob):
                self.released.add(i.job_id)
        return out

    @rule(
        kinds=st.lists(st.sampled_from(["classical", "quantum"]), min_size=1, max_size=3),
        plan=st.sampled_from(["auto", "ask", "off"]),
    )
    def adopt(self, kinds: list[str], plan: str) -> None:
        wid = f"wf{len(self.workflows)}"
        self.workflows.append(wid)
        self.fed.append(("adopt", wid, kinds, plan))
        self.feed(_adoption(wid, kinds, plan))

    @precondition(lambda self: self.running)
    @rule(data=st.data(), succeeds=st.booleans())
    def step_finishes(self, data: st.DataObject, succeeds: bool) -> None:
        wid, sid, lane = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
        outcome = (
            StepOutcome(True, outputs={f"x{sid}": b"v"}, stdout="")
            if succeeds
            else StepOutcome(False, error="boom", error_type="RuntimeError")
        )
        self.feed(StepFinished(wid, sid, lane, outcome))

    @precondition(lambda self: any(lane == "quantum" for _, _, lane in self.running))
    @rule(data=st.data())
    def step_samples(self, data: st.DataObject) -> None:
        quantum = [(w, s) for w, s, lane in self.running if lane == "quantum"]
        wid, sid = data.draw(st.sampled_from(quantum))
        self.calls += 1
        try:
            self.feed(SampleRequested(wid, sid, 100, (b"worker", f"rid-{self.calls}", "cap")))
        except UserError:
            pass  # its workflow ended: the driver answers the worker with this error

    def _jobs_at(self, *stages: str) -> list[str]:
        # In the order the jobs were made: their ids are random (the machine draws them).
        return [j for j, info in self.jobs.items() if info["stage"] in stages]

    @precondition(lambda self: self._jobs_at("started", "estimating", "placed"))
    @rule(data=st.data(), with_plans=st.booleans())
    def pipeline_moves(self, data: st.DataObject, with_plans: bool) -> None:
        job_id = data.draw(st.sampled_from(self._jobs_at("started", "estimating", "placed")))
        info = self.jobs[job_id]
        stage = info["stage"]
        if stage == "started":
            self.feed(QpuJobEstimating(job_id))
        elif stage == "estimating":
            self.feed(PlansReady(job_id, PLANS if with_plans else []))
        else:
            self.feed(QpuJobStarted(job_id))
        info["stage"] = _NEXT[stage]

    @precondition(lambda self: self._jobs_at("planned"))
    @rule(data=st.data())
    def pipeline_places(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self._jobs_at("planned")))
        info = self.jobs[job_id]
        # The driver places a job once its step's plan is decided (or its workflow ended).
        if (info["wid"], info["step"]) in self.decided or job_id in self.released:
            info["stage"] = "placing"
            self.feed(QpuJobPlaced(job_id, "fake_a", 0.9, 1.0, 1, "on fake_a"))
            if info["stage"] == "placing":  # not enqueued: the pipeline ends here
                info["stage"] = "over"

    @precondition(lambda self: self._jobs_at("planned"))
    @rule(data=st.data(), answer=st.sampled_from([0, 1, 5, "off"]))
    def user_chooses(self, data: st.DataObject, answer: Any) -> None:
        info = self.jobs[data.draw(st.sampled_from(self._jobs_at("planned")))]
        try:
            self.feed(PlanChosen(info["wid"], info["step"], answer))
        except UserError:
            pass  # not asking (any more), or no such plan: the user is told, nothing changes

    @precondition(lambda self: self._jobs_at("running"))
    @rule(data=st.data(), succeeds=st.booleans())
    def qpu_job_ends(self, data: st.DataObject, succeeds: bool) -> None:
        job_id = data.draw(st.sampled_from(self._jobs_at("running")))
        if succeeds:
            self.feed(QpuJobFinished(job_id, ["aer"], {"0": 100}))
        else:
            self.feed(QpuJobFailed(job_id, "RuntimeError", "the QPU broke"))
        self.jobs[job_id]["stage"] = "over"

    @precondition(lambda self: self.workflows)
    @rule(data=st.data())
    def user_cancels(self, data: st.DataObject) -> None:
        self.feed(CancelRequested(data.draw(st.sampled_from(self.workflows))))

    @precondition(lambda self: any(self.jobs[j]["stage"] != "over" for j in self.released))
    @rule(data=st.data())
    def released_pipeline_ends(self, data: st.DataObject) -> None:
        live = [j for j in self.jobs if j in self.released and self.jobs[j]["stage"] != "over"]
        job_id = data.draw(st.sampled_from(live))
        self.feed(QpuJobCancelled(job_id))
        self.jobs[job_id]["stage"] = "over"

    def teardown(self) -> None:
        """The same events into a new machine: the same instructions, the same errors."""
        again = _machine()
        replayed: list[Instruction] = []
        for item in self.fed:
            if isinstance(item, tuple) and item[0] == "adopt":
                replayed.extend(again.handle(_adoption(*item[1:])))
            elif isinstance(item, tuple) and item[0] == "raised":
                with pytest.raises(UserError):
                    again.handle(item[1])
            else:
                replayed.extend(again.handle(item))
        assert [_summary(i) for i in replayed] == [_summary(i) for i in self.log]

    # ------------------------------------------------------------------------ invariants
    @invariant()
    def no_job_queued_twice(self) -> None:
        queued = Counter(i.job_id for i in self.log if isinstance(i, Enqueue))
        assert all(n == 1 for n in queued.values()), queued

    @invariant()
    def every_worker_answered_once(self) -> None:
        answers = Counter(i.caller for i in self.log if isinstance(i, Reply))
        assert all(n == 1 for n in answers.values()), answers

    @invariant()
    def no_job_leaves_a_final_state(self) -> None:
        final: dict[str, str] = {}
        for i in self.log:
            if isinstance(i, Persist):
                if i.job.id in final:
                    assert i.state.value == final[i.job.id], (i.job.id, final, i.state)
                if i.state.final:
                    final[i.job.id] = i.state.value

    @invariant()
    def each_result_applied_once(self) -> None:
        saved = Counter(
            (i.workflow_id, i.step_id) for i in self.log if isinstance(i, SaveStepOutputs)
        )
        assert all(n == 1 for n in saved.values()), saved

    @invariant()
    def a_workflow_ends_once_and_starts_nothing_after(self) -> None:
        ended: set[str] = set()
        for i in self.log:
            if isinstance(i, WorkflowFinal):
                assert i.workflow_id not in ended
                ended.add(i.workflow_id)
            elif isinstance(i, RunStep):
                assert i.spec.workflow_id not in ended
            elif isinstance(i, Enqueue):
                assert self.jobs[i.job_id]["wid"] not in ended


TestMachineUnderRandomEvents = MachineUnderRandomEvents.TestCase
TestMachineUnderRandomEvents.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
