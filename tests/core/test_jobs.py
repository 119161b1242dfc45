"""The job state machine and the DAG walk, without sockets or processes."""

import pytest

from kernel_server.core.graph import WorkflowGraph
from kernel_server.core.jobs import (
    TRANSITIONS,
    IllegalTransition,
    JobRecord,
    JobState,
    WorkflowRun,
    WorkflowState,
)


def graph(edges, kinds=("classical", "quantum", "classical")):
    steps = [
        {
            "id": i,
            "kind": k,
            "source": f"x{i} = {i}\n",
            "lineno": i + 1,
            "end_lineno": i + 1,
            "reads": [],
            "writes": [f"x{i}"],
            "producers": {},
        }
        for i, k in enumerate(kinds)
    ]
    return WorkflowGraph.from_dict({"steps": steps, "edges": edges, "inputs": [], "outputs": {}})


def test_legal_path_records_times_and_history():
    job = JobRecord(id="j", workflow_id="w", kind="qpu")
    job.transition(JobState.ESTIMATING, now=1.0)
    job.transition(JobState.QUEUED, now=2.0)
    job.transition(JobState.RUNNING, now=5.0)
    job.transition(JobState.DONE, now=9.0)
    assert job.queue_seconds == 3.0
    assert job.run_seconds == 4.0
    assert [t.target for t in job.history] == [
        JobState.ESTIMATING,
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.DONE,
    ]
    assert job.history[1].cause == TRANSITIONS[(JobState.ESTIMATING, JobState.QUEUED)]


@pytest.mark.parametrize(
    "source,target",
    [
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.DONE),
        (JobState.QUEUED, JobState.ESTIMATING),
    ],
)
def test_illegal_transitions_raise(source, target):
    job = JobRecord(id="j", workflow_id="w", kind="classical", state=source)
    with pytest.raises(IllegalTransition, match=f"{source.value} -> {target.value}"):
        job.transition(target)
    assert job.state is source


@pytest.mark.parametrize("final", [JobState.DONE, JobState.FAILED, JobState.CANCELLED])
def test_final_states_are_final(final):
    job = JobRecord(id="j", workflow_id="w", kind="qpu", state=final)
    for target in JobState:
        with pytest.raises(IllegalTransition):
            job.transition(target)


def test_restart_requeue_clears_timings():
    job = JobRecord(id="j", workflow_id="w", kind="classical")
    job.transition(JobState.QUEUED, now=1.0)
    job.transition(JobState.RUNNING, now=2.0)
    job.transition(JobState.PENDING, "restart", now=3.0)
    assert job.queued_at is None and job.started_at is None
    assert job.history[-1].cause == "restart"


def test_dag_walk_runs_steps_in_dependency_order():
    run = WorkflowRun.new("w", "img", graph([(0, 1), (1, 2)]))
    assert run.ready_steps() == [0]
    run.start()  # submitted -> running: a workflow is done only once it ran (WORKFLOW_TRANSITIONS)
    for sid in (0, 1, 2):
        assert run.ready_steps() == [sid]
        run.steps[sid].transition(JobState.QUEUED)
        run.steps[sid].transition(JobState.RUNNING)
        assert run.ready_steps() == []
        finished = run.step_done(sid)
    assert finished and run.state is WorkflowState.DONE


def test_independent_steps_are_ready_together():
    run = WorkflowRun.new("w", "img", graph([(0, 2), (1, 2)], ("quantum", "quantum", "classical")))
    assert run.ready_steps() == [0, 1]


def test_failed_step_fails_workflow_and_cancels_the_rest():
    run = WorkflowRun.new("w", "img", graph([(0, 1), (1, 2)]))
    run.steps[0].transition(JobState.QUEUED)
    run.steps[0].transition(JobState.RUNNING)
    qpu_job = JobRecord(id="q", workflow_id="w", kind="qpu", step_id=0, state=JobState.QUEUED)
    run.qpu_jobs["q"] = qpu_job
    cancelled = run.step_failed(0, "Traceback ... ZeroDivisionError")
    assert run.state is WorkflowState.FAILED
    assert run.steps[0].state is JobState.FAILED
    assert {j.id for j in cancelled} == {"w.s1", "w.s2", "q"}
    assert run.ready_steps() == []


def test_cancel_is_idempotent():
    run = WorkflowRun.new("w", "img", graph([(0, 1), (1, 2)]))
    assert len(run.cancel()) == 3
    assert run.cancel() == []
    assert run.state is WorkflowState.CANCELLED
