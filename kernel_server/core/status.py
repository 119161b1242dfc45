"""The shapes of what the orchestrator reports: job, step and workflow status, resource plans,
devices and listings, and the lab server's replies built from them.

One module for everything that crosses a process, storage or UI boundary after the run options
(``core.deployment.RunOptions``): msgspec Structs that the wire and the store encode as they are,
that the kernel side and the lab server read by attribute, and whose JSON Schema
(:func:`json_schema`) the lab extension's TypeScript types are generated from
(``python tools/gen_ts_types.py``; a test keeps the generated file current).

States are enums (encoded as their values). A step's resource plans are ``list[Plan]`` or a
``PlanError`` that says why there are none: never a list holding an error.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

import msgspec

from kernel_server.core.deployment import DeploymentConfig, RunOptions


class _TextEnum(str, Enum):
    """An enum whose members read as their values in text (``f"{state}"`` is "done"), as
    ``enum.StrEnum`` does from Python 3.11."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class JobState(_TextEnum):
    PENDING = "pending"
    ESTIMATING = "estimating"
    QUEUED = "queued"
    RUNNING = "running"
    POST_PROCESSING = "post-processing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})


class WorkflowState(_TextEnum):
    SUBMITTED = "submitted"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (WorkflowState.DONE, WorkflowState.FAILED, WorkflowState.CANCELLED)


# A workflow step is classical, quantum (one QPU call) or hybrid (a loop calling QPUs); a QPU job
# is one call's circuits on one QPU; a background job is another user's load on a simulated QPU.
JobKind = Literal["classical", "quantum", "hybrid", "qpu", "background"]


# Resource plans ---------------------------------------------------------------------------------


class Plan(msgspec.Struct, kw_only=True, frozen=True):
    """One Pareto-ranked way to run a quantum step: a QPU template, a mitigation stack and an
    accelerator, with what the estimator expects of it."""

    rank: int  # 0 = on the Pareto front
    backend: str  # the QPU template (or QPU) it runs on
    mitigation: str  # the stack's techniques joined by "+", "none" unmitigated
    accelerator: str
    shots: int
    fidelity: float  # learned model: expected Hellinger fidelity to the ideal distribution
    numerical_fidelity: float  # the baseline: product of (1 - error), blind to mitigation
    quantum_seconds: float  # QPU time of every circuit the stack runs (runtime model)
    classical_seconds: float  # post-processing wall time on the accelerator
    cost: float  # dollars, from the price table
    num_circuits: int
    total_shots: int
    # The runtime model's 80% interval around quantum_seconds (None: a model without one).
    quantum_seconds_low: float | None = None
    quantum_seconds_high: float | None = None
    members: tuple[str, ...] = ()  # the template's QPUs, where the job may run with this plan
    chosen: bool = False  # the plan the step runs with

    @property
    def seconds(self) -> float:
        """Quantum plus classical time, the runtime objective of plans."""
        return self.quantum_seconds + self.classical_seconds


class PlanError(msgspec.Struct, kw_only=True, frozen=True):
    """Why a step has no resource plans (the job runs unmitigated on the scheduler's choice)."""

    error: str


Plans = list[Plan] | PlanError


# Jobs, steps and workflows ------------------------------------------------------------------------


class JobStatus(msgspec.Struct, kw_only=True):
    """A job as a status reply shows it: a workflow step or a QPU job."""

    id: str
    kind: JobKind
    state: JobState
    step_id: int | None = None
    parent: str | None = None  # a QPU job's step
    qpu: str | None = None
    est_fidelity: float | None = None
    est_duration_s: float | None = None
    shots: int | None = None
    num_circuits: int | None = None
    queue_s: float | None = None
    run_s: float | None = None
    error: str | None = None
    method: str | None = None  # how a QPU job was executed (simulation method, or a real backend)
    mitigation: str | None = None  # a QPU job's mitigation stack ("none" unmitigated)
    plans: Plans | None = None  # a quantum step's first QPU job: its plans, best first
    awaiting_choice: bool = False  # plans shown; the user picks one (--plan ask)
    worker: str | None = None  # "local:<pid>" for the embedded pools, a Dask worker otherwise
    # A queued QPU job: its place in the QPU's queue and the expected seconds until it starts.
    queue_position: int | None = None
    est_start_s: float | None = None


class StepStatus(JobStatus, kw_only=True):
    """A workflow step: its job, where it is in the cell, and its QPU jobs."""

    lineno: int = 0
    end_lineno: int = 0
    first_line: str = ""
    qpu_jobs: list[JobStatus] = []

    @property
    def plans_of_step(self) -> Plans | None:
        """The step's plans: those of its first QPU job that has some."""
        return next((j.plans for j in self.qpu_jobs if j.plans is not None), None)


class WorkflowInfo(msgspec.Struct, kw_only=True):
    """What a workflow is, beside its state: its image, name, times and options."""

    image_id: str = ""
    name: str | None = None
    created_at: float | None = None
    finished_at: float | None = None
    options: RunOptions = RunOptions()


class WorkflowSummary(msgspec.Struct, kw_only=True):
    """One row of a workflow listing."""

    id: str
    image_id: str
    name: str | None
    state: WorkflowState
    created_at: float
    finished_at: float | None = None
    error: str | None = None
    qpus: list[str] = []  # the QPUs its jobs use
    jobs_running: int = 0
    jobs_queued: int = 0
    # Job completion time as the user lives it: from submission to the final state.
    jct_s: float | None = None


