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

Fidelity has a ceiling the same way (``fidelity_ceiling``): a job runs on one of its QPUs at some
time after it arrives, so it gets at most the best fidelity any of them has at or after its
arrival (a calibration can move a QPU's fidelities either way). What a policy reaches is judged
against it: a target of more mean fidelity than the ceiling is out of every schedule's reach.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

__all__ = ["fidelity_ceiling", "jct_lower_bound", "others_hold_s", "srpt_flow_times"]


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
