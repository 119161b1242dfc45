"""Discrete-event simulation of a quantum cloud driven by the real scheduling code.

Each simulated QPU runs one job at a time from a FIFO queue shared by our jobs and other users'
(background) jobs. Our jobs arrive from the load generator; a policy places them: ``qonductor``
in cycles (``scheduler.cycle.run_cycle`` under the cloud triggers: 100 pending jobs or 120 s), the
baselines each job as it arrives (what a user submitting directly does). What the scheduler sees
are estimates (the estimator's fidelity and QPU time; queue waits from the estimated durations of
queued jobs); what happens is drawn once per seed and shared by every policy: each job's real QPU
time is its estimate times a log-normal error (sigma 0.15), background jobs are the same.

Calibration crossovers: at a QPU's calibration its fidelities drift (a seeded factor on each job's
log-fidelity; spread from ``ibm_perth_calibrations_2023H1`` where present), and qonductor takes the
jobs still waiting in that QPU's queue back and places them again with the new estimates.
Reservations: a QPU reserved for a window starts nothing inside it and is offline to the scheduler.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel_server.scheduler.cycle import (
    BALANCE_WINDOW_S,
    CLOUD_TRIGGERS,
    QPUView,
    Triggers,
    run_cycle,
)
from kernel_server.scheduler.online import OnlineScheduler
from kernel_server.scheduler.policies import BATCHING, ONLINE, PolicyState
from kernel_server.simulation.workload import Workload

RUNTIME_ERROR_SIGMA = 0.15
# A cloud provider's qonductor balances load (``SchedulingProblem.balance``) over the last hour
# (``BALANCE_WINDOW_S``): each QPU ends a cycle within 5% of the even level, give or take one job.
# At 1500 jobs/h without other users' load, 10% left a load difference of 15.0% between the
# busiest and the least busy QPU, 5% left 10.0% at 0.1% less fidelity. ``balance=None`` turns it
# off: the notebook orchestrator's default (fleet.yaml ``scheduler:`` turns it on there), where one
# user's jobs should go where they run best.
DEFAULT_BALANCE = 0.05
# Online qonductor decides this long after the first of a burst of arrivals (jobs arriving
# together share one decision). Poisson arrivals at 6000 jobs/h come 0.6 s apart on average.
ONLINE_GATHER_S = 0.1


@dataclass(frozen=True)
class Reservation:
    qpu: str
    start_s: float
    end_s: float


@dataclass
class Entry:
    """One job in a QPU's queue."""

    job: int  # our job index, or -1 for background
    duration: float  # real seconds
    estimate: float  # what the scheduler thinks it takes
    enqueued: float
    start: float = 0.0
    end: float = 0.0


@dataclass
class QPUState:
    name: str
    num_qubits: int
    entries: list[Entry] = field(default_factory=list)
    free_at: float = 0.0
    reservations: list[tuple[float, float]] = field(default_factory=list)

    def _start_after(self, t: float) -> float:
        for a, b in sorted(self.reservations):
            if a <= t < b:
                t = b
        return t

    def enqueue(self, entry: Entry, now: float) -> None:
        entry.enqueued = now
        entry.start = self._start_after(max(now, self.free_at))
        entry.end = entry.start + entry.duration
        self.free_at = entry.end
        self.entries.append(entry)

    def withdraw_waiting(self, now: float) -> list[Entry]:
        """Take out every entry not started by ``now``; the rest of the queue closes up."""
        started = [e for e in self.entries if e.start <= now]
        waiting = [e for e in self.entries if e.start > now]
        self.entries = started
        self.free_at = max([e.end for e in started], default=0.0)
        ours = [e for e in waiting if e.job >= 0]
        for e in waiting:
            if e.job < 0:
                self.enqueue(e, e.enqueued)  # background jobs keep their place in line
        return ours

    def reserved_at(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.reservations)

    def view(self, now: float, window_s: float = BALANCE_WINDOW_S) -> QPUView:
        # Estimated wait: estimated durations of what is queued, the running job's remainder.
        wait = 0.0
        pending = 0
        busy = 0.0  # work run in [now - window, now]
        for e in self.entries:
            busy += max(min(e.end, now) - max(e.start, now - window_s), 0.0)
            if e.end <= now:
                continue
            pending += 1
            if e.start <= now:
                wait += max(e.estimate - (now - e.start), 0.0)
            else:
                wait += e.estimate
        for a, b in self.reservations:
            if a <= now + wait and b > now:
                wait = max(wait, b - now) if a <= now else wait + (b - a)
        return QPUView(self.name, self.num_qubits, wait, pending, not self.reserved_at(now), busy)


