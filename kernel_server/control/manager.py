"""The job manager: the asyncio driver of the workflow state machine.

``machine.WorkflowMachine`` decides (which step runs, what a failure or a cancel does, how a restart
resumes, which plan a step uses, each QPU job's state); this module carries its instructions out
and does what needs an event loop: it runs steps and QPU-job pipelines as tasks, holds the futures
a waiting worker, plan or client is woken through, asks the fleet for estimates and placements,
and answers workers. It does no socket I/O itself: the orchestrator hands it callables for running
a step, estimating a job on a device and making plans, for publishing an event and for answering
a waiting worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from kernel_server.control.events import (
    CancelRequested,
    Enqueue,
    Event,
    Instruction,
    Persist,
    PlanChosen,
    PlanDecided,
    PlanFailed,
    QpuJobStarted,
    Recovered,
    RecoveredWorkflow,
    ReleaseQpuJob,
    Reply,
    RunStep,
    SaveOutputs,
    SaveStepOutputs,
    SaveWorkflow,
    StartQpuJob,
    StepFinished,
    WorkflowAdopted,
    WorkflowFinal,
)
from kernel_server.control.machine import UnknownWorkflow, UserError, WorkflowMachine
from kernel_server.control.qpu_jobs import CircuitTooWide, QpuJobs
from kernel_server.control.stimuli import StimulusLog
from kernel_server.control.store import Store
from kernel_server.core.deployment import DEFAULT_PLACEMENT, RunOptions, stored_options
from kernel_server.core.jobs import JobRecord, WorkflowRun, not_asking
from kernel_server.core.plans import parse_plan_option
from kernel_server.core.status import JobState, Plans, WorkflowInfo
from kernel_server.fleet.queues import SimulatedQPU
from kernel_server.scheduler.cycle import QPUView
from kernel_server.scheduler.dispatch import OnlineDispatcher
from kernel_server.tasks.step import StepOutcome, StepSpec
from kernel_server.wire import messages as P

__all__ = ["CircuitTooWide", "Executors", "JobManager"]

log = logging.getLogger("kernel_server.control.manager")


@dataclass
class Executors:
    """How the manager gets CPU work done (process pools in the orchestrator)."""

    run_step: Callable[[StepSpec], Awaitable[StepOutcome]]
    # (a quantum call, a QPU's name) -> tasks.qpu.DeviceEstimate
    estimate: Callable[[P.Sample, str], Awaitable[Any]]
    spawn: Callable[[Awaitable[Any]], asyncio.Task]
    # a quantum call -> its resource plans (tasks.qpu.plan_step); None: no plans
    plan: Callable[[P.Sample], Awaitable[Plans]] | None = None


Emit = Callable[[JobRecord, str], None]
AnswerWorker = Callable[[bytes, str, P.Message, str], Awaitable[None]]


class JobManager:
    def __init__(
        self,
        store: Store,
        executors: Executors,
        emit: Emit,
        reply: AnswerWorker,
        classical_slots: int = 2,
        quantum_step_slots: int = 4,
        placement: str = DEFAULT_PLACEMENT,
        balance: float | str | None = None,
    ):
        self.store = store
        self.ex = executors
        self.emit = emit
        self.reply = reply
        self.stimuli = StimulusLog.from_env()
        self.machine = WorkflowMachine(
            classical_slots, quantum_step_slots, clock=self.stimuli.clock, ids=self.stimuli.ids
        )
        # Called with a workflow's id once it is final (the orchestrator revokes its capability).
        self.on_final: Callable[[str], None] = lambda workflow_id: None
        self.placement = placement
        self.quantum = QpuJobs(self)
        self.dispatcher = OnlineDispatcher(
            self._qpu_views, balance=balance, estimating=lambda: self.quantum.estimating
        )
        # (workflow, step) -> the plan its QPU jobs run with, once the machine has decided it.
        self.step_plans: dict[tuple[str, int], asyncio.Future] = {}
        self.qpu_waits: dict[str, asyncio.Future] = {}  # QPU job -> its execution
        # plans_asked waiters, woken after each event the machine handles (no polling).
        self._plan_waiters: set[asyncio.Event] = set()
        self.waiters: dict[str, list[asyncio.Future]] = {}  # clients waiting for a final state
        self.qpus: dict[str, SimulatedQPU] = {}

    @property
    def runs(self) -> dict[str, WorkflowRun]:
        return {wid: live.run for wid, live in self.machine.live.items()}

    @property
    def options(self) -> dict[str, RunOptions]:
        return {wid: live.options for wid, live in self.machine.live.items()}

    # ------------------------------------------------------------------ instructions
    def _do(self, event: Event) -> list[Instruction]:
        instructions = self.stimuli.handle(self.machine, event)
        for instruction in instructions:
            self._execute(instruction)
        for woken in self._plan_waiters:  # whoever waits for a step's plans looks again
            woken.set()
        return instructions

    def _execute(self, ins: Instruction) -> None:
        if isinstance(ins, Persist):
            self.store.save_job(ins.job)
            if ins.publish:
                job = ins.job if ins.job.state is ins.state else replace(ins.job, state=ins.state)
                self.emit(job, ins.cause)
        elif isinstance(ins, SaveWorkflow):
            self.store.update_workflow(ins.run)
        elif isinstance(ins, SaveStepOutputs):
            self.store.save_step_outputs(ins.workflow_id, ins.step_id, ins.outputs, ins.stdout)
        elif isinstance(ins, SaveOutputs):
            self.store.save_outputs(ins.workflow_id, ins.outputs, ins.stdout)
        elif isinstance(ins, RunStep):
            self.ex.spawn(self._run_step(ins.spec, ins.lane))
        elif isinstance(ins, ReleaseQpuJob):
            fut = self.qpu_waits.pop(ins.job_id, None)
            if fut is not None and not fut.done():
                fut.cancel()
        elif isinstance(ins, (PlanDecided, PlanFailed)):
            self._settle_plan(ins)
        elif isinstance(ins, StartQpuJob):
            self.quantum.start(ins.job, ins.request, ins.seed)
        elif isinstance(ins, Enqueue):
            self.quantum.enqueue(ins.job_id, ins.qpu)
        elif isinstance(ins, Reply):
            self.ex.spawn(self._answer(ins))
        elif isinstance(ins, WorkflowFinal):
            self._wake(ins.workflow_id)

    def _settle_plan(self, ins: PlanDecided | PlanFailed) -> None:
        future = self.step_plans.get((ins.workflow_id, ins.step_id))
        if future is None or future.done():
            return
        if isinstance(ins, PlanDecided):
            future.set_result(ins.plan)
        else:
            future.set_exception(ins.error)
            future.exception()  # retrieved: the step's QPU jobs re-raise it

    async def _answer(self, ins: Reply) -> None:
        identity, rid, reply_as = ins.caller
        message: P.Message = (
            P.SampleReply(results=ins.counts, qpu=ins.qpu or "", report=_report(ins.job))
            if ins.ok
            else P.ErrorReply(type=ins.error_type, message=ins.message)
        )
        await self.reply(identity, rid, message, reply_as)

    def _wake(self, workflow_id: str) -> None:
        # The workflow is final: stop waiting for plans nobody will choose now, and wake clients.
        for key in [k for k in self.step_plans if k[0] == workflow_id]:
            future = self.step_plans.pop(key)
            if not future.done():
                future.cancel()
        for fut in self.waiters.pop(workflow_id, []):
            if not fut.done():
                fut.set_result(None)
        self.on_final(workflow_id)

    # ------------------------------------------------------------------ workflows
    def adopt(
        self,
        run: WorkflowRun,
        inputs: dict[str, bytes],
        options: RunOptions,
        done: dict[int, tuple[dict[str, bytes], str]] | None = None,
    ) -> None:
        self._do(WorkflowAdopted(run, inputs, options, dict(done or {})))

    def recover(self) -> None:
        """Pick up every workflow a previous orchestrator accepted and did not finish."""
        found = []
        for workflow_id in self.store.unfinished_workflow_ids():
            run = self.store.load_run(workflow_id)
            if run is None:
                continue
            row = self.store.workflow_row(workflow_id)
            saved = self.store.step_outputs(workflow_id)
            inputs = self.store.workflow_inputs(workflow_id)
            options = row.options if row is not None else stored_options(None)
            found.append(RecoveredWorkflow(run, saved, inputs, options))
        # Each run of a job on these QPUs costs money (a real IBM QPU, unless configured else).
        paid = frozenset(n for n, q in self.qpus.items() if q.info.billed)
        self._do(Recovered(found, paid))

    async def _run_step(self, spec: StepSpec, lane: str) -> None:
        try:
            outcome = await self.ex.run_step(spec)
        except Exception as exc:  # a broken pool or an unpicklable spec: the step fails
            log.exception("step %s of %s could not run", spec.step_id, spec.workflow_id)
            outcome = StepOutcome(
                False, error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__
            )
        self._do(StepFinished(spec.workflow_id, spec.step_id, lane, outcome))

    async def wait_final(self, run: WorkflowRun, timeout: float) -> None:
        if run.state.final or timeout <= 0:
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run.id, []).append(fut)
        try:
            await asyncio.wait_for(fut, timeout=timeout)
        except asyncio.TimeoutError:
            pass

    def run_for(self, workflow_id: str) -> WorkflowRun:
        live = self.machine.live.get(workflow_id)
        run = live.run if live is not None else self.store.load_run(workflow_id)
        if run is None:
            raise UnknownWorkflow(f"no workflow {workflow_id!r}; list them with list_workflows()")
        return run

    def workflow_reply(self, run: WorkflowRun, with_outputs: bool) -> P.WorkflowReply:
        row = self.store.workflow_row(run.id)
        steps = run.step_summaries()
        for step in steps:
            for job in step.qpu_jobs:
                qpu = self.qpus.get(job.qpu or "")
                queued = qpu is not None and job.state is JobState.QUEUED
                where = qpu.position_of(job.id) if qpu is not None and queued else None
                if where is not None:
                    job.queue_position, job.est_start_s = where[0], round(where[1], 3)
        reply = P.WorkflowReply(
            workflow_id=run.id,
            state=run.state,
            steps=steps,
            error=run.error,
            info=WorkflowInfo(
                image_id=run.image_id,
                name=row.name if row is not None else None,
                created_at=run.created_at,
                finished_at=run.finished_at,
                options=row.options if row is not None else stored_options(None),
            ),
        )
        if run.state.final:
            # Failed or cancelled: what was assigned before, as the names a cell keeps.
            reply.stdout = row.stdout if row is not None else ""
            if with_outputs:
                reply.outputs = self.store.workflow_outputs(run.id) or {}
        return reply

    def cancel(self, workflow_id: str) -> tuple[WorkflowRun, list[JobRecord]]:
        run = self.run_for(workflow_id)
        instructions = self._do(CancelRequested(run.id))
        cancelled = [
            i.job
            for i in instructions
            if isinstance(i, Persist) and i.cause == "workflow cancelled"
        ]
        return run, cancelled

    # ------------------------------------------------------------------ quantum jobs
    def eligible_qpus(self, options: RunOptions, width: int) -> list[SimulatedQPU]:
        """QPUs that satisfy the deployment config and fit the circuit; a clear error if none."""
        return self.quantum.eligible_qpus(options, width)

    def submit_sample(self, msg: P.Sample, identity: bytes, rid: str, reply_as: str = "") -> None:
        """A step called sample() (or a primitive ran a PUB): its QPU job (``qpu_jobs``)."""
        self.quantum.submit(msg, identity, rid, reply_as)

    async def plans_asked(self, workflow_id: str, step_id: int, timeout: float) -> None:
        """Wait (up to ``timeout``) until the step asks for a plan, while it still may: it has
        not started, or its first QPU job is estimating the plans."""
        run = self.run_for(workflow_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        woken = asyncio.Event()  # set after every event the machine handles
        self._plan_waiters.add(woken)
        try:
            while not self._asked_or_over(run, step_id):
                woken.clear()
                try:
                    await asyncio.wait_for(woken.wait(), deadline - loop.time())
                except TimeoutError:
                    return
        finally:
            self._plan_waiters.discard(woken)

    def _asked_or_over(self, run: WorkflowRun, step_id: int) -> bool:
        """The step asks for a plan now, or never will."""
        live = self.machine.live.get(run.id)
        if live is not None and step_id in live.asking:
            return True
        step = run.steps.get(step_id)
        if run.state.final or step is None or step.state.final:
            return True
        return live is None or live.options.plan != "ask"

    def choose_plan(self, workflow_id: str, step_id: int, plan: Any) -> int | str:
        """The user's answer to a ``--plan ask`` step (a plan number or "off")."""
        run = self.run_for(workflow_id)
        if run.id not in self.machine.live:
            raise UserError(not_asking(run, step_id))
        self._do(PlanChosen(run.id, step_id, plan))
        return parse_plan_option(plan)

    def _qpu_views(self) -> list[QPUView]:
        """The fleet as a scheduling cycle sees it (online QPUs, their queues now)."""
        return [
            QPUView(
                q.name,
                q.num_qubits,
                q.expected_wait_s(),
                q.queue_length(),
                q.online,
                q.recent_busy_s(),
            )
            for q in self.qpus.values()
        ]

    def qpu_job_started(self, job: JobRecord) -> None:
        self._do(QpuJobStarted(job.id))


def _report(job: JobRecord | None) -> P.QpuJobReport | None:
    if job is None:
        return None
    return P.QpuJobReport(
        job_id=job.id,
        qpu=job.qpu or "",
        mitigation=job.mitigation or "none",
        est_fidelity=job.est_fidelity,
        method=job.method or "",
        shots=job.shots or 0,
        num_circuits=job.num_circuits or 0,
        queue_s=job.queue_seconds,
        run_s=job.run_seconds,
    )
