"""The workflow state machine alone: events in, instructions out; no sockets, processes or loop.

Each test builds a machine, feeds it the events a run would produce and compares the instructions
it returns (their kinds in order, and the fields that matter) with what the rules say.
"""

from __future__ import annotations

from typing import Any

import pytest

from kernel_server.control.events import (
    CancelRequested,
    Enqueue,
    Instruction,
    Persist,
    PlanChosen,
    PlanDecided,
    PlansReady,
    QpuJobCancelled,
    QpuJobEstimating,
    QpuJobFinished,
    QpuJobPlaced,
    QpuJobStarted,
    Recovered,
    RecoveredWorkflow,
    ReleaseQpuJob,
    Reply,
    RunStep,
    SampleRequested,
    SaveOutputs,
    SaveStepOutputs,
    StartQpuJob,
    StepFinished,
    WorkflowAdopted,
    WorkflowFinal,
)
from kernel_server.control.machine import UserError, WorkflowMachine, kinds
from kernel_server.core.deployment import ConfigError, RunOptions, run_options
from kernel_server.core.graph import WorkflowGraph
from kernel_server.core.jobs import (
    IllegalTransition,
    JobState,
    WorkflowRun,
    WorkflowState,
    job_seed,
)
from kernel_server.core.status import Plan
from kernel_server.tasks.step import StepOutcome

pytestmark = pytest.mark.unit

CALLER = (b"worker-1", "rid-1", "cap-1")


def _plan(backend: str, mitigation: str, fidelity: float, seconds: float, post_s: float) -> Plan:
    return Plan(
        rank=0,
        backend=backend,
        mitigation=mitigation,
        accelerator="none",
        shots=1000,
        fidelity=fidelity,
        numerical_fidelity=fidelity,
        quantum_seconds=seconds,
        classical_seconds=post_s,
        cost=0.0,
        num_circuits=1,
        total_shots=1000,
    )


PLANS = [  # two plans on the front: fast and noisy, slow and good
    _plan("t0", "none", 0.80, 1.0, 0.0),
    _plan("t1", "zne", 0.95, 9.0, 1.0),
]


def graph(*kinds_: str) -> WorkflowGraph:
    """A cell of one step per kind, each reading the name the step before it wrote."""
    steps = []
    for i, kind in enumerate(kinds_):
        steps.append(
            {
                "id": i,
                "kind": kind,
                "source": f"x{i} = {i}",
                "lineno": i + 1,
                "end_lineno": i + 1,
                "reads": [f"x{i - 1}"] if i else ["seed"],
                "writes": [f"x{i}"],
                "producers": {f"x{i - 1}": i - 1} if i else {"seed": None},
                "deletes": [],
            }
        )
    edges = [[i - 1, i] for i in range(1, len(kinds_))]
    source = "\n".join(s["source"] for s in steps)
    outputs = {f"x{i}": i for i in range(len(kinds_))}
    return WorkflowGraph.from_dict(
        {"steps": steps, "edges": edges, "inputs": ["seed"], "outputs": outputs, "source": source}
    )


def new_run(workflow_id: str, *kinds_: str) -> WorkflowRun:
    return WorkflowRun.new(workflow_id, "img-1", graph(*kinds_))


def adopt(machine: WorkflowMachine, run: WorkflowRun, **options: Any) -> list[Instruction]:
    return machine.handle(WorkflowAdopted(run, {"seed": b"s"}, run_options(options)))


def ok(step: int) -> StepOutcome:
    return StepOutcome(True, outputs={f"x{step}": f"v{step}".encode()}, stdout=f"out{step}\n")


def of(instructions: list[Instruction], kind: type) -> list[Any]:
    return [i for i in instructions if isinstance(i, kind)]


def persisted(instructions: list[Instruction]) -> list[tuple[str, str]]:
    return [(i.job.id, i.state.value) for i in of(instructions, Persist)]


