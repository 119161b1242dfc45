"""How good any schedule of a workload could be: a lower bound on its mean job completion time.

A job's JCT runs from its arrival to the end of its post-processing. Whatever the policy, a job
cannot finish sooner than its fastest run on a QPU it may use (the realised time, not the
estimate: a clairvoyant schedule knows the run's error, which is the execution's and the same on
every QPU), so the mean JCT is at least the mean of those plus the mean post-processing. And m
QPUs do no more work per second than one machine m times as fast; on that machine,
shortest-remaining-processing-time (preempting at arrivals) minimises the total flow time
(Schrage 1968), and any schedule of the m QPUs can be run there with every job finishing no
later, so its mean flow time bounds every schedule's too (the relaxation Leonardi and Raz's SRPT
analysis starts from). The bound is the larger of the two.

Other users' jobs count where they must: each QPU serves its queue first come first served, so
an earlier job of another user is always ahead of ours, and our jobs can only delay theirs. Run
alone in their arrival order (``others_hold_s``), other users' jobs therefore end no later than in
any real schedule, and a job of ours handed to a QPU at or after its arrival starts no sooner
than the QPU clears of the other users' jobs that arrived before it. A job's own bound becomes its
earliest finish over its QPUs counting that hold, and on the fast machine it is released no
sooner than its earliest possible start. Reservations and calibrations are still ignored: they
only make real schedules longer.

The SRPT machine lets a job run on every QPU at once and pause at will; real jobs do neither.
``time_indexed_jct_bound`` keeps that: the LP relaxation of the time-indexed formulation
(Sousa and Wolsey 1992; Dyer and Wolsey 1990 for its strength), a variable per job, QPU and
start slot, each slot of a QPU taken at most once. Any schedule maps onto it: a job starting at
``S`` takes slot ``floor(S / slot)`` and the ``floor(run / slot)`` slots after it, which no job
before it on that QPU still holds, and pays ``max(slot start, earliest start) + run - arrival``,
no more than its real flow. A start later than ``horizon_s`` after arrival is priced at that
horizon plus the job's fastest run and takes no slots (it only loosens the bound). The LP grows
with jobs x QPUs x slots, so it is solved on consecutive groups of arrivals: removing the other
groups' jobs from a schedule leaves a schedule of one group, so the groups' optima add up to at
most the whole's. One hour on 8 QPUs with the IBM trace at 95% (5350 jobs/h, seed 1): 3.61 s
against the SRPT machine's 3.36 s.

Fidelity has a ceiling the same way (``fidelity_ceiling``): a job runs on one of its QPUs at some
time after it arrives, so it gets at most the best fidelity any of them has at or after its
arrival (a calibration can move a QPU's fidelities either way). What a policy reaches is judged
against it: a target of more mean fidelity than the ceiling is out of every schedule's reach.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

__all__ = [
    "fidelity_ceiling",
    "jct_lower_bound",
    "others_hold_s",
    "srpt_flow_times",
    "time_indexed_flow_s",
    "time_indexed_jct_bound",
]


def srpt_flow_times(arrival_s: np.ndarray, work_s: np.ndarray) -> np.ndarray:
    """Each job's flow time (finish - arrival) under preemptive SRPT on one machine."""
    arrival = np.asarray(arrival_s, dtype=float)
    work = np.asarray(work_s, dtype=float)
    if arrival.shape != work.shape or (work < 0).any():
        raise ValueError("one non-negative work per arrival")
    order = np.argsort(arrival, kind="stable")
    finish = np.empty(len(arrival))
    waiting: list[tuple[float, int]] = []  # (remaining work, job)
    t, i, n = 0.0, 0, len(order)
    while i < n or waiting:
        if not waiting:
            t = max(t, float(arrival[order[i]]))
        while i < n and arrival[order[i]] <= t:
            heapq.heappush(waiting, (float(work[order[i]]), int(order[i])))
            i += 1
        remaining, job = heapq.heappop(waiting)
        next_arrival = float(arrival[order[i]]) if i < n else np.inf
        if t + remaining <= next_arrival:
            t += remaining
            finish[job] = t
        else:  # an arrival may preempt it: run until then and decide again
            heapq.heappush(waiting, (remaining - (next_arrival - t), job))
            t = next_arrival
    return finish - arrival


