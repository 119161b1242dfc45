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

:class:`CloudSimulation` is one run, a method per kind of event; the QPUs' queues are in ``qpus``,
what a run produced and its metrics in ``results``.
"""

from __future__ import annotations

import functools
import heapq
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kernel_server.scheduler.cycle import CLOUD_TRIGGERS, Triggers, run_cycle
from kernel_server.scheduler.online import OnlineScheduler
from kernel_server.scheduler.policies import BATCHING, ONLINE, PolicyState
from kernel_server.simulation.bounds import (
    fidelity_ceiling,
    jct_lower_bound,
    others_hold_s,
    time_indexed_jct_bound,
)
from kernel_server.simulation.qpus import Entry, QPUState, Reservation
from kernel_server.simulation.results import CycleRecord, SimulationResult
from kernel_server.simulation.workload import Workload

__all__ = [
    "CloudSimulation",
    "Reservation",
    "SimulationResult",
    "simulate",
    "time_indexed_bound",
]

RUNTIME_ERROR_SIGMA = 0.15
# A cloud provider's qonductor balances load (``SchedulingProblem.balance``) over the last hour
# (``BALANCE_WINDOW_S``): each QPU ends a cycle within 5% of the even level, give or take one job.
# At 1500 jobs/h without other users' load, 10% left a load difference of 15.0% between the
# busiest and the least busy QPU, 5% left 10.0% at 0.1% less fidelity. ``balance=None`` turns it
# off: the notebook orchestrator's default (fleet.yaml ``scheduler:`` turns it on there), where one
# user's jobs should go where they run best.
DEFAULT_BALANCE = 0.05
# Online qonductor decides this long after an arrival. Zero, as the orchestrator's dispatcher
# decides for a job that arrives alone (``scheduler.dispatch``); jobs arriving at the same
# instant still share one decision (their arrival events come before it). It was 0.1 s, which
# charged every job of the online presets 0.1 s of JCT that no baseline paid (one hour, seed 1,
# 2809 jobs/h on 16 QPUs: `jct` 3.62 s -> 3.51 s, `balanced` 4.22 s -> 4.10 s).
ONLINE_GATHER_S = 0.0


def _world(seed: int) -> np.random.Generator:
    """The draws of the real world (runtime errors first, then calibration drifts) for a seed:
    the same for every policy, and for the bounds computed outside a run."""
    return np.random.default_rng(seed + 101)


def _runtime_errors(rng: np.random.Generator, jobs: int) -> np.ndarray:
    """(N, 1) factor each job's real run time is of its estimate: the world's first draw."""
    return rng.lognormal(0.0, RUNTIME_ERROR_SIGMA, size=(jobs, 1))


def _bound_inputs(
    workload: Workload,
    background: Sequence[tuple[float, int, float]],
    actual_factor: np.ndarray,
    jobs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrivals, realised run times (N, Q; infinite where a job may not run), post-processing
    and other users' hold (``others_hold_s``) of the ``jobs`` (mask) that may run somewhere."""
    w = workload
    realised = np.where(w.usable, w.quantum_s * actual_factor, np.inf)
    jobs = jobs & np.isfinite(realised.min(axis=1))
    held = others_hold_s(w.arrival_s[jobs], background, len(w.qpus))
    return w.arrival_s[jobs], realised[jobs], w.classical_s[jobs], held


def time_indexed_bound(
    workload: Workload,
    background: Sequence[tuple[float, int, float]] = (),
    seed: int = 1,
    **options: Any,
) -> float:
    """The tighter mean-JCT bound (``bounds.time_indexed_jct_bound``) of every job of a run with
    this ``seed``: the same realised run times as ``simulate``'s. Seconds to minutes of LPs, so
    computed on request, once per workload (``options``: the LP's slot, horizon, group size)."""
    factor = _runtime_errors(_world(seed), workload.num_jobs)
    arrival, run, classical, held = _bound_inputs(
        workload, background, factor, np.ones(workload.num_jobs, dtype=bool)
    )
    return time_indexed_jct_bound(arrival, run, classical, len(workload.qpus), held, **options)


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


