"""The job state machine and the walk over a workflow's step DAG.

Pure core, no sockets and no processes (dask's worker state machine is the model): the orchestrator
feeds it events (a step finished, a QPU job started) and asks it what to do next.

Every job, a workflow step or a QPU job inside it, has a ``JobState``. The legal transitions are the
keys of ``TRANSITIONS``; the value says what the transition means. Anything else raises
``IllegalTransition``, and every transition is recorded with its cause.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import msgspec

from kernel_server.core.graph import Step, WorkflowGraph
from kernel_server.core.status import (
    JobKind,
    JobState,
    JobStatus,
    Plans,
    StepStatus,
    WorkflowState,
)

S = JobState
TRANSITIONS: dict[tuple[JobState, JobState], str] = {
    (S.PENDING, S.QUEUED): "dependencies done; waiting for a worker",
    (S.PENDING, S.ESTIMATING): "quantum job: estimating fidelity and runtime per QPU",
    (S.ESTIMATING, S.QUEUED): "placed on a QPU queue",
    (S.QUEUED, S.RUNNING): "a worker or QPU took it",
    (S.RUNNING, S.POST_PROCESSING): "quantum results in; classical post-processing",
    (S.POST_PROCESSING, S.DONE): "post-processing finished",
    (S.RUNNING, S.DONE): "finished",
    # Failures and cancellation can hit any live state.
    **{
        (s, S.FAILED): "failed"
        for s in (S.PENDING, S.ESTIMATING, S.QUEUED, S.RUNNING, S.POST_PROCESSING)
    },
    **{
        (s, S.CANCELLED): "cancelled"
        for s in (S.PENDING, S.ESTIMATING, S.QUEUED, S.RUNNING, S.POST_PROCESSING)
    },
    # A restarted orchestrator puts work that was in flight back to the start; nothing is lost.
    **{
        (s, S.PENDING): "requeued after an orchestrator restart"
        for s in (S.ESTIMATING, S.QUEUED, S.RUNNING, S.POST_PROCESSING)
    },
}


# Recovery only (``JobRecord.requeue``): a restarted orchestrator puts a step whose outputs were
# lost back to the start, whatever state it had reached; nothing else may leave a final state.
RECOVERY: dict[JobState, str] = {
    **{s: "requeued after an orchestrator restart" for s in JobState if s is not S.PENDING},
}


class IllegalTransition(RuntimeError):
    pass


W = WorkflowState
WORKFLOW_TRANSITIONS: dict[tuple[WorkflowState, WorkflowState], str] = {
    (W.SUBMITTED, W.RUNNING): "invoked: its steps are being walked",
    (W.RUNNING, W.DONE): "every step returned",
    (W.RUNNING, W.FAILED): "a step failed and every step before it is final",
    # Cancel or fail before the walk started (a restart that will not resume it).
    **{(s, t): str(t.value) for s in (W.SUBMITTED, W.RUNNING) for t in (W.CANCELLED, W.FAILED)},
}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def job_seed(base: int | None, step_id: int, index: int) -> int | None:
    """The simulator seed of a step's ``index``-th QPU job, derived from the workflow's
    ``--seed`` (None without one): a seeded run draws the same counts again."""
    if base is None:
        return None
    return (int(base) * 1_000_003 + step_id * 1009 + index) % (2**31)


@dataclass
class Transition:
    source: JobState
    target: JobState
    cause: str
    ts: float


@dataclass
class JobRecord:
    """One unit of work: a workflow step (kind classical/quantum/hybrid) or a QPU job (kind qpu)."""

    id: str
    workflow_id: str
    kind: JobKind
    step_id: int | None = None
    state: JobState = JobState.PENDING
    qpu: str | None = None
    est_fidelity: float | None = None
    est_duration_s: float | None = None
    shots: int | None = None
    num_circuits: int | None = None
    created_at: float = field(default_factory=time.time)
    queued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    parent: str | None = None
    method: str | None = None  # how a QPU job was executed (simulation method, or a real backend)
    mitigation: str | None = None  # a QPU job's mitigation stack ("none" unmitigated)
    # Resource plans of a quantum step's first QPU job (estimator.plans), best first, or why
    # they could not be made (the job runs anyway); the user is asked to pick one (--plan ask)
    # while awaiting_choice.
    plans: Plans | None = None
    awaiting_choice: bool = False
    # Where the work ran: "local:<pid>" for the embedded pools, a Dask worker's address otherwise.
    worker: str | None = None
    history: list[Transition] = field(default_factory=list)

    def transition(self, target: JobState, cause: str = "", now: float | None = None) -> Transition:
        key = (self.state, target)
        if key not in TRANSITIONS:
            raise IllegalTransition(
                f"job {self.id}: {self.state.value} -> {target.value} is not allowed"
                + (f" ({cause})" if cause else "")
            )
        now = time.time() if now is None else now
        record = Transition(self.state, target, cause or TRANSITIONS[key], now)
        self.state = target
        if target is JobState.QUEUED:
            self.queued_at = now
        elif target is JobState.RUNNING:
            self.started_at = now
        elif target is JobState.PENDING:  # restart: forget the in-flight timings
            self.queued_at = self.started_at = None
        elif target.final:
            self.finished_at = now
        self.history.append(record)
        return record

    def requeue(self, cause: str, now: float | None = None) -> Transition:
        """Back to pending after a restart (``RECOVERY``): the step runs again."""
        if self.state not in RECOVERY:
            raise IllegalTransition(f"job {self.id}: {self.state.value} cannot be requeued")
        now = time.time() if now is None else now
        record = Transition(self.state, JobState.PENDING, cause or RECOVERY[self.state], now)
        self.state = JobState.PENDING
        self.queued_at = self.started_at = self.finished_at = None
        self.history.append(record)
        return record

    @property
    def queue_seconds(self) -> float | None:
        if self.queued_at is None:
            return None
        end = self.started_at or self.finished_at
        return None if end is None else max(0.0, end - self.queued_at)

    @property
    def run_seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)

    def summary(self) -> JobStatus:
        return JobStatus(
            id=self.id,
            kind=self.kind,
            step_id=self.step_id,
            state=self.state,
            qpu=self.qpu,
            est_fidelity=self.est_fidelity,
            est_duration_s=self.est_duration_s,
            shots=self.shots,
            num_circuits=self.num_circuits,
            queue_s=self.queue_seconds,
            run_s=self.run_seconds,
            error=self.error,
            parent=self.parent,
            method=self.method,
            mitigation=self.mitigation,
            plans=self.plans,
            awaiting_choice=self.awaiting_choice,
            worker=self.worker,
        )


@dataclass
class WorkflowRun:
    """The DAG walk of one invoked workflow.

    ``steps`` holds one JobRecord per graph step; ``qpu_jobs`` the QPU jobs its quantum calls made.
    """

    id: str
    image_id: str
    graph: WorkflowGraph
    steps: dict[int, JobRecord]
    state: WorkflowState = WorkflowState.SUBMITTED
    qpu_jobs: dict[str, JobRecord] = field(default_factory=dict)
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    # The earliest step (in cell order) that failed. As in Python, what comes before it in the
    # cell still runs to its end; what comes after it does not run.
    failed_step: int | None = None

    def __post_init__(self) -> None:
        self._steps = {step.id: step for step in self.graph.steps}

    @classmethod
    def new(cls, workflow_id: str, image_id: str, graph: WorkflowGraph) -> WorkflowRun:
        steps = {
            step.id: JobRecord(
                id=f"{workflow_id}.s{step.id}",
                workflow_id=workflow_id,
                kind=step.kind.value,
                step_id=step.id,
            )
            for step in graph.steps
        }
        return cls(id=workflow_id, image_id=image_id, graph=graph, steps=steps)

    def step(self, step_id: int) -> Step:
        """The graph's step ``step_id`` (what it runs, reads and writes)."""
        return self._steps[step_id]

    @property
    def cell_source(self) -> str:
        """The whole cell, as the kernel sent it beside the graph (for tracebacks)."""
        return self.graph.source

    def dependencies(self, step_id: int) -> tuple[int, ...]:
        return self.graph.predecessors(step_id)

    def ready_steps(self) -> list[int]:
        """Pending steps whose every dependency is done, in step order."""
        if self.state.final:
            return []
        return [
            sid
            for sid, job in sorted(self.steps.items())
            if job.state is JobState.PENDING
            and all(self.steps[d].state is JobState.DONE for d in self.dependencies(sid))
        ]

    # ``now`` below: the time the caller stamps (the workflow machine passes its clock's);
    # None reads the wall clock.
    def start(self, now: float | None = None) -> None:
        if self.state is WorkflowState.SUBMITTED:
            self.move_to(WorkflowState.RUNNING, now)

    def move_to(self, target: WorkflowState, now: float | None = None) -> None:
        """Move the workflow to ``target``, by ``WORKFLOW_TRANSITIONS``."""
        if (self.state, target) not in WORKFLOW_TRANSITIONS:
            raise IllegalTransition(
                f"workflow {self.id}: {self.state.value} -> {target.value} is not allowed"
            )
        self.state = target
        if target.final:
            self.finished_at = time.time() if now is None else now

    def step_failed(
        self, step_id: int, error: str, stop_all: bool = False, now: float | None = None
    ) -> list[JobRecord]:
        """Mark the step failed and cancel what comes after it in the cell; return the jobs that
        were cancelled. The workflow fails once every step before it is final: plain Python
        would have run them all before reaching the failing line (``stop_all``: fail it now,
        cancelling those too)."""
        job = self.steps[step_id]
        if not job.state.final:
            job.transition(JobState.FAILED, "step raised", now)
        job.error = error
        if self.failed_step is None or step_id < self.failed_step:
            self.failed_step, self.error = step_id, error
        later = {sid for sid in self.steps if stop_all or sid > self.failed_step}
        cancelled = self._cancel_live("an earlier step failed", later | {self.failed_step}, now)
        self._settle_failure(now)
        return cancelled

    def _settle_failure(self, now: float | None = None) -> None:
        if self.failed_step is None or self.state.final:
            return
        if all(job.state.final for sid, job in self.steps.items() if sid < self.failed_step):
            self.move_to(WorkflowState.FAILED, now)

    def cancel(self, now: float | None = None) -> list[JobRecord]:
        if self.state.final:
            return []
        self.move_to(WorkflowState.CANCELLED, now)
        self.error = "cancelled by the user"
        return self._cancel_live("workflow cancelled", None, now)

    def _cancel_live(
        self, cause: str, step_ids: set[int] | None = None, now: float | None = None
    ) -> list[JobRecord]:
        """Cancel the live jobs of ``step_ids`` (default: every step) and their QPU jobs."""
        cancelled = []
        for job in [*self.steps.values(), *self.qpu_jobs.values()]:
            if step_ids is not None and job.step_id not in step_ids:
                continue
            if not job.state.final:
                job.transition(JobState.CANCELLED, cause, now)
                cancelled.append(job)
        return cancelled

    def step_done(self, step_id: int, now: float | None = None) -> bool:
        """Record a finished step; return True when that finished the whole workflow (done, or
        failed: the last step before a failing one has finished)."""
        job = self.steps[step_id]
        job.transition(JobState.DONE, "step returned", now)
        if self.failed_step is not None:
            self._settle_failure(now)
            return self.state.final
        if all(j.state is JobState.DONE for j in self.steps.values()):
            self.move_to(WorkflowState.DONE, now)
            return True
        return False

    def step_summaries(self) -> list[StepStatus]:
        out = []
        by_step: dict[int, list[JobRecord]] = {}
        for q in self.qpu_jobs.values():
            by_step.setdefault(q.step_id or 0, []).append(q)
        for step in self.graph.steps:
            job = self.steps[step.id].summary()
            out.append(
                StepStatus(
                    **msgspec.structs.asdict(job),
                    lineno=step.lineno,
                    end_lineno=step.end_lineno,
                    first_line=step.source.splitlines()[0] if step.source else "",
                    qpu_jobs=[q.summary() for q in by_step.get(step.id, [])],
                )
            )
        return out


def not_asking(run: WorkflowRun, step_id: int) -> str:
    """Why a plan cannot be chosen for this step now, and when it can."""
    step = run.steps.get(step_id)
    decided = any(
        p.chosen
        for j in run.qpu_jobs.values()
        if j.step_id == step_id and isinstance(j.plans, list)
        for p in j.plans
    )
    if decided and not run.state.final:
        return f"step {step_id} of workflow {run.id} already runs with its chosen plan"
    if step is not None and not step.state.final and not run.state.final:
        return (
            f"step {step_id} of workflow {run.id} has no plans yet: it still waits "
            f"for the steps before it ({step.state.value}); choose once "
            f"%qonductor plans {run.id} lists them"
        )
    return (
        f"workflow {run.id} has no step {step_id} waiting for a plan "
        f"(it is {run.state.value}; plans are chosen once, when the step is ready)"
    )


# The final workflow states as plain strings, for code that holds states as text (replies, events,
# JSON rows): one declaration, derived from WorkflowState.
FINAL_WORKFLOW_STATES = frozenset(state.value for state in WorkflowState if state.final)
