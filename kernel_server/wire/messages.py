"""The typed messages of the wire protocol: every request, reply and event, one class per ``op``.

Each message is a ``msgspec.Struct`` with a class-level ``op``; decoding converts a body into the
class of its op and refuses wrong types and out-of-range values before any handler sees it. The
envelope the messages travel in (signature, id, timestamp, nonce) is ``envelope.py``'s.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Generic, TypeVar, get_args, get_origin

import msgspec

from kernel_server.core.deployment import DeploymentConfig
from kernel_server.core.graph import WorkflowGraph
from kernel_server.core.status import (
    ComputeStatus,
    DeviceStatus,
    ImageSummary,
    StepStatus,
    WorkflowInfo,
    WorkflowState,
    WorkflowSummary,
)

PROTOCOL_VERSION = 1

# Every message class by its op (filled as the classes are defined): what decoding looks up.
MESSAGES: dict[str, type[Message]] = {}

# Bounds every decoded message is checked against before a handler sees it.
# Ids name files and rows: letters, digits, "_", "-" and "." (never ".."), at most 128.
Id = Annotated[str, msgspec.Meta(pattern=r"^(?!.*\.\.)[A-Za-z0-9_.-]{0,128}$")]
StepId = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
Shots = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=86_400.0)]


class Message(msgspec.Struct, kw_only=True):
    """A typed message body. Decoding converts the body into the class of its ``op`` and
    refuses wrong types and out-of-range values (msgspec's strict conversion); unknown keys are
    ignored, so that an older client can talk to a newer orchestrator."""

    op: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.op:
            if cls.op in MESSAGES:
                raise TypeError(f"duplicate message op {cls.op!r}")
            MESSAGES[cls.op] = cls

    def to_dict(self) -> dict[str, Any]:
        # Nested structs (a reply's report) become dicts too; bytes stay bytes for msgpack.
        body: dict[str, Any] = msgspec.to_builtins(self, builtin_types=(bytes, bytearray))
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The body as this class; ``msgspec.ValidationError`` names the first bad field."""
        # msgpack carries bytes natively: a str where bytes belong is a wrong type, not base64.
        return msgspec.convert(data, cls, builtin_types=(bytes, bytearray))


R = TypeVar("R", bound=Message)


class Request(Message, Generic[R]):
    """A request; ``R`` is the reply it promises (``reply_type``), which a client's typed
    request returns."""


def reply_type(request: Request[Any] | type[Request[Any]]) -> type[Message]:
    """The reply class a request (or request class) promises."""
    cls = request if isinstance(request, type) else type(request)
    for base in cls.__orig_bases__:  # type: ignore[attr-defined]
        if get_origin(base) is Request:
            promised: type[Message] = get_args(base)[0]
            return promised
    raise TypeError(f"{cls.__name__} promises no reply type")


# Replies ------------------------------------------------------------------------------------


class ErrorReply(Message):
    op: ClassVar[str] = "error"
    type: str = "Exception"
    message: str = ""


class Pong(Message):
    op: ClassVar[str] = "pong"
    pid: int = 0
    version: int = PROTOCOL_VERSION
    started_at: float = 0.0
    fleet: list[str] = []


class WorkflowReply(Message):
    """State of one workflow; ``outputs`` is filled once it is done and the caller asked for it."""

    op: ClassVar[str] = "workflow"
    workflow_id: str = ""
    state: WorkflowState = WorkflowState.SUBMITTED
    steps: list[StepStatus] = []
    error: str | None = None
    outputs: dict[str, bytes] | None = None
    stdout: str = ""
    info: WorkflowInfo = msgspec.field(default_factory=WorkflowInfo)


class QpuJobReport(msgspec.Struct, kw_only=True):
    """What a QPU job was: where it ran, with which plan, how long it queued and ran."""

    job_id: str = ""
    qpu: str = ""
    mitigation: str = "none"  # the plan's mitigation stack
    est_fidelity: float | None = None
    method: str = ""  # how the QPU executed it (simulation method, or a real backend)
    shots: int = 0
    num_circuits: int = 0
    queue_s: float | None = None
    run_s: float | None = None


class BackendReply(Message):
    """A device or template of the fleet: its QPUs and its Target (cloudpickled; a Target is
    no QPY document, and the kernel trusts its orchestrator's replies as it trusts results)."""

    op: ClassVar[str] = "backend"
    name: str = ""
    kind: str = "device"  # "device" or "template"
    num_qubits: int = 0
    members: list[str] = []
    target: bytes = b""


class SampleReply(Message):
    op: ClassVar[str] = "sample_result"
    results: bytes = b""
    qpu: str = ""
    report: QpuJobReport | None = None


class Stopping(Message):
    op: ClassVar[str] = "stopping"
    pid: int = 0


class ImageCreated(Message):
    op: ClassVar[str] = "image_created"
    image_id: str = ""
    name: str | None = None


class ImageDeployed(Message):
    op: ClassVar[str] = "image_deployed"
    image_id: str = ""
    config: DeploymentConfig = DeploymentConfig()


class ImageList(Message):
    op: ClassVar[str] = "image_list"
    images: list[ImageSummary] = []


class WorkflowList(Message):
    op: ClassVar[str] = "workflow_list"
    workflows: list[WorkflowSummary] = []


class Invoked(Message):
    op: ClassVar[str] = "invoked"
    workflow_id: str = ""
    duplicate: bool = False  # a resent invoke: the workflow already existed


class PlanTaken(Message):
    op: ClassVar[str] = "plan_taken"
    plan: int | str = 0


class Cancelled(Message):
    op: ClassVar[str] = "cancelled"
    state: WorkflowState = WorkflowState.CANCELLED
    cancelled: list[str] = []  # the job ids the cancel stopped


class FleetReply(Message):
    op: ClassVar[str] = "fleet_status"
    devices: list[DeviceStatus] = []
    dropped_messages: int = 0
    dropped_by_reason: dict[str, int] = {}
    compute: ComputeStatus = msgspec.field(default_factory=lambda: ComputeStatus(backend=""))


# Requests from kernels (and the CLI) ---------------------------------------------------------


class Ping(Request[Pong]):
    op: ClassVar[str] = "ping"


class Shutdown(Request[Stopping]):
    op: ClassVar[str] = "shutdown"


class CreateWorkflow(Request[ImageCreated]):
    """Register a workflow image: the split cell (graph) plus its code and configuration."""

    op: ClassVar[str] = "create_workflow"
    graph: WorkflowGraph  # with the cell's source
    config: DeploymentConfig = DeploymentConfig()
    name: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    # Objects bound into the image itself (the function-list form of create_workflow).
    bound: dict[str, bytes] = {}


class Deploy(Request[ImageDeployed]):
    op: ClassVar[str] = "deploy"
    image_id: Id = ""
    config: DeploymentConfig = DeploymentConfig()  # laid over the image's own


class Invoke(Request[Invoked]):
    """Run an image. The client chooses ``workflow_id``, so a resent request is idempotent."""

    op: ClassVar[str] = "invoke"
    image_id: Id = ""
    workflow_id: Id = ""
    inputs: dict[str, bytes] = {}
    options: DeploymentConfig = DeploymentConfig()  # laid over the image's deployment


class GetStatus(Request[WorkflowReply]):
    op: ClassVar[str] = "status"
    workflow_id: Id = ""


class GetResults(Request[WorkflowReply]):
    """Long-poll: the reply comes when the workflow is final or after ``wait_s`` seconds."""

    op: ClassVar[str] = "results"
    workflow_id: Id = ""
    wait_s: Seconds = 0.0


class ListImages(Request[ImageList]):
    op: ClassVar[str] = "list_images"


class ListWorkflows(Request[WorkflowList]):
    op: ClassVar[str] = "list_workflows"
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100


class Cancel(Request[Cancelled]):
    op: ClassVar[str] = "cancel"
    workflow_id: Id = ""


class ChoosePlan(Request[PlanTaken]):
    """The user's plan for a quantum step of a ``--plan ask`` workflow (a number, or "off")."""

    op: ClassVar[str] = "choose_plan"
    workflow_id: Id = ""
    step_id: StepId = 0
    plan: Annotated[int, msgspec.Meta(ge=0)] | Annotated[str, msgspec.Meta(max_length=32)] = 0


class GetFleet(Request[FleetReply]):
    op: ClassVar[str] = "fleet"


class DescribeBackend(Request[BackendReply]):
    """A fleet device or template by name, for a kernel's backend view (its Target)."""

    op: ClassVar[str] = "describe_backend"
    name: Annotated[str, msgspec.Meta(max_length=128)] = ""


# Requests from classical workers (quantum calls made inside a step) -------------------------


class Sample(Request[SampleReply]):
    """A step's ``sample(...)`` call: circuits (QPY, a data format: nothing in it is code) to run
    on one QPU.

    ``num_qubits`` and ``fingerprint`` are the orchestrator's: it reads them off the circuits
    themselves when the request arrives and overwrites whatever a client sent.
    """

    op: ClassVar[str] = "sample"
    workflow_id: Id = ""
    step_id: StepId = 0
    circuits: bytes = b""
    shots: Shots = 1
    kind: Annotated[str, msgspec.Meta(max_length=32)] = "sample"
    # Parameter sets bound into every circuit on the QPU, as ``numpy.save`` writes a float64
    # array of shape (rows, parameters) ("" for bound circuits): a PUB's sweep is one QPU job,
    # its circuits estimated and transpiled once, the rows bound where they run.
    parameter_values: bytes = b""
    # QPUs the call may run on (a pinned device, or a template's members; empty: any eligible).
    qpus: list[Id] = []
    # A primitive's Session: its jobs stay on the QPU its first job was placed on.
    session: Id = ""
    # Mitigation stacks the plan may use ("none", "rem", "zne+rem", ...; empty: any), set by a
    # primitive's resilience options.
    stacks: list[Annotated[str, msgspec.Meta(max_length=64)]] = []
    num_qubits: int = 0
    # wire.circuits.fingerprint of the circuits ("" unknown): what estimates and
    # plans are remembered under.
    fingerprint: str = ""
    # Rows of parameter values (1 for bound circuits); the orchestrator's, like num_qubits.
    rows: int = 1


# Events (PUB) --------------------------------------------------------------------------------


class Event(Message):
    """A state change of a workflow, published to its owner (see ``EventSealer``)."""

    op: ClassVar[str] = "event"
    workflow_id: str = ""
    job_id: str = ""
    step_id: int | None = None
    kind: str = ""
    state: str = ""
    qpu: str | None = None
    detail: str = ""
    ts: float = 0.0
