"""The life of a QPU job on the event loop: candidates, plan, estimates, placement, queue, reply.

A step's ``sample()`` or a primitive's PUB arrives as one ``Sample`` request and becomes one QPU
job. This module finds the QPUs it may run on (the deployment config, a pinned device or
template, a Session's QPU), waits for the step's (or the Session's) plan, estimates the job on
each candidate (remembered per circuits and calibration), places it (the online scheduler or a
placement policy), queues it and hands the execution back to the machine. Every state change goes
through the workflow machine (``JobManager._do``).

Sessions: the first job of a primitive's ``Session`` is planned and placed like any other; the
Session then keeps that QPU and that plan for its later jobs, whichever workflow they belong to,
and its jobs go ahead of other jobs in the QPU's queue within the queue's fairness rule
(``fleet.queues.JobQueue``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import msgspec

from kernel_server.backends.isa import IsaMismatch
from kernel_server.control.events import (
    Caller,
    PlansReady,
    QpuJobCancelled,
    QpuJobEstimating,
    QpuJobFailed,
    QpuJobFinished,
    QpuJobPlaced,
    SampleRequested,
)
from kernel_server.control.machine import LiveWorkflow, UserError
from kernel_server.core.cache import LRU
from kernel_server.core.deployment import RunOptions
from kernel_server.core.jobs import JobRecord
from kernel_server.core.status import Plan, PlanError, Plans
from kernel_server.fleet.queues import QueuedJob, SimulatedQPU
from kernel_server.scheduler.placement import Candidate, place
from kernel_server.wire import messages as P

if TYPE_CHECKING:
    from kernel_server.control.manager import JobManager


class CircuitTooWide(UserError):
    pass


class QpuJobs:
    """The QPU-job pipelines of one job manager, with their caches and the Sessions' QPUs."""

    def __init__(self, manager: JobManager):
        self.m = manager
        self.estimating = 0  # QPU jobs between their arrival and their placement decision
        # A cell run again sends the same circuits: their estimates on a calibration, and their
        # plans over the fleet's calibrations, are the same (keyed on Sample.fingerprint).
        self.estimates: LRU[Any] = LRU(1024)
        self.plans: LRU[list[Plan]] = LRU(256)
        # Session key (owner and session id) -> its QPU and plan, once its first job is placed.
        self.session_qpus: dict[str, str] = {}
        self.session_plans: dict[str, Plan | None] = {}
        self._session_locks: dict[str, asyncio.Lock] = {}
        # Placed jobs readied for their queue until the machine says Enqueue (``enqueue``).
        self.ready: dict[str, QueuedJob] = {}

    @property
    def qpus(self) -> dict[str, SimulatedQPU]:
        return self.m.qpus

    # ------------------------------------------------------------------ candidates
    def eligible_qpus(self, options: RunOptions, width: int) -> list[SimulatedQPU]:
        """QPUs that satisfy the deployment config and fit the circuit; a clear error if none."""
        req = options.qpu
        qpus = [q for q in self.qpus.values() if q.online]
        if req.backends:
            unknown = [b for b in req.backends if b not in self.qpus]
            if unknown:
                raise UserError(f"unknown backends {unknown}; the fleet has {sorted(self.qpus)}")
            qpus = [q for q in qpus if q.name in req.backends]
        if req.families:
            qpus = [q for q in qpus if q.family in req.families]
        low = max(width, req.min_qubits)
        high = req.max_qubits if req.max_qubits is not None else 10**9
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
        raise UserError(
            f"no QPU satisfies the configuration qpu: {msgspec.to_builtins(req)}"
            f"{what}; fleet: {sizes}"
        )

    def _candidates(self, live: LiveWorkflow, msg: P.Sample) -> list[SimulatedQPU]:
        """Where the job may run: its loop's or Session's QPU, else the eligible QPUs narrowed
        to the ones the call pins."""
        pinned = live.sessions.get(msg.step_id) or self.session_qpus.get(msg.session)
        if pinned and pinned in self.qpus and self.qpus[pinned].online:
            return [self.qpus[pinned]]
        if msg.session:
            # Its QPU left the fleet (or there was none yet): the Session starts afresh.
            self.session_qpus.pop(msg.session, None)
        qpus = self.eligible_qpus(live.options, msg.num_qubits)
        if msg.qpus:
            unknown = sorted(set(msg.qpus) - set(self.qpus))
            if unknown:
                raise UserError(f"unknown QPUs {unknown}; the fleet has {sorted(self.qpus)}")
            qpus = [q for q in qpus if q.name in set(msg.qpus)]
            if not qpus:
                raise UserError(
                    f"none of {sorted(msg.qpus)} is online and allowed by this workflow's "
                    "configuration"
                )
        return qpus

    # ------------------------------------------------------------------ the pipeline
    def submit(self, msg: P.Sample, identity: bytes, rid: str, reply_as: str = "") -> None:
        """A step called sample(): create its QPU job; the worker gets the reply when it is done."""
        caller: Caller = (identity, rid, reply_as)
        self.m._do(SampleRequested(msg.workflow_id, msg.step_id, msg.shots, caller, msg))

    def start(self, job: JobRecord, msg: P.Sample, seed: int | None) -> None:
        """StartQpuJob: the job's pipeline, in the background (with the seed the machine drew)."""
        self.m.ex.spawn(self._run(job, msg, seed))

    def enqueue(self, job_id: str, qpu: str) -> None:
        """Enqueue: the job the pipeline readied goes into its QPU's queue."""
        self.qpus[qpu].queue.put_nowait(self.ready.pop(job_id))

    def _session_lock(self, key: str) -> Any:
        """Held while a Session's job is placed until the Session has its QPU: its first jobs
        must not land on two QPUs."""
        if not key or key in self.session_qpus:
            return contextlib.nullcontext()
        return self._session_locks.setdefault(key, asyncio.Lock())

    async def _run(self, job: JobRecord, msg: P.Sample, seed: int | None) -> None:
        """Estimate the job on its candidate QPUs, place it, queue it and wait for its counts;
        every state change goes through the machine."""
        m = self.m
        self.estimating += 1
        estimating = True
        try:
            m._do(QpuJobEstimating(job.id))
            live = m.machine.live[job.workflow_id]
            async with self._session_lock(msg.session):
                plan = await self._plan_for(job, msg)
                qpus = self._candidates(live, msg)
                if plan is not None and len(qpus) > 1:
                    # Run where the plan says: a QPU of its template (if the config allows one).
                    members = [q for q in qpus if q.name in set(plan.members)]
                    qpus = members or qpus
                qpus, estimates = await self._fitting_estimates(msg, qpus)
                self.estimating -= 1
                estimating = False
                chosen, est, cause = await self._place(live.options, job, msg, qpus, estimates)
                if msg.session:
                    self.session_qpus.setdefault(msg.session, chosen)
                    self._session_locks.pop(msg.session, None)  # pinned: no lock needed now
            stack = plan.mitigation if plan is not None else "none"
            await self._queue_and_wait(job, msg, seed, chosen, est, cause, stack)
        except asyncio.CancelledError:
            m.qpu_waits.pop(job.id, None)
            m._do(QpuJobCancelled(job.id))
        except Exception as exc:
            m._do(QpuJobFailed(job.id, type(exc).__name__, str(exc)))
        finally:
            if estimating:
                self.estimating -= 1

    async def _queue_and_wait(
        self,
        job: JobRecord,
        msg: P.Sample,
        seed: int | None,
        chosen: str,
        est: Any,
        cause: str,
        stack: str,
    ) -> None:
        m = self.m
        done = asyncio.get_running_loop().create_future()
        m.qpu_waits[job.id] = done
        placed = QpuJobPlaced(
            job.id, chosen, est.fidelity, est.duration_s, est.num_circuits, cause, stack
        )
        self.ready[job.id] = QueuedJob(
            job,
            est.transpiled,
            msg.shots,
            seed,
            done,
            mitigation=stack if stack != "none" else None,
            circuits=msg.circuits,
            parameter_values=msg.parameter_values,
            session=msg.session,
            predicted_s=est.run_s,
        )
        m._do(placed)  # the machine's Enqueue puts it in the queue (``enqueue``)
        if self.ready.pop(job.id, None) is not None:
            m.qpu_waits.pop(job.id, None)
            return  # the workflow ended meanwhile; the machine has answered the worker
        try:
            execution = await done
        finally:
            m.dispatcher.kick()  # the QPU is free: jobs waiting for it may be bound now
        m.qpu_waits.pop(job.id, None)
        m._do(QpuJobFinished(job.id, list(execution.methods), execution.counts))

    async def _fitting_estimates(
        self, msg: P.Sample, qpus: list[SimulatedQPU]
    ) -> tuple[list[SimulatedQPU], list[Any]]:
        """The job's estimates on the candidates; an ISA circuit drops the QPUs it does not fit
        and fails (IsaMismatch, saying why) where it fits none."""
        found = await asyncio.gather(
            *[self._estimate(msg, q) for q in qpus], return_exceptions=True
        )
        kept = [(q, e) for q, e in zip(qpus, found, strict=True) if not isinstance(e, Exception)]
        errors = [e for e in found if isinstance(e, Exception)]
        others = [e for e in errors if not isinstance(e, IsaMismatch)]
        if others or not kept:
            raise (others or errors)[0]
        return [q for q, _ in kept], [e for _, e in kept]

    async def _place(
        self,
        options: RunOptions,
        job: JobRecord,
        msg: P.Sample,
        qpus: list[SimulatedQPU],
        estimates: list[Any],
    ) -> tuple[str, Any, str]:
        """The QPU the job goes to, its estimate there, and the cause its event shows."""
        m = self.m
        by_name = {e.device: e for e in estimates}
        candidates = [
            Candidate(q.name, by_name[q.name].fidelity, q.expected_wait_s()) for q in qpus
        ]
        policy = options.placement or m.placement
        priority = options.priority
        if policy == "qonductor" and len(candidates) > 1:
            # Each QPU's run time in the seconds its queue measures (its wait is in those too).
            runtimes = {q.name: q.job_seconds(by_name[q.name].run_s) for q in qpus}
            name = await m.dispatcher.place(
                job.id,
                msg.num_qubits,
                {c.qpu: (c.fidelity, runtimes[c.qpu]) for c in candidates},
                priority,
            )
        else:
            name = place(candidates, policy, priority).qpu
        est = by_name[name]
        cause = (
            f"on {name} (estimated fidelity {est.fidelity:.3f}, "
            f"{len(candidates)} candidates, policy {policy})"
        )
        if msg.session:
            cause += " for its session" if msg.session in self.session_qpus else ", session opened"
        return name, est, cause

    async def _estimate(self, msg: P.Sample, qpu: SimulatedQPU) -> Any:
        """The job's estimate on one QPU (remembered per circuits, rows and calibration)."""
        key = (msg.fingerprint, msg.rows, qpu.name, qpu.info.calibration_id)
        cached = self.estimates.get(key) if msg.fingerprint else None
        if cached is not None:
            return cached
        estimate = await self.m.ex.estimate(msg, qpu.name)
        return self.estimates.put(key, estimate) if msg.fingerprint else estimate

    # ------------------------------------------------------------------ plans
    async def _plan_for(self, job: JobRecord, msg: P.Sample) -> Plan | None:
        """The step's plan, or the Session's once its first job has one."""
        if msg.session and msg.session in self.session_plans:
            return self.session_plans[msg.session]
        plan = await self._step_plan(job, msg)
        if msg.session:
            self.session_plans.setdefault(msg.session, plan)
        return plan

    async def _step_plan(self, job: JobRecord, msg: P.Sample) -> Plan | None:
        """The plan this step runs with: its first QPU job makes the plans and the machine
        chooses (or asks the user); the step's other jobs (a hybrid loop) wait for the same."""
        m = self.m
        key = (job.workflow_id, msg.step_id)
        future = m.step_plans.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            m.step_plans[key] = future
            plans = await self._plans(msg) if m.ex.plan is not None else []
            m._do(PlansReady(job.id, plans))
        return await asyncio.shield(future)

    async def _plans(self, msg: P.Sample) -> Plans:
        """The resource plans of a step's circuits (remembered per circuits, shots, stacks and
        the fleet's calibrations); a ``PlanError`` when they cannot be made."""
        assert self.m.ex.plan is not None
        calibrations = tuple(sorted((n, q.info.calibration_id) for n, q in self.qpus.items()))
        key = (msg.fingerprint, msg.shots, tuple(msg.stacks), calibrations)
        cached = self.plans.get(key) if msg.fingerprint else None
        if cached is not None:
            return cached
        try:
            plans = await self.m.ex.plan(msg)
        except Exception as exc:  # a lost worker: advice missing, job goes on
            return PlanError(error=f"{type(exc).__name__}: {exc}")
        if msg.fingerprint and isinstance(plans, list) and plans:
            self.plans.put(key, plans)  # Plans are frozen: shared safely
        return plans