class ImageSummary(msgspec.Struct, kw_only=True):
    """One workflow image of a listing."""

    id: str
    name: str
    created_at: float
    deployed: bool
    steps: int
    quantum_steps: int
    inputs: list[str]  # the names a caller must give (not bound by the cell)
    outputs: list[str]
    config: DeploymentConfig  # the image's config, as the user wrote it


# Devices ---------------------------------------------------------------------------------------


class DeviceInfo(msgspec.Struct, kw_only=True):
    """What the orchestrator knows of a QPU without holding its backend."""

    name: str
    num_qubits: int
    family: str
    calibration_id: str
    basis_gates: tuple[str, ...] = ()
    calibrated_at: float | None = None  # epoch seconds of the calibration snapshot, if known
    # Error product of a 5-qubit GHZ (4 two-qubit gates, 5 readouts) on the median coupler and
    # readout: one number to compare QPUs at a glance, not an estimate for any job.
    fidelity_score: float | None = None
    kind: Literal["simulated", "ibm"] = "simulated"
    local_testing: bool = False  # an IBM device through qiskit-ibm-runtime's local mode
    billed: bool = False  # its jobs cost money (an IBM QPU outside local testing)


class DeviceStatus(DeviceInfo, kw_only=True):
    """A QPU of the fleet now: its description, whether it takes jobs and its queue."""

    online: bool = True
    queue_length: int = 0
    expected_wait_s: float = 0.0
    jobs_done: int = 0
    busy_s: float = 0.0
    running: str | None = None  # the job it executes now


class NodeStatus(msgspec.Struct, kw_only=True):
    """A node classical steps run on: its capacity and what running steps reserved of it."""

    name: str
    cores: int
    memory_gb: float
    accelerators: dict[str, int] = {}
    used_cores: int = 0
    used_memory_gb: float = 0.0
    used_accelerators: dict[str, int] = {}


class ComputeStatus(msgspec.Struct, kw_only=True):
    """Where the orchestrator runs steps and simulations: its embedded pools, or Dask."""

    backend: str  # "local" or "dask"
    nodes: list[NodeStatus] = []
    address: str | None = None  # the Dask scheduler's


# The lab server's REST replies (what the sidebar reads) ------------------------------------------


class FleetView(msgspec.Struct, kw_only=True):
    """``GET fleet``: the QPUs, and the server's clock (calibration ages count from it)."""

    devices: list[DeviceStatus]
    updated_at: float


class WorkflowsView(msgspec.Struct, kw_only=True):
    """``GET workflows``: the newest workflows and how many of their QPU jobs run and wait."""

    workflows: list[WorkflowSummary]
    running_jobs: int
    queued_jobs: int


class WorkflowDetail(msgspec.Struct, kw_only=True):
    """``GET workflows/ID``: a workflow's state and steps (its values stay in the kernel)."""

    workflow_id: str
    state: WorkflowState
    error: str | None = None
    steps: list[StepStatus] = []
    info: WorkflowInfo = msgspec.field(default_factory=WorkflowInfo)


class CancelView(msgspec.Struct, kw_only=True):
    """``POST workflows/ID/cancel``: the state after the cancel and the jobs it stopped."""

    workflow_id: str
    state: WorkflowState
    cancelled: list[str]


class EventsView(msgspec.Struct, kw_only=True):
    """``GET events``: the number of the newest event, and whether an orchestrator runs."""

    seq: int
    orchestrator: bool  # the events endpoint never starts one


# The shapes the lab extension reads, in the order its generated file declares them.
UI_TYPES: tuple[type, ...] = (FleetView, WorkflowsView, WorkflowDetail, CancelView, EventsView)


def json_schema() -> dict[str, Any]:
    """JSON Schema of the lab server's replies as the server writes them, and every shape they
    hold (``$defs``).

    msgspec's schema describes what a decoder accepts (a field with a default may be missing);
    the encoder writes every field of a Struct that does not omit defaults, so those are marked
    required here: the generated TypeScript then need not treat them as possibly absent.
    """
    _, components = msgspec.json.schema_components(UI_TYPES, ref_template="#/$defs/{name}")
    for struct in _structs(UI_TYPES):
        config = getattr(struct, "__struct_config__", None)  # None: a dataclass, written whole
        if config is None or not config.omit_defaults:
            schema = components[struct.__name__]
            schema["required"] = list(schema.get("properties", {}))
    return {"$defs": components}


def _structs(types: tuple[type, ...]) -> list[type]:
    """Every Struct and dataclass type reachable from ``types``."""
    seen: dict[type, None] = {}

    def walk(t: msgspec.inspect.Type) -> None:
        if isinstance(t, (msgspec.inspect.StructType, msgspec.inspect.DataclassType)):
            if t.cls in seen:
                return
            seen[t.cls] = None
            for f in t.fields:
                walk(f.type)
        for attr in ("item_type", "key_type", "value_type"):
            inner = getattr(t, attr, None)
            if isinstance(inner, msgspec.inspect.Type):
                walk(inner)
        for inner in getattr(t, "types", ()) or ():
            if isinstance(inner, msgspec.inspect.Type):
                walk(inner)
        for inner in getattr(t, "item_types", ()) or ():
            walk(inner)

    for info in msgspec.inspect.multi_type_info(types):
        walk(info)
    return list(seen)
