"""Pareto ranking of resource plans over (fidelity up, runtime down, cost down).

Plain non-dominated sorting: rank 0 is the Pareto front, rank 1 the front of what is left, and so
on. The candidate sets here are small (templates x mitigation stacks x accelerators, tens to a few
hundred), so the O(n^2) pairwise check per front is cheaper than anything clever.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    objectives = np.asarray(objectives, float)
    n = len(objectives)
    ranks = np.full(n, -1, dtype=int)
    remaining = np.arange(n)
    rank = 0
    while remaining.size:
        sub = objectives[remaining]
        # row i is dominated if some row j is <= everywhere and < somewhere
        le = np.all(sub[:, None, :] <= sub[None, :, :], axis=2)  # le[j, i]: j <= i
        lt = np.any(sub[:, None, :] < sub[None, :, :], axis=2)
        dominated = np.any(le & lt, axis=0)
        front = remaining[~dominated]
        ranks[front] = rank
        remaining = remaining[dominated]
        rank += 1
    return ranks


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