@dataclass
class SimulationResult:
    policy: str
    preference: Any
    jct_s: np.ndarray
    fidelity: np.ndarray
    qpu_of_job: list[str]
    start_s: np.ndarray
    end_s: np.ndarray
    arrival_s: np.ndarray
    dropped: dict[int, str]
    our_busy_s: dict[str, float]  # our jobs' work per QPU
    makespan_s: float
    cycles: list[dict[str, Any]]
    pending_samples: list[tuple[float, int]]
    crossover_moves: int
    wall_s: float
    busy_intervals: dict[str, list[tuple[float, float]]]
    last_front: np.ndarray | None = None  # (K, 2) front of the last qonductor cycle with a choice
    # Online qonductor: wall seconds of each decision and the jobs it covered.
    decision_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    decision_jobs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def busy_s(self) -> dict[str, float]:
        """All work (ours and background) each QPU ran up to the makespan."""
        return {q: sum(b - a for a, b in spans) for q, spans in self.busy_intervals.items()}

    def metrics(self) -> dict[str, Any]:
        done = np.isfinite(self.jct_s)
        # A QPU's load is its total active runtime (ours and other users' jobs), as in the
        # paper's Figure 8c; ``our_load_s`` keeps our jobs' share per QPU.
        loads = np.asarray(list(self.busy_s.values()))
        ours = np.asarray(list(self.our_busy_s.values()))
        util = loads / max(self.makespan_s, 1e-9)
        cycle_s = [c["seconds"] for c in self.cycles]
        return {
            "jobs": int(len(self.jct_s)),
            "completed": int(done.sum()),
            "dropped": len(self.dropped),
            "mean_jct_s": float(self.jct_s[done].mean()) if done.any() else float("nan"),
            "p95_jct_s": float(np.percentile(self.jct_s[done], 95)) if done.any() else float("nan"),
            "mean_fidelity": float(self.fidelity[done].mean()) if done.any() else float("nan"),
            "mean_utilization": float(util.mean()),
            "max_load_difference": _spread(loads),
            "max_load_difference_ours": _spread(ours),
            "mean_execution_s": float((self.end_s - self.start_s)[done].mean())
            if done.any()
            else float("nan"),
            "makespan_s": self.makespan_s,
            "cycles": len(self.cycles),
            "mean_cycle_s": float(np.mean(cycle_s)) if cycle_s else 0.0,
            "max_cycle_s": float(np.max(cycle_s)) if cycle_s else 0.0,
            "mean_generations": float(np.mean([c.get("generations", 0) for c in self.cycles]))
            if self.cycles
            else 0.0,
            "max_pending": max((n for _, n in self.pending_samples), default=0),
            "crossover_moves": self.crossover_moves,
            "decisions": int(len(self.decision_s)),
            "median_decision_ms": float(np.median(self.decision_s) * 1000)
            if len(self.decision_s)
            else 0.0,
            "p95_decision_ms": float(np.percentile(self.decision_s, 95) * 1000)
            if len(self.decision_s)
            else 0.0,
            "mean_decision_jobs": float(self.decision_jobs.mean())
            if len(self.decision_jobs)
            else 0.0,
            "our_load_s": {k: round(v, 1) for k, v in self.our_busy_s.items()},
            "wall_seconds": self.wall_s,
        }


