"""The orchestrator process: API server, job manager and the QPU fleet in one asyncio loop.

Sockets: a ROUTER for requests (kernels, the CLI, and classical workers calling ``sample``) and a
PUB
for events. Each request is handled in its own task, so a long-poll or a quantum call waiting for
its QPU never blocks the loop. CPU work never runs in the loop: classical steps go to a process
pool, transpilation and noisy simulation to a second one.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from . import protocol as P
from .config import DEFAULT_SHOTS, validate_config
from .fleet import QueuedJob, SimulatedQPU, qpu_runner
from .jobs import JobRecord, JobState, WorkflowRun, WorkflowState, new_id
from .registry import Registry, UnknownImage
from .scheduler.placement import DEFAULT_PLACEMENT, Candidate, place
from .store import Store
from .workers import classical, qpu
from .workers.lifeline import start_lifeline

log = logging.getLogger("kernel_server")

Handler = Callable[[Any, bytes, str], Awaitable[P.Message | None]]


class UserError(Exception):
    """A request that cannot be served as asked; the message tells the user what to do."""


class CircuitTooWide(UserError):
    pass


class Orchestrator:
    def __init__(
        self,
        home: Path,
        fleet: list[str],
        classical_slots: int = 2,
        quantum_step_slots: int = 4,
        qpu_workers: int = 2,
        placement: str = DEFAULT_PLACEMENT,
    ):
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        self.fleet_names = list(fleet)
        self.store = Store(self.home / "state.db")
        self.registry = Registry(self.home / "images")
        self.placement = placement
        self.classical_slots = {"classical": classical_slots, "quantum": quantum_step_slots}
        self.qpu_worker_count = qpu_workers
        self.runs: dict[str, WorkflowRun] = {}
        self.inputs: dict[str, dict[str, bytes]] = {}
        self.options: dict[str, dict[str, Any]] = {}
        self.step_results: dict[str, dict[int, tuple[dict[str, bytes], str]]] = {}
        self.waiters: dict[str, list[asyncio.Future]] = {}
        self.sessions: dict[tuple[str, int], str] = {}
        self.qpu_waits: dict[str, asyncio.Future] = {}
        self.step_queue: dict[str, list[tuple[str, int]]] = {"classical": [], "quantum": []}
        self.qpus: dict[str, SimulatedQPU] = {}
        self.dropped_messages = 0
        self.started_at = time.time()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self.handlers: dict[str, Handler] = {
            "ping": self.h_ping,
            "shutdown": self.h_shutdown,
            "create_workflow": self.h_create,
            "deploy": self.h_deploy,
            "invoke": self.h_invoke,
            "status": self.h_status,
            "results": self.h_results,
            "list_images": self.h_images,
            "list_workflows": self.h_workflows,
            "cancel": self.h_cancel,
            "fleet": self.h_fleet,
            "sample": self.h_sample,
        }

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, host: str = "127.0.0.1") -> None:
        self.loop = asyncio.get_running_loop()
        self.ctx = zmq.asyncio.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        router_port = self.router.bind_to_random_port(f"tcp://{host}")
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        pub_port = self.pub.bind_to_random_port(f"tcp://{host}")
        self.router_endpoint = f"tcp://{host}:{router_port}"
        key = P.new_key()
        self.signer = P.Signer(key.encode())
        spawn = multiprocessing.get_context("spawn")  # never fork a process holding zmq sockets
        n_step = sum(self.classical_slots.values())
        self.step_pool = ProcessPoolExecutor(
            n_step,
            mp_context=spawn,
            initializer=classical.init_worker,
            initargs=(self.router_endpoint, key),
        )
        self.qpu_pool = ProcessPoolExecutor(
            self.qpu_worker_count, mp_context=spawn, initializer=start_lifeline
        )
        self.conn = P.ConnectionInfo(
            router=self.router_endpoint,
            pub=f"tcp://{host}:{pub_port}",
            key=key,
            pid=os.getpid(),
            started_at=self.started_at,
        )
        self.fleet_ready = asyncio.Event()
        self._spawn(self._load_fleet())
        self.conn.write(P.connection_file_path())
        log.info("orchestrator %s listening on %s", os.getpid(), self.router_endpoint)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stop.set)
        receiver = self._spawn(self._receive_loop())
        await self._stop.wait()
        receiver.cancel()
        await self._close()

    async def _close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        path = P.connection_file_path()
        try:
            if P.ConnectionInfo.read(path).pid == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass
        for pool in (self.step_pool, self.qpu_pool):
            # A step may be stuck in user code; do not wait for it, end the workers.
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()
        self.router.close()
        self.pub.close()
        self.ctx.term()
        self.store.close()
        log.info("orchestrator stopped")

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task failed", exc_info=task.exception())

    async def _load_fleet(self) -> None:
        infos = await self.loop.run_in_executor(
            self.qpu_pool, qpu.device_catalogue, self.fleet_names
        )
        for info in infos:
            self.store.upsert_device(info)
            self.qpus[info["name"]] = SimulatedQPU(info["name"], info)
        for q in self.qpus.values():
            self._spawn(qpu_runner(q, self._execute, self._qpu_job_started))
        self.fleet_ready.set()
        # Warm every worker so that the first job does not pay for imports and device loading.
        for _ in range(self.qpu_worker_count):
            self.loop.run_in_executor(self.qpu_pool, qpu.warm_up, list(self.qpus))
        for _ in range(sum(self.classical_slots.values())):
            self.loop.run_in_executor(self.step_pool, classical.warm_up)
        self._recover()

    # ------------------------------------------------------------------ messaging
    async def _receive_loop(self) -> None:
        while True:
            frames = await self.router.recv_multipart()
            if len(frames) < 2:
                self.dropped_messages += 1
                continue
            self._spawn(self._handle(frames[0], frames[1:]))

    async def _handle(self, identity: bytes, frames: list[bytes]) -> None:
        try:
            env = P.decode(frames, self.signer)
        except P.ProtocolError as exc:
            self.dropped_messages += 1
            log.warning("dropped a message: %s", exc)
            return
        handler = self.handlers.get(env.message.op)
        try:
            if handler is None:
                raise UserError(f"operation {env.message.op!r} is not a request")
            reply = await handler(env.message, identity, env.request_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, (UserError, UnknownImage, ValueError)):
                log.exception("handler %s failed", env.message.op)
            reply = P.ErrorReply(type=type(exc).__name__, message=str(exc))
        if reply is not None:
            await self._reply(identity, env.request_id, reply)

    async def _reply(self, identity: bytes, request_id: str, message: P.Message) -> None:
        await self.router.send_multipart([identity, *P.encode(message, self.signer, request_id)])

    def _release(self, jobs: list[JobRecord]) -> None:
        """Wake the QPU-job tasks of cancelled jobs so that their steps end too."""
        for job in jobs:
            fut = self.qpu_waits.pop(job.id, None)
            if fut is not None and not fut.done():
                fut.cancel()

    def _event(self, job: JobRecord, detail: str = "") -> None:
        ev = P.Event(
            workflow_id=job.workflow_id,
            job_id=job.id,
            step_id=job.step_id,
            kind=job.kind,
            state=job.state.value,
            qpu=job.qpu,
            detail=detail,
            ts=time.time(),
        )
        self.store.add_event(ev.ts, ev.workflow_id, ev.job_id, ev.kind, ev.state, detail)
        frames = P.encode(ev, self.signer)
        self._spawn(self.pub.send_multipart([ev.topic, *frames]))

    def _move(self, job: JobRecord, target: JobState, cause: str = "") -> None:
        job.transition(target, cause)
        self.store.save_job(job)
        self._event(job, cause)

    # ------------------------------------------------------------------ simple requests
    async def h_ping(self, msg: P.Ping, identity: bytes, rid: str) -> P.Message:
        return P.Pong(pid=os.getpid(), started_at=self.started_at, fleet=list(self.qpus))

    async def h_shutdown(self, msg: P.Shutdown, identity: bytes, rid: str) -> P.Message:
        self.loop.call_later(0.05, self._stop.set)
        return P.Ok(data={"pid": os.getpid()})

    async def h_create(self, msg: P.CreateWorkflow, identity: bytes, rid: str) -> P.Message:
        image = self.registry.create(msg.source, msg.graph, msg.config, msg.name, msg.bound)
        return P.Ok(data={"image_id": image.id, "name": image.name})

    async def h_deploy(self, msg: P.Deploy, identity: bytes, rid: str) -> P.Message:
        image = self.registry.deploy(msg.image_id, msg.config)
        await self.fleet_ready.wait()
        self._eligible_qpus(image.deployed or {}, width=0)  # refuse configs no QPU satisfies
        return P.Ok(data={"image_id": image.id, "config": image.deployed})

    async def h_images(self, msg: P.ListImages, identity: bytes, rid: str) -> P.Message:
        return P.Ok(data={"images": [i.summary() for i in self.registry.list()]})

    async def h_workflows(self, msg: P.ListWorkflows, identity: bytes, rid: str) -> P.Message:
        return P.Ok(data={"workflows": self.store.list_workflows(msg.limit)})

    async def h_fleet(self, msg: P.GetFleet, identity: bytes, rid: str) -> P.Message:
        await self.fleet_ready.wait()
        return P.Ok(
            data={
                "devices": [q.status() for q in self.qpus.values()],
                "dropped_messages": self.dropped_messages,
            }
        )

    # ------------------------------------------------------------------ workflows
    async def h_invoke(self, msg: P.Invoke, identity: bytes, rid: str) -> P.Message:
        image = self.registry.get(msg.image_id)
        if image.deployed is None:
            raise UserError(f"image {image.id} is not deployed; call deploy({image.id!r}) first")
        options = validate_config({**image.deployed, **msg.options})
        bound = self.registry.bound(image.id)
        missing = [n for n in image.graph["inputs"] if n not in msg.inputs and n not in bound]
        optional = set(image.graph.get("optional_inputs", []))
        missing = [n for n in missing if n not in optional]
        if missing:
            raise UserError("missing inputs: " + ", ".join(missing))
        workflow_id = msg.workflow_id or new_id("wf")
        await self.fleet_ready.wait()
        if image.graph.get("steps") and any(s["kind"] != "classical" for s in image.graph["steps"]):
            self._eligible_qpus(options, width=0)
        run = WorkflowRun.new(workflow_id, image.id, image.graph)
        inputs = {**bound, **msg.inputs}
        if not self.store.insert_workflow(run, image.name, options, inputs):
            return P.Ok(data={"workflow_id": workflow_id, "duplicate": True})
        self._adopt(run, inputs, options)
        return P.Ok(data={"workflow_id": workflow_id})

    def _adopt(
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

    def _recover(self) -> None:
        """Pick up every workflow a previous orchestrator accepted and did not finish."""
        for workflow_id in self.store.unfinished_workflow_ids():
            run = self.store.load_run(workflow_id)
            if run is None:
                continue
            saved = self.store.step_outputs(workflow_id)
            for sid, job in run.steps.items():
                if job.state is JobState.DONE and sid in saved:
                    continue
                if job.state is JobState.DONE or job.state.final:
                    job.state = JobState.RUNNING  # its outputs were lost: run it again
                if job.state is not JobState.PENDING:
                    self._move(job, JobState.PENDING, "requeued after an orchestrator restart")
            for job in run.qpu_jobs.values():
                if not job.state.final:
                    job.error = "orchestrator restarted; the step runs again"
                    self._move(job, JobState.FAILED, job.error)
            row = self.store.workflow_row(workflow_id) or {}
            done = {
                sid: saved[sid]
                for sid, j in run.steps.items()
                if j.state is JobState.DONE and sid in saved
            }
            log.info("recovering workflow %s (%d steps done)", workflow_id, len(done))
            self._adopt(run, self.store.workflow_inputs(workflow_id), row.get("options", {}), done)

    def _advance(self, run: WorkflowRun) -> None:
        for sid in run.ready_steps():
            job = run.steps[sid]
            lane = "classical" if job.kind == "classical" else "quantum"
            self._move(job, JobState.QUEUED, f"waiting for a {lane} worker slot")
            self.step_queue[lane].append((run.id, sid))
        self._dispatch()

    def _dispatch(self) -> None:
        for lane, queue in self.step_queue.items():
            while queue and self.classical_slots[lane] > 0:
                workflow_id, sid = queue.pop(0)
                run = self.runs.get(workflow_id)
                if run is None or run.steps[sid].state is not JobState.QUEUED:
                    continue
                self.classical_slots[lane] -= 1
                self._spawn(self._run_step(run, sid, lane))

    def _step_spec(self, run: WorkflowRun, sid: int) -> classical.StepSpec:
        step = next(s for s in run.graph["steps"] if s["id"] == sid)
        inputs: dict[str, bytes] = {}
        results = self.step_results[run.id]
        for name, producer in step["producers"].items():
            if producer is None:
                source = self.inputs[run.id]
            else:
                source = results.get(int(producer), ({}, ""))[0]
            if name in source:
                inputs[name] = source[name]
        options = self.options[run.id]
        return classical.StepSpec(
            workflow_id=run.id,
            step_id=sid,
            kind=step["kind"],
            code=step["source"],
            lineno=step["lineno"],
            cell_source=run.graph.get("source", ""),
            inputs=inputs,
            writes=list(step["writes"]),
            shots=int(options.get("shots", DEFAULT_SHOTS)),
        )

    async def _run_step(self, run: WorkflowRun, sid: int, lane: str) -> None:
        job = run.steps[sid]
        try:
            spec = self._step_spec(run, sid)
            self._move(job, JobState.RUNNING, f"{lane} worker")
            outcome = await self.loop.run_in_executor(self.step_pool, classical.run_step, spec)
        except Exception as exc:  # a broken pool or an unpicklable spec: the step fails
            log.exception("step %s of %s could not run", sid, run.id)
            outcome = classical.StepOutcome(
                False, error=f"{type(exc).__name__}: {exc}", error_type=type(exc).__name__
            )
        finally:
            self.classical_slots[lane] += 1
            self._dispatch()
        if run.state.final:
            return  # cancelled or failed while it ran: drop what it produced
        if outcome.ok:
            self.step_results[run.id][sid] = (outcome.outputs, outcome.stdout)
            self.store.save_step_outputs(run.id, sid, outcome.outputs, outcome.stdout)
            finished = run.step_done(sid)
            self.store.save_job(job)
            self._event(job, "step returned")
            if finished:
                self._finish(run)
            else:
                self._advance(run)
        else:
            self.step_results[run.id][sid] = ({}, outcome.stdout)
            cancelled = run.step_failed(sid, outcome.error or "step failed")
            self.store.save_job(job)
            self._event(job, outcome.error_type or "failed")
            for other in cancelled:
                self.store.save_job(other)
                self._event(other, "an earlier step failed")
            self._release(cancelled)
            self.store.update_workflow(run)
            self._wake(run.id)

    def _finish(self, run: WorkflowRun) -> None:
        outputs: dict[str, bytes] = {}
        results = self.step_results[run.id]
        for name, sid in run.graph["outputs"].items():
            values = results.get(int(sid), ({}, ""))[0]
            if name in values:
                outputs[name] = values[name]
        stdout = "".join(results.get(s["id"], ({}, ""))[1] for s in run.graph["steps"])
        run.state = WorkflowState.DONE
        run.finished_at = run.finished_at or time.time()
        self.store.save_outputs(run.id, outputs, stdout)
        self.store.update_workflow(run)
        self._wake(run.id)

    def _wake(self, workflow_id: str) -> None:
        for fut in self.waiters.pop(workflow_id, []):
            if not fut.done():
                fut.set_result(None)

    def _run_for(self, workflow_id: str) -> WorkflowRun:
        run = self.runs.get(workflow_id) or self.store.load_run(workflow_id)
        if run is None:
            raise UserError(f"no workflow {workflow_id!r}; list them with list_workflows()")
        return run

    def _workflow_reply(self, run: WorkflowRun, with_outputs: bool) -> P.WorkflowReply:
        row = self.store.workflow_row(run.id) or {}
        reply = P.WorkflowReply(
            workflow_id=run.id,
            state=run.state.value,
            steps=run.step_summaries(),
            error=run.error,
            info={
                "image_id": run.image_id,
                "name": row.get("name"),
                "created_at": run.created_at,
                "finished_at": run.finished_at,
                "options": row.get("options", {}),
            },
        )
        if run.state is WorkflowState.DONE:
            reply.stdout = row.get("stdout") or ""
            if with_outputs:
                reply.outputs = self.store.workflow_outputs(run.id) or {}
        elif run.state.final:
            reply.stdout = "".join(
                v[1] for _, v in sorted(self.step_results.get(run.id, {}).items())
            )
        return reply

    async def h_status(self, msg: P.GetStatus, identity: bytes, rid: str) -> P.Message:
        return self._workflow_reply(self._run_for(msg.workflow_id), with_outputs=False)

    async def h_results(self, msg: P.GetResults, identity: bytes, rid: str) -> P.Message:
        run = self._run_for(msg.workflow_id)
        if not run.state.final and msg.wait_s > 0:
            fut = self.loop.create_future()
            self.waiters.setdefault(run.id, []).append(fut)
            try:
                await asyncio.wait_for(fut, timeout=min(msg.wait_s, 30.0))
            except asyncio.TimeoutError:
                pass
        return self._workflow_reply(run, with_outputs=True)

    async def h_cancel(self, msg: P.Cancel, identity: bytes, rid: str) -> P.Message:
        run = self._run_for(msg.workflow_id)
        if run.id not in self.runs:
            return P.Ok(data={"state": run.state.value, "cancelled": []})
        cancelled = run.cancel()
        for job in cancelled:
            self.store.save_job(job)
            self._event(job, "workflow cancelled")
        self._release(cancelled)
        self.store.update_workflow(run)
        self._wake(run.id)
        return P.Ok(data={"state": run.state.value, "cancelled": [j.id for j in cancelled]})

    # ------------------------------------------------------------------ quantum calls
    def _eligible_qpus(self, options: dict[str, Any], width: int) -> list[SimulatedQPU]:
        req = options.get("qpu", {})
        qpus = [q for q in self.qpus.values() if q.online]
        if req.get("backends"):
            unknown = [b for b in req["backends"] if b not in self.qpus]
            if unknown:
                raise UserError(f"unknown backends {unknown}; the fleet has {sorted(self.qpus)}")
            qpus = [q for q in qpus if q.name in req["backends"]]
        if req.get("families"):
            qpus = [q for q in qpus if q.family in req["families"]]
        min_q = max(width, int(req.get("min_qubits", 0)))
        fitting = [
            q
            for q in qpus
            if q.num_qubits >= min_q and q.num_qubits <= int(req.get("max_qubits", 10**9))
        ]
        if not fitting:
            sizes = ", ".join(f"{q.name} ({q.num_qubits})" for q in self.qpus.values())
            if width and width > max((q.num_qubits for q in self.qpus.values()), default=0):
                raise CircuitTooWide(
                    f"the circuit needs {width} qubits but the largest QPU has "
                    f"{max(q.num_qubits for q in self.qpus.values())}; fleet: "
                    f"{sizes}. Reduce the circuit's width (or cut it)."
                )
            raise UserError(
                f"no QPU satisfies the configuration {req} for a {width}-qubit "
                f"circuit; fleet: {sizes}"
            )
        return fitting

    async def h_sample(self, msg: P.Sample, identity: bytes, rid: str) -> P.Message | None:
        run = self.runs.get(msg.workflow_id)
        if run is None or run.state.final:
            raise UserError(f"workflow {msg.workflow_id} is no longer running")
        step_job = run.steps[msg.step_id]
        job = JobRecord(
            id=new_id("qj"),
            workflow_id=run.id,
            kind="qpu",
            step_id=msg.step_id,
            shots=msg.shots,
            parent=step_job.id,
        )
        run.qpu_jobs[job.id] = job
        self.store.save_job(job)
        self._spawn(self._run_qpu_job(run, job, msg, identity, rid))
        return None  # the reply comes when the QPU job is done

    async def _run_qpu_job(
        self, run: WorkflowRun, job: JobRecord, msg: P.Sample, identity: bytes, rid: str
    ) -> None:
        options = self.options[run.id]
        try:
            self._move(job, JobState.ESTIMATING)
            session = self.sessions.get((run.id, msg.step_id))
            if session:
                qpus = [self.qpus[session]]
            else:
                qpus = self._eligible_qpus(options, msg.num_qubits)
            estimates = await asyncio.gather(
                *[
                    self.loop.run_in_executor(
                        self.qpu_pool, qpu.estimate_on_device, msg.circuits, q.name, 0
                    )
                    for q in qpus
                ]
            )
            by_name = {e.device: e for e in estimates}
            candidates = [
                Candidate(q.name, by_name[q.name].fidelity, q.expected_wait_s()) for q in qpus
            ]
            chosen = place(
                candidates,
                options.get("placement", self.placement),
                options.get("priority", "balanced"),
            )
            est = by_name[chosen.qpu]
            job.qpu, job.est_fidelity, job.est_duration_s = chosen.qpu, est.fidelity, est.duration_s
            job.num_circuits = est.num_circuits
            if run.steps[msg.step_id].kind == "hybrid":
                self.sessions[(run.id, msg.step_id)] = chosen.qpu  # pin the loop to one QPU
            if run.state.final:
                raise asyncio.CancelledError
            done = self.loop.create_future()
            self.qpu_waits[job.id] = done
            seed = self._seed(run, job)
            self._move(
                job,
                JobState.QUEUED,
                f"on {chosen.qpu} (estimated fidelity {est.fidelity:.3f}, "
                f"{len(candidates)} candidates, policy {self.placement})",
            )
            await self.qpus[chosen.qpu].queue.put(
                QueuedJob(job, est.transpiled, msg.shots, seed, done)
            )
            result = await done
            self.qpu_waits.pop(job.id, None)
            self._move(job, JobState.DONE, "results returned to the step")
            await self._reply(identity, rid, P.SampleReply(results=result, qpu=chosen.qpu))
        except asyncio.CancelledError:
            if not job.state.final:
                self._move(job, JobState.CANCELLED, "workflow cancelled")
            self.qpu_waits.pop(job.id, None)
            await self._reply(
                identity,
                rid,
                P.ErrorReply(type="WorkflowCancelled", message="the workflow was cancelled"),
            )
        except Exception as exc:
            job.error = f"{type(exc).__name__}: {exc}"
            if not job.state.final:
                self._move(job, JobState.FAILED, job.error)
            await self._reply(
                identity, rid, P.ErrorReply(type=type(exc).__name__, message=str(exc))
            )

    def _seed(self, run: WorkflowRun, job: JobRecord) -> int | None:
        base = self.options[run.id].get("seed")
        if base is None:
            return None
        index = (
            sum(
                1
                for j in run.qpu_jobs.values()
                if j.step_id == job.step_id and j.created_at <= job.created_at
            )
            - 1
        )
        return (int(base) * 1_000_003 + (job.step_id or 0) * 1009 + index) % (2**31)

    def _qpu_job_started(self, job: JobRecord) -> None:
        self._move(job, JobState.RUNNING, f"executing on {job.qpu}")

    async def _execute(self, device: str, transpiled: bytes, shots: int, seed: int | None) -> bytes:
        return await self.loop.run_in_executor(
            self.qpu_pool, qpu.execute_on_device, device, transpiled, shots, seed
        )