class CloudSimulation:
    """One policy's run over a workload: the event queue, the QPUs' queues and what the policy
    did, with one method per kind of event. Deterministic for a seed (except wall times)."""

    def __init__(
        self,
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
        online_balance: float | str | None = None,  # OnlineScheduler.balance
    ) -> None:
        self.wall0 = time.perf_counter()
        self.workload, self.policy, self.preference, self.seed = workload, policy, preference, seed
        self.calibrations, self.triggers, self.gather_s = calibrations, triggers, gather_s
        n, q_count = workload.num_jobs, len(workload.qpus)
        rng = _world(seed)
        # The real world, the same for every policy: runtime errors and calibration drifts. A
        # run's error belongs to the execution, not to the QPU it might have run on (identical
        # reruns spread 2.4-10.9 s, ``estimator.runtime``): one factor per job, whichever QPU
        # runs it. Per (job, QPU) draws would give a QPU no scheduler can know to be faster, and
        # a lower bound that picks it (the min of eight draws sits ~15% under their mean).
        self.actual_factor = np.broadcast_to(_runtime_errors(rng, n), (n, q_count))
        sigma = _drift_sigma() if drift_sigma is None else drift_sigma
        self.drift = rng.lognormal(0.0, sigma, size=(len(calibrations), n))
        self.fidelity = workload.fidelity.copy()  # the estimates, drifting at each calibration
        self.qpus = [QPUState(q.name, q.num_qubits) for q in workload.qpus]
        self.index = {q.name: i for i, q in enumerate(self.qpus)}
        for r in reservations:
            if r.qpu not in self.index:
                raise ValueError(f"reservation for unknown QPU {r.qpu!r}")
            self.qpus[self.index[r.qpu]].reservations.append((r.start_s, r.end_s))

        self.batching = policy in BATCHING
        self.online = policy in ONLINE
        self.scheduler = OnlineScheduler(preference=preference, balance=online_balance, seed=seed)
        self.largest = max(q.num_qubits for q in self.qpus)
        self.decide_at: float | None = None  # online: when the gathered arrivals are decided
        self.state = PolicyState(
            extra={"nsga2": dict(nsga2_options or {}), "jct_model": jct_model, "balance": balance}
        )
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0  # ties in time go in the order the events were pushed
        for i, t in enumerate(workload.arrival_s):
            self.push(float(t), "arrival", i)
        self.background = list(background)
        for t, qi, duration in self.background:
            self.push(t, "background", (qi, duration))
        for c, (t, qi) in enumerate(calibrations):
            self.push(t, "calibration", (c, qi))

        self.placed_on = np.full(n, -1)
        self.entry_of: dict[int, Entry] = {}
        self.dropped: dict[int, str] = {}
        self.pending: list[int] = []  # batching: the jobs waiting for the next cycle
        self.cycles: list[CycleRecord] = []
        self.samples: list[tuple[float, int]] = []  # (time, jobs waiting to be placed)
        self.moves = 0
        self.last_cycle = 0.0
        self.timer_at: float | None = None
        self.last_front: np.ndarray | None = None
        if self.online:
            for qp in self.qpus:  # a QPU coming back from a reservation may take jobs
                for a, b in qp.reservations:
                    self.push(a, "decide", None)
                    self.push(b, "decide", None)

    def push(self, t: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, payload))
        self.seq += 1

    def run(self) -> SimulationResult:
        """Handle the events in time order until none is left; the run's result."""
        handlers: dict[str, Callable[[float, Any], None]] = {
            "arrival": self.on_arrival,
            "decide": self.on_decide,
            "free": self.on_decide,
            "cycle": self.on_cycle,
            "background": self.on_background,
            "calibration": self.on_calibration,
        }
        while self.events:
            now, _, kind, payload = heapq.heappop(self.events)
            handlers[kind](now, payload)
        return self.result()

    # -- placing jobs -----------------------------------------------------------------------

    def _entry(self, j: int, qi: int, now: float) -> Entry:
        """Job ``j`` on QPU ``qi``: its real duration and the estimate the scheduler sees."""
        estimate = self.workload.quantum_s[j, qi]
        return Entry(j, float(estimate * self.actual_factor[j, qi]), float(estimate), now)

    def _enqueue(self, qi: int, entry: Entry, now: float) -> None:
        self.qpus[qi].enqueue(entry, now)
        if self.online:  # the QPU frees: pending jobs may start there
            self.push(entry.end, "free", qi)

    def _place(self, jobs: list[int], now: float) -> None:
        """Place ``jobs`` with the policy (a batching policy's cycle) and queue them."""
        if not jobs:
            return
        workload = self.workload
        views = [qp.view(now) for qp in self.qpus]
        est_runtime = np.nan_to_num(workload.quantum_s[jobs], nan=1e9)
        est_fid = np.nan_to_num(self.fidelity[jobs], nan=0.0)
        outcome = run_cycle(
            [str(j) for j in jobs],
            workload.qubits[jobs].tolist(),
            est_runtime,
            est_fid,
            views,
            policy=self.policy,
            state=self.state,
            preference=self.preference,
            seed=self.seed + len(self.cycles),
            offsets=[now - workload.arrival_s[j] for j in jobs],
        )
        if self.batching:
            self._record_cycle(outcome, len(jobs), now)
        for job_id, reason in outcome.dropped.items():
            self.dropped[int(job_id)] = reason
        for job_id in outcome.deferred:
            self.pending.append(int(job_id))
        # Enqueue in arrival order: the order the JCT objective assumed.
        for job_id in sorted(outcome.placed, key=lambda j: workload.arrival_s[int(j)]):
            j = int(job_id)
            qi = self.index[outcome.placed[job_id]]
            if self.placed_on[j] >= 0 and self.placed_on[j] != qi:
                self.moves += 1
            self.placed_on[j] = qi
            entry = self._entry(j, qi, now)
            self.qpus[qi].enqueue(entry, now)
            self.entry_of[j] = entry

    def _record_cycle(self, outcome: Any, jobs: int, now: float) -> None:
        record = CycleRecord(
            t=now, jobs=jobs, seconds=outcome.seconds, stage_seconds=dict(outcome.stage_seconds)
        )
        if outcome.result is not None:
            front = outcome.result.front
            if len(front) > 1:
                self.last_front = front
            record["front_jct"] = (float(front[:, 0].min()), float(front[:, 0].max()))
            record["front_error"] = (float(front[:, 1].min()), float(front[:, 1].max()))
            record["chosen"] = [float(v) for v in outcome.result.objectives]
            record["generations"] = outcome.result.generations
        self.cycles.append(record)

    def _decide(self, now: float) -> None:
        """Online: start what the scheduler decides now on the QPUs' current views."""
        for job_id, qi in self.scheduler.step([qp.view(now) for qp in self.qpus], now):
            j = int(job_id)
            self.placed_on[j] = qi
            entry = self._entry(j, qi, now)
            self._enqueue(qi, entry, now)
            self.entry_of[j] = entry

    def _cycle_now(self, now: float) -> None:
        """A batching policy's cycle over every waiting job."""
        jobs, self.pending[:] = list(self.pending), []
        self._place(jobs, now)

    # -- events -----------------------------------------------------------------------------

    def on_arrival(self, now: float, j: int) -> None:
        if self.online:
            self._arrive_online(now, j)
        elif self.batching:
            self._arrive_for_cycle(now, j)
        else:
            self._place([j], now)

    def _arrive_online(self, now: float, j: int) -> None:
        workload = self.workload
        if workload.qubits[j] > self.largest:
            self.dropped[j] = (
                f"needs {workload.qubits[j]} qubits; the largest QPU has {self.largest}"
            )
            return
        self.scheduler.add(
            str(j),
            int(workload.qubits[j]),
            np.nan_to_num(self.fidelity[j], nan=0.0),
            np.nan_to_num(workload.quantum_s[j], nan=1e9),
            now,
        )
        self.samples.append((now, len(self.scheduler.pending)))
        if self.decide_at is None or self.decide_at < now:
            self.decide_at = now + self.gather_s
            self.push(self.decide_at, "decide", None)

    def _arrive_for_cycle(self, now: float, j: int) -> None:
        self.pending.append(j)
        self.samples.append((now, len(self.pending)))
        if len(self.pending) >= self.triggers.queue_size:
            self._cycle_now(now)
            self.last_cycle = now
            self.samples.append((now, 0))
        elif self.timer_at is None:
            due = self.triggers.next_cycle(len(self.pending), now, self.last_cycle)
            self.timer_at = max(due if due is not None else now, now)
            self.push(self.timer_at, "cycle", None)

    def on_decide(self, now: float, _: Any) -> None:
        """A gathering window closed or a QPU freed (online)."""
        if self.online and self.scheduler.pending:
            self._decide(now)

    def on_cycle(self, now: float, _: Any) -> None:
        """The cycle timer of a batching policy."""
        self.timer_at = None
        if self.pending:
            self._cycle_now(now)
            self.samples.append((now, len(self.pending)))
        self.last_cycle = now
        if self.pending:  # deferred jobs (their QPUs offline) try again next interval
            self.timer_at = now + self.triggers.interval_s
            self.push(self.timer_at, "cycle", None)

    def on_background(self, now: float, payload: tuple[int, float]) -> None:
        qi, duration = payload
        self._enqueue(qi, Entry(-1, duration, duration, now), now)

    def on_calibration(self, now: float, payload: tuple[int, int]) -> None:
        c, qi = payload
        # New calibration: this QPU's fidelities drift for every job.
        with np.errstate(invalid="ignore"):  # NaN where the QPU is too small stays NaN
            self.fidelity[:, qi] = _drifted(self.fidelity[:, qi], self.drift[c])
        if self.batching:
            waiting = self.qpus[qi].withdraw_waiting(now)
            if waiting:
                self._place([e.job for e in waiting], now)
        elif self.online and self.scheduler.pending:
            # Nothing of ours waits in a queue: the pending jobs' plans take the new estimates.
            self.scheduler.update_estimates(
                qi,
                {
                    k: float(np.nan_to_num(self.fidelity[int(k), qi]))
                    for k in self.scheduler.pending
                },
            )
            self._decide(now)

    # -- the outcome ------------------------------------------------------------------------

    def result(self) -> SimulationResult:
        workload, n = self.workload, self.workload.num_jobs
        jct = np.full(n, np.inf)
        fid = np.full(n, np.nan)
        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        qpu_of: list[str] = [""] * n
        for j, entry in self.entry_of.items():
            qi = int(self.placed_on[j])
            start[j], end[j] = entry.start, entry.end
            jct[j] = entry.end + workload.classical_s[j] - workload.arrival_s[j]
            # The fidelity the job got: its QPU's calibration at the time it ran.
            fid[j] = _fidelity_at(workload, self.calibrations, self.drift, j, qi, entry.start)
            qpu_of[j] = self.qpus[qi].name
        makespan = float(np.nanmax(end)) if np.isfinite(end).any() else 0.0
        ours = {qp.name: 0.0 for qp in self.qpus}
        intervals: dict[str, list[tuple[float, float]]] = {qp.name: [] for qp in self.qpus}
        for qp in self.qpus:
            for e in qp.entries:
                lo, hi = e.start, min(e.end, makespan)
                if hi > lo:
                    intervals[qp.name].append((lo, hi))
                if e.job >= 0:
                    ours[qp.name] += e.duration
        scheduler = self.scheduler
        return SimulationResult(
            policy=self.policy,
            preference=self.preference,
            jct_s=jct,
            fidelity=fid,
            qpu_of_job=qpu_of,
            start_s=start,
            end_s=end,
            arrival_s=np.asarray(workload.arrival_s, dtype=float),
            dropped=self.dropped,
            our_busy_s=ours,
            makespan_s=makespan,
            cycles=self.cycles,
            pending_samples=self.samples,
            crossover_moves=scheduler.moves if self.online else self.moves,
            wall_s=time.perf_counter() - self.wall0,
            busy_intervals=intervals,
            last_front=self.last_front,
            decision_s=scheduler.decision_seconds(),
            decision_jobs=np.asarray([k for k, _, _ in scheduler.decisions], dtype=int),
            lower_bound_jct_s=self._lower_bound(np.isfinite(jct)),
            fidelity_ceiling=self._fidelity_ceiling(np.isfinite(jct)),
        )

    def _lower_bound(self, jobs: np.ndarray) -> float:
        """The mean JCT no schedule of these jobs could beat (``bounds``), from their realised
        run times: the same for every policy on the same workload and seed."""
        arrival, run, classical, held = _bound_inputs(
            self.workload, self.background, self.actual_factor, jobs
        )
        return jct_lower_bound(arrival, run, classical, len(self.qpus), held)

    def _fidelity_ceiling(self, jobs: np.ndarray) -> float:
        """The mean fidelity no schedule of these jobs could beat (``bounds``), from the
        calibrations' realised drifts: the same for every policy on the same workload and seed."""
        w = self.workload
        start = np.where(w.usable, w.fidelity, np.nan)[jobs]
        current, changes = start.copy(), []
        # In time order: each change carries every drift up to it (the list may come unsorted).
        for c, (when, qi) in sorted(enumerate(self.calibrations), key=lambda e: e[1][0]):
            with np.errstate(invalid="ignore"):  # NaN where the job may not run stays NaN
                current[:, qi] = _drifted(current[:, qi], self.drift[c][jobs])
            changes.append((when, qi, current[:, qi].copy()))
        return fidelity_ceiling(w.arrival_s[jobs], start, changes)


def simulate(
    workload: Workload, policy: str, preference: Any = "balanced", **options: Any
) -> SimulationResult:
    """Run one policy over the workload; deterministic for a seed (except wall times).

    ``options`` are :class:`CloudSimulation`'s (seed, background, calibrations, reservations,
    triggers, ...), passed on as they are."""
    return CloudSimulation(workload, policy, preference, **options).run()


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
