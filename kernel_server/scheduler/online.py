"""Online quantum scheduling: decide when something changes, bind a job to a QPU only as it starts.

The paper's scheduler gathers jobs for a cycle (120 s or 100 jobs) and then commits each to a QPU's
FIFO queue: a job waits 60 s on average before anyone looks at it, and a decision taken on stale
queue and calibration data cannot be taken back. Here a decision runs whenever the fleet or the
pending set changes (jobs arrive, a QPU frees, a calibration lands, a reservation ends), over every
job that has not started, and a job is handed to a QPU only when that QPU is about to be free
(``commit_ahead_s``). Until then it is a *plan*: re-planned at the next event with fresh data, the
late binding of Sparrow's and Slurm's backfill schedulers.

A decision is the same multi-objective problem as a cycle (``SchedulingProblem``: mean JCT and
mean error over the pending jobs, FIFO per QPU in arrival order, so each QPU serves our jobs first
come first served). Its candidate schedules come from

* the exact front where the assignments can be enumerated (``EXACT_LIMIT``),
* otherwise list schedules over a sweep of exchange rates (seconds of completion one unit of
  fidelity is worth: rate 0 is earliest expected completion, an infinite rate best fidelity),
  the previous plan, and for larger decisions NSGA-II seeded with them;

and the preset picks one on the front: first the region of schedules whose mean JCT is within the
preset's margin of the fastest (``OnlinePreset.within``), then the pseudo-weights choice in it. The
margin is what makes a preset mean something absolute: a cycle's front stretches from "every job
where it finishes first" to "every job on its best QPU whatever the queue", and a pseudo-weights
choice over that whole range (what the paper's selection does) trades minutes of waiting for a
percent of fidelity.

Order as well as place: pending jobs go to a QPU in the preset's order (``OnlinePreset.aging``).
Arrival order is first come first served. With an aging rate ``a`` jobs go shortest expected run
first (their fastest usable QPU's runtime ``r``) less ``a`` x the seconds they have waited, and no
job starves: a job arriving ``d`` seconds after one of expected run ``r`` goes first only if its
own run is under ``r - a d``, so none arriving more than ``r / a`` seconds later ever does (the
bound ``aging_bound_s``). `jct` goes shortest first with aging 1.0; `balanced` and `fidelity` keep
arrival order. On the busy clouds of ``benchmarks/scheduler_order.py`` (runtime errors per
execution) aging 1.0 lowers the `jct` preset's mean JCT by 2-5% at 78-99% utilization with p95
within 2% (5.6 s -> 5.3 s at 86%), and weak aging raises it saturated (35 s -> 46 s at 0.1).
(With an error drawn per job and QPU, aging did not pay at all.)

Balance the operator's way (``OnlinePreset.balance``: `jct` and `balanced` keep 0.1 by default,
`fidelity` 0.3, or the fleet file's ``scheduler.balance`` for every preset): each decision sees a
job's fidelity on a QPU less a price for the load it would add there: ``load_price`` per second of
the job's run on that QPU, in units of the typical job's run (a running mean of the jobs seen). A
QPU ``tolerance`` above the fleet's even level over the last hour costs a typical job
``BALANCE_PRICE`` of fidelity, one as far below credits as much. Jobs that gain much on a busy QPU
still go there; the others spread; long jobs pay for the load they are. The price moves only the
choice: JCT and reported fidelity are the jobs' own. Where other users' load (``QPUView.others_s``)
leaves the fleet so uneven that none of our placements could even it out (``BALANCE_OUT_OF_REACH``),
no price is charged: the balance would be lost anyway and only the users would pay for it. A hard
cap and floor per decision (what the paper mode's cycles keep) made the online scheduler least-busy:
with one or two jobs a decision, the floor sent every job to the least loaded QPU (at 3423 jobs/h on
8 QPUs, `balanced` fell to least-busy's fidelity, 0.786 against 0.814 unbalanced). A price per job
rather than per second kept 0.807 at a 7.1% load difference; per second of run, 0.815 at 8.8% and a
lower mean JCT than without balance (4.23 s against 4.48).

No starvation either way: a job that has been moved ``max_moves`` times (or waited
``pin_after_s``) is pinned: bound to its planned QPU's queue at once, behind whatever is there, so
neither re-planning nor other users' newer jobs can push it back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel_server.core.mcdm import front_2d, preference_weights, pseudo_weights
from kernel_server.scheduler.nsga2 import (
    EXACT_LIMIT,
    _repair_to_feasible,
    all_assignments,
    best_fidelity_assignment,
    nsga2_schedule,
)
from kernel_server.scheduler.problem import SchedulingProblem, water_level


@dataclass(frozen=True)
class OnlinePreset:
    """A preset's meaning: how much slower than the fastest plan it may be, and where in that
    region it chooses (pseudo-weights over mean JCT, mean error)."""

    margin_s: float  # mean JCT up to the fastest schedule's + this many seconds
    weights: tuple[float, float]
    # Order of the pending jobs: None, arrival order; a rate, shortest expected run first less
    # this many seconds per second waited (the module docstring).
    aging: float | None = None
    # Load balance kept by default: the tolerance ``load_price`` is scaled by (None: off).
    balance: float | None = None
    # How it chooses in its region: "weights", the schedule whose pseudo-weights are nearest
    # ``weights``; "ratio", the most mean fidelity per second of mean JCT (FAN's score, taken
    # on the decision's means).
    choice: str = "weights"

    def aging_bound_s(self, runtime_s: float) -> float:
        """Seconds after a job of expected run ``runtime_s`` arrives from which no later job
        goes before it (infinite in arrival order: none ever does, bound 0)."""
        return 0.0 if self.aging is None else runtime_s / self.aging

    def within(self, jct: np.ndarray) -> np.ndarray:
        """Mask of the schedules (mean JCT, seconds from now) this preset accepts."""
        return jct <= float(np.min(jct)) + self.margin_s + 1e-9


# Set on `qonductor simulate` at 1500 and 6000 jobs/h, 8 QPUs, seed 1 (jobs of 3.1 s on average),
# and checked at every load of benchmarks/scheduler.py (which prints whether each preset meets its
# target there). In words: "jct" is the most faithful plan whose mean JCT is within 1 s of the
# fastest plan's; "balanced" within 2 s; "fidelity" within 10 s. The margin is in seconds, not
# relative to the fastest plan: a relative one grows with the queue, and the longer waits it
# allows grow the queue again (an early "within 2.5x" ran away to 10x least-busy's JCT where the
# best QPU was everyone's favourite). A margin in units of the pending jobs' runtime did worse on
# every setting tried (a decision's pending set is biased to the long jobs that still wait).
# Inside the region the weights lean to fidelity: the region already bounds the waiting.
# `jct` chooses by the ratio: one hour, seed 1, deciding at each arrival, pseudo-weights (0.1, 0.9)
# gave 4.04 s / 0.804 at 5387 jobs/h on 8 QPUs (FAN 3.89 s / 0.795, earliest completion 3.71 s)
# and 3.51 s / 0.809 at 2809 jobs/h on 16 (FAN 3.48 s / 0.818, dominating it); the ratio gave
# 3.74 s / 0.796 and 3.38 s / 0.805 (dominated by neither), and 4.14 s / 0.795 at 6370 jobs/h
# on 8, faster than earliest completion (4.19 s). Its weights steer only NSGA-II's search.
ONLINE_PRESETS: dict[str, OnlinePreset] = {
    # Shortest expected run first with aging 1.0 (a second waited offsets a second of run): one
    # hour, seed 1, on 8 QPUs 4.01 s against 4.07 s in arrival order at 95% utilization, 4.42 s
    # against 4.64 s with the IBM trace at 95%, the same fidelity (benchmarks/scheduler_order.py).
    "jct": OnlinePreset(margin_s=1.0, weights=(0.5, 0.5), aging=1.0, balance=0.1, choice="ratio"),
    # 2 s, not 3: one hour, seed 1, runtime errors per execution, at 1472 jobs/h on 8 QPUs 3 s
    # gave 3.90 s / 0.818, dominated by greedy-tolerance (3.66 s / 0.819); 2 s gave 3.63 s / 0.816
    # (+0.017 over least-busy) and kept its targets at 3423-6370 jobs/h on 8 QPUs and 6860-10910
    # on 16 (load difference 6.9-15.6%).
    "balanced": OnlinePreset(margin_s=2.0, weights=(0.1, 0.9), balance=0.1),
    # Asked for the best fidelity: a looser balance. Half an hour on 8 QPUs, seed 1: at 0.3 its
    # load difference was 22% and it stayed the most faithful policy within 3x least-busy's JCT
    # (1458 and 5387 jobs/h); unbalanced, `balanced` (balancing) beat its fidelity at 80% load.
    "fidelity": OnlinePreset(margin_s=10.0, weights=(0.05, 0.95), balance=0.3),
}
# Fidelity a QPU one tolerance above the even load costs a typical job (per second of run in
# units of the typical job's). Measured at tolerance 0.1, half an hour on 8 QPUs, seed 1: 0.05
# kept `balanced` at 7-9% load difference with +0.015 to +0.033 fidelity over least-busy at
# 1458-6370 jobs/h; 0.1, 4.5% with less fidelity; 0.03, 15%.
BALANCE_PRICE = 0.05
# The fleet file's word for "no balance, whatever the preset".
BALANCE_OFF = "off"


# Loads are compared relative to the even level, but never to less than this: on a fleet that
# has barely worked, a QPU 2 s busier than another is not 100% over the level.
BALANCE_MIN_LEVEL_S = 60.0


# Balance is priced only where our work can move it: when other users' load leaves the fleet more
# than this far from even whatever we place (``reachable_difference``: the busiest QPU over 3x the
# least loaded), a decision prices no load and the preset's user objectives decide alone. One hour
# on 8 QPUs with the IBM queue trace, seed 1: at 20% utilization no placement of the hour's jobs
# gets under 88.8% (the decisions' own estimate 0.88-0.90), and the price moved `balanced` from
# 98.7% to 91.2% for 0.016 fidelity (3.72 s / 0.8155 against 3.57 s / 0.8311 without it); at 50%
# the least reachable is 40.3% (estimates 0.45-0.50: 0.5 here switched it off half the time), and
# the price took `balanced` from 80.4% to 52.1% at no cost; at 80%, 0% (estimates 0.05-0.15). A
# threshold in tolerances cannot tell these apart for `fidelity` (0.3) and `balanced` (0.1) alike.
BALANCE_OUT_OF_REACH = 0.7


def reachable_difference(others: np.ndarray, ours_s: float) -> float:
    """The least (busiest - least busy) / busiest load difference our ``ours_s`` seconds of work
    can leave on QPUs whose other users' load is ``others`` (Q,) seconds: water-filled from the
    least loaded up (jobs' sizes and widths ignored, so no placement does better)."""
    water = float(water_level(others, ours_s)[0])
    busiest = max(float(np.max(others)), water)
    if busiest < BALANCE_MIN_LEVEL_S:  # a fleet that has barely worked is not unbalanced
        return 0.0
    return (busiest - water) / busiest


def load_price(load: np.ndarray, tolerance: float) -> np.ndarray:
    """(Q,) fidelity a typical job is charged on each QPU for its load (seconds of work over the
    last hour and in its queue) against the even level: ``BALANCE_PRICE`` per ``tolerance`` of
    relative excess, a credit as much below it."""
    level = float(np.mean(load))
    scale = max(level, BALANCE_MIN_LEVEL_S) * max(tolerance, 1e-3)
    return BALANCE_PRICE * (np.asarray(load, dtype=float) - level) / scale


# Seconds of completion time one unit of fidelity is worth, swept to draw a cheap front.
EXCHANGE_RATES = np.array([0.0, 2, 5, 10, 20, 40, 80, 150, 300, 600, 1200, 3000, 1e4, 1e6])
UNUSABLE_RUNTIME_S = 1e6
NSGA_MIN_JOBS = 8  # from this many pending jobs the list schedules seed an NSGA-II search
NSGA_ONLINE = {"population": 32, "max_generations": 15, "window": 6}
# NSGA-II adds 11-15% hypervolume to the list schedules' front on 8-32 pending jobs but takes
# about 100 ms (pymoo's per-generation overhead), against under 1 ms for the list path. It runs at
# most once per this many seconds; in between, its last plan seeds the list path as the previous
# plan, so what it found is kept while arrivals are decided in a millisecond.
NSGA_INTERVAL_S = 5.0


def online_preset(preference: Any) -> OnlinePreset:
    """A preset by name, or custom pseudo-weights (then with the balanced region and balance)."""
    if isinstance(preference, OnlinePreset):
        return preference
    if isinstance(preference, str) and preference in ONLINE_PRESETS:
        return ONLINE_PRESETS[preference]
    weights = preference_weights(preference)  # raises on unknown names
    base = ONLINE_PRESETS["balanced"]
    return OnlinePreset(base.margin_s, weights, balance=base.balance)


def exchange_rate_schedules(
    problem: SchedulingProblem, rates: np.ndarray = EXCHANGE_RATES
) -> np.ndarray:
    """(K, N) list schedules, one per rate: jobs in order, each on the QPU minimising its
    expected completion + rate x (1 - fidelity), queues growing as jobs are added."""
    rates = np.asarray(rates, dtype=float)
    free = np.tile(problem.wait.astype(float), (len(rates), 1))  # (K, Q)
    out = np.empty((len(rates), problem.num_jobs), dtype=int)
    rows = np.arange(len(rates))
    for i in range(problem.num_jobs):
        finish = free + problem.runtime[i][None, :]
        cost = finish + rates[:, None] * (1.0 - problem.fidelity[i])[None, :]
        q = np.argmin(np.where(problem.feasible[i][None, :], cost, np.inf), axis=1)
        out[:, i] = q
        free[rows, q] = finish[rows, q]
    return out


@dataclass
class Decision:
    assignment: np.ndarray  # (N,) QPU index per pending job
    front: np.ndarray  # (K, 2) [mean JCT s, mean error] of the candidate front
    chosen: int
    path: str  # "exact", "list" or "nsga2"
    seconds: float


def decide(
    problem: SchedulingProblem,
    preference: Any = "balanced",
    previous: np.ndarray | None = None,
    seed: int = 0,
    search: bool = True,
) -> Decision:
    """One online decision over the pending jobs of ``problem`` (no offsets: JCT from now)."""
    start = time.perf_counter()
    preset = online_preset(preference)
    n, q = problem.num_jobs, problem.num_qpus
    if n == 0:
        empty = np.zeros(0, dtype=int)
        return Decision(empty, np.zeros((1, 2)), 0, "exact", 0.0)
    if q**n <= EXACT_LIMIT:
        xs = np.unique(_repair_to_feasible(problem, all_assignments(n, q)), axis=0)
        path = "exact"
    else:
        seeds = [exchange_rate_schedules(problem), best_fidelity_assignment(problem)[None, :]]
        if previous is not None:
            seeds.append(_repair_to_feasible(problem, np.asarray(previous)[None, :]))
        xs = np.unique(np.vstack(seeds), axis=0)
        path = "list"
        if search and n >= NSGA_MIN_JOBS:
            result = nsga2_schedule(
                problem, preference=preset.weights, seed=seed, seeds=xs, **NSGA_ONLINE
            )
            xs = np.unique(np.vstack([xs, result.front_assignments]), axis=0)
            path = "nsga2"
    if problem.balance is not None:
        excess = problem.load_excess(xs)
        xs = xs[excess <= excess.min() + 1e-9]
    f = problem.evaluate(xs)
    on_front = front_2d(f)
    xs, f = xs[on_front], f[on_front]
    chosen = choose(f, preset)
    return Decision(xs[chosen], f, chosen, path, time.perf_counter() - start)


def choose(front: np.ndarray, preset: OnlinePreset) -> int:
    """The preset's schedule on a front: among those within its JCT margin, by its choice."""
    region = np.flatnonzero(preset.within(front[:, 0]))
    if len(region) == 1:
        return int(region[0])
    if preset.choice == "ratio":
        score = (1.0 - front[region, 1]) / np.maximum(front[region, 0], 1e-9)
        return int(region[np.argmax(score)])
    distance = np.abs(pseudo_weights(front[region]) - np.asarray(preset.weights)).sum(axis=1)
    return int(region[np.argmin(distance)])


# --------------------------------------------------------------------------------------------
# The pending set between decisions: plans, moves, pins and commits
# --------------------------------------------------------------------------------------------


@dataclass
class PendingJob:
    job_id: str
    num_qubits: int
    fidelity: np.ndarray  # (Q,) over the fleet's QPUs (0 where it cannot run)
    runtime: np.ndarray  # (Q,) estimated seconds
    arrived_s: float
    planned: int = -1  # QPU index of the current plan (-1: none yet)
    moves: int = 0
    pinned: bool = False


@dataclass
class OnlineScheduler:
    """The pending jobs and their plans; ``step`` decides and says which jobs start where.

    Pure: the caller (the simulator, the orchestrator's dispatcher) says what the fleet looks like
    (``QPUView``-like: ``wait_s``, ``num_qubits``, ``online``) and enqueues what ``step`` commits.
    """

    preference: Any = "balanced"
    commit_ahead_s: float = 0.0  # hand a job over when its QPU's queue clears within this
    max_moves: int = 3
    pin_after_s: float = 900.0
    # Load balance: None, the preset's own; a tolerance, every preset's; BALANCE_OFF, none.
    balance: float | str | None = None
    pending: dict[str, PendingJob] = field(default_factory=dict)
    decisions: list[tuple[int, str, float]] = field(default_factory=list)  # (jobs, path, seconds)
    moves: int = 0
    seed: int = 0
    nsga_interval_s: float = NSGA_INTERVAL_S
    _searched_at: float = -np.inf
    # Running mean of the jobs' fastest run time: the unit the balance price is charged in.
    _typical_run_s: float | None = None

    def add(
        self,
        job_id: str,
        num_qubits: int,
        fidelity: Sequence[float] | np.ndarray,
        runtime: Sequence[float] | np.ndarray,
        now: float,
    ) -> None:
        job = PendingJob(
            job_id, int(num_qubits), np.asarray(fidelity, float), np.asarray(runtime, float), now
        )
        self.pending[job_id] = job
        usable = job.runtime[job.runtime < UNUSABLE_RUNTIME_S]
        if len(usable):
            fastest = float(usable.min())
            previous = self._typical_run_s
            self._typical_run_s = fastest if previous is None else 0.98 * previous + 0.02 * fastest

    def tolerance(self) -> float | None:
        """The load-balance tolerance decisions keep (None: no balance)."""
        if self.balance is None:
            return online_preset(self.preference).balance
        if self.balance == BALANCE_OFF:
            return None
        return float(self.balance)

    def update_estimates(self, qpu: int, fidelity: Mapping[str, float]) -> None:
        """New fidelity estimates on one QPU (a calibration landed) for pending jobs."""
        for job_id, value in fidelity.items():
            if job_id in self.pending:
                self.pending[job_id].fidelity[qpu] = value

    def step(self, qpus: Sequence[Any], now: float) -> list[tuple[str, int]]:
        """Re-plan every pending job against ``qpus`` and return (job id, QPU index) to start:
        the oldest planned job of each QPU whose queue clears within ``commit_ahead_s``, as long
        as it does."""
        if not self.pending:
            return []
        online = np.asarray([bool(getattr(v, "online", True)) for v in qpus])
        columns = np.flatnonzero(online)
        widths = np.asarray([v.num_qubits for v in qpus], dtype=int)
        if not len(columns):
            return []
        order = self._order(columns, widths, now)
        # A runtime this long is how callers say "may not run there" (excluded by the job's
        # configuration, no estimate for that QPU). Jobs no online QPU can take wait for one.
        jobs = [
            j
            for j in order
            if ((j.num_qubits <= widths[columns]) & (j.runtime[columns] < UNUSABLE_RUNTIME_S)).any()
        ]
        if not jobs:
            return []
        wait = np.asarray([qpus[c].wait_s for c in columns], dtype=float)
        runtime = np.stack([j.runtime[columns] for j in jobs])
        fidelity = np.stack([j.fidelity[columns] for j in jobs])
        load = np.asarray([getattr(qpus[c], "recent_busy_s", 0.0) for c in columns]) + wait
        fidelity = self._priced(fidelity, runtime, load, qpus, columns)
        problem = SchedulingProblem(
            wait=wait,
            qpu_qubits=widths[columns],
            job_qubits=np.array([j.num_qubits for j in jobs]),
            runtime=runtime,
            fidelity=fidelity,
            load=load,
        )
        problem.feasible &= runtime < UNUSABLE_RUNTIME_S
        where = {int(c): k for k, c in enumerate(columns)}
        for i, job in enumerate(jobs):
            if problem.feasible[i].sum() == 1:  # nothing to re-plan: bound as soon as planned
                job.pinned = True
            if job.pinned and job.planned in where:
                only = np.zeros(len(columns), dtype=bool)
                only[where[job.planned]] = True
                problem.feasible[i] = only & problem.feasible[i]
        previous = np.asarray([where.get(j.planned, 0) for j in jobs])
        search = now - self._searched_at >= self.nsga_interval_s
        decision = decide(
            problem, self.preference, previous=previous, seed=self.seed, search=search
        )
        if decision.path == "nsga2":
            self._searched_at = now
        self.seed += 1
        self.decisions.append((len(jobs), decision.path, decision.seconds))
        for job, k in zip(jobs, decision.assignment, strict=True):
            qpu = int(columns[k])
            if job.planned >= 0 and job.planned != qpu:
                job.moves += 1
                self.moves += 1
            job.planned = qpu
            if job.moves >= self.max_moves or now - job.arrived_s >= self.pin_after_s:
                job.pinned = True
        starts: list[tuple[str, int]] = []
        for k, c in enumerate(columns):
            mine = [job for job in jobs if job.planned == c]  # the preset's order per QPU
            # A pinned job is bound now, and every older job planned on its QPU with it: a QPU
            # shared with other users keeps taking their jobs, so a job that only waits for its
            # queue to clear could wait for ever.
            last_pinned = max((i for i, job in enumerate(mine) if job.pinned), default=-1)
            clears = wait[k]
            for i, job in enumerate(mine):
                if i > last_pinned and clears > self.commit_ahead_s + 1e-9:
                    break
                starts.append((job.job_id, int(c)))
                clears += job.runtime[c]
        for job_id, _ in starts:
            del self.pending[job_id]
        return starts

    def _priced(
        self,
        fidelity: np.ndarray,
        runtime: np.ndarray,
        load: np.ndarray,
        qpus: Sequence[Any],
        columns: np.ndarray,
    ) -> np.ndarray:
        """The fidelity a decision sees: the jobs' own, less the load each would add where it
        runs, priced (``load_price``), where balance is on and within reach."""
        tolerance = self.tolerance()
        if tolerance is None or not self._balance_reachable(qpus, load, columns, runtime):
            return fidelity
        typical = max(self._typical_run_s or 1.0, 1e-3)
        seconds = np.where(runtime < UNUSABLE_RUNTIME_S, runtime, 0.0) / typical
        return fidelity - load_price(load, tolerance)[None, :] * seconds

    @staticmethod
    def _balance_reachable(
        qpus: Sequence[Any], load: np.ndarray, columns: np.ndarray, runtime: np.ndarray
    ) -> bool:
        """Whether our work (the QPUs' load less other users', and the pending jobs at their
        fastest) can bring the QPUs ``columns`` within ``BALANCE_OUT_OF_REACH`` of even."""
        others = np.asarray([getattr(qpus[c], "others_s", 0.0) for c in columns], dtype=float)
        others = np.minimum(others, load)
        pending = np.where(runtime < UNUSABLE_RUNTIME_S, runtime, np.inf).min(axis=1).sum()
        ours = float((load - others).sum() + pending)
        return reachable_difference(others, ours) <= BALANCE_OUT_OF_REACH

    def _order(self, columns: np.ndarray, widths: np.ndarray, now: float) -> list[PendingJob]:
        """The pending jobs in the order the preset serves them (the module docstring)."""
        aging = online_preset(self.preference).aging
        jobs = list(self.pending.values())
        if aging is None:
            return sorted(jobs, key=lambda j: (j.arrived_s, j.job_id))

        def key(job: PendingJob) -> tuple[float, float, str]:
            usable = job.runtime[columns][widths[columns] >= job.num_qubits]
            fastest = float(usable.min()) if usable.size else UNUSABLE_RUNTIME_S
            return (fastest - aging * (now - job.arrived_s), job.arrived_s, job.job_id)

        return sorted(jobs, key=key)

    def decision_seconds(self) -> np.ndarray:
        return np.asarray([s for _, _, s in self.decisions], dtype=float)