def start_qpu_job(machine: WorkflowMachine, workflow_id: str, step: int) -> str:
    out = machine.handle(SampleRequested(workflow_id, step, 100, CALLER))
    assert kinds(out) == ["Persist", "StartQpuJob"] and out[0].publish is False
    job_id = of(out, StartQpuJob)[0].job.id
    assert kinds(machine.handle(QpuJobEstimating(job_id))) == ["Persist"]
    return job_id


# ------------------------------------------------------------------------- the DAG walk
def test_a_cell_runs_its_steps_in_order_and_keeps_every_name() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical", "classical")
    out = adopt(m, run)
    assert kinds(out) == ["SaveWorkflow", "Persist", "Persist", "RunStep"]
    assert persisted(out) == [("wf.s0", "queued"), ("wf.s0", "running")]
    spec = of(out, RunStep)[0].spec
    assert (spec.step_id, spec.inputs, spec.code) == (0, {"seed": b"s"}, "x0 = 0")

    out = m.handle(StepFinished("wf", 0, "classical", ok(0)))
    assert kinds(out) == ["SaveStepOutputs", "Persist", "Persist", "Persist", "RunStep"]
    assert of(out, RunStep)[0].spec.inputs == {"x0": b"v0"}  # from the step that wrote it

    out = m.handle(StepFinished("wf", 1, "classical", ok(1)))
    assert kinds(out) == [
        "SaveStepOutputs",
        "Persist",
        "SaveOutputs",
        "SaveWorkflow",
        "WorkflowFinal",
    ]
    saved = of(out, SaveOutputs)[0]
    assert saved.outputs == {"x0": b"v0", "x1": b"v1"} and saved.stdout == "out0\nout1\n"
    assert run.state is WorkflowState.DONE


def test_slots_bound_each_lane_and_a_freed_slot_starts_the_next_step() -> None:
    m = WorkflowMachine(classical_slots=1, quantum_step_slots=1)
    first, second = new_run("a", "classical"), new_run("b", "classical")
    assert len(of(adopt(m, first), RunStep)) == 1
    out = adopt(m, second)
    assert of(out, RunStep) == [] and second.steps[0].state is JobState.QUEUED
    # A quantum step has its own lane: it is not held up by the busy classical slot.
    assert len(of(adopt(m, new_run("q", "quantum")), RunStep)) == 1
    out = m.handle(StepFinished("a", 0, "classical", ok(0)))
    assert [r.spec.workflow_id for r in of(out, RunStep)] == ["b"]


def test_a_failing_step_keeps_what_ran_before_it_and_cancels_what_follows() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical", "classical", "classical")
    adopt(m, run)
    m.handle(StepFinished("wf", 0, "classical", ok(0)))
    failed = StepOutcome(
        False,
        outputs={"x1": b"partial"},
        error="ZeroDivisionError: boom",
        error_type="ZeroDivisionError",
    )
    out = m.handle(StepFinished("wf", 1, "classical", failed))
    assert ("wf.s2", "cancelled") in persisted(out)
    assert run.state is WorkflowState.FAILED and run.failed_step == 1
    assert of(out, SaveOutputs)[0].outputs == {"x0": b"v0", "x1": b"partial"}
    assert of(out, RunStep) == [] and kinds(out)[-1] == "WorkflowFinal"


def test_a_step_whose_pool_worker_died_fails_and_frees_its_slot_for_the_next_workflow() -> None:
    m = WorkflowMachine(classical_slots=1)
    dying, waiting = new_run("a", "classical", "classical"), new_run("b", "classical")
    adopt(m, dying)
    adopt(m, waiting)
    died = StepOutcome(
        False,
        error="BrokenProcessPool: A process in the process pool was terminated abruptly",
        error_type="BrokenProcessPool",
    )
    out = m.handle(StepFinished("a", 0, "classical", died))
    assert [r.spec.workflow_id for r in of(out, RunStep)] == ["b"]  # the slot came back
    assert ("a.s0", "failed") in persisted(out) and ("a.s1", "cancelled") in persisted(out)
    assert dying.state is WorkflowState.FAILED and "BrokenProcessPool" in (dying.error or "")
    assert of(out, Persist)[-1].cause == "an earlier step failed"
    assert of(out, WorkflowFinal)[0].workflow_id == "a"


