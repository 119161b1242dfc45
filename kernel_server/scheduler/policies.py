"""Quantum scheduling policies with one interface: a cycle's problem in, one QPU per job out.

* ``qonductor`` - NSGA-II over the whole cycle, then pseudo-weights selection by preference.
* ``fcfs`` - what users do today: every job on its highest-fidelity QPU, in arrival order,
  whatever the queue (the paper's FCFS baseline).
* ``least-busy`` - IBM's ``least_busy``: the QPU with the fewest pending jobs at submission
  (counting the jobs this policy has just sent), ignoring fidelity and job lengths.
* ``round-robin`` - QPUs in turn, skipping those too small for the job.
* ``earliest-completion`` - the QPU where the job is expected to finish first (queued work + its
  own run), whatever the fidelity.
* ``fan`` - the largest fidelity / expected completion time (the FAN rule of the
  quantum-schedulers testbed).
* ``greedy-tolerance`` - the best fidelity among QPUs whose expected completion is within
  ``tolerance_s`` seconds or ``tolerance`` of the earliest (2 s or 20% unless the policy name
  says ``greedy-tolerance:5s+50%``): the short rule a cloud operator would write.

Baselines place each job as it arrives, so the simulator calls them with one-job cycles; they
accept any cycle size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel_server.scheduler.nsga2 import ScheduleResult, best_fidelity_assignment, nsga2_schedule
from kernel_server.scheduler.problem import SchedulingProblem


@dataclass
class PolicyState:
    """What a policy may remember between cycles and read about the fleet."""

    pending: np.ndarray | None = None  # (Q,) jobs queued or running per QPU, for least-busy
    next_qpu: int = 0  # round-robin pointer
    last_result: ScheduleResult | None = None  # qonductor: the last cycle's front, for reports
    extra: dict[str, Any] = field(default_factory=dict)


Policy = Callable[[SchedulingProblem, PolicyState, Any, int], np.ndarray]


def qonductor(
    problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int
) -> np.ndarray:
    # extra["nsga2"]: population / generation caps (tests and quick simulations use smaller ones)
    result = nsga2_schedule(
        problem, preference=preference, seed=seed, **state.extra.get("nsga2", {})
    )
    state.last_result = result
    return result.assignment


def fcfs(problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int) -> np.ndarray:
    return best_fidelity_assignment(problem)


def least_busy(
    problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int
) -> np.ndarray:
    pending = (
        np.zeros(problem.num_qpus)
        if state.pending is None
        else np.asarray(state.pending, dtype=float).copy()
    )
    out = np.empty(problem.num_jobs, dtype=int)
    for i in range(problem.num_jobs):
        count = np.where(problem.feasible[i], pending, np.inf)
        q = int(np.argmin(count))  # ties: lower index, as a sorted backend list would give
        out[i] = q
        pending[q] += 1
    return out


def round_robin(
    problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int
) -> np.ndarray:
    out = np.empty(problem.num_jobs, dtype=int)
    q_count = problem.num_qpus
    for i in range(problem.num_jobs):
        for step in range(q_count):
            q = (state.next_qpu + step) % q_count
            if problem.feasible[i, q]:
                break
        out[i] = q
        state.next_qpu = (q + 1) % q_count
    return out


def _expected_finish(problem: SchedulingProblem) -> tuple[np.ndarray, np.ndarray]:
    return problem.wait.astype(float).copy(), np.where(problem.feasible, problem.runtime, np.inf)


def earliest_completion(
    problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int
) -> np.ndarray:
    free, run = _expected_finish(problem)
    out = np.empty(problem.num_jobs, dtype=int)
    for i in range(problem.num_jobs):
        q = int(np.argmin(free + run[i]))
        out[i] = q
        free[q] += run[i, q]
    return out


def fan(problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int) -> np.ndarray:
    free, run = _expected_finish(problem)
    out = np.empty(problem.num_jobs, dtype=int)
    for i in range(problem.num_jobs):
        score = np.where(problem.feasible[i], problem.fidelity[i] / (free + run[i]), -np.inf)
        q = int(np.argmax(score))
        out[i] = q
        free[q] += run[i, q]
    return out


def parse_tolerance(text: str) -> tuple[float, float]:
    """ "2s+20%" -> (2.0, 0.2); "" -> the default (2 s, 20%)."""
    if not text:
        return 2.0, 0.2
    try:
        seconds, _, share = text.partition("+")
        return float(seconds.removesuffix("s")), float(share.removesuffix("%") or 0) / 100
    except ValueError:
        raise ValueError(
            f"greedy-tolerance takes SECONDSs+PERCENT%, e.g. 2s+20%, not {text!r}"
        ) from None


def greedy_tolerance(
    problem: SchedulingProblem, state: PolicyState, preference: Any, seed: int
) -> np.ndarray:
    seconds, share = parse_tolerance(str(preference) if preference != "balanced" else "")
    free, run = _expected_finish(problem)
    out = np.empty(problem.num_jobs, dtype=int)
    for i in range(problem.num_jobs):
        finish = free + run[i]
        earliest = finish.min()
        near = finish <= earliest + max(seconds, share * earliest) + 1e-9
        q = int(np.argmax(np.where(near, problem.fidelity[i], -np.inf)))
        out[i] = q
        free[q] = finish[q]
    return out


POLICIES: dict[str, Policy] = {
    "qonductor": qonductor,
    "qonductor-paper": qonductor,
    "fcfs": fcfs,
    "least-busy": least_busy,
    "round-robin": round_robin,
    "earliest-completion": earliest_completion,
    "fan": fan,
    "greedy-tolerance": greedy_tolerance,
}
# How the simulator drives each policy: ``qonductor`` online (``scheduler.online``: decisions on
# events, jobs bound to a QPU as it frees), ``qonductor-paper`` in the paper's cycles (triggers,
# committed queues); the baselines place each job on arrival. As a cycle's policy (``run_cycle``)
# both names run NSGA-II over the cycle.
ONLINE = frozenset({"qonductor"})
BATCHING = frozenset({"qonductor-paper"})


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduling policy {name!r}; known: {', '.join(POLICIES)}"
        ) from None
