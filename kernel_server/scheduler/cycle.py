"""One quantum scheduling cycle (pre-processing -> optimisation -> selection) and its triggers.

Shared by the orchestrator (notebook jobs, interactive triggers) and the cloud simulator (cloud
triggers), so the simulator measures the code that runs.

Pre-processing: QPUs that are offline or reserved now leave the problem (paper §7: a reservation
makes a QPU offline for its window); a job that no QPU of the fleet can hold is dropped with a
reason for its owner; a job that only fits QPUs that are offline right now waits for the next cycle.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel_server.scheduler.nsga2 import ScheduleResult
from kernel_server.scheduler.policies import PolicyState, get_policy
from kernel_server.scheduler.problem import SchedulingProblem


@dataclass(frozen=True)
class Triggers:
    """When a cycle runs: ``queue_size`` pending jobs, or else on a clock.

    Cloud setting (paper §7): every ``interval_s`` (120 s) regardless of the queue, or at once when
    100 jobs wait. Interactive setting (``gather_s`` set): a cycle runs ``gather_s`` after the first
    job of an empty queue arrives, so a lone notebook job is placed within that delay, and jobs
    submitted together (a cell's steps, a sweep) still share one cycle.
    """

    queue_size: int = 100
    interval_s: float = 120.0
    gather_s: float | None = None

    def __post_init__(self) -> None:
        if self.queue_size < 1 or self.interval_s <= 0:
            raise ValueError("queue_size must be >= 1 and interval_s > 0")
        if self.gather_s is not None and self.gather_s < 0:
            raise ValueError("gather_s must be >= 0")

    def next_cycle(
        self, pending: int, first_pending_at: float | None, last_cycle_at: float
    ) -> float | None:
        """Time of the next cycle (None: nothing pending, nothing to do)."""
        if pending <= 0 or first_pending_at is None:
            return None
        if pending >= self.queue_size:
            return first_pending_at if self.gather_s is not None else last_cycle_at
        if self.gather_s is not None:
            return first_pending_at + self.gather_s
        return last_cycle_at + self.interval_s


CLOUD_TRIGGERS = Triggers()
INTERACTIVE_TRIGGERS = Triggers(queue_size=100, interval_s=120.0, gather_s=0.25)


# The span of a QPU's recent work that load balancing evens out: the last hour, the span the
# simulator's load figure is judged over.
BALANCE_WINDOW_S = 3600.0


@dataclass(frozen=True)
class QPUView:
    """A QPU as one cycle sees it."""

    name: str
    num_qubits: int
    wait_s: float  # until its queue clears (including any reservation that blocks it)
    pending: int = 0  # jobs queued or running
    online: bool = True  # False while offline or reserved
    # Seconds of work it ran in the last BALANCE_WINDOW_S (ours and other users'); with ``wait_s``
    # the load that balancing evens out. 0 where nobody measures it (balancing then sees queues).
    recent_busy_s: float = 0.0
    # Of that load (``recent_busy_s`` + ``wait_s``), the seconds that are other users' work: what
    # our placements cannot move (``online.reachable_difference``). 0 where none is known.
    others_s: float = 0.0


@dataclass
class CycleOutcome:
    placed: dict[str, str] = field(default_factory=dict)  # job id -> QPU name
    dropped: dict[str, str] = field(default_factory=dict)  # job id -> reason for its owner
    deferred: list[str] = field(default_factory=list)  # waits for an offline QPU to return
    result: ScheduleResult | None = None  # qonductor's front, where it ran
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)


def run_cycle(
    job_ids: Sequence[str],
    job_qubits: Sequence[int],
    runtime: np.ndarray,
    fidelity: np.ndarray,
    qpus: Sequence[QPUView],
    policy: str = "qonductor",
    state: PolicyState | None = None,
    preference: Any = "balanced",
    seed: int = 0,
    offsets: Sequence[float] | None = None,
) -> CycleOutcome:
    """Place ``job_ids`` (estimates as (N, Q) arrays over ``qpus``) with ``policy``."""
    t0 = time.perf_counter()
    state = state if state is not None else PolicyState()
    out = CycleOutcome()
    widths = np.asarray(job_qubits, dtype=int)
    qubits = np.asarray([q.num_qubits for q in qpus], dtype=int)
    online = np.asarray([q.online for q in qpus], dtype=bool)
    runtime = np.asarray(runtime, dtype=float).reshape(len(job_ids), len(qpus))
    fidelity = np.asarray(fidelity, dtype=float).reshape(len(job_ids), len(qpus))
    largest = int(qubits.max(initial=0))
    largest_online = int(qubits[online].max(initial=0))
    keep: list[int] = []
    for i, (job, width) in enumerate(zip(job_ids, widths, strict=True)):
        if width > largest:
            out.dropped[job] = (
                f"needs {width} qubits but the largest QPU of the fleet has {largest}; "
                "reduce the circuit's width or cut it"
            )
        elif width > largest_online:
            out.deferred.append(job)
        else:
            keep.append(i)
    columns = np.flatnonzero(online)
    out.stage_seconds["pre-processing"] = time.perf_counter() - t0
    if not keep:
        out.seconds = time.perf_counter() - t0
        return out
    rows = np.asarray(keep)
    problem = SchedulingProblem(
        wait=np.asarray([qpus[c].wait_s for c in columns]),
        qpu_qubits=qubits[columns],
        job_qubits=widths[rows],
        runtime=runtime[np.ix_(rows, columns)],
        fidelity=fidelity[np.ix_(rows, columns)],
        offset=None if offsets is None else np.asarray(offsets, dtype=float)[rows],
        jct_model=state.extra.get("jct_model", "fifo"),
        load=np.asarray([qpus[c].recent_busy_s + qpus[c].wait_s for c in columns]),
        balance=state.extra.get("balance"),
    )
    state.pending = np.asarray([qpus[c].pending for c in columns])
    t1 = time.perf_counter()
    assignment = get_policy(policy)(problem, state, preference, seed)
    out.stage_seconds["optimization+selection"] = time.perf_counter() - t1
    if policy.startswith("qonductor"):
        out.result = state.last_result
    for r, column in zip(rows, assignment, strict=True):
        out.placed[job_ids[r]] = qpus[columns[column]].name
    out.seconds = time.perf_counter() - t0
    return out