# ------------------------------------------------------------------------------- cancel
def test_cancel_while_a_step_waits_for_a_slot() -> None:
    m = WorkflowMachine(classical_slots=1)
    adopt(m, new_run("a", "classical"))
    run = new_run("b", "classical")
    adopt(m, run)
    out = m.handle(CancelRequested("b"))
    assert persisted(out) == [("b.s0", "cancelled")]
    assert kinds(out)[-3:] == ["SaveOutputs", "SaveWorkflow", "WorkflowFinal"]
    # When the slot frees, the cancelled step is skipped, not run.
    assert of(m.handle(StepFinished("a", 0, "classical", ok(0))), RunStep) == []


def test_cancel_while_a_step_runs_drops_what_it_returns_later() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical", "classical")
    adopt(m, run)
    out = m.handle(CancelRequested("wf"))
    assert set(persisted(out)) == {("wf.s0", "cancelled"), ("wf.s1", "cancelled")}
    assert run.state is WorkflowState.CANCELLED
    out = m.handle(StepFinished("wf", 0, "classical", ok(0)))
    assert of(out, SaveStepOutputs) == [] and of(out, RunStep) == []


@pytest.mark.parametrize("stage", ["estimating", "asking", "queued", "running"])
def test_cancel_at_each_state_of_a_qpu_job_answers_its_worker_once(stage: str) -> None:
    m = WorkflowMachine()
    run = new_run("wf", "quantum")
    adopt(m, run, plan="ask" if stage == "asking" else "auto")
    job_id = start_qpu_job(m, "wf", 0)
    if stage == "asking":
        assert kinds(m.handle(PlansReady(job_id, PLANS))) == ["Persist"]
    if stage in ("queued", "running"):
        m.handle(PlansReady(job_id, PLANS))
        out = m.handle(QpuJobPlaced(job_id, "fake_a", 0.9, 1.0, 1, "on fake_a"))
        assert kinds(out) == ["Persist", "Enqueue"]
    if stage == "running":
        assert persisted(m.handle(QpuJobStarted(job_id))) == [(job_id, "running")]

    out = m.handle(CancelRequested("wf"))
    assert (job_id, "cancelled") in persisted(out)
    assert of(out, ReleaseQpuJob)[0].job_id == job_id  # its waiting task is woken
    # The pipeline then reports the cancellation: the worker gets exactly one answer.
    out = m.handle(QpuJobCancelled(job_id))
    assert kinds(out) == ["Reply"] and of(out, Reply)[0].error_type == "WorkflowCancelled"
    assert m.handle(QpuJobCancelled(job_id)) == []
    assert m.handle(QpuJobFinished(job_id, ["aer"], {"0": 1})) == []


def test_a_job_placed_after_its_workflow_was_cancelled_is_not_enqueued() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"))
    job_id = start_qpu_job(m, "wf", 0)
    m.handle(PlansReady(job_id, []))
    m.handle(CancelRequested("wf"))
    out = m.handle(QpuJobPlaced(job_id, "fake_a", 0.9, 1.0, 1, "on fake_a"))
    assert of(out, Enqueue) == [] and of(out, Reply)[0].error_type == "WorkflowCancelled"


def test_a_qpu_job_goes_from_sample_to_counts() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"))
    job_id = start_qpu_job(m, "wf", 0)
    assert of(m.handle(PlansReady(job_id, [])), PlanDecided)[0].plan is None
    m.handle(QpuJobPlaced(job_id, "fake_a", 0.9, 1.0, 1, "on fake_a"))
    m.handle(QpuJobStarted(job_id))
    out = m.handle(QpuJobFinished(job_id, ["lazy_dm", "lazy_dm"], {"00": 60, "11": 40}))
    assert persisted(out) == [(job_id, "done")] and of(out, Persist)[0].job.method == "lazy_dm"
    reply = of(out, Reply)[0]
    assert (reply.caller, reply.ok, reply.qpu, reply.counts) == (
        CALLER,
        True,
        "fake_a",
        {"00": 60, "11": 40},
    )