def others_hold_s(
    arrival_s: np.ndarray, background: Sequence[tuple[float, int, float]], qpus: int
) -> np.ndarray:
    """(N, Q) seconds each QPU is still held, at each of our jobs' arrivals, by the other users'
    jobs that arrived before it (``background``: (arrival, QPU index, seconds)), those jobs run
    alone in arrival order: what any schedule's FIFO queues hold at least."""
    arrival = np.asarray(arrival_s, dtype=float)
    hold = np.zeros((len(arrival), qpus))
    for q in range(qpus):
        jobs = sorted((t, d) for t, qi, d in background if qi == q)
        if not jobs:
            continue
        came = np.array([t for t, _ in jobs])
        end, ends = -np.inf, np.empty(len(jobs))
        for k, (t, d) in enumerate(jobs):
            end = max(end, t) + d
            ends[k] = end
        last = np.searchsorted(came, arrival, side="left") - 1  # strictly before the arrival
        cleared = np.where(last >= 0, ends[np.maximum(last, 0)], -np.inf)
        hold[:, q] = np.maximum(cleared - arrival, 0.0)
    return hold


def jct_lower_bound(
    arrival_s: np.ndarray,
    run_s: np.ndarray,
    classical_s: np.ndarray,
    machines: int,
    held_s: np.ndarray | None = None,
) -> float:
    """Mean JCT no schedule of these jobs on ``machines`` QPUs can beat.

    ``run_s``: each job's shortest realised run time over the QPUs it may use (N,), or its run
    time on each QPU (N, Q), infinite where it may not run. ``held_s`` (N, Q): seconds other
    users' earlier jobs hold each QPU at the job's arrival (``others_hold_s``; None: none).
    """
    if machines < 1:
        raise ValueError("machines must be at least 1")
    run = np.asarray(run_s, dtype=float)
    run = run[:, None] if run.ndim == 1 else run
    if len(run) == 0:
        return float("nan")
    held = np.zeros(run.shape) if held_s is None else np.asarray(held_s, dtype=float)
    if held.shape != run.shape:
        raise ValueError(f"held_s must be {run.shape}, one per job and QPU, not {held.shape}")
    fastest = run.min(axis=1)
    finish = (held + run).min(axis=1)  # the earliest own finish, from arrival
    ready = np.where(np.isfinite(run), held, np.inf).min(axis=1)  # the earliest start
    arrival = np.asarray(arrival_s, dtype=float)
    pooled = float((srpt_flow_times(arrival + ready, fastest / machines) + ready).mean())
    return float(np.mean(classical_s) + max(float(finish.mean()), pooled))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``start, start + 1, ..., start + length - 1`` for each pair, concatenated, and the index
    of the pair each element came from."""
    lengths = np.asarray(lengths, dtype=np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + offset, owner


def time_indexed_flow_s(
    arrival_s: np.ndarray,
    run_s: np.ndarray,
    held_s: np.ndarray,
    slot_s: float = 0.1,
    horizon_s: float = 15.0,
) -> float:
    """Total flow time (seconds) no non-preemptive schedule of these jobs beats: the time-indexed
    LP relaxation (module docstring). ``run_s`` (N, Q): each job's run time on each QPU, infinite
    where it may not run; ``held_s`` (N, Q): seconds before it may start there."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    arrival = np.asarray(arrival_s, dtype=float)
    run, held = np.asarray(run_s, dtype=float), np.asarray(held_s, dtype=float)
    n = len(run)
    fastest = np.where(np.isfinite(run), run, np.inf).min(axis=1)
    if not np.isfinite(fastest).all():
        raise ValueError("every job needs a QPU it may run on (a finite run time)")
    jobs, qpus = np.nonzero(np.isfinite(run))
    earliest, seconds = arrival[jobs] + held[jobs, qpus], run[jobs, qpus]
    first = np.floor(earliest / slot_s).astype(np.int64)
    # A start that costs more than the horizon's price is never worth a slot.
    latest = arrival[jobs] + horizon_s + fastest[jobs] - seconds
    last = np.floor(latest / slot_s).astype(np.int64)
    keep = last >= first
    jobs, qpus, earliest, seconds, first, last = (
        a[keep] for a in (jobs, qpus, earliest, seconds, first, last)
    )
    start, pair = _ranges(first, last - first + 1)
    starts = len(start)
    cost = np.concatenate(
        [
            np.maximum(start * slot_s, earliest[pair]) + seconds[pair] - arrival[jobs[pair]],
            horizon_s + fastest,  # one column per job: a start past the horizon
        ]
    )
    held_slot, column = _ranges(start, np.floor(seconds[pair] / slot_s).astype(np.int64))
    _, row = np.unique(qpus[pair][column] * (1 << 40) + held_slot, return_inverse=True)
    capacity = csr_matrix(
        (np.ones(len(column)), (row, column)), shape=(int(row.max(initial=-1)) + 1, starts + n)
    )
    columns = np.arange(starts + n)
    one_each = csr_matrix(
        (np.ones(starts + n), (np.concatenate([jobs[pair], np.arange(n)]), columns)),
        shape=(n, starts + n),
    )
    r = linprog(cost, A_ub=capacity, b_ub=np.ones(capacity.shape[0]), A_eq=one_each,
                b_eq=np.ones(n), bounds=(0, None), method="highs")  # fmt: skip
    if r.status != 0:
        raise RuntimeError(f"the time-indexed LP failed: {r.message}")
    return float(r.fun)


