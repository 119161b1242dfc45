"""The orchestrator process: API server, job manager and the QPU fleet in one asyncio loop.

Sockets: a ROUTER for requests (kernels, the CLI, and classical workers calling ``sample``) and a
PUB for events. Each request is handled in its own task, so a long-poll or a quantum call waiting
for its QPU never blocks the loop. CPU work never runs in the loop: classical steps go to a process
pool, transpilation and noisy simulation to a second one. What happens to workflows and jobs is the
job manager's business (``manager.py``); this module does I/O and the request handlers.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from kernel_server.compute.local import make_compute
from kernel_server.control.ibm_link import IBMLink
from kernel_server.control.manager import Executors, JobManager, UnknownWorkflow, UserError
from kernel_server.control.registry import Registry, UnknownImage
from kernel_server.control.store import Store
from kernel_server.core.deployment import (
    DEFAULT_PLACEMENT,
    ConfigError,
    classical_request,
    validate_config,
)
from kernel_server.core.jobs import JobRecord, WorkflowRun, new_id
from kernel_server.fleet.queues import SimulatedQPU, background_arrivals, qpu_runner
from kernel_server.fleet.spec import FleetSpec
from kernel_server.scheduler.classical import NoFeasibleNode
from kernel_server.tasks import qpu
from kernel_server.tasks import step as classical
from kernel_server.wire import protocol as P
from kernel_server.wire.circuits import read_circuits

log = logging.getLogger("kernel_server")

# Who signed the request being handled ("" is the orchestrator's own key: full rights).
CURRENT_USER: contextvars.ContextVar[str] = contextvars.ContextVar("qonductor_user", default="")
# Whose key signs the replies to it: the user's, or the capability's the request was signed with.
CURRENT_SIGNER: contextvars.ContextVar[str] = contextvars.ContextVar("qonductor_signer", default="")

# How long past a step's timeout the orchestrator waits for the worker's own report of it.
STEP_TIMEOUT_GRACE_S = 10.0
# How long a plan choice waits for that step's plans to be made (the client waits 60 s).
CHOOSE_WAIT_S = 45.0

Handler = Callable[[Any, bytes, str], Awaitable[P.Message | None]]


class Orchestrator:
    def __init__(
        self,
        home: Path,
        fleet: list[str] | FleetSpec,
        classical_slots: int = 2,
        quantum_step_slots: int = 4,
        qpu_workers: int = 2,
        placement: str = DEFAULT_PLACEMENT,
        cluster: str | None = None,
        public_host: str | None = None,
    ):
        self.home = Path(home)
        # Also listen on this host, with CURVE (security.curve), for users on other machines.
        self.public_host = public_host
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o700)
        self.fleet_spec = fleet if isinstance(fleet, FleetSpec) else FleetSpec(tuple(fleet))
        # The simulated QPUs: estimator templates and plans are made over these.
        self.fleet_names = list(self.fleet_spec.simulated)
        self.store = Store(self.home / "state.db")
        self.registry = Registry(self.home / "images")
        self.placement = placement
        self.step_workers = classical_slots + quantum_step_slots
        self.qpu_worker_count = qpu_workers
        # Local process pools, or a Dask cluster when ``cluster`` names its scheduler.
        self.compute = make_compute(cluster, self.step_workers, qpu_workers)
        # IBM Quantum QPUs (real, or fake backends in local testing mode) beside the simulated.
        self.ibm = IBMLink(self.fleet_spec.ibm) if self.fleet_spec.ibm else None
        self._ibm_threads = ThreadPoolExecutor(4, thread_name_prefix="qonductor-ibm")
        # Reading circuits (QPY) off quantum calls: short, but not in the event loop.
        self._io_threads = ThreadPoolExecutor(2, thread_name_prefix="qonductor-io")
        self._runners: dict[str, asyncio.Task] = {}
        self.manager = JobManager(
            self.store,
            Executors(
                run_step=self._run_step,
                estimate=self._estimate,
                spawn=self._spawn,
                plan=self._plan,
            ),
            emit=self._event,
            reply=self._reply,
            classical_slots=classical_slots,
            quantum_step_slots=quantum_step_slots,
            placement=placement,
            balance=self.fleet_spec.balance,
        )
        self.qpus: dict[str, SimulatedQPU] = self.manager.qpus
        self.dropped_messages = 0
        # Why messages were dropped (bad_signature, replayed, stale, oversized, malformed).
        self.dropped_by_reason: dict[str, int] = {}
        self.replay_guard = P.ReplayGuard()
        self.limits = self.fleet_spec.limits
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
            "choose_plan": self.h_choose_plan,
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
        public = await self._listen_public() if self.public_host else {}
        key = P.new_key()
        self.signer = P.Signer(key.encode())
        # Users of a shared orchestrator each sign with their own key (users.json).
        self.keyring = P.KeyRing(self.signer, self.home / "users.json")
        self.manager.on_final = self.keyring.revoke  # a workflow's capability ends with it
        self._owners: dict[str, str] = {}
        self._sealers: dict[bytes, P.EventSealer] = {}
        # Step processes get the router's address only: each step brings its own capability.
        await self.compute.start(self.router_endpoint, self.home)
        self.conn = P.ConnectionInfo(
            router=self.router_endpoint,
            pub=f"tcp://{host}:{pub_port}",
            key=key,
            pid=os.getpid(),
            started_at=self.started_at,
            max_payload_bytes=self.limits.max_payload_bytes,
            **public,
        )
        self.fleet_ready = asyncio.Event()
        self._spawn(self._load_fleet())
        self.conn.write(P.server_connection_file_path())
        log.info("orchestrator %s listening on %s", os.getpid(), self.router_endpoint)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stop.set)
        receiver = self._spawn(self._receive_loop())
        await self._stop.wait()
        receiver.cancel()
        await self._close()

    async def _listen_public(self) -> dict[str, str]:
        """Bind the router and the event socket once more on the public host, speaking CURVE.

        Options are copied into each endpoint when it is bound, so the loopback endpoints bound
        before stay plain and the public ones, bound after these options, are CURVE only.
        """
        from zmq.auth.asyncio import AsyncioAuthenticator

        from kernel_server.security.curve import ZAP_DOMAIN, AllowList

        public_key, secret_key = zmq.curve_keypair()
        self.authenticator = AsyncioAuthenticator(self.ctx)
        self.authenticator.start()
        self.allow_list = AllowList(self.home)
        # The callback is looked up by the sockets' ZAP domain: under "*" it would never be asked
        # and every CURVE client would be refused.
        self.authenticator.configure_curve_callback(
            ZAP_DOMAIN.decode(), credentials_provider=self.allow_list
        )
        endpoints = {}
        for name, sock in (("public_router", self.router), ("public_pub", self.pub)):
            sock.curve_server = True
            sock.curve_secretkey = secret_key
            sock.zap_domain = ZAP_DOMAIN
            port = sock.bind_to_random_port(f"tcp://{self.public_host}")
            endpoints[name] = f"tcp://{self.public_host}:{port}"
        log.info("CURVE endpoints on %s: %s", self.public_host, endpoints)
        return {**endpoints, "curve_server_key": public_key.decode()}

    async def _close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        path = P.server_connection_file_path()
        try:
            if P.ConnectionInfo.read(path).pid == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass
        await self.compute.close()
        self._ibm_threads.shutdown(wait=False, cancel_futures=True)
        if getattr(self, "authenticator", None) is not None:
            self.authenticator.stop()
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
        infos = await self.compute.plan(qpu.device_catalogue, self.fleet_names)
        if self.ibm is not None:
            infos += await self.loop.run_in_executor(self._ibm_threads, self.ibm.load)
        for info in infos:
            self.store.upsert_device(info)
            self.qpus[info["name"]] = SimulatedQPU(info["name"], info)
        for q in self.qpus.values():
            self._runners[q.name] = self._spawn(
                qpu_runner(q, self._execute, self.manager.qpu_job_started)
            )
        load = self.fleet_spec.background
        if load is not None:  # other users share the simulated QPUs; IBM's queues are real
            for q in self.qpus.values():
                if q.info.get("kind") != "ibm":
                    self._spawn(
                        background_arrivals(q, load.jobs_per_hour, load.mean_runtime_s, load.seed)
                    )
        if self.ibm is not None and self.ibm.devices:
            self._spawn(self._watch_ibm())
        self.fleet_ready.set()
        self.loop.run_in_executor(self._io_threads, _import_qiskit)  # read_circuits needs it
        # Warm every worker so that the first job does not pay for imports and device loading.
        self.compute.warm_up(list(self.qpus))
        self.manager.recover()

    # ------------------------------------------------------------------ messaging
    async def _receive_loop(self) -> None:
        while True:
            frames = await self.router.recv_multipart()
            if len(frames) < 2:
                self._drop("malformed")
                continue
            self._spawn(self._handle(frames[0], frames[1:]))

    async def _handle(self, identity: bytes, frames: list[bytes]) -> None:
        try:
            env = P.decode(frames, self.keyring, self.limits.max_payload_bytes)
            self.replay_guard.check(env)
        except P.InvalidMessage as exc:
            # Signed by someone we know, but a field has the wrong type or is out of range:
            # tell them which, run nothing.
            self._drop(exc.reason)
            if exc.envelope is not None:
                try:
                    self.replay_guard.check(exc.envelope)
                except P.ProtocolError:
                    return
                reply = P.ErrorReply(type="InvalidMessage", message=str(exc))
                await self._reply(
                    identity, exc.envelope.request_id, reply, self._signer_name(exc.envelope)
                )
            return
        except P.ProtocolError as exc:
            self._drop(exc.reason)
            log.warning("dropped a message: %s", exc)
            return
        handler = self.handlers.get(env.message.op)
        CURRENT_USER.set(env.user)  # this request's task only (each _handle is its own task)
        CURRENT_SIGNER.set(self._signer_name(env))
        try:
            if handler is None:
                raise UserError(f"operation {env.message.op!r} is not a request")
            if env.scope is not None:
                self._check_capability(env)
            reply = await handler(env.message, identity, env.request_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, (UserError, UnknownImage, ConfigError, ValueError)):
                log.exception("handler %s failed", env.message.op)
            reply = P.ErrorReply(type=type(exc).__name__, message=str(exc))
        if reply is not None:
            await self._reply(identity, env.request_id, reply, self._signer_name(env))

    @staticmethod
    def _signer_name(env: P.Envelope) -> str:
        """Whose key signs the reply: the capability the request came with, else its user."""
        return env.user if env.scope is None else env.capability

    def _check_capability(self, env: P.Envelope) -> None:
        """A workflow's capability signs that workflow's quantum calls while it runs: nothing
        else (no listing, no status, no cancel, not another workflow)."""
        message = env.message
        run = self.manager.runs.get(env.scope or "")
        if (
            not isinstance(message, P.Sample)
            or message.workflow_id != env.scope
            or run is None
            or run.state.final
        ):
            raise UserError(
                f"a step's capability only runs quantum calls of its own workflow while it runs; "
                f"{message.op!r} is not one"
            )

    def _drop(self, reason: str) -> None:
        """Count a message we refused; it is never executed."""
        self.dropped_messages += 1
        self.dropped_by_reason[reason] = self.dropped_by_reason.get(reason, 0) + 1

    async def _reply(
        self, identity: bytes, request_id: str, message: P.Message, user: str = ""
    ) -> None:
        signer = self.keyring.signer_for(user)
        await self.router.send_multipart([identity, *P.encode(message, signer, request_id)])

    def _owner_of(self, workflow_id: str) -> str:
        owner = self._owners.get(workflow_id)
        if owner is None:  # a workflow's owner never changes: ask the store once
            owner = self._owners[workflow_id] = self.store.workflow_owner(workflow_id) or ""
        return owner

    def _check_owner(self, workflow_id: str) -> None:
        """A user sees and touches only their own workflows; to them others' do not exist."""
        user = CURRENT_USER.get()
        if user and self._owner_of(workflow_id) != user:
            raise UnknownWorkflow(f"no workflow {workflow_id!r}; list them with list_workflows()")

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
        # Sealed with its owner's key: nobody else subscribed to the socket can read it.
        key = self.keyring.user_key(self._owner_of(job.workflow_id))
        sealer = self._sealers.get(key)
        if sealer is None:
            sealer = self._sealers[key] = P.EventSealer(key)
        self._spawn(self.pub.send_multipart(sealer.seal(ev)))

    async def _run_step(self, spec: classical.StepSpec) -> classical.StepOutcome:
        # The step runs with its owner's processes and its workflow's capability, nothing more.
        spec.owner = self._owner_of(spec.workflow_id)
        spec.capability = self.keyring.issue(spec.workflow_id, spec.owner)
        options = self.manager.options.get(spec.workflow_id, {})
        request = classical_request(options.get("classical"))
        spec.timeout_s = min(
            self.limits.step_timeout_s, float(options.get("step_timeout_s", float("inf")))
        )
        try:
            node, reserved = await self.compute.place(request, spec.kind)
        except NoFeasibleNode as exc:
            return classical.StepOutcome(False, error=str(exc), error_type="NoFeasibleNode")
        try:
            # The worker stops the step itself; this is for workers that cannot (Dask threads).
            return await asyncio.wait_for(
                self.compute.run_step(spec, node), spec.timeout_s + STEP_TIMEOUT_GRACE_S
            )
        except asyncio.TimeoutError:
            return classical.StepOutcome(
                False,
                error=f"the step ran longer than its timeout of {spec.timeout_s:g} s and was "
                "stopped",
                error_type="StepTimeout",
            )
        finally:
            self.compute.release(node, request, reserved, spec.kind)

    async def _estimate(self, circuits: bytes, device: str) -> qpu.DeviceEstimate:
        return await self.compute.plan(qpu.estimate_on_device, circuits, device, 0)

    async def _plan(self, circuits: bytes, shots: int) -> list[dict[str, Any]]:
        return await self.compute.plan(
            qpu.plan_step, circuits, self.fleet_names, shots, qpu.PLAN_LIMIT, self.fleet_spec.prices
        )

    async def _execute(
        self,
        device: str,
        transpiled: bytes,
        shots: int,
        seed: int | None,
        mitigation: str | None = None,
        circuits: bytes | None = None,
    ) -> qpu.Execution:
        if self.ibm is not None and device in self.ibm.devices:
            # Through the Sampler as laid out for the device; a plan's mitigation stack is
            # applied on simulated QPUs only (on IBM the job runs unmitigated, and says so).
            return await self.loop.run_in_executor(
                self._ibm_threads, self.ibm.execute, device, transpiled, shots
            )
        if mitigation and mitigation != "none" and circuits is not None:
            return await self.compute.simulate(
                qpu.execute_mitigated, device, circuits, mitigation, shots, seed
            )
        return await self.compute.simulate(qpu.execute_on_device, device, transpiled, shots, seed)

    async def _watch_ibm(self) -> None:
        """Read the IBM devices' queues, status and calibrations, and apply what changed."""
        assert self.ibm is not None
        while True:
            try:
                changes = await self.loop.run_in_executor(self._ibm_threads, self.ibm.poll)
            except Exception:  # a network hiccup must not stop the watch
                log.exception("IBM device poll failed")
                changes = []
            for change in changes:
                self._apply_ibm_change(change)
            await asyncio.sleep(self.ibm.spec.queue_refresh_s)

    def _apply_ibm_change(self, change: Any) -> None:
        assert self.ibm is not None
        retired = self.ibm.apply(change, self.qpus, self.store)
        if retired is not None:
            runner = self._runners.pop(retired.name, None)
            if runner is not None:
                runner.cancel()

    # ------------------------------------------------------------------ simple requests
    async def h_ping(self, msg: P.Ping, identity: bytes, rid: str) -> P.Message:
        return P.Pong(pid=os.getpid(), started_at=self.started_at, fleet=list(self.qpus))

    async def h_shutdown(self, msg: P.Shutdown, identity: bytes, rid: str) -> P.Message:
        self.loop.call_later(0.05, self._stop.set)
        return P.Ok(data={"pid": os.getpid()})

    async def h_create(self, msg: P.CreateWorkflow, identity: bytes, rid: str) -> P.Message:
        image = self.registry.create(
            msg.source, msg.graph, msg.config, msg.name, msg.bound, CURRENT_USER.get()
        )
        return P.Ok(data={"image_id": image.id, "name": image.name})

    async def h_deploy(self, msg: P.Deploy, identity: bytes, rid: str) -> P.Message:
        image = self.registry.deploy(msg.image_id, msg.config, CURRENT_USER.get())
        await self.fleet_ready.wait()
        self.manager.eligible_qpus(image.deployed or {}, 0)  # refuse configs no QPU satisfies
        return P.Ok(data={"image_id": image.id, "config": image.deployed})

    async def h_images(self, msg: P.ListImages, identity: bytes, rid: str) -> P.Message:
        owner = CURRENT_USER.get() or None  # the orchestrator's own key sees every image
        return P.Ok(data={"images": [i.summary() for i in self.registry.list(owner)]})

    async def h_workflows(self, msg: P.ListWorkflows, identity: bytes, rid: str) -> P.Message:
        owner = CURRENT_USER.get() or None  # the orchestrator's own key sees every workflow
        return P.Ok(data={"workflows": self.store.list_workflows(msg.limit, owner)})

    async def h_fleet(self, msg: P.GetFleet, identity: bytes, rid: str) -> P.Message:
        await self.fleet_ready.wait()
        return P.Ok(
            data={
                "devices": [q.status() for q in self.qpus.values()],
                "dropped_messages": self.dropped_messages,
                "dropped_by_reason": dict(self.dropped_by_reason),
                "compute": self.compute.describe(),
            }
        )

    # ------------------------------------------------------------------ workflows
    async def h_invoke(self, msg: P.Invoke, identity: bytes, rid: str) -> P.Message:
        image = self.registry.get(msg.image_id, CURRENT_USER.get())
        if image.deployed is None:
            raise UserError(f"image {image.id} is not deployed; call deploy({image.id!r}) first")
        options = validate_config({**image.deployed, **msg.options})
        if options.get("shots", 0) > self.limits.max_shots:
            raise UserError(
                f"{options['shots']} shots exceed this orchestrator's limit of "
                f"{self.limits.max_shots} (limits.max_shots in its fleet file)"
            )
        bound = self.registry.bound(image.id)
        # Only what the image declares required (a function-list workflow's parameters): a
        # cell's free names are looked up when its steps run, NameError where one is missing.
        required = image.graph.get("required_inputs", [])
        missing = [n for n in required if n not in msg.inputs and n not in bound]
        if missing:
            raise UserError("missing inputs: " + ", ".join(missing))
        workflow_id = msg.workflow_id or new_id("wf")
        await self.fleet_ready.wait()
        if image.graph.get("steps") and any(s["kind"] != "classical" for s in image.graph["steps"]):
            self.manager.eligible_qpus(options, 0)
        run = WorkflowRun.new(workflow_id, image.id, image.graph)
        inputs = {**bound, **msg.inputs}
        if not self.store.insert_workflow(run, image.name, options, inputs, CURRENT_USER.get()):
            return P.Ok(data={"workflow_id": workflow_id, "duplicate": True})
        self.manager.adopt(run, inputs, options)
        return P.Ok(data={"workflow_id": workflow_id})

    async def h_status(self, msg: P.GetStatus, identity: bytes, rid: str) -> P.Message:
        self._check_owner(msg.workflow_id)
        run = self.manager.run_for(msg.workflow_id)
        return self.manager.workflow_reply(run, with_outputs=False)

    async def h_results(self, msg: P.GetResults, identity: bytes, rid: str) -> P.Message:
        self._check_owner(msg.workflow_id)
        run = self.manager.run_for(msg.workflow_id)
        await self.manager.wait_final(run, min(msg.wait_s, 30.0))
        return self.manager.workflow_reply(run, with_outputs=True)

    async def h_choose_plan(self, msg: P.ChoosePlan, identity: bytes, rid: str) -> P.Message:
        self._check_owner(msg.workflow_id)
        # Right after a --plan ask cell the plans may still be on their way: wait for them.
        await self.manager.plans_asked(msg.workflow_id, msg.step_id, CHOOSE_WAIT_S)
        plan = self.manager.choose_plan(msg.workflow_id, msg.step_id, msg.plan)
        return P.Ok(data={"plan": plan})

    async def h_cancel(self, msg: P.Cancel, identity: bytes, rid: str) -> P.Message:
        self._check_owner(msg.workflow_id)
        run, cancelled = self.manager.cancel(msg.workflow_id)
        return P.Ok(data={"state": run.state.value, "cancelled": [j.id for j in cancelled]})

    async def h_sample(self, msg: P.Sample, identity: bytes, rid: str) -> P.Message | None:
        self._check_owner(msg.workflow_id)
        limits = self.limits
        # Width and fingerprint come from the circuits themselves, never from the request.
        msg.num_qubits, msg.fingerprint = await self.loop.run_in_executor(
            self._io_threads, read_circuits, msg.circuits
        )
        if msg.num_qubits > limits.max_qubits:
            raise UserError(
                f"a circuit of {msg.num_qubits} qubits exceeds this orchestrator's limit of "
                f"{limits.max_qubits} (limits.max_qubits in its fleet file)"
            )
        if msg.shots > limits.max_shots:
            raise UserError(
                f"{msg.shots} shots exceed this orchestrator's limit of {limits.max_shots} "
                "(limits.max_shots in its fleet file)"
            )
        self.manager.submit_sample(msg, identity, rid, CURRENT_SIGNER.get())
        return None  # the reply comes when the QPU job is done


def _import_qiskit() -> None:
    import qiskit.qpy  # noqa: F401