def test_sample_from_a_finished_workflow_is_refused() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"))
    m.handle(CancelRequested("wf"))
    with pytest.raises(UserError, match="no longer running"):
        m.handle(SampleRequested("wf", 0, 100, CALLER))


# ------------------------------------------------------------------------- plan choice
def test_plan_auto_picks_by_priority_and_marks_the_choice_on_the_job() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"), priority="fidelity")
    job_id = start_qpu_job(m, "wf", 0)
    out = m.handle(PlansReady(job_id, PLANS))
    decided = of(out, PlanDecided)[0]
    assert decided.plan is not None and decided.plan.backend == "t1"
    job = m.qpu_jobs[job_id][1]
    assert isinstance(job.plans, list) and [p.chosen for p in job.plans] == [False, True]
    assert not job.awaiting_choice


def test_plan_ask_waits_for_the_user_then_runs_their_choice() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"), plan="ask")
    job_id = start_qpu_job(m, "wf", 0)
    out = m.handle(PlansReady(job_id, PLANS))
    assert kinds(out) == ["Persist"] and out[0].cause == "2 plans ready; waiting for a choice"
    job = m.qpu_jobs[job_id][1]
    assert job.awaiting_choice and job.plans == PLANS
    with pytest.raises(UserError, match="from 0 to 1"):
        m.handle(PlanChosen("wf", 0, 5))
    out = m.handle(PlanChosen("wf", 0, 0))
    decided = of(out, PlanDecided)[0].plan
    assert decided is not None and decided.backend == "t0" and decided.chosen
    assert not job.awaiting_choice
    with pytest.raises(UserError, match="already runs with its chosen plan"):
        m.handle(PlanChosen("wf", 0, 1))  # chosen once


def test_plan_ask_off_runs_unmitigated_and_a_bad_plan_option_fails_the_plan() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "quantum"), plan="ask")
    job_id = start_qpu_job(m, "wf", 0)
    m.handle(PlansReady(job_id, PLANS))
    assert of(m.handle(PlanChosen("wf", 0, "off")), PlanDecided)[0].plan is None

    # A plan number the step does not have fails the plan, not the machine.
    adopt(m, new_run("wf2", "quantum"), plan=7)
    job_id = start_qpu_job(m, "wf2", 0)
    assert kinds(m.handle(PlansReady(job_id, PLANS))) == ["PlanFailed"]
    # A plan option that means nothing never reaches the machine: the options refuse it.
    with pytest.raises(ConfigError, match="--plan takes auto, ask, off or a plan number"):
        run_options({"plan": "sometimes"})


def test_a_plan_cannot_be_chosen_before_the_step_has_plans() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("wf", "classical", "quantum"), plan="ask")
    with pytest.raises(UserError, match="has no plans yet"):
        m.handle(PlanChosen("wf", 1, 0))


# ---------------------------------------------------------------------- restart, billing
def recovered(run: WorkflowRun, saved: dict[int, Any] | None = None) -> RecoveredWorkflow:
    return RecoveredWorkflow(run, saved or {}, {"seed": b"s"}, RunOptions())


def test_recovery_reruns_what_was_in_flight_and_keeps_finished_steps() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical", "quantum", "classical")
    adopt(m, run)
    m.handle(StepFinished("wf", 0, "classical", ok(0)))
    job_id = start_qpu_job(m, "wf", 1)  # step 1's QPU job was estimating at the crash
    before = run.steps[1].state

    fresh = WorkflowMachine()  # a new orchestrator, the same records from the store
    out = fresh.handle(Recovered([recovered(run, {0: ({"x0": b"v0"}, "out0\n")})], frozenset()))
    assert before is JobState.RUNNING
    assert (job_id, "failed") in persisted(out)  # its step asks again when it runs again
    assert ("wf.s1", "pending") in persisted(out)
    assert run.steps[0].state is JobState.DONE  # not run twice
    spec = of(out, RunStep)[0].spec
    assert (spec.step_id, spec.inputs) == (1, {"x0": b"v0"})


