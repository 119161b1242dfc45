"""Placement of one quantum job on one QPU: simple greedy alternatives to the cycle scheduler.

The orchestrator's default, ``qonductor``, places jobs in cycles of the NSGA-II scheduler
(``scheduler.dispatch``). These place each job on its own, as it arrives, and stay selectable
(``placement`` in the configuration):

* ``highest-fidelity`` - what users do today: the QPU with the best estimated fidelity, whatever its
  queue (the FCFS baseline of the paper).
* ``fidelity-tolerance`` - among QPUs whose estimated fidelity is within a tolerance of the best,
  the one whose queue clears first. The tolerance comes from the priority: ``fidelity`` 0,
  ``balanced`` 0.02, ``jct`` 0.10 (absolute fidelity points).
* ``least-busy`` - the shortest expected wait, ignoring fidelity (IBM's ``least_busy``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kernel_server.core.deployment import DEFAULT_PLACEMENT

PRIORITY_TOLERANCE = {"fidelity": 0.0, "balanced": 0.02, "jct": 0.10}


@dataclass(frozen=True)
class Candidate:
    qpu: str
    fidelity: float
    expected_wait_s: float


class NoCandidate(ValueError):
    pass


def _check(candidates: list[Candidate]) -> None:
    if not candidates:
        raise NoCandidate("no QPU can run this job")


def highest_fidelity(candidates: list[Candidate], priority: str = "balanced") -> Candidate:
    _check(candidates)
    return max(candidates, key=lambda c: (c.fidelity, -c.expected_wait_s, c.qpu))


def least_busy(candidates: list[Candidate], priority: str = "balanced") -> Candidate:
    _check(candidates)
    return min(candidates, key=lambda c: (c.expected_wait_s, -c.fidelity, c.qpu))


def fidelity_tolerance(candidates: list[Candidate], priority: str = "balanced") -> Candidate:
    _check(candidates)
    tolerance = PRIORITY_TOLERANCE.get(priority, PRIORITY_TOLERANCE["balanced"])
    best = max(c.fidelity for c in candidates)
    good = [c for c in candidates if c.fidelity >= best - tolerance - 1e-12]
    return min(good, key=lambda c: (c.expected_wait_s, -c.fidelity, c.qpu))


PLACEMENT_POLICIES: Mapping[str, Callable[[list[Candidate], str], Candidate]] = {
    # The cycle scheduler; here (one candidate at a time) it falls back to fidelity-tolerance.
    "qonductor": fidelity_tolerance,
    "highest-fidelity": highest_fidelity,
    "fidelity-tolerance": fidelity_tolerance,
    "least-busy": least_busy,
}


def place(
    candidates: list[Candidate], policy: str = DEFAULT_PLACEMENT, priority: str = "balanced"
) -> Candidate:
    try:
        fn = PLACEMENT_POLICIES[policy]
    except KeyError:
        known = ", ".join(PLACEMENT_POLICIES)
        raise ValueError(f"unknown placement policy {policy!r}; known: {known}") from None
    return fn(candidates, priority)
