"""What the workflow state machine (``machine``) is fed and what it asks its driver to do.

Events are things that happened (a request, a worker's result, a QPU's progress, a restart);
instructions are I/O the driver carries out after the machine has changed its state. Both are
plain records, so a test can build the one and compare the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_server.core.deployment import RunOptions
from kernel_server.core.jobs import JobRecord, JobState, WorkflowRun
from kernel_server.core.status import Plan, Plans
from kernel_server.tasks.step import StepOutcome, StepSpec

# A step's worker waiting for a QPU job's answer: its socket identity, its request id, and whose
# key signs the reply (the step's capability).
Caller = tuple[bytes, str, str]


# ------------------------------------------------------------------------------------- events
@dataclass
class Event:
    """Something that happened: a request, a worker's result, a QPU's progress, a restart.

    ``stimulus_id`` names it once it enters the machine (``stimuli.StimulusLog``): the
    instructions it causes, and a replayable log in debug mode, are told by it."""

    stimulus_id: str = field(default="", kw_only=True)


@dataclass
class WorkflowAdopted(Event):
    """An invoke was accepted (or a restart picked the workflow up): start walking its DAG."""

    run: WorkflowRun
    inputs: dict[str, bytes]
    options: RunOptions
    done: dict[int, tuple[dict[str, bytes], str]] = field(default_factory=dict)


@dataclass
class RecoveredWorkflow:
    """What the store holds of a workflow a previous orchestrator accepted and did not finish."""

    run: WorkflowRun
    saved: dict[int, tuple[dict[str, bytes], str]]  # step outputs that reached the store
    inputs: dict[str, bytes]
    options: RunOptions


@dataclass
class Recovered(Event):
    """The orchestrator restarted; ``paid_qpus`` are the QPUs where each run is billed."""

    workflows: list[RecoveredWorkflow]
    paid_qpus: frozenset[str]


@dataclass
class StepFinished(Event):
    """A step's worker returned (``outcome.ok`` False: it raised, or its worker died)."""

    workflow_id: str
    step_id: int
    lane: str
    outcome: StepOutcome


@dataclass
class CancelRequested(Event):
    workflow_id: str


@dataclass
class SampleRequested(Event):
    """A step called ``sample()``: make its QPU job."""

    workflow_id: str
    step_id: int
    shots: int | None
    caller: Caller
    # The request itself (circuits, parameter values, session): the machine passes it on to
    # the StartQpuJob it makes without looking at it.
    request: Any = None


@dataclass
class QpuJobEstimating(Event):
    job_id: str


@dataclass
class PlansReady(Event):
    """The resource plans of a step's circuits (a ``PlanError`` when none could be made)."""

    job_id: str
    plans: Plans


@dataclass
class PlanChosen(Event):
    """The user's answer to a ``--plan ask`` step: a plan number or "off"."""

    workflow_id: str
    step_id: int
    plan: Any


@dataclass
class QpuJobPlaced(Event):
    job_id: str
    qpu: str
    est_fidelity: float
    est_duration_s: float
    num_circuits: int
    cause: str
    mitigation: str = "none"  # the plan's stack the job runs with


@dataclass
class QpuJobStarted(Event):
    job_id: str


@dataclass
class QpuJobFinished(Event):
    job_id: str
    methods: list[str]
    counts: Any


@dataclass
class QpuJobFailed(Event):
    job_id: str
    error_type: str
    message: str


@dataclass
class QpuJobCancelled(Event):
    job_id: str


# ------------------------------------------------------------------------------- instructions
class Instruction:
    """Something the driver must do; the machine has already changed its state."""


@dataclass
class RunStep(Instruction):
    spec: StepSpec
    lane: str


@dataclass
class Persist(Instruction):
    """Save a job; ``publish``: also send its event (with the cause) to subscribers."""

    job: JobRecord
    cause: str = ""
    publish: bool = True
    # The state the job had when the instruction was made: one event can move a job several
    # times (pending, queued, running), and each event published must show its own state.
    state: JobState = field(init=False)

    def __post_init__(self) -> None:
        self.state = self.job.state


@dataclass
class SaveWorkflow(Instruction):
    run: WorkflowRun


@dataclass
class SaveStepOutputs(Instruction):
    workflow_id: str
    step_id: int
    outputs: dict[str, bytes]
    stdout: str


@dataclass
class SaveOutputs(Instruction):
    """The names a final workflow leaves behind, and its printed output."""

    workflow_id: str
    outputs: dict[str, bytes]
    stdout: str


@dataclass
class StartQpuJob(Instruction):
    """Estimate, place and queue this QPU job (the driver's async pipeline)."""

    job: JobRecord
    seed: int | None  # the simulator's seed for this job (job_seed); None: unseeded
    request: Any = None  # the SampleRequested's request


@dataclass
class Enqueue(Instruction):
    """Put the placed job in its QPU's queue (the pipeline readied what the queue takes)."""

    job_id: str
    qpu: str


@dataclass
class ReleaseQpuJob(Instruction):
    """Stop waiting for a cancelled QPU job, so that the step waiting on it ends too."""

    job_id: str


@dataclass
class PlanDecided(Instruction):
    """The plan a step's QPU jobs run with (None: unmitigated, on the scheduler's QPU)."""

    workflow_id: str
    step_id: int
    plan: Plan | None


@dataclass
class PlanFailed(Instruction):
    workflow_id: str
    step_id: int
    error: Exception


@dataclass
class Reply(Instruction):
    """Answer a worker's ``sample()``: ``ok`` with counts and the QPU, or an error."""

    caller: Caller
    ok: bool
    counts: Any = None
    qpu: str | None = None
    job: JobRecord | None = None  # the QPU job answered (its report goes with the counts)
    error_type: str = ""
    message: str = ""


@dataclass
class WorkflowFinal(Instruction):
    """Wake whoever waits for the workflow and forget its live futures and capability."""

    workflow_id: str