def test_recovery_reruns_a_done_step_whose_outputs_never_reached_the_store() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical", "classical")
    adopt(m, run)
    m.handle(StepFinished("wf", 0, "classical", ok(0)))
    out = WorkflowMachine().handle(Recovered([recovered(run)], frozenset()))
    assert ("wf.s0", "pending") in persisted(out)
    assert [r.spec.step_id for r in of(out, RunStep)] == [0]


def test_a_qpu_job_running_on_a_billed_qpu_at_the_crash_is_not_paid_for_twice() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "quantum", "classical")
    adopt(m, run)
    job_id = start_qpu_job(m, "wf", 0)
    m.handle(PlansReady(job_id, []))
    m.handle(QpuJobPlaced(job_id, "ibm_paid", 0.9, 5.0, 1, "on ibm_paid"))
    m.handle(QpuJobStarted(job_id))

    out = WorkflowMachine().handle(Recovered([recovered(run)], frozenset({"ibm_paid"})))
    assert of(out, RunStep) == []  # nothing runs again
    assert (job_id, "failed") in persisted(out)
    assert run.state is WorkflowState.FAILED
    assert "not paid for twice" in (run.error or "")
    assert kinds(out)[-1] == "SaveWorkflow"


def test_the_same_crash_on_a_free_simulated_qpu_runs_the_step_again() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "quantum")
    adopt(m, run)
    job_id = start_qpu_job(m, "wf", 0)
    m.handle(PlansReady(job_id, []))
    m.handle(QpuJobPlaced(job_id, "fake_free", 0.9, 5.0, 1, "on fake_free"))
    m.handle(QpuJobStarted(job_id))
    out = WorkflowMachine().handle(Recovered([recovered(run)], frozenset({"ibm_paid"})))
    assert [r.spec.step_id for r in of(out, RunStep)] == [0]
    assert run.state is WorkflowState.RUNNING


# --------------------------------------------------------------------------- the tables
def test_a_final_job_leaves_its_state_only_through_the_recovery_table() -> None:
    run = new_run("wf", "classical")
    job = run.steps[0]
    job.transition(JobState.QUEUED)
    job.transition(JobState.RUNNING)
    job.transition(JobState.DONE)
    with pytest.raises(IllegalTransition):
        job.transition(JobState.PENDING)
    job.requeue("outputs lost")
    assert job.state is JobState.PENDING and job.finished_at is None
    with pytest.raises(IllegalTransition):
        job.requeue("twice")


def test_workflow_states_move_by_their_table() -> None:
    run = new_run("wf", "classical")
    with pytest.raises(IllegalTransition):
        run.move_to(WorkflowState.DONE)  # never started
    run.start()
    run.move_to(WorkflowState.DONE)
    with pytest.raises(IllegalTransition):
        run.move_to(WorkflowState.RUNNING)


def test_a_step_whose_inputs_cannot_be_built_fails_instead_of_stopping_the_machine() -> None:
    m = WorkflowMachine()
    run = new_run("wf", "classical")
    run._steps.clear()  # a graph without the step its job record names
    out = adopt(m, run)
    assert ("wf.s0", "failed") in persisted(out) and run.state is WorkflowState.FAILED
    assert isinstance(out[-1], WorkflowFinal) and m.slots["classical"] == 2


def test_the_machine_draws_each_qpu_jobs_seed_from_the_workflows() -> None:
    m = WorkflowMachine()
    adopt(m, new_run("seeded", "hybrid"), seed=7)
    adopt(m, new_run("free", "hybrid"))
    seeds = [
        of(m.handle(SampleRequested("seeded", 0, 100, CALLER)), StartQpuJob)[0].seed
        for _ in range(3)
    ]
    # One seed per QPU job of the step, the same for the same --seed, different job to job.
    assert seeds == [job_seed(7, 0, i) for i in range(3)] and len(set(seeds)) == 3
    assert of(m.handle(SampleRequested("free", 0, 100, CALLER)), StartQpuJob)[0].seed is None