def _spread(loads: np.ndarray) -> float:
    """(busiest - least busy) / busiest; 0 for no load."""
    if not loads.size or loads.max() <= 0:
        return 0.0
    return float((loads.max() - loads.min()) / loads.max())


def _drifted(fidelity: Any, factor: Any) -> Any:
    """Fidelity after a calibration that scales its log by ``factor``."""
    return np.exp(np.log(np.clip(fidelity, 1e-9, 1.0)) * factor)


@functools.lru_cache(maxsize=1)
def _drift_sigma() -> float:
    """Spread of a QPU's log-error from one daily calibration to the next (ibm_perth, 2023H1);
    read once per process (every policy's run uses it)."""
    from kernel_server.core.paths import SHARED_DATA_DIR

    path = SHARED_DATA_DIR / "ibm_perth_calibrations_2023H1.jsonl.gz"
    if not path.exists():
        return 0.2
    import gzip
    import json

    means = []
    with gzip.open(path, "rt") as f:
        for line in f:
            snap = json.loads(line)
            errors = [
                p["value"]
                for g in snap.get("gates", [])
                if g.get("gate") == "cx"
                for p in g.get("parameters", [])
                if p.get("name") == "gate_error" and 0 < p.get("value", 0) < 1
            ]
            if errors:
                means.append(np.mean(errors))
    if len(means) < 3:
        return 0.2
    return float(np.std(np.diff(np.log(means))))


