"""What one simulated run of a policy produced, and the metrics ``qonductor simulate`` reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np


class CycleRecord(TypedDict, total=False):
    """One scheduling cycle of the paper mode: when, how many jobs, how long its stages took,
    and (where NSGA-II chose) the front's range and the choice, in (JCT s, error)."""

    t: float
    jobs: int
    seconds: float
    stage_seconds: dict[str, float]  # pre-processing, optimization+selection
    front_jct: tuple[float, float]
    front_error: tuple[float, float]
    chosen: list[float]
    generations: int


class SimMetrics(TypedDict):
    """What ``qonductor simulate`` reports of one policy's run (JSON with ``--out``)."""

    jobs: int
    completed: int
    dropped: int
    mean_jct_s: float
    p95_jct_s: float
    lower_bound_jct_s: float
    jct_over_bound: float
    mean_fidelity: float
    fidelity_ceiling: float
    mean_utilization: float
    max_load_difference: float
    max_load_difference_ours: float
    mean_execution_s: float
    makespan_s: float
    cycles: int
    mean_cycle_s: float
    max_cycle_s: float
    mean_generations: float
    max_pending: int
    crossover_moves: int
    decisions: int
    median_decision_ms: float
    p95_decision_ms: float
    mean_decision_jobs: float
    our_load_s: dict[str, float]
    wall_seconds: float


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
    cycles: list[CycleRecord]
    pending_samples: list[tuple[float, int]]
    crossover_moves: int
    wall_s: float
    busy_intervals: dict[str, list[tuple[float, float]]]
    last_front: np.ndarray | None = None  # (K, 2) front of the last qonductor cycle with a choice
    # Online qonductor: wall seconds of each decision and the jobs it covered.
    decision_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    decision_jobs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    # The mean JCT no schedule of the completed jobs could beat (simulation.bounds).
    lower_bound_jct_s: float = float("nan")
    # The mean fidelity no schedule of them could beat (simulation.bounds.fidelity_ceiling).
    fidelity_ceiling: float = float("nan")

    @property
    def busy_s(self) -> dict[str, float]:
        """All work (ours and background) each QPU ran up to the makespan."""
        return {q: sum(b - a for a, b in spans) for q, spans in self.busy_intervals.items()}

    def metrics(self) -> SimMetrics:
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
            "lower_bound_jct_s": self.lower_bound_jct_s,
            "jct_over_bound": float(self.jct_s[done].mean() / self.lower_bound_jct_s)
            if done.any() and self.lower_bound_jct_s > 0
            else float("nan"),
            "mean_fidelity": float(self.fidelity[done].mean()) if done.any() else float("nan"),
            "fidelity_ceiling": self.fidelity_ceiling,
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