def time_indexed_jct_bound(
    arrival_s: np.ndarray,
    run_s: np.ndarray,
    classical_s: np.ndarray,
    machines: int,
    held_s: np.ndarray | None = None,
    slot_s: float = 0.1,
    horizon_s: float = 15.0,
    pairs_per_lp: int = 4000,
) -> float:
    """Mean JCT no schedule of these jobs beats, the tighter of ``jct_lower_bound`` and the
    time-indexed LP solved over consecutive groups of arrivals of at most ``pairs_per_lp``
    (job, usable QPU) pairs each (memory grows with them: about 3 GB at 4000 pairs of 3 s runs)."""
    arrival = np.asarray(arrival_s, dtype=float)
    run = np.asarray(run_s, dtype=float)
    held = np.zeros(run.shape) if held_s is None else np.asarray(held_s, dtype=float)
    simple = jct_lower_bound(arrival, run, classical_s, machines, held)
    if run.ndim != 2 or len(run) == 0:
        return simple
    order = np.argsort(arrival, kind="stable")
    group = np.cumsum(np.isfinite(run[order]).sum(axis=1)) // max(pairs_per_lp, 1)
    total = 0.0
    for g in np.unique(group):
        jobs = order[group == g]
        own = float((held[jobs] + run[jobs]).min(axis=1).sum())
        lp = time_indexed_flow_s(arrival[jobs], run[jobs], held[jobs], slot_s, horizon_s)
        total += max(own, lp)
    return max(simple, float(np.mean(classical_s)) + total / len(run))


def fidelity_ceiling(
    arrival_s: np.ndarray,
    fidelity: np.ndarray,
    changes: Sequence[tuple[float, int, np.ndarray]] = (),
) -> float:
    """Mean fidelity no schedule of these jobs can beat.

    ``fidelity`` (N, Q): each job's fidelity on each QPU from the start (NaN where it may not
    run); ``changes``: (time, QPU index, the jobs' fidelities there from that time on), one per
    calibration. A QPU's fidelities before a change count for the jobs that arrive before it.
    """
    arrival = np.asarray(arrival_s, dtype=float)
    state = np.array(fidelity, dtype=float)
    if state.ndim != 2 or len(state) != len(arrival):
        raise ValueError(f"fidelity must be (jobs, QPUs), one row per arrival, not {state.shape}")
    reach = np.full(state.shape, -np.inf)
    for when, q, after in sorted(changes, key=lambda change: change[0]):
        reach[:, q] = np.where(arrival < when, np.fmax(reach[:, q], state[:, q]), reach[:, q])
        state[:, q] = after
    best = np.fmax(reach, state).max(axis=1)  # the last states hold from their change on
    best = best[np.isfinite(best)]
    return float(best.mean()) if len(best) else float("nan")