def simulate(
    workload: Workload,
    policy: str,
    preference: Any = "balanced",
    seed: int = 1,
    background: Sequence[tuple[float, int, float]] = (),
    calibrations: Sequence[tuple[float, int]] = (),
    reservations: Sequence[Reservation] = (),
    triggers: Triggers = CLOUD_TRIGGERS,
    drift_sigma: float | None = None,
    nsga2_options: dict[str, Any] | None = None,
    jct_model: str = "fifo",
    balance: float | None = DEFAULT_BALANCE,
    gather_s: float = ONLINE_GATHER_S,
    online_balance: float | None = None,
) -> SimulationResult:
    """Run one policy over the workload; deterministic for a seed (except wall times)."""
    wall0 = time.perf_counter()
    n, q_count = workload.num_jobs, len(workload.qpus)
    rng = np.random.default_rng(seed + 101)
    # The real world, the same for every policy: runtime errors and calibration drifts.
    actual_factor = rng.lognormal(0.0, RUNTIME_ERROR_SIGMA, size=(n, q_count))
    sigma = _drift_sigma() if drift_sigma is None else drift_sigma
    drift = rng.lognormal(0.0, sigma, size=(len(calibrations), n))
    fidelity = workload.fidelity.copy()
    qpus = [QPUState(q.name, q.num_qubits) for q in workload.qpus]
    index = {q.name: i for i, q in enumerate(qpus)}
    for r in reservations:
        if r.qpu not in index:
            raise ValueError(f"reservation for unknown QPU {r.qpu!r}")
        qpus[index[r.qpu]].reservations.append((r.start_s, r.end_s))

    batching = policy in BATCHING
    online = policy in ONLINE
    scheduler = OnlineScheduler(preference=preference, balance=online_balance, seed=seed)
    largest = max(q.num_qubits for q in qpus)
    decide_at: float | None = None
    state = PolicyState(
        extra={"nsga2": dict(nsga2_options or {}), "jct_model": jct_model, "balance": balance}
    )
    events: list[tuple[float, int, str, Any]] = []
    seq = 0

    def push(t: float, kind: str, payload: Any) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    for i, t in enumerate(workload.arrival_s):
        push(float(t), "arrival", i)
    for t, qi, duration in background:
        push(t, "background", (qi, duration))
    for c, (t, qi) in enumerate(calibrations):
        push(t, "calibration", (c, qi))

    placed_on = np.full(n, -1)
    entry_of: dict[int, Entry] = {}
    dropped: dict[int, str] = {}
    pending: list[int] = []
    waiting_since: dict[int, float] = {}
    cycles: list[dict[str, Any]] = []
    samples: list[tuple[float, int]] = []
    moves = 0
    last_cycle = 0.0
    timer_at: float | None = None
    last_front: np.ndarray | None = None

    def place(jobs: list[int], now: float) -> None:
        nonlocal moves, last_front
        if not jobs:
            return
        views = [qp.view(now) for qp in qpus]
        est_runtime = np.nan_to_num(workload.quantum_s[jobs], nan=1e9)
        est_fid = np.nan_to_num(fidelity[jobs], nan=0.0)
        outcome = run_cycle(
            [str(j) for j in jobs],
            workload.qubits[jobs],
            est_runtime,
            est_fid,
            views,
            policy=policy,
            state=state,
            preference=preference,
            seed=seed + len(cycles),
            offsets=[now - workload.arrival_s[j] for j in jobs],
        )
        if batching:
            record: dict[str, Any] = {"t": now, "jobs": len(jobs), "seconds": outcome.seconds}
            record.update(outcome.stage_seconds)
            if outcome.result is not None:
                front = outcome.result.front
                if len(front) > 1:
                    last_front = front
                record.update(
                    front_jct=(float(front[:, 0].min()), float(front[:, 0].max())),
                    front_error=(float(front[:, 1].min()), float(front[:, 1].max())),
                    chosen=[float(v) for v in outcome.result.objectives],
                    generations=outcome.result.generations,
                )
            cycles.append(record)
        for job_id, reason in outcome.dropped.items():
            dropped[int(job_id)] = reason
        for job_id in outcome.deferred:
            pending.append(int(job_id))
        # Enqueue in arrival order: the order the JCT objective assumed.
        for job_id in sorted(outcome.placed, key=lambda j: workload.arrival_s[int(j)]):
            j = int(job_id)
            qi = index[outcome.placed[job_id]]
            if placed_on[j] >= 0 and placed_on[j] != qi:
                moves += 1
            placed_on[j] = qi
            entry = Entry(
                j,
                float(workload.quantum_s[j, qi] * actual_factor[j, qi]),
                float(workload.quantum_s[j, qi]),
                now,
            )
            qpus[qi].enqueue(entry, now)
            entry_of[j] = entry

    def enqueue(qi: int, entry: Entry, now: float) -> None:
        qpus[qi].enqueue(entry, now)
        if online:  # the QPU frees: pending jobs may start there
            push(entry.end, "free", qi)

    def decide(now: float) -> None:
        for job_id, qi in scheduler.step([qp.view(now) for qp in qpus], now):
            j = int(job_id)
            placed_on[j] = qi
            entry = Entry(
                j,
                float(workload.quantum_s[j, qi] * actual_factor[j, qi]),
                float(workload.quantum_s[j, qi]),
                now,
            )
            enqueue(qi, entry, now)
            entry_of[j] = entry

    if online:
        for qp in qpus:  # a QPU coming back from a reservation may take jobs
            for a, b in qp.reservations:
                push(a, "decide", None)
                push(b, "decide", None)

    while events:
        now, _, kind, payload = heapq.heappop(events)
        if online and kind == "arrival":
            j = payload
            if workload.qubits[j] > largest:
                dropped[j] = f"needs {workload.qubits[j]} qubits; the largest QPU has {largest}"
                continue
            scheduler.add(
                str(j),
                int(workload.qubits[j]),
                np.nan_to_num(fidelity[j], nan=0.0),
                np.nan_to_num(workload.quantum_s[j], nan=1e9),
                now,
            )
            samples.append((now, len(scheduler.pending)))
            if decide_at is None or decide_at < now:
                decide_at = now + gather_s
                push(decide_at, "decide", None)
        elif kind == "decide" or kind == "free":
            if online and scheduler.pending:
                decide(now)
        elif kind == "arrival":
            if batching:
                pending.append(payload)
                waiting_since.setdefault(payload, now)
                samples.append((now, len(pending)))
                if len(pending) >= triggers.queue_size:
                    jobs, pending[:] = list(pending), []
                    place(jobs, now)
                    last_cycle = now
                    samples.append((now, 0))
                elif timer_at is None:
                    due = triggers.next_cycle(len(pending), now, last_cycle)
                    timer_at = max(due if due is not None else now, now)
                    push(timer_at, "cycle", None)
            else:
                place([payload], now)
        elif kind == "cycle":
            timer_at = None
            if pending:
                jobs, pending[:] = list(pending), []
                place(jobs, now)
                samples.append((now, len(pending)))
            last_cycle = now
            if pending:  # deferred jobs (their QPUs offline) try again next interval
                timer_at = now + triggers.interval_s
                push(timer_at, "cycle", None)
        elif kind == "background":
            qi, duration = payload
            enqueue(qi, Entry(-1, duration, duration, now), now)
        elif kind == "calibration":
            c, qi = payload
            # New calibration: this QPU's fidelities drift for every job.
            with np.errstate(invalid="ignore"):  # NaN where the QPU is too small stays NaN
                fidelity[:, qi] = _drifted(fidelity[:, qi], drift[c])
            if batching:
                waiting = qpus[qi].withdraw_waiting(now)
                if waiting:
                    place([e.job for e in waiting], now)
            elif online and scheduler.pending:
                # Nothing of ours waits in a queue: the pending jobs' plans take the new estimates.
                scheduler.update_estimates(
                    qi, {k: float(np.nan_to_num(fidelity[int(k), qi])) for k in scheduler.pending}
                )
                decide(now)

    jct = np.full(n, np.inf)
    fid = np.full(n, np.nan)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    qpu_of: list[str] = [""] * n
    for j, entry in entry_of.items():
        qi = int(placed_on[j])
        start[j], end[j] = entry.start, entry.end
        jct[j] = entry.end + workload.classical_s[j] - workload.arrival_s[j]
        # The fidelity the job got: its QPU's calibration at the time it ran.
        fid[j] = _fidelity_at(workload, calibrations, drift, j, qi, entry.start)
        qpu_of[j] = qpus[qi].name
    makespan = float(np.nanmax(end)) if np.isfinite(end).any() else 0.0
    ours = {qp.name: 0.0 for qp in qpus}
    intervals: dict[str, list[tuple[float, float]]] = {qp.name: [] for qp in qpus}
    for qp in qpus:
        for e in qp.entries:
            lo, hi = e.start, min(e.end, makespan)
            if hi > lo:
                intervals[qp.name].append((lo, hi))
            if e.job >= 0:
                ours[qp.name] += e.duration
    return SimulationResult(
        policy=policy,
        preference=preference,
        jct_s=jct,
        fidelity=fid,
        qpu_of_job=qpu_of,
        start_s=start,
        end_s=end,
        arrival_s=np.asarray(workload.arrival_s, dtype=float),
        dropped=dropped,
        our_busy_s=ours,
        makespan_s=makespan,
        cycles=cycles,
        pending_samples=samples,
        crossover_moves=scheduler.moves if online else moves,
        wall_s=time.perf_counter() - wall0,
        busy_intervals=intervals,
        last_front=last_front,
        decision_s=scheduler.decision_seconds(),
        decision_jobs=np.asarray([n for n, _, _ in scheduler.decisions], dtype=int),
    )


def _fidelity_at(
    workload: Workload,
    calibrations: Sequence[tuple[float, int]],
    drift: np.ndarray,
    job: int,
    qpu: int,
    t: float,
) -> float:
    value = float(workload.fidelity[job, qpu])
    for c, (when, qi) in enumerate(calibrations):
        if qi == qpu and when <= t:
            value = float(_drifted(value, drift[c, job]))
    return value
