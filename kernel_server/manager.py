"""The job manager: walks each workflow's DAG, runs its steps, places and queues its QPU jobs.

It owns the in-memory workflow runs and every job transition (each one persisted and published as
an event). It does no socket I/O: the orchestrator hands it callables for running a step, estimating
a job on a device and executing it, for publishing an event and for answering a waiting worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import protocol as P
from .config import DEFAULT_SHOTS
from .dataflow import cell_outputs, step_inputs
from .fleet import QueuedJob, SimulatedQPU
from .jobs import JobRecord, JobState, WorkflowRun, WorkflowState, new_id
from .lru import LRU
from .scheduler.cycle import QPUView
from .scheduler.dispatch import OnlineDispatcher
from .scheduler.placement import DEFAULT_PLACEMENT, Candidate, place
from .scheduler.plan_choice import ASSUMED_LOOP_CALLS, choose_plan, parse_plan_option
from .store import Store
from .workers.classical import StepOutcome, StepSpec

log = logging.getLogger("kernel_server.manager")


class UserError(Exception):
    """A request that cannot be served as asked; the message tells the user what to do."""


class CircuitTooWide(UserError):
    pass


class UnknownWorkflow(UserError):
    """No workflow has this id (a client can map it to "not found")."""


@dataclass
class Executors:
    """How the manager gets CPU work done (process pools in the orchestrator)."""

    run_step: Callable[[StepSpec], Awaitable[StepOutcome]]
    estimate: Callable[[bytes, str], Awaitable[Any]]  # -> workers.qpu.DeviceEstimate
    spawn: Callable[[Awaitable[Any]], asyncio.Task]
    # (circuits blob, shots) -> resource plans as dicts (workers.qpu.plan_step); None: no plans
    plan: Callable[[bytes, int], Awaitable[list[dict[str, Any]]]] | None = None


Emit = Callable[[JobRecord, str], None]
Reply = Callable[[bytes, str, P.Message, str], Awaitable[None]]


class JobManager:
    def __init__(
        self,
        store: Store,
        executors: Executors,
        emit: Emit,
        reply: Reply,
        classical_slots: int = 2,
        quantum_step_slots: int = 4,
        placement: str = DEFAULT_PLACEMENT,
        balance: float | None = None,
    ):
        self.store = store
        self.ex = executors
        self.emit = emit
        self.reply = reply
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
        # (workflow, step) -> the plan its QPU jobs run with (None: unmitigated, scheduler's QPU)
        self.step_plans: dict[tuple[str, int | None], asyncio.Future] = {}
        # --plan ask: (workflow, step) -> (future of the user's answer, number of plans)
        self.plan_requests: dict[tuple[str, int | None], tuple[asyncio.Future, int]] = {}
        self.slots = {"classical": classical_slots, "quantum": quantum_step_slots}
        self.step_queue: dict[str, list[tuple[str, int]]] = {"classical": [], "quantum": []}
        self.runs: dict[str, WorkflowRun] = {}
        self.inputs: dict[str, dict[str, bytes]] = {}
        self.options: dict[str, dict[str, Any]] = {}
        self.step_results: dict[str, dict[int, tuple[dict[str, bytes], str]]] = {}
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.sessions: dict[tuple[str, int], str] = {}  # hybrid step -> its pinned QPU
        self.qpu_waits: dict[str, asyncio.Future] = {}
        self.qpus: dict[str, SimulatedQPU] = {}

    # ------------------------------------------------------------------ transitions
    def move(self, job: JobRecord, target: JobState, cause: str = "") -> None:
        job.transition(target, cause)
        self.store.save_job(job)
        self.emit(job, cause)

    def _persist(self, jobs: list[JobRecord], cause: str) -> None:
        for job in jobs:
            self.store.save_job(job)
            self.emit(job, cause)

    def _release(self, jobs: list[JobRecord]) -> None:
        """Wake the QPU-job tasks of cancelled jobs so that the steps waiting on them end too."""
        for job in jobs:
            fut = self.qpu_waits.pop(job.id, None)
            if fut is not None and not fut.done():
                fut.cancel()

    # ------------------------------------------------------------------ workflows
    def adopt(
        self,
        run: WorkflowRun,
        inputs: dict[str, bytes],
        options: dict[str, Any],
        done: dict[int, tuple[dict[str, bytes], str]] | None = None,
    ) -> None:
        self.runs[run.id] = run
        self.inputs[run.id] = inputs
        self.options[run.id] = options
        self.step_results[run.id] = dict(done or {})
        run.start()
        self.store.update_workflow(run)
        if not run.steps:
            self._finish(run)
        self._advance(run)

    def recover(self) -> None:
        """Pick up every workflow a previous orchestrator accepted and did not finish."""
        for workflow_id in self.store.unfinished_workflow_ids():
            run = self.store.load_run(workflow_id)
            if run is None:
                continue
            if self._fail_paid_runs(run):
                continue
            saved = self.store.step_outputs(workflow_id)
            for sid, job in run.steps.items():
                if job.state is JobState.DONE and sid in saved:
                    continue
                if job.state.final:
                    job.state = JobState.RUNNING  # its outputs were lost: run it again
                if job.state is not JobState.PENDING:
                    self.move(job, JobState.PENDING, "requeued after an orchestrator restart")
            for job in run.qpu_jobs.values():
                if not job.state.final:
                    job.error = "orchestrator restarted; the step runs again"
                    self.move(job, JobState.FAILED, job.error)
            done = {
                sid: saved[sid]
                for sid, j in run.steps.items()
                if j.state is JobState.DONE and sid in saved
            }
            row = self.store.workflow_row(workflow_id) or {}
            log.info("recovering workflow %s (%d steps done)", workflow_id, len(done))
            self.adopt(run, self.store.workflow_inputs(workflow_id), row.get("options", {}), done)

    def _is_paid(self, qpu_name: str | None) -> bool:
        """Each run of a job on this QPU costs money (a real IBM QPU, unless configured else)."""
        qpu = self.qpus.get(qpu_name or "")
        return bool(qpu is not None and qpu.info.get("billed", False))

    def _fail_paid_runs(self, run: WorkflowRun) -> bool:
        """A QPU job that was running on a paid QPU when the orchestrator stopped may have run
        (and been billed) already; running its step again would pay twice. Such a workflow
        ends failed, with the reason, instead of being resumed. Returns whether it did."""
        paid = [
            j for j in run.qpu_jobs.values() if j.state is JobState.RUNNING and self._is_paid(j.qpu)
        ]
        if not paid:
            return False
        first = paid[0]
        reason = (
            f"QPU job {first.id} was running on the paid QPU {first.qpu} when the orchestrator "
            "stopped; it is not run again so that it is not paid for twice. Check its result on "
            "IBM Quantum, or run the workflow again."
        )
        for job in paid:
            job.error = reason
            self.move(job, JobState.FAILED, "orchestrator restarted during a paid run")
        cancelled = run.step_failed(first.step_id or 0, reason, stop_all=True)
        self._persist([run.steps[first.step_id or 0]], "orchestrator restarted during a paid run")
        self._persist(cancelled, "an earlier step failed")
        self.store.update_workflow(run)
        log.warning("workflow %s not resumed: %s", run.id, reason)
        return True

    def _advance(self, run: WorkflowRun) -> None:
        for sid in run.ready_steps():
            lane = "classical" if run.steps[sid].kind == "classical" else "quantum"
            self.move(run.steps[sid], JobState.QUEUED, f"waiting for a {lane} worker slot")
            self.step_queue[lane].append((run.id, sid))
        self._dispatch()

    def _dispatch(self) -> None:
        # Quantum and hybrid steps mostly wait on QPUs, so they get their own slots: a notebook
        # full of waiting quantum steps never starves classical work.
        for lane, queue in self.step_queue.items():
            while queue and self.slots[lane] > 0:
                workflow_id, sid = queue.pop(0)
                run = self.runs.get(workflow_id)
                if run is None or run.steps[sid].state is not JobState.QUEUED:
                    continue
                self.slots[lane] -= 1
                self.ex.spawn(self._run_step(run, sid, lane))

    def _step_spec(self, run: WorkflowRun, sid: int) -> StepSpec:
        step = next(s for s in run.graph["steps"] if s["id"] == sid)
        results = {i: values for i, (values, _) in self.step_results[run.id].items()}
        inputs = step_inputs(step, self.inputs[run.id], results)
        return StepSpec(
            workflow_id=run.id,
            step_id=sid,
            kind=step["kind"],
            code=step["source"],
            lineno=step["lineno"],
            cell_source=run.graph.get("source", ""),
            inputs=inputs,
            writes=list(step["writes"]),
            deletes=list(step.get("deletes", [])),
            shots=int(self.options[run.id].get("shots", DEFAULT_SHOTS)),
        )

    async def _run_step(self, run: WorkflowRun, sid: int, lane: str) -> None:
        job = run.steps[sid]
        try:
            spec = self._step_spec(run, sid)
            self.move(job, JobState.RUNNING, f"{lane} worker")
            outcome = await self.ex.run_step(spec)
        except Exception as exc:  # a broken pool or an unpicklable spec: the step fails
            log.exception("step %s of %s could not run", sid, run.id)
            outcome = StepOutcome(
                False, error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__
            )
        finally:
            self.slots[lane] += 1
            self._dispatch()
        job.worker = outcome.worker or job.worker
        if run.state.final or job.state.final:
            return  # cancelled while it ran (or a step before it failed): drop what it produced
        # Kept on failure too: what the step assigned before the error, as Python keeps it.
        self.step_results[run.id][sid] = (outcome.outputs, outcome.stdout)
        self.store.save_step_outputs(run.id, sid, outcome.outputs, outcome.stdout)
        if outcome.ok:
            finished = run.step_done(sid)
            self._persist([job], "step returned")
        else:
            cancelled = run.step_failed(sid, outcome.error or "step failed")
            self._persist([job], outcome.error_type or "failed")
            self._persist(cancelled, "an earlier step failed")
            self._release(cancelled)
            finished = run.state.final
        if finished:
            self._finish(run)
        else:
            self._advance(run)  # steps before a failing one still run, as in Python

    def _finish(self, run: WorkflowRun) -> None:
        """The workflow is final: keep the names it leaves behind (all of them when done; those
        up to the failing step, or of the steps that finished before a cancel, otherwise)."""
        results = self.step_results[run.id]
        values = {sid: outputs for sid, (outputs, _) in results.items()}
        upto = run.failed_step if run.state is WorkflowState.FAILED else None
        outputs = cell_outputs(run.graph, values, upto)
        stdout = "".join(
            results[s["id"]][1]
            for s in run.graph["steps"]
            if s["id"] in results and (upto is None or s["id"] <= upto)
        )
        if not run.state.final:
            run.state = WorkflowState.DONE
        run.finished_at = run.finished_at or time.time()
        self.store.save_outputs(run.id, outputs, stdout)
        self.store.update_workflow(run)
        self._wake(run.id)

    def _wake(self, workflow_id: str) -> None:
        # The workflow is final: forget its per-step plan choices and pinned QPUs, and stop
        # waiting for plan choices nobody will make now.
        for key in [k for k in self.plan_requests if k[0] == workflow_id]:
            answer, _ = self.plan_requests.pop(key)
            answer.cancel()
        for table in (self.step_plans, self.sessions):
            for key in [k for k in table if k[0] == workflow_id]:
                del table[key]
        for fut in self.waiters.pop(workflow_id, []):
            if not fut.done():
                fut.set_result(None)
        self.on_final(workflow_id)

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
        run = self.runs.get(workflow_id) or self.store.load_run(workflow_id)
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
        if run.id not in self.runs:
            return run, []  # finished before this orchestrator started: nothing is live
        if run.state.final:
            return run, []
        cancelled = run.cancel()
        self._persist(cancelled, "workflow cancelled")
        self._release(cancelled)
        self._finish(run)
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
        run = self.runs.get(msg.workflow_id)
        if run is None or run.state.final:
            raise UserError(f"workflow {msg.workflow_id} is no longer running")
        if msg.step_id not in run.steps:
            raise UserError(f"workflow {msg.workflow_id} has no step {msg.step_id}")
        index = sum(1 for j in run.qpu_jobs.values() if j.step_id == msg.step_id)
        job = JobRecord(
            id=new_id("qj"),
            workflow_id=run.id,
            kind="qpu",
            step_id=msg.step_id,
            shots=msg.shots,
            parent=run.steps[msg.step_id].id,
        )
        run.qpu_jobs[job.id] = job
        self.store.save_job(job)
        self.ex.spawn(self._run_qpu_job(run, job, msg, (identity, rid, reply_as), index))

    async def _run_qpu_job(
        self,
        run: WorkflowRun,
        job: JobRecord,
        msg: P.Sample,
        caller: tuple[bytes, str, str],
        index: int,
    ) -> None:
        # caller: the worker's socket identity, its request id, and whose key signs the reply
        # (the step's capability).
        options = self.options[run.id]
        self.estimating += 1
        estimating = True
        try:
            self.move(job, JobState.ESTIMATING)
            pinned = self.sessions.get((run.id, msg.step_id))
            qpus = [self.qpus[pinned]] if pinned else self.eligible_qpus(options, msg.num_qubits)
            plan = await self._step_plan(run, job, msg, index)
            if plan is not None and not pinned:
                # Run where the plan says: a QPU of its template (if the config allows one).
                members = [q for q in qpus if q.name in set(plan.get("members", []))]
                qpus = members or qpus
            estimates = await asyncio.gather(*[self._estimate(msg, q) for q in qpus])
            by_name = {e.device: e for e in estimates}
            candidates = [
                Candidate(q.name, by_name[q.name].fidelity, q.expected_wait_s()) for q in qpus
            ]
            policy = options.get("placement", self.placement)
            priority = options.get("priority", "balanced")
            self.estimating -= 1
            estimating = False
            if policy == "qonductor" and len(candidates) > 1:
                name = await self.dispatcher.place(
                    job.id,
                    msg.num_qubits,
                    {c.qpu: (c.fidelity, by_name[c.qpu].duration_s) for c in candidates},
                    priority,
                )
                chosen = next(c for c in candidates if c.qpu == name)
            else:
                chosen = place(candidates, policy, priority)
            est = by_name[chosen.qpu]
            job.qpu, job.est_fidelity, job.est_duration_s = chosen.qpu, est.fidelity, est.duration_s
            job.num_circuits = est.num_circuits
            if run.steps[msg.step_id].kind == "hybrid":
                self.sessions[(run.id, msg.step_id)] = chosen.qpu  # pin the loop to one QPU
            if run.state.final:
                raise asyncio.CancelledError
            done = asyncio.get_running_loop().create_future()
            self.qpu_waits[job.id] = done
            self.move(
                job,
                JobState.QUEUED,
                f"on {chosen.qpu} (estimated fidelity {est.fidelity:.3f}, "
                f"{len(candidates)} candidates, policy {policy})",
            )
            stack = plan["mitigation"] if plan is not None else None
            await self.qpus[chosen.qpu].queue.put(
                QueuedJob(
                    job,
                    est.transpiled,
                    msg.shots,
                    self._seed(run, job, index),
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
            job.method = ",".join(sorted(set(execution.methods)))
            self.move(job, JobState.DONE, f"simulated with {job.method}")
            await self._answer(caller, P.SampleReply(results=execution.counts, qpu=chosen.qpu))
        except asyncio.CancelledError:
            if estimating:
                self.estimating -= 1
                estimating = False
            if not job.state.final:
                self.move(job, JobState.CANCELLED, "workflow cancelled")
            self.qpu_waits.pop(job.id, None)
            await self._answer(
                caller, P.ErrorReply(type="WorkflowCancelled", message="the workflow was cancelled")
            )
        except Exception as exc:
            if estimating:
                self.estimating -= 1
                estimating = False
            job.error = f"{type(exc).__name__}: {exc}"
            if not job.state.final:
                self.move(job, JobState.FAILED, job.error)
            await self._answer(caller, P.ErrorReply(type=type(exc).__name__, message=str(exc)))

    async def _answer(self, caller: tuple[bytes, str, str], message: P.Message) -> None:
        identity, rid, reply_as = caller
        await self.reply(identity, rid, message, reply_as)

    async def _estimate(self, msg: P.Sample, qpu: SimulatedQPU) -> Any:
        """The job's estimate on one QPU (remembered per circuits and calibration)."""
        key = (msg.fingerprint, qpu.name, qpu.info.get("calibration_id"))
        cached = self.estimates.get(key) if msg.fingerprint else None
        if cached is not None:
            return cached
        estimate = await self.ex.estimate(msg.circuits, qpu.name)
        return self.estimates.put(key, estimate) if msg.fingerprint else estimate

    async def _step_plan(
        self, run: WorkflowRun, job: JobRecord, msg: P.Sample, index: int
    ) -> dict[str, Any] | None:
        """The plan this step runs with: made by its first QPU job, shared by the rest (a hybrid
        loop keeps one plan). The plans, the chosen one marked, are recorded on the first job."""
        key = (run.id, msg.step_id)
        future = self.step_plans.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self.step_plans[key] = future
            options = self.options[run.id]
            plans: list[dict[str, Any]] = []
            chosen: int | None = None
            try:
                if self.ex.plan is not None:
                    plans = await self._plans(msg)
                mode = parse_plan_option(options.get("plan"))
                usable = [p for p in plans if "error" not in p]
                if mode == "ask" and usable:
                    mode = await self._ask_for_plan(run, job, msg, usable)
                chosen = choose_plan(
                    plans, mode, options.get("priority", "balanced"), self._calls(run, msg.step_id)
                )
            except BaseException as exc:
                future.set_exception(exc)
                future.exception()  # retrieved: the other jobs of the step re-raise it
                raise
            if chosen is not None:
                plans = [dict(p, chosen=(i == chosen)) for i, p in enumerate(plans)]
            job.plans = plans
            future.set_result(plans[chosen] if chosen is not None else None)
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

    @staticmethod
    def _calls(run: WorkflowRun, step_id: int) -> int:
        """QPU calls the step makes with its plan: one for a quantum step; for a hybrid step
        what its text shows, or a long loop where it does not say."""
        step = next((s for s in run.graph["steps"] if s["id"] == step_id), {})
        if step.get("kind") != "hybrid":
            return 1
        return int(step.get("expected_calls") or ASSUMED_LOOP_CALLS)

    async def _ask_for_plan(
        self, run: WorkflowRun, job: JobRecord, msg: P.Sample, plans: list[dict[str, Any]]
    ) -> int | str:
        """Show the plans (on the job) and wait for ``choose_plan``; returns its answer."""
        key = (run.id, msg.step_id)
        answer = asyncio.get_running_loop().create_future()
        self.plan_requests[key] = (answer, len(plans))
        job.plans = [dict(p, awaiting_choice=True) for p in plans]
        self.store.save_job(job)
        # Same state (estimating); the event tells widgets the plans are there.
        self.emit(job, f"{len(plans)} plans ready; waiting for a choice")
        try:
            return await answer
        finally:
            self.plan_requests.pop(key, None)

    async def plans_asked(self, workflow_id: str, step_id: int, timeout: float) -> None:
        """Wait (up to ``timeout``) until the step asks for a plan, while it still may: it has
        not started, or its first QPU job is estimating the plans."""
        run = self.run_for(workflow_id)
        deadline = time.monotonic() + timeout
        while (workflow_id, step_id) not in self.plan_requests and time.monotonic() < deadline:
            step = run.steps.get(step_id)
            if run.state.final or step is None or step.state.final:
                return
            if parse_plan_option(self.options.get(run.id, {}).get("plan")) != "ask":
                return
            await asyncio.sleep(0.05)

    def choose_plan(self, workflow_id: str, step_id: int, plan: Any) -> int | str:
        """The user's answer to a ``--plan ask`` step (a plan number or "off")."""
        run = self.run_for(workflow_id)
        request = self.plan_requests.get((run.id, step_id))
        if request is None:
            step = run.steps.get(step_id)
            if step is not None and not step.state.final and not run.state.final:
                raise UserError(
                    f"step {step_id} of workflow {workflow_id} has no plans yet: it still waits "
                    f"for the steps before it ({step.state.value}); choose once "
                    f"%qonductor plans {workflow_id} lists them"
                )
            raise UserError(
                f"workflow {workflow_id} has no step {step_id} waiting for a plan "
                f"(it is {run.state.value}; plans are chosen once, when the step is ready)"
            )
        answer, count = request
        try:
            value = parse_plan_option(plan)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if value in ("auto", "ask") or (isinstance(value, int) and value >= count):
            raise UserError(f"choose a plan number from 0 to {count - 1}, or off; got {plan!r}")
        if not answer.done():
            answer.set_result(value)
        return value

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
        base = self.options[run.id].get("seed")
        if base is None:
            return None
        return (int(base) * 1_000_003 + (job.step_id or 0) * 1009 + index) % (2**31)

    def qpu_job_started(self, job: JobRecord) -> None:
        self.move(job, JobState.RUNNING, f"executing on {job.qpu}")
