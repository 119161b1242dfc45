"""The workflow state machine: events in, instructions out, no I/O.

Everything that decides whether a workflow is lost, doubled or billed twice lives here: which steps
run next and on which lane's worker slots, what a finished, failed or cancelled step does to the
rest of the cell, how a restarted orchestrator picks up what it had accepted, which plan a quantum
step runs with, and the life of each QPU job from its ``sample()`` call to the reply. The asyncio
driver (``manager.JobManager``) feeds it :class:`Event`\\ s and carries out the
:class:`Instruction`\\ s it returns (run a step, persist and publish a job, enqueue on a QPU, answer
a worker); it keeps only what is I/O: futures, tasks, sockets and the fleet.

The shape follows dask.distributed's worker state machine (``handle_stimulus`` returning
instructions): each event kind has one handler, found through ``_HANDLERS``, and the tests feed
events and compare instructions with no sockets, processes or event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kernel_server.control.events import (
    Caller,
    CancelRequested,
    Enqueue,
    Event,
    Instruction,
    Persist,
    PlanChosen,
    PlanDecided,
    PlanFailed,
    PlansReady,
    QpuJobCancelled,
    QpuJobEstimating,
    QpuJobFailed,
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
    SaveWorkflow,
    StartQpuJob,
    StepFinished,
    WorkflowAdopted,
    WorkflowFinal,
)
from kernel_server.core.dataflow import cell_outputs, step_inputs
from kernel_server.core.deployment import RunOptions
from kernel_server.core.graph import Step, StepKind
from kernel_server.core.jobs import (
    JobRecord,
    JobState,
    WorkflowRun,
    WorkflowState,
    job_seed,
    new_id,
    not_asking,
)
from kernel_server.core.plans import ASSUMED_LOOP_CALLS, choose_plan, parse_plan_option
from kernel_server.core.status import Plan, Plans
from kernel_server.tasks.step import StepOutcome, StepSpec

log = logging.getLogger("kernel_server.control.machine")

LANES = ("classical", "quantum")


class UserError(Exception):
    """A request that cannot be served as asked; the message tells the user what to do."""


class UnknownWorkflow(UserError):
    """No workflow has this id (a client can map it to "not found")."""


@dataclass
class LiveWorkflow:
    """One workflow this orchestrator is running, with everything the machine knows of it."""

    run: WorkflowRun
    inputs: dict[str, bytes]
    options: RunOptions
    # step id -> (the names it assigned, its stdout): kept on failure too, as Python keeps them.
    results: dict[int, tuple[dict[str, bytes], str]] = field(default_factory=dict)
    # step id -> number of plans shown while the step waits for the user's choice (--plan ask).
    asking: dict[int, int] = field(default_factory=dict)
    # step id -> the plans offered, until the user's choice is made.
    offered: dict[int, list[Plan]] = field(default_factory=dict)
    # hybrid step id -> the QPU its loop is pinned to (one QPU for the whole loop).
    sessions: dict[int, str] = field(default_factory=dict)
    # QPU job id -> the worker waiting for its counts.
    callers: dict[str, Caller] = field(default_factory=dict)

    def step(self, step_id: int) -> Step:
        return self.run.step(step_id)


# ------------------------------------------------------------------------------------ machine
class WorkflowMachine:
    """The live workflows, the step lanes and their slots; ``handle`` is the only way in."""

    def __init__(
        self,
        classical_slots: int = 2,
        quantum_step_slots: int = 4,
        clock: Callable[[], float] = time.time,
        ids: Callable[[str], str] = new_id,
    ):
        # Time and new ids come from outside (the driver's wall clock and random ids; a test's
        # fixed ones): the same events then give the same instructions, a replay included.
        self.clock, self.ids = clock, ids
        self.live: dict[str, LiveWorkflow] = {}
        # Quantum and hybrid steps mostly wait on QPUs, so they get their own slots: a notebook
        # full of waiting quantum steps never starves classical work.
        self.slots = {"classical": classical_slots, "quantum": quantum_step_slots}
        self.lanes: dict[str, list[tuple[str, int]]] = {lane: [] for lane in LANES}
        self.qpu_jobs: dict[str, tuple[LiveWorkflow, JobRecord]] = {}

    def handle(self, event: Event) -> list[Instruction]:
        return _HANDLERS[type(event)](self, event)

    # ------------------------------------------------------------------ workflows
    def _adopt(self, ev: WorkflowAdopted) -> list[Instruction]:
        live = LiveWorkflow(ev.run, ev.inputs, ev.options, dict(ev.done))
        self.live[ev.run.id] = live
        ev.run.start(self.clock())
        out: list[Instruction] = [SaveWorkflow(ev.run)]
        if not ev.run.steps:
            out += self._finish(live)
        return out + self._advance(live)

    def _recovered(self, ev: Recovered) -> list[Instruction]:
        out: list[Instruction] = []
        for rec in ev.workflows:
            if self._paid_run_in_flight(rec.run, ev.paid_qpus):
                out += self._fail_paid(rec.run, ev.paid_qpus)
                continue
            out += self._requeue(rec)
            done = {
                sid: rec.saved[sid]
                for sid, job in rec.run.steps.items()
                if job.state is JobState.DONE and sid in rec.saved
            }
            log.info("recovering workflow %s (%d steps done)", rec.run.id, len(done))
            out += self._adopt(WorkflowAdopted(rec.run, rec.inputs, rec.options, done))
        return out

    def _requeue(self, rec: RecoveredWorkflow) -> list[Instruction]:
        """Steps in flight (or done with their outputs lost) start again; QPU jobs in flight fail,
        their step asks again when it runs again."""
        out: list[Instruction] = []
        for sid, job in rec.run.steps.items():
            if job.state is JobState.DONE and sid in rec.saved:
                continue
            if job.state is not JobState.PENDING:
                job.requeue("requeued after an orchestrator restart", self.clock())
                out.append(Persist(job, "requeued after an orchestrator restart"))
        for job in rec.run.qpu_jobs.values():
            if not job.state.final:
                job.error = "orchestrator restarted; the step runs again"
                job.transition(JobState.FAILED, job.error, self.clock())
                out.append(Persist(job, job.error))
        return out

    @staticmethod
    def _paid_run_in_flight(run: WorkflowRun, paid: frozenset[str]) -> list[JobRecord]:
        return [j for j in run.qpu_jobs.values() if j.state is JobState.RUNNING and j.qpu in paid]

    def _fail_paid(self, run: WorkflowRun, paid: frozenset[str]) -> list[Instruction]:
        """A QPU job that was running on a paid QPU when the orchestrator stopped may have run
        (and been billed) already; running its step again would pay twice. The workflow ends
        failed, with the reason, instead of being resumed."""
        jobs = self._paid_run_in_flight(run, paid)
        first = jobs[0]
        reason = (
            f"QPU job {first.id} was running on the paid QPU {first.qpu} when the orchestrator "
            "stopped; it is not run again so that it is not paid for twice. Check its result on "
            "IBM Quantum, or run the workflow again."
        )
        cause = "orchestrator restarted during a paid run"
        out: list[Instruction] = []
        for job in jobs:
            job.error = reason
            job.transition(JobState.FAILED, cause, self.clock())
            out.append(Persist(job, cause))
        step_id = first.step_id or 0
        cancelled = run.step_failed(step_id, reason, stop_all=True, now=self.clock())
        out.append(Persist(run.steps[step_id], cause))
        out += [Persist(j, "an earlier step failed") for j in cancelled]
        out.append(SaveWorkflow(run))
        log.warning("workflow %s not resumed: %s", run.id, reason)
        return out

    def _advance(self, live: LiveWorkflow) -> list[Instruction]:
        out: list[Instruction] = []
        for sid in live.run.ready_steps():
            lane = "classical" if live.run.steps[sid].kind == "classical" else "quantum"
            job = live.run.steps[sid]
            cause = f"waiting for a {lane} worker slot"
            job.transition(JobState.QUEUED, cause, self.clock())
            out.append(Persist(job, cause))
            self.lanes[lane].append((live.run.id, sid))
        return out + self._dispatch()

    def _dispatch(self) -> list[Instruction]:
        out: list[Instruction] = []
        for lane, queue in self.lanes.items():
            while queue and self.slots[lane] > 0:
                workflow_id, sid = queue.pop(0)
                live = self.live.get(workflow_id)
                if live is None or live.run.steps[sid].state is not JobState.QUEUED:
                    continue
                self.slots[lane] -= 1
                job = live.run.steps[sid]
                job.transition(JobState.RUNNING, f"{lane} worker", self.clock())
                out.append(Persist(job, f"{lane} worker"))
                try:
                    out.append(RunStep(self._step_spec(live, sid), lane))
                except Exception as exc:  # its inputs cannot be put together: the step fails
                    log.exception("step %s of %s could not run", sid, workflow_id)
                    failed = StepOutcome(
                        False, error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__
                    )
                    out += self._step_finished(StepFinished(workflow_id, sid, lane, failed))
        return out

    @staticmethod
    def _step_spec(live: LiveWorkflow, sid: int) -> StepSpec:
        step = live.step(sid)
        results = {i: values for i, (values, _) in live.results.items()}
        return StepSpec(
            workflow_id=live.run.id,
            step_id=sid,
            kind=step.kind.value,
            code=step.source,
            lineno=step.lineno,
            cell_source=live.run.cell_source,
            inputs=step_inputs(step, live.inputs, results),
            writes=list(step.writes),
            deletes=list(step.deletes),
            shots=live.options.shots,
        )

    def _step_finished(self, ev: StepFinished) -> list[Instruction]:
        self.slots[ev.lane] += 1
        out = self._dispatch()
        live = self.live.get(ev.workflow_id)
        if live is None:
            return out
        run, outcome = live.run, ev.outcome
        job = run.steps[ev.step_id]
        job.worker = outcome.worker or job.worker
        if run.state.final or job.state.final:
            return out  # cancelled while it ran (or a step before it failed): drop its outputs
        live.results[ev.step_id] = (outcome.outputs, outcome.stdout)
        out.append(SaveStepOutputs(run.id, ev.step_id, outcome.outputs, outcome.stdout))
        if outcome.ok:
            finished = run.step_done(ev.step_id, self.clock())
            out.append(Persist(job, "step returned"))
        else:
            cancelled = run.step_failed(
                ev.step_id, outcome.error or "step failed", now=self.clock()
            )
            out.append(Persist(job, outcome.error_type or "failed"))
            out += [Persist(j, "an earlier step failed") for j in cancelled]
            out += [ReleaseQpuJob(j.id) for j in cancelled if j.kind == "qpu"]
            finished = run.state.final
        # Steps before a failing one still run, as in Python.
        return out + (self._finish(live) if finished else self._advance(live))

    def _finish(self, live: LiveWorkflow) -> list[Instruction]:
        """The workflow is final: keep the names it leaves behind (all of them when done; those
        up to the failing step, or of the steps that finished before a cancel, otherwise)."""
        run = live.run
        values = {sid: outputs for sid, (outputs, _) in live.results.items()}
        upto = run.failed_step if run.state is WorkflowState.FAILED else None
        outputs = cell_outputs(run.graph, values, upto)
        stdout = "".join(
            live.results[s.id][1]
            for s in run.graph.steps
            if s.id in live.results and (upto is None or s.id <= upto)
        )
        if not run.state.final:
            run.move_to(WorkflowState.DONE, self.clock())
        run.finished_at = run.finished_at or self.clock()
        live.asking.clear()
        live.offered.clear()
        live.sessions.clear()
        return [SaveOutputs(run.id, outputs, stdout), SaveWorkflow(run), WorkflowFinal(run.id)]

    def _cancel(self, ev: CancelRequested) -> list[Instruction]:
        live = self.live.get(ev.workflow_id)
        if live is None or live.run.state.final:
            return []  # finished (perhaps before this orchestrator started): nothing is live
        cancelled = live.run.cancel(self.clock())
        out: list[Instruction] = [Persist(j, "workflow cancelled") for j in cancelled]
        out += [ReleaseQpuJob(j.id) for j in cancelled if j.kind == "qpu"]
        return out + self._finish(live)

    # ------------------------------------------------------------------ QPU jobs
    def _sample(self, ev: SampleRequested) -> list[Instruction]:
        live = self.live.get(ev.workflow_id)
        if live is None or live.run.state.final:
            raise UserError(f"workflow {ev.workflow_id} is no longer running")
        run = live.run
        if ev.step_id not in run.steps:
            raise UserError(f"workflow {ev.workflow_id} has no step {ev.step_id}")
        index = sum(1 for j in run.qpu_jobs.values() if j.step_id == ev.step_id)
        job = JobRecord(
            id=self.ids("qj"),
            created_at=self.clock(),
            workflow_id=run.id,
            kind="qpu",
            step_id=ev.step_id,
            shots=ev.shots,
            parent=run.steps[ev.step_id].id,
        )
        run.qpu_jobs[job.id] = job
        live.callers[job.id] = ev.caller
        self.qpu_jobs[job.id] = (live, job)
        seed = job_seed(live.options.seed, ev.step_id, index)
        return [Persist(job, publish=False), StartQpuJob(job, seed, ev.request)]

    def _estimating(self, ev: QpuJobEstimating) -> list[Instruction]:
        if ev.job_id not in self.qpu_jobs:
            return []
        _, job = self.qpu_jobs[ev.job_id]
        if job.state.final:
            return []
        job.transition(JobState.ESTIMATING, now=self.clock())
        return [Persist(job)]

    def _plans_ready(self, ev: PlansReady) -> list[Instruction]:
        live, job = self.qpu_jobs[ev.job_id]
        sid = job.step_id or 0
        try:
            mode = live.options.plan  # parsed with the options (run_options)
            usable = ev.plans if isinstance(ev.plans, list) else []
            if mode == "ask" and usable and not live.run.state.final:
                # Same state (estimating); the event tells widgets the plans are there.
                live.asking[sid] = len(usable)
                live.offered[sid] = usable
                job.plans, job.awaiting_choice = usable, True
                return [Persist(job, f"{len(usable)} plans ready; waiting for a choice")]
            return self._decide(live, job, ev.plans, mode)
        except Exception as exc:
            return [PlanFailed(live.run.id, sid, exc)]

    def _decide(
        self, live: LiveWorkflow, job: JobRecord, plans: Plans, mode: Any
    ) -> list[Instruction]:
        sid = job.step_id or 0
        chosen = choose_plan(plans, mode, live.options.priority, self._calls(live, sid))
        job.awaiting_choice = False
        if chosen is None or not isinstance(plans, list):
            job.plans = plans
            return [PlanDecided(live.run.id, sid, None)]
        job.plans = [msgspec.structs.replace(p, chosen=i == chosen) for i, p in enumerate(plans)]
        return [PlanDecided(live.run.id, sid, job.plans[chosen])]

    @staticmethod
    def _calls(live: LiveWorkflow, step_id: int) -> int:
        """QPU calls the step makes with its plan: one for a quantum step; for a hybrid step
        what its text shows, or a long loop where it does not say."""
        step = live.step(step_id)
        if step.kind is not StepKind.HYBRID:
            return 1
        return step.expected_calls or ASSUMED_LOOP_CALLS

    def _plan_chosen(self, ev: PlanChosen) -> list[Instruction]:
        live = self.live.get(ev.workflow_id)
        if live is None:
            raise UnknownWorkflow(f"no live workflow {ev.workflow_id!r}")
        count = live.asking.get(ev.step_id)
        if count is None:
            raise UserError(not_asking(live.run, ev.step_id))
        try:
            value = parse_plan_option(ev.plan)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if value in ("auto", "ask") or (isinstance(value, int) and value >= count):
            raise UserError(f"choose a plan number from 0 to {count - 1}, or off; got {ev.plan!r}")
        del live.asking[ev.step_id]
        plans = live.offered.pop(ev.step_id)
        job = next(j for j in live.run.qpu_jobs.values() if j.step_id == ev.step_id and j.plans)
        try:
            return self._decide(live, job, plans, value)
        except Exception as exc:
            return [PlanFailed(live.run.id, ev.step_id, exc)]

    def _placed(self, ev: QpuJobPlaced) -> list[Instruction]:
        live, job = self.qpu_jobs[ev.job_id]
        job.qpu, job.est_fidelity, job.est_duration_s = ev.qpu, ev.est_fidelity, ev.est_duration_s
        job.num_circuits = ev.num_circuits
        job.mitigation = ev.mitigation
        sid = job.step_id or 0
        if live.run.steps[sid].kind == "hybrid":
            live.sessions[sid] = ev.qpu  # pin the loop to one QPU
        if live.run.state.final or job.state.final:
            return self._job_cancelled(QpuJobCancelled(job.id))
        job.transition(JobState.QUEUED, ev.cause, self.clock())
        return [Persist(job, ev.cause), Enqueue(job.id, ev.qpu)]

    def _started(self, ev: QpuJobStarted) -> list[Instruction]:
        if ev.job_id not in self.qpu_jobs:
            return []  # cancelled and answered already
        _, job = self.qpu_jobs[ev.job_id]
        if job.state.final:
            return []
        cause = f"executing on {job.qpu}"
        job.transition(JobState.RUNNING, cause, self.clock())
        return [Persist(job, cause)]

    def _job_finished(self, ev: QpuJobFinished) -> list[Instruction]:
        if ev.job_id not in self.qpu_jobs:
            return []  # answered already
        live, job = self.qpu_jobs.pop(ev.job_id)
        caller = live.callers.pop(job.id)
        if job.state.final:  # cancelled while it ran
            return [Reply(caller, False, error_type="WorkflowCancelled", message=_CANCELLED)]
        job.method = ",".join(sorted(set(ev.methods)))
        cause = f"simulated with {job.method}"
        job.transition(JobState.DONE, cause, self.clock())
        return [Persist(job, cause), Reply(caller, True, counts=ev.counts, qpu=job.qpu, job=job)]

    def _job_failed(self, ev: QpuJobFailed) -> list[Instruction]:
        if ev.job_id not in self.qpu_jobs:
            return []  # answered already
        live, job = self.qpu_jobs.pop(ev.job_id)
        caller = live.callers.pop(job.id)
        job.error = f"{ev.error_type}: {ev.message}"
        out: list[Instruction] = []
        if not job.state.final:
            job.transition(JobState.FAILED, job.error, self.clock())
            out.append(Persist(job, job.error))
        return out + [Reply(caller, False, error_type=ev.error_type, message=ev.message)]

    def _job_cancelled(self, ev: QpuJobCancelled) -> list[Instruction]:
        if ev.job_id not in self.qpu_jobs:
            return []  # answered already
        live, job = self.qpu_jobs.pop(ev.job_id)
        caller = live.callers.pop(job.id)
        out: list[Instruction] = []
        if not job.state.final:
            job.transition(JobState.CANCELLED, "workflow cancelled", self.clock())
            out.append(Persist(job, "workflow cancelled"))
        return out + [Reply(caller, False, error_type="WorkflowCancelled", message=_CANCELLED)]


_CANCELLED = "the workflow was cancelled"

_HANDLERS: dict[type[Event], Callable[[WorkflowMachine, Any], list[Instruction]]] = {
    WorkflowAdopted: WorkflowMachine._adopt,
    Recovered: WorkflowMachine._recovered,
    StepFinished: WorkflowMachine._step_finished,
    CancelRequested: WorkflowMachine._cancel,
    SampleRequested: WorkflowMachine._sample,
    QpuJobEstimating: WorkflowMachine._estimating,
    PlansReady: WorkflowMachine._plans_ready,
    PlanChosen: WorkflowMachine._plan_chosen,
    QpuJobPlaced: WorkflowMachine._placed,
    QpuJobStarted: WorkflowMachine._started,
    QpuJobFinished: WorkflowMachine._job_finished,
    QpuJobFailed: WorkflowMachine._job_failed,
    QpuJobCancelled: WorkflowMachine._job_cancelled,
}


def kinds(instructions: Iterable[Instruction]) -> list[str]:
    """The instructions' class names, in order (what a test or a log line wants to read)."""
    return [type(i).__name__ for i in instructions]
