"""The orchestrator process: API server, job manager and the QPU fleet in one asyncio loop.

Sockets: a ROUTER for requests (kernels, the CLI, and classical workers calling ``sample``) and a
PUB for events. Each request is handled in its own task, so a long-poll or a quantum call waiting
for its QPU never blocks the loop. CPU work never runs in the loop: classical steps go to a process
pool, transpilation and noisy simulation to a second one. What happens to workflows and jobs is the
job manager's business (``manager.py``); this module does the I/O: it receives, checks and
dispatches each request to its handler (``handlers.py``), sends the replies and publishes events.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from kernel_server.compute.base import make_compute
from kernel_server.control.handlers import Handler, Handlers
from kernel_server.control.ibm_link import IBMLink
from kernel_server.control.machine import UserError
from kernel_server.control.manager import Executors, JobManager
from kernel_server.control.ownership import CURRENT_SIGNER, CURRENT_USER, Ownership, signer_name
from kernel_server.control.registry import Registry, UnknownImage
from kernel_server.control.store import Store
from kernel_server.core.deployment import (
    DEFAULT_PLACEMENT,
    ConfigError,
    RunOptions,
    classical_request,
)
from kernel_server.core.jobs import JobRecord
from kernel_server.core.status import Plans
from kernel_server.fleet.queues import QueuedJob, SimulatedQPU, background_arrivals, qpu_runner
from kernel_server.fleet.spec import FleetSpec
from kernel_server.scheduler.classical import NoFeasibleNode
from kernel_server.security.keyring import KeyRing
from kernel_server.tasks import qpu
from kernel_server.tasks.step import StepOutcome, StepSpec
from kernel_server.wire.connection import ConnectionInfo, new_key, server_connection_file_path
from kernel_server.wire.envelope import EventSealer, ReplayGuard, Signer, decode, encode
from kernel_server.wire.errors import InvalidMessage, ProtocolError
from kernel_server.wire.messages import ErrorReply, Event, Message, Sample

log = logging.getLogger("kernel_server")

# How long past a step's timeout the orchestrator waits for the worker's own report of it.
STEP_TIMEOUT_GRACE_S = 10.0


class Orchestrator:
    """One orchestrator: its sockets, job manager, compute and QPU fleet (``serve`` runs it)."""

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
        self.io_threads = ThreadPoolExecutor(2, thread_name_prefix="qonductor-io")
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
        self.ownership = Ownership(self.store, self.manager)
        self.dropped_messages = 0
        # Why messages were dropped (bad_signature, replayed, stale, oversized, malformed).
        self.dropped_by_reason: dict[str, int] = {}
        self.replay_guard = ReplayGuard()
        self.limits = self.fleet_spec.limits
        self.started_at = time.time()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self.handlers: dict[str, Handler] = Handlers(self).table()

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
        public: dict[str, Any] = await self._listen_public() if self.public_host else {}
        key = new_key()
        self.signer = Signer(key.encode())
        # Users of a shared orchestrator each sign with their own key (users.json).
        self.keyring = KeyRing(self.signer, self.home / "users.json")
        self.manager.on_final = self.keyring.revoke  # a workflow's capability ends with it
        self._sealers: dict[bytes, EventSealer] = {}
        # Step processes get the router's address only: each step brings its own capability.
        await self.compute.start(self.router_endpoint, self.home)
        self.conn = ConnectionInfo(
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
        self.conn.write(server_connection_file_path())
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

    def stop(self) -> None:
        """Stop serving: ``serve`` closes everything and returns."""
        self._stop.set()

    async def _close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        path = server_connection_file_path()
        try:
            if ConnectionInfo.read(path).pid == os.getpid():
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
            self.qpus[info.name] = SimulatedQPU(info.name, info)
        for q in self.qpus.values():
            self._runners[q.name] = self._spawn(
                qpu_runner(q, self._execute, self.manager.qpu_job_started)
            )
        load = self.fleet_spec.background
        if load is not None:  # other users share the simulated QPUs; IBM's queues are real
            for q in self.qpus.values():
                if q.info.kind != "ibm":
                    self._spawn(
                        background_arrivals(q, load.jobs_per_hour, load.mean_runtime_s, load.seed)
                    )
        if self.ibm is not None and self.ibm.devices:
            self._spawn(self._watch_ibm())
        self.fleet_ready.set()
        self.loop.run_in_executor(self.io_threads, _import_qiskit)  # read_circuits needs it
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
            env = decode(frames, self.keyring, self.limits.max_payload_bytes)
            self.replay_guard.check(env)
        except InvalidMessage as exc:
            # Signed by someone we know, but a field has the wrong type or is out of range:
            # tell them which, run nothing.
            self._drop(exc.reason)
            if exc.envelope is not None:
                try:
                    self.replay_guard.check(exc.envelope)
                except ProtocolError:
                    return
                refusal = ErrorReply(type="InvalidMessage", message=str(exc))
                await self._reply(
                    identity, exc.envelope.request_id, refusal, signer_name(exc.envelope)
                )
            return
        except ProtocolError as exc:
            self._drop(exc.reason)
            log.warning("dropped a message: %s", exc)
            return
        handler = self.handlers.get(env.message.op)
        CURRENT_USER.set(env.user)  # this request's task only (each _handle is its own task)
        CURRENT_SIGNER.set(signer_name(env))
        try:
            if handler is None:
                raise UserError(f"operation {env.message.op!r} is not a request")
            if env.scope is not None:
                self.ownership.check_capability(env)
            reply = await handler(env.message, identity, env.request_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, (UserError, UnknownImage, ConfigError, ValueError)):
                log.exception("handler %s failed", env.message.op)
            reply = ErrorReply(type=type(exc).__name__, message=str(exc))
        if reply is not None:
            await self._reply(identity, env.request_id, reply, signer_name(env))

    def _drop(self, reason: str) -> None:
        """Count a message we refused; it is never executed."""
        self.dropped_messages += 1
        self.dropped_by_reason[reason] = self.dropped_by_reason.get(reason, 0) + 1

    async def _reply(
        self, identity: bytes, request_id: str, message: Message, user: str = ""
    ) -> None:
        signer = self.keyring.signer_for(user)
        await self.router.send_multipart([identity, *encode(message, signer, request_id)])

    def _event(self, job: JobRecord, detail: str = "") -> None:
        ev = Event(
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
        key = self.keyring.user_key(self.ownership.owner_of(job.workflow_id))
        sealer = self._sealers.get(key)
        if sealer is None:
            sealer = self._sealers[key] = EventSealer(key)
        self._spawn(self.pub.send_multipart(sealer.seal(ev)))

    async def _run_step(self, spec: StepSpec) -> StepOutcome:
        # The step runs with its owner's processes and its workflow's capability, nothing more.
        spec.owner = self.ownership.owner_of(spec.workflow_id)
        spec.capability = self.keyring.issue(spec.workflow_id, spec.owner)
        options = self.manager.options.get(spec.workflow_id) or RunOptions()
        request = classical_request(options.classical)
        own_limit = options.step_timeout_s if options.step_timeout_s is not None else float("inf")
        spec.timeout_s = min(self.limits.step_timeout_s, own_limit)
        try:
            node, reserved = await self.compute.place(request, spec.kind)
        except NoFeasibleNode as exc:
            return StepOutcome(False, error=str(exc), error_type="NoFeasibleNode")
        try:
            # The worker stops the step itself; this is for workers that cannot (Dask threads).
            return await asyncio.wait_for(
                self.compute.run_step(spec, node), spec.timeout_s + STEP_TIMEOUT_GRACE_S
            )
        except asyncio.TimeoutError:
            return StepOutcome(
                False,
                error=f"the step ran longer than its timeout of {spec.timeout_s:g} s and was "
                "stopped",
                error_type="StepTimeout",
            )
        finally:
            self.compute.release(node, request, reserved, spec.kind)

    async def _estimate(self, msg: Sample, device: str) -> qpu.DeviceEstimate:
        on_ibm = self.ibm is not None and device in self.ibm.devices
        return await self.compute.plan(
            qpu.estimate_on_device,
            msg.circuits,
            device,
            0,
            msg.rows,
            msg.shots,
            on_ibm,
            self.fleet_spec.runtime_quantile,
        )

    async def _plan(self, msg: Sample) -> Plans:
        return await self.compute.plan(
            qpu.plan_step,
            msg.circuits,
            self.fleet_names,
            msg.shots,
            qpu.PLAN_LIMIT,
            self.fleet_spec.prices,
            tuple(msg.stacks),
            msg.parameter_values,
        )

    async def _execute(self, device: str, job: QueuedJob) -> qpu.Execution:
        values, shots, seed, mitigation = job.parameter_values, job.shots, job.seed, job.mitigation
        if self.ibm is not None and device in self.ibm.devices:
            # Through the Sampler as laid out for the device; a plan's mitigation stack is
            # applied on simulated QPUs only (on IBM the job runs unmitigated, and says so).
            job.job.mitigation = "none"  # what the report says: IBM runs it unmitigated
            transpiled = job.transpiled
            if values:
                transpiled = await self.loop.run_in_executor(
                    self.io_threads, qpu.bind_transpiled, transpiled, values
                )
            return await self.loop.run_in_executor(
                self._ibm_threads, self.ibm.execute, device, transpiled, shots
            )
        if mitigation and mitigation != "none" and job.circuits is not None:
            return await self.compute.simulate(
                qpu.execute_mitigated, device, job.circuits, mitigation, shots, seed, values
            )
        return await self.compute.simulate(
            qpu.execute_on_device, device, job.transpiled, shots, seed, values
        )

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


def _import_qiskit() -> None:
    import qiskit.qpy  # noqa: F401
