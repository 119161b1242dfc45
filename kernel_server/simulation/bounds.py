"""How good any schedule of a workload could be: a lower bound on its mean job completion time.

A job's JCT runs from its arrival to the end of its post-processing. Whatever the policy, a job
cannot finish sooner than its fastest run on a QPU it may use (the realised time, not the
estimate: a clairvoyant schedule knows the run's error, which is the execution's and the same on
every QPU), so the mean JCT is at least the mean of those plus the mean post-processing. And m
QPUs do no more work per second than one machine m times as fast; on that machine,
shortest-remaining-processing-time (preempting at arrivals) minimises the total flow time
(Schrage 1968), and any schedule of the m QPUs can be run there with every job finishing no
later, so its mean flow time bounds every schedule's too (the relaxation Leonardi and Raz's SRPT
analysis starts from). The bound is the larger of the two. It ignores other users' jobs,
reservations and calibrations, which only make real schedules longer.
"""

from __future__ import annotations

import heapq

import numpy as np

__all__ = ["jct_lower_bound", "srpt_flow_times"]


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


def jct_lower_bound(
    arrival_s: np.ndarray, fastest_s: np.ndarray, classical_s: np.ndarray, machines: int
) -> float:
    """Mean JCT no schedule of these jobs on ``machines`` QPUs can beat.

    ``fastest_s``: each job's shortest realised run time over the QPUs it may use.
    """
    if machines < 1:
        raise ValueError("machines must be at least 1")
    fastest = np.asarray(fastest_s, dtype=float)
    if len(fastest) == 0:
        return float("nan")
    pooled = float(srpt_flow_times(arrival_s, fastest / machines).mean())
    return float(np.mean(classical_s) + max(float(fastest.mean()), pooled))
