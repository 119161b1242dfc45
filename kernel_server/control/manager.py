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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

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
from kernel_server.control.machine import UnknownWorkflow, UserError, WorkflowMachine, not_asking
from kernel_server.control.store import Store
from kernel_server.core.cache import LRU
from kernel_server.core.deployment import DEFAULT_PLACEMENT
from kernel_server.core.jobs import JobRecord, WorkflowRun
from kernel_server.core.plans import parse_plan_option
from kernel_server.fleet.queues import QueuedJob, SimulatedQPU
from kernel_server.scheduler.cycle import QPUView
from kernel_server.scheduler.dispatch import OnlineDispatcher
from kernel_server.scheduler.placement import Candidate, place
from kernel_server.tasks.step import StepOutcome, StepSpec
from kernel_server.wire import messages as P

__all__ = ["CircuitTooWide", "Executors", "JobManager"]

log = logging.getLogger("kernel_server.control.manager")


class CircuitTooWide(UserError):
    pass


@dataclass
class Executors:
    """How the manager gets CPU work done (process pools in the orchestrator)."""

    run_step: Callable[[StepSpec], Awaitable[StepOutcome]]
    estimate: Callable[[bytes, str], Awaitable[Any]]  # -> tasks.qpu.DeviceEstimate
    spawn: Callable[[Awaitable[Any]], asyncio.Task]
    # (circuits blob, shots) -> resource plans as dicts (tasks.qpu.plan_step); None: no plans
    plan: Callable[[bytes, int], Awaitable[list[dict[str, Any]]]] | None = None


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
        balance: float | None = None,
    ):
        self.store = store
        self.ex = executors
        self.emit = emit
        self.reply = reply
        self.machine = WorkflowMachine(classical_slots, quantum_step_slots)
        # Called with a workflow's id once it is final (the orchestrator revokes its capability).
        self.on_final: Callable[[str], None] = lambda workflow_id: None
        self.placement = placement
        self.estimating = 0  # QPU jobs between their arrival and their placement decision
        self.dispatcher = OnlineDispatcher(
            self._qpu_views, balance=balance, estimating=lambda: self.estimating
        )
        # A cell run again sends the same circuits: their estimates on a calibration, and their
        # plans over the fleet's calibrations, are the same (keyed on Sample.fingerprint).
        self.estimates: LRU[Any] = LRU(1024)
        self.plans: LRU[list[dict[str, Any]]] = LRU(256)
        # (workflow, step) -> the plan its QPU jobs run with, once the machine has decided it.
        self.step_plans: dict[tuple[str, int], asyncio.Future] = {}
        self.qpu_waits: dict[str, asyncio.Future] = {}  # QPU job -> its execution
        self.waiters: dict[str, list[asyncio.Future]] = {}  # clients waiting for a final state
        self.qpus: dict[str, SimulatedQPU] = {}

    @property
    def runs(self) -> dict[str, WorkflowRun]:
        return {wid: live.run for wid, live in self.machine.live.items()}

    @property
    def options(self) -> dict[str, dict[str, Any]]:
        return {wid: live.options for wid, live in self.machine.live.items()}

    # ------------------------------------------------------------------ instructions
    def _do(self, event: Event) -> list[Instruction]:
        instructions = self.machine.handle(event)
        for instruction in instructions:
            self._execute(instruction)
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
        elif isinstance(ins, Reply):
            self.ex.spawn(self._answer(ins))
        elif isinstance(ins, WorkflowFinal):
            self._wake(ins.workflow_id)
        # StartQpuJob and Enqueue are carried out by their callers, which hold the circuits.

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
            P.SampleReply(results=ins.counts, qpu=ins.qpu or "")
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
        options: dict[str, Any],
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
            row = self.store.workflow_row(workflow_id) or {}
            saved = self.store.step_outputs(workflow_id)
            inputs = self.store.workflow_inputs(workflow_id)
            found.append(RecoveredWorkflow(run, saved, inputs, row.get("options", {})))
        # Each run of a job on these QPUs costs money (a real IBM QPU, unless configured else).
        paid = frozenset(n for n, q in self.qpus.items() if q.info.get("billed", False))
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
        row = self.store.workflow_row(run.id) or {}
        steps = run.step_summaries()
        for step in steps:
            for job in step["qpu_jobs"]:
                qpu = self.qpus.get(job["qpu"] or "")
                where = qpu.position_of(job["id"]) if qpu and job["state"] == "queued" else None
                if where is not None:
                    job["queue_position"], job["est_start_s"] = where[0], round(where[1], 3)
        reply = P.WorkflowReply(
            workflow_id=run.id,
            state=run.state.value,
            steps=steps,
            error=run.error,
            info={
                "image_id": run.image_id,
                "name": row.get("name"),
                "created_at": run.created_at,
                "finished_at": run.finished_at,
                "options": row.get("options", {}),
            },
        )
        if run.state.final:
            # Failed or cancelled: what was assigned before, as the names a cell keeps.
            reply.stdout = row.get("stdout") or ""
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
    def eligible_qpus(self, options: dict[str, Any], width: int) -> list[SimulatedQPU]:
        """QPUs that satisfy the deployment config and fit the circuit; a clear error if none."""
        req = options.get("qpu", {})
        qpus = [q for q in self.qpus.values() if q.online]
        if req.get("backends"):
            unknown = [b for b in req["backends"] if b not in self.qpus]
            if unknown:
                raise UserError(f"unknown backends {unknown}; the fleet has {sorted(self.qpus)}")
            qpus = [q for q in qpus if q.name in req["backends"]]
        if req.get("families"):
            qpus = [q for q in qpus if q.family in req["families"]]
        low = max(width, int(req.get("min_qubits", 0)))
        high = int(req.get("max_qubits", 10**9))
        fitting = [q for q in qpus if low <= q.num_qubits <= high]
        if fitting:
            return fitting
        sizes = ", ".join(f"{q.name} ({q.num_qubits})" for q in self.qpus.values())
        largest = max((q.num_qubits for q in self.qpus.values()), default=0)
        if width > largest:
            raise CircuitTooWide(
                f"the circuit needs {width} qubits but the largest QPU has "
                f"{largest}; fleet: {sizes}. Reduce the circuit's width "
                "(or cut it)."
            )
        # Width 0: checked before any circuit exists (deploy, invoke); the config alone fails.
        what = f" for a {width}-qubit circuit" if width else ""
        raise UserError(f"no QPU satisfies the configuration qpu: {req}{what}; fleet: {sizes}")

    def submit_sample(self, msg: P.Sample, identity: bytes, rid: str, reply_as: str = "") -> None:
        """A step called sample(): create its QPU job; the worker gets the reply when it is done."""
        caller: Caller = (identity, rid, reply_as)
        for ins in self.machine.handle(
            SampleRequested(msg.workflow_id, msg.step_id, msg.shots, caller)
        ):
            if isinstance(ins, StartQpuJob):
                self.ex.spawn(self._run_qpu_job(ins.job, msg, ins.index))
            else:
                self._execute(ins)

    async def _run_qpu_job(self, job: JobRecord, msg: P.Sample, index: int) -> None:
        """Estimate the job on its candidate QPUs, place it, queue it and wait for its counts;
        every state change goes through the machine."""
        self.estimating += 1
        estimating = True
        try:
            self._do(QpuJobEstimating(job.id))
            live = self.machine.live[job.workflow_id]
            pinned = live.sessions.get(msg.step_id)
            qpus = (
                [self.qpus[pinned]] if pinned else self.eligible_qpus(live.options, msg.num_qubits)
            )
            plan = await self._step_plan(job, msg)
            if plan is not None and not pinned:
                # Run where the plan says: a QPU of its template (if the config allows one).
                members = [q for q in qpus if q.name in set(plan.get("members", []))]
                qpus = members or qpus
            estimates = await asyncio.gather(*[self._estimate(msg, q) for q in qpus])
            self.estimating -= 1
            estimating = False
            chosen, est, cause = await self._place(live.options, job, msg, qpus, estimates)
            done = asyncio.get_running_loop().create_future()
            self.qpu_waits[job.id] = done
            placed = QpuJobPlaced(
                job.id, chosen, est.fidelity, est.duration_s, est.num_circuits, cause
            )
            if not any(isinstance(i, Enqueue) for i in self._do(placed)):
                self.qpu_waits.pop(job.id, None)
                return  # the workflow ended meanwhile; the machine has answered the worker
            stack = plan["mitigation"] if plan is not None else None
            seed = self._seed(live.run, job, index)
            await self.qpus[chosen].queue.put(
                QueuedJob(
                    job,
                    est.transpiled,
                    msg.shots,
                    seed,
                    done,
                    mitigation=stack if stack and stack != "none" else None,
                    circuits=msg.circuits,
                )
            )
            try:
                execution = await done
            finally:
                self.dispatcher.kick()  # the QPU is free: jobs waiting for it may be bound now
            self.qpu_waits.pop(job.id, None)
            self._do(QpuJobFinished(job.id, list(execution.methods), execution.counts))
        except asyncio.CancelledError:
            self.qpu_waits.pop(job.id, None)
            self._do(QpuJobCancelled(job.id))
        except Exception as exc:
            self._do(QpuJobFailed(job.id, type(exc).__name__, str(exc)))
        finally:
            if estimating:
                self.estimating -= 1

    async def _place(
        self,
        options: dict[str, Any],
        job: JobRecord,
        msg: P.Sample,
        qpus: list[SimulatedQPU],
        estimates: list[Any],
    ) -> tuple[str, Any, str]:
        """The QPU the job goes to, its estimate there, and the cause its event shows."""
        by_name = {e.device: e for e in estimates}
        candidates = [
            Candidate(q.name, by_name[q.name].fidelity, q.expected_wait_s()) for q in qpus
        ]
        policy = options.get("placement", self.placement)
        priority = options.get("priority", "balanced")
        if policy == "qonductor" and len(candidates) > 1:
            name = await self.dispatcher.place(
                job.id,
                msg.num_qubits,
                {c.qpu: (c.fidelity, by_name[c.qpu].duration_s) for c in candidates},
                priority,
            )
        else:
            name = place(candidates, policy, priority).qpu
        est = by_name[name]
        cause = (
            f"on {name} (estimated fidelity {est.fidelity:.3f}, "
            f"{len(candidates)} candidates, policy {policy})"
        )
        return name, est, cause

    async def _estimate(self, msg: P.Sample, qpu: SimulatedQPU) -> Any:
        """The job's estimate on one QPU (remembered per circuits and calibration)."""
        key = (msg.fingerprint, qpu.name, qpu.info.get("calibration_id"))
        cached = self.estimates.get(key) if msg.fingerprint else None
        if cached is not None:
            return cached
        estimate = await self.ex.estimate(msg.circuits, qpu.name)
        return self.estimates.put(key, estimate) if msg.fingerprint else estimate

    async def _step_plan(self, job: JobRecord, msg: P.Sample) -> dict[str, Any] | None:
        """The plan this step runs with: its first QPU job makes the plans and the machine
        chooses (or asks the user); the step's other jobs (a hybrid loop) wait for the same."""
        key = (job.workflow_id, msg.step_id)
        future = self.step_plans.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self.step_plans[key] = future
            plans = await self._plans(msg) if self.ex.plan is not None else []
            self._do(PlansReady(job.id, plans))
        return await asyncio.shield(future)

    async def _plans(self, msg: P.Sample) -> list[dict[str, Any]]:
        """The resource plans of a step's circuits (remembered per circuits, shots and the
        fleet's calibrations); ``[{"error": ...}]`` when they cannot be made."""
        assert self.ex.plan is not None
        calibrations = tuple(
            sorted((n, q.info.get("calibration_id")) for n, q in self.qpus.items())
        )
        key = (msg.fingerprint, msg.shots, calibrations)
        cached = self.plans.get(key) if msg.fingerprint else None
        if cached is not None:
            return [dict(p) for p in cached]
        try:
            plans = await self.ex.plan(msg.circuits, msg.shots)
        except Exception as exc:  # a lost worker: advice missing, job goes on
            return [{"error": f"{type(exc).__name__}: {exc}"}]
        if msg.fingerprint and plans and "error" not in plans[0]:
            self.plans.put(key, [dict(p) for p in plans])
        return plans

    async def plans_asked(self, workflow_id: str, step_id: int, timeout: float) -> None:
        """Wait (up to ``timeout``) until the step asks for a plan, while it still may: it has
        not started, or its first QPU job is estimating the plans."""
        run = self.run_for(workflow_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.machine.live.get(workflow_id)
            if live is not None and step_id in live.asking:
                return
            step = run.steps.get(step_id)
            if run.state.final or step is None or step.state.final:
                return
            options = live.options if live is not None else {}
            if parse_plan_option(options.get("plan")) != "ask":
                return
            await asyncio.sleep(0.05)

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

    def _seed(self, run: WorkflowRun, job: JobRecord, index: int) -> int | None:
        """Per-job simulator seed derived from the workflow's --seed: reproducible runs."""
        base = self.machine.live[run.id].options.get("seed")
        if base is None:
            return None
        return (int(base) * 1_000_003 + (job.step_id or 0) * 1009 + index) % (2**31)

    def qpu_job_started(self, job: JobRecord) -> None:
        self._do(QpuJobStarted(job.id))
