"""Multi-criteria decisions shared by plan choice and scheduling: Pareto ranks, pseudo-weights.

Resource plans are ranked over (fidelity up, runtime down, cost down) by pymoo's non-dominated
sorting (moocore underneath): rank 0 is the Pareto front, rank 1 the front of what is left, and
so on. The decision maker then picks on a front by pseudo-weights (Deb's, paper eq. 2), written
here rather than taken from pymoo's ``PseudoWeights``: that one divides by the front's span and
gives NaN on fronts of one point or of equal values on an objective, which one-job scheduling
cycles produce all the time (a test checks the two agree where the span is not zero).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def as_minimization(
    fidelity: Sequence[float], runtime: Sequence[float], cost: Sequence[float]
) -> np.ndarray:
    """Objectives as an (n, 3) array where every column is to be minimised."""
    return np.column_stack(
        [-np.asarray(fidelity, float), np.asarray(runtime, float), np.asarray(cost, float)]
    )


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """a is no worse than b in every objective and better in at least one (minimisation)."""
    return bool(np.all(a <= b) and np.any(a < b))


def pareto_ranks(objectives: np.ndarray) -> np.ndarray:
    """Non-dominated sorting rank of each row (0 = Pareto front)."""
    f = np.asarray(objectives, float)
    if len(f) == 0:
        return np.zeros(0, dtype=int)
    # Imported here: the kernel imports this module for the plan widget, and pymoo takes ~0.3 s.
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    _, ranks = NonDominatedSorting().do(f, return_rank=True)
    return np.asarray(ranks, dtype=int)


def front_2d(objectives: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated rows of an (n, 2) minimisation array, in increasing first
    objective. A sort and one pass: for the tens of thousands of points an exhaustive schedule
    enumeration gives, where :func:`pareto_ranks`' pairwise check would not fit."""
    f = np.asarray(objectives, float)
    order = np.lexsort((f[:, 1], f[:, 0]))
    keep, best = [], np.inf
    for i in order:
        if f[i, 1] < best:
            keep.append(i)
            best = f[i, 1]
    return np.asarray(keep, dtype=int)


# Preference vectors over (mean JCT, mean error), as pseudo-weights: the share of its range an
# objective is improved from the worst solution of the front. "fidelity" asks for a schedule close
# to the best error, "jct" for one close to the best JCT.
PREFERENCES: dict[str, tuple[float, float]] = {
    "jct": (0.85, 0.15),
    "balanced": (0.5, 0.5),
    "fidelity": (0.15, 0.85),
}


def preference_weights(
    preference: str | Sequence[float] | Mapping[str, float],
) -> tuple[float, float]:
    """(JCT, error) weights from a preset name, a pair, or {"jct": a, "fidelity": b}."""
    if isinstance(preference, str):
        try:
            return PREFERENCES[preference]
        except KeyError:
            known = ", ".join(PREFERENCES)
            raise ValueError(
                f"unknown preference {preference!r}; use one of {known} or explicit weights "
                "such as {'jct': 0.7, 'fidelity': 0.3}"
            ) from None
    if isinstance(preference, Mapping):
        unknown = set(preference) - {"jct", "fidelity"}
        if unknown:
            raise ValueError(f"preference weights are 'jct' and 'fidelity', not {sorted(unknown)}")
        pair = (float(preference.get("jct", 0.0)), float(preference.get("fidelity", 0.0)))
    else:
        values = [float(v) for v in preference]
        if len(values) != 2:
            raise ValueError(f"a preference vector has two weights (JCT, fidelity), got {values}")
        pair = (values[0], values[1])
    if min(pair) < 0 or sum(pair) <= 0:
        raise ValueError(f"preference weights must be non-negative and not both 0, got {pair}")
    total = sum(pair)
    return (pair[0] / total, pair[1] / total)


def pseudo_weights(front: np.ndarray) -> np.ndarray:
    """(K, M) pseudo-weights of a front of minimised objectives (paper eq. 2).

    Each objective's distance from its worst value on the front, normalised by the front's range on
    it, then normalised to sum to one per solution. An objective with no range (all solutions
    equal on it) carries no preference: it gets weight 0. A one-point front gets equal weights.
    """
    f = np.asarray(front, dtype=float)
    if f.ndim != 2 or len(f) == 0:
        raise ValueError("pseudo_weights needs a non-empty (K, M) front")
    span = f.max(axis=0) - f.min(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        closeness = np.where(span > 0, (f.max(axis=0) - f) / np.where(span > 0, span, 1), 0.0)
    total = closeness.sum(axis=1, keepdims=True)
    equal = np.full_like(closeness, 1.0 / f.shape[1])
    return np.where(total > 0, closeness / np.where(total > 0, total, 1), equal)


def select(front: np.ndarray, preference: Any = "balanced") -> int:
    """Index of the front's solution whose pseudo-weights are closest (L1) to the preference."""
    weights = np.asarray(preference_weights(preference))
    distance = np.abs(pseudo_weights(front) - weights).sum(axis=1)
    return int(np.argmin(distance))
