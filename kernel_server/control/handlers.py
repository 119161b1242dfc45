"""The orchestrator's request handlers: one per request ``op``, each returning its reply.

The orchestrator (``app.py``) checks a request's signature, its sender's rights and its fields
before a handler runs, and sends the reply a handler returns (``None``: the reply comes later, as
for a quantum call that waits for its QPU job). A handler raises to refuse: the error goes back to
the sender as an ``ErrorReply``. What happens to workflows and jobs is the job manager's business.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from kernel_server.control.machine import UserError
from kernel_server.control.ownership import CURRENT_SIGNER, CURRENT_USER
from kernel_server.core.deployment import DeploymentConfig, load_config, run_options
from kernel_server.core.jobs import WorkflowRun, new_id
from kernel_server.tasks.qpu import describe_backend
from kernel_server.wire.circuits import CircuitFormatError, read_call
from kernel_server.wire.messages import (
    BackendReply,
    Cancel,
    Cancelled,
    ChoosePlan,
    CreateWorkflow,
    Deploy,
    DescribeBackend,
    FleetReply,
    GetFleet,
    GetResults,
    GetStatus,
    ImageCreated,
    ImageDeployed,
    ImageList,
    Invoke,
    Invoked,
    ListImages,
    ListWorkflows,
    Message,
    Ping,
    PlanTaken,
    Pong,
    Sample,
    Shutdown,
    Stopping,
    WorkflowList,
)

if TYPE_CHECKING:
    from kernel_server.control.app import Orchestrator

# A PUB's sweep is one QPU job: it may take this many times one call's shot limit in all.
MAX_ROWS_FACTOR = 100

# How long a plan choice waits for that step's plans to be made (the client waits 60 s).
CHOOSE_WAIT_S = 45.0

Handler = Callable[[Any, bytes, str], Awaitable[Message | None]]


class Handlers:
    """The handlers of one orchestrator, over its registry, store, job manager and fleet."""

    def __init__(self, orch: Orchestrator):
        self.orch = orch

    def table(self) -> dict[str, Handler]:
        """Each request op's handler (an op not in it is not a request)."""
        return {
            "ping": self.ping,
            "shutdown": self.shutdown,
            "create_workflow": self.create,
            "deploy": self.deploy,
            "invoke": self.invoke,
            "status": self.status,
            "results": self.results,
            "list_images": self.images,
            "list_workflows": self.workflows,
            "cancel": self.cancel,
            "choose_plan": self.choose_plan,
            "fleet": self.fleet,
            "describe_backend": self.describe_backend,
            "sample": self.sample,
        }

    def _check_shots(self, shots: int) -> None:
        limit = self.orch.limits.max_shots
        if shots > limit:
            raise UserError(
                f"{shots} shots exceed this orchestrator's limit of {limit} "
                "(limits.max_shots in its fleet file)"
            )

    # ------------------------------------------------------------------ simple requests
    async def ping(self, msg: Ping, identity: bytes, rid: str) -> Message:
        orch = self.orch
        return Pong(pid=os.getpid(), started_at=orch.started_at, fleet=list(orch.qpus))

    async def shutdown(self, msg: Shutdown, identity: bytes, rid: str) -> Message:
        self.orch.loop.call_later(0.05, self.orch.stop)
        return Stopping(pid=os.getpid())

    async def create(self, msg: CreateWorkflow, identity: bytes, rid: str) -> Message:
        image = self.orch.registry.create(
            msg.graph, msg.config, msg.name, msg.bound, CURRENT_USER.get()
        )
        return ImageCreated(image_id=image.id, name=image.name)

    async def deploy(self, msg: Deploy, identity: bytes, rid: str) -> Message:
        image = self.orch.registry.deploy(msg.image_id, msg.config, CURRENT_USER.get())
        await self.orch.fleet_ready.wait()
        # Refuse configs no QPU satisfies.
        deployed = image.deployed or DeploymentConfig()
        self.orch.manager.eligible_qpus(run_options(deployed), 0)
        return ImageDeployed(image_id=image.id, config=deployed)

    async def images(self, msg: ListImages, identity: bytes, rid: str) -> Message:
        owner = CURRENT_USER.get() or None  # the orchestrator's own key sees every image
        return ImageList(images=[i.summary() for i in self.orch.registry.list(owner)])

    async def workflows(self, msg: ListWorkflows, identity: bytes, rid: str) -> Message:
        owner = CURRENT_USER.get() or None  # the orchestrator's own key sees every workflow
        return WorkflowList(workflows=self.orch.store.list_workflows(msg.limit, owner))

    async def fleet(self, msg: GetFleet, identity: bytes, rid: str) -> Message:
        orch = self.orch
        await orch.fleet_ready.wait()
        return FleetReply(
            devices=[q.status() for q in orch.qpus.values()],
            dropped_messages=orch.dropped_messages,
            dropped_by_reason=dict(orch.dropped_by_reason),
            compute=orch.compute.describe(),
        )

    async def describe_backend(self, msg: DescribeBackend, identity: bytes, rid: str) -> Message:
        orch = self.orch
        await orch.fleet_ready.wait()
        try:
            name, kind, width, members, target = await orch.compute.plan(
                describe_backend, msg.name, list(orch.qpus)
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None
        return BackendReply(name=name, kind=kind, num_qubits=width, members=members, target=target)

    # ------------------------------------------------------------------ workflows
    async def invoke(self, msg: Invoke, identity: bytes, rid: str) -> Message:
        orch = self.orch
        image = orch.registry.get(msg.image_id, CURRENT_USER.get())
        if image.deployed is None:
            raise UserError(f"image {image.id} is not deployed; call deploy({image.id!r}) first")
        given = load_config(msg.options.over(image.deployed))  # the values checked here too
        options = run_options(given)
        if given.shots is not UNSET:  # the default is checked where a call falls back on it
            self._check_shots(options.shots)
        bound = orch.registry.bound(image.id)
        # Only what the image declares required (a function-list workflow's parameters): a
        # cell's free names are looked up when its steps run, NameError where one is missing.
        required = image.graph.required_inputs
        missing = [n for n in required if n not in msg.inputs and n not in bound]
        if missing:
            raise UserError("missing inputs: " + ", ".join(missing))
        workflow_id = msg.workflow_id or new_id("wf")
        await orch.fleet_ready.wait()
        if image.graph.has_quantum:
            orch.manager.eligible_qpus(options, 0)
        run = WorkflowRun.new(workflow_id, image.id, image.graph)
        inputs = {**bound, **msg.inputs}
        if not orch.store.insert_workflow(run, image.name, options, inputs, CURRENT_USER.get()):
            return Invoked(workflow_id=workflow_id, duplicate=True)
        orch.manager.adopt(run, inputs, options)
        return Invoked(workflow_id=workflow_id)

    async def status(self, msg: GetStatus, identity: bytes, rid: str) -> Message:
        self.orch.ownership.check_owner(msg.workflow_id)
        run = self.orch.manager.run_for(msg.workflow_id)
        return self.orch.manager.workflow_reply(run, with_outputs=False)

    async def results(self, msg: GetResults, identity: bytes, rid: str) -> Message:
        manager = self.orch.manager
        self.orch.ownership.check_owner(msg.workflow_id)
        run = manager.run_for(msg.workflow_id)
        await manager.wait_final(run, min(msg.wait_s, 30.0))
        return manager.workflow_reply(run, with_outputs=True)

    async def choose_plan(self, msg: ChoosePlan, identity: bytes, rid: str) -> Message:
        manager = self.orch.manager
        self.orch.ownership.check_owner(msg.workflow_id)
        # Right after a --plan ask cell the plans may still be on their way: wait for them.
        await manager.plans_asked(msg.workflow_id, msg.step_id, CHOOSE_WAIT_S)
        plan = manager.choose_plan(msg.workflow_id, msg.step_id, msg.plan)
        return PlanTaken(plan=plan)

    async def cancel(self, msg: Cancel, identity: bytes, rid: str) -> Message:
        self.orch.ownership.check_owner(msg.workflow_id)
        run, cancelled = self.orch.manager.cancel(msg.workflow_id)
        return Cancelled(state=run.state, cancelled=[j.id for j in cancelled])

    async def sample(self, msg: Sample, identity: bytes, rid: str) -> Message | None:
        orch = self.orch
        orch.ownership.check_owner(msg.workflow_id)
        # Width, fingerprint and rows come from the circuits themselves, never from the request.
        try:
            facts = await orch.loop.run_in_executor(
                orch.io_threads, read_call, msg.circuits, msg.parameter_values
            )
        except CircuitFormatError as exc:
            raise UserError(str(exc)) from None
        msg.num_qubits, msg.fingerprint = facts.num_qubits, facts.fingerprint
        msg.rows = facts.rows
        if msg.shots * msg.rows > orch.limits.max_shots * MAX_ROWS_FACTOR:
            raise UserError(
                f"{msg.rows} parameter sets x {msg.shots} shots exceed this orchestrator's limit "
                f"of {orch.limits.max_shots * MAX_ROWS_FACTOR} shots per QPU job"
            )
        if msg.num_qubits > orch.limits.max_qubits:
            raise UserError(
                f"a circuit of {msg.num_qubits} qubits exceeds this orchestrator's limit of "
                f"{orch.limits.max_qubits} (limits.max_qubits in its fleet file)"
            )
        self._check_shots(msg.shots)
        if msg.session:
            # Sessions are each user's own: the same id from two users names two sessions.
            msg.session = f"{orch.ownership.owner_of(msg.workflow_id)}:{msg.session}"
        orch.manager.submit_sample(msg, identity, rid, CURRENT_SIGNER.get())
        return None  # the reply comes when the QPU job is done
