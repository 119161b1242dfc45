"""Runtime intervals: how far a job's time may land from the runtime model's prediction.

A point estimate with a spread of seconds is not what a scheduler or a user should be shown as if
it were exact (forty reruns of one job took 2.4-10.9 s). The interval here is split-conformal
(Vovk et al.; Angelopoulos & Bates, "A gentle introduction to conformal prediction", 2021) on
residuals in log space, ``log((y + c) / (prediction + c))``, computed out of fold on grouped
folds (a job's reruns never calibrate its own interval) and kept per cell: the regime (single
circuit or batch) and a quartile of the predicted time, so a short job gets a short interval and
a long batch a proportionally long one (Mondrian conformal prediction). For coverage 1 - a a cell
with n residuals takes the ``floor(a/2 (n+1))``-th and ``ceil((1-a/2)(n+1))``-th smallest as its
bounds, which covers at least 1 - a of jobs exchangeable with the calibration jobs.

numpy only: the calibration travels in the model's JSON file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec
import numpy as np

# Seconds added before taking logs: the data's 0.03 s jobs would otherwise make a ratio of noise.
LOG_OFFSET_S = 0.5
CELLS_PER_REGIME = 4
FORMAT = "qonductor-runtime-intervals/1"
_REGIMES = ("single", "multi")


def log_residuals(y: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """log((y + c) / (prediction + c)); a negative prediction (a baseline's) counts as 0 s."""
    base = np.maximum(np.asarray(predicted, dtype=np.float64), 0.0) + LOG_OFFSET_S
    return np.log((np.asarray(y, dtype=np.float64) + LOG_OFFSET_S) / base)


@dataclass
class ConformalIntervals:
    """Sorted out-of-fold log residuals per cell, and the predicted-time edges of the cells."""

    edges: dict[str, list[float]]  # regime -> inner edges (CELLS_PER_REGIME - 1 values)
    residuals: dict[str, list[np.ndarray]]  # regime -> per cell, sorted

    @classmethod
    def calibrate(
        cls, single: np.ndarray, y: np.ndarray, predicted: np.ndarray
    ) -> ConformalIntervals:
        """From out-of-fold ``predicted`` seconds of jobs whose times were ``y`` (``single``
        marks single-circuit jobs)."""
        edges: dict[str, list[float]] = {}
        residuals: dict[str, list[np.ndarray]] = {}
        for regime, mask in zip(_REGIMES, (single, ~single), strict=True):
            if not mask.any():  # a regime without calibration jobs borrows all of them
                mask = np.ones_like(mask)
            p = predicted[mask]
            inner = [
                float(v) for v in np.quantile(p, np.arange(1, CELLS_PER_REGIME) / CELLS_PER_REGIME)
            ]
            cells = np.searchsorted(inner, p, side="right")
            r = log_residuals(y[mask], p)
            edges[regime] = inner
            residuals[regime] = [
                np.sort(r[cells == c]) if (cells == c).any() else np.sort(r)
                for c in range(CELLS_PER_REGIME)
            ]
        return cls(edges, residuals)

    def bounds(
        self, single: np.ndarray, predicted: np.ndarray, coverage: float = 0.8
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) seconds of each job's interval at ``coverage`` (0 < coverage < 1)."""
        if not 0.0 < coverage < 1.0:
            raise ValueError(f"coverage must be between 0 and 1 (exclusive), got {coverage!r}")
        predicted = np.asarray(predicted, dtype=np.float64)
        low = np.empty_like(predicted)
        high = np.empty_like(predicted)
        alpha = 1.0 - coverage
        for regime, mask in zip(_REGIMES, (single, ~single), strict=True):
            if not mask.any():
                continue
            p = predicted[mask]
            cells = np.searchsorted(self.edges[regime], p, side="right")
            lo_r = np.empty_like(p)
            hi_r = np.empty_like(p)
            for c in range(CELLS_PER_REGIME):
                here = cells == c
                if here.any():
                    lo_r[here], hi_r[here] = _quantiles(self.residuals[regime][c], alpha)
            base = np.maximum(p, 0.0) + LOG_OFFSET_S
            low[mask] = np.maximum(base * np.exp(lo_r) - LOG_OFFSET_S, 0.0)
            high[mask] = base * np.exp(hi_r) - LOG_OFFSET_S
        return low, high

    def to_json(self) -> IntervalsFile:
        return IntervalsFile(
            format=FORMAT,
            log_offset_s=LOG_OFFSET_S,
            edges=self.edges,
            residuals={
                regime: [[round(float(v), 5) for v in cell] for cell in cells]
                for regime, cells in self.residuals.items()
            },
        )

    @classmethod
    def from_json(cls, d: IntervalsFile) -> ConformalIntervals:
        if d.format != FORMAT:
            raise ValueError(f"intervals format {d.format!r}, expected {FORMAT!r}")
        return cls(
            {k: [float(v) for v in e] for k, e in d.edges.items()},
            {
                k: [np.sort(np.asarray(cell, dtype=np.float64)) for cell in cells]
                for k, cells in d.residuals.items()
            },
        )


class IntervalsFile(msgspec.Struct, frozen=True):
    """The intervals as the runtime model file holds them: per regime, the predicted-seconds
    edges of its cells and each cell's sorted log residuals."""

    format: str
    log_offset_s: float
    edges: dict[str, list[float]]
    residuals: dict[str, list[list[float]]]


def _quantiles(sorted_residuals: np.ndarray, alpha: float) -> tuple[float, float]:
    """The conformal lower and upper residual of a cell (its extremes when it is too small)."""
    n = len(sorted_residuals)
    lo = math.floor(alpha / 2 * (n + 1))
    hi = math.ceil((1 - alpha / 2) * (n + 1))
    return (
        float(sorted_residuals[max(lo - 1, 0)]),
        float(sorted_residuals[min(hi - 1, n - 1)]),
    )


def held_out_coverage(
    single: np.ndarray,
    y: np.ndarray,
    predicted: np.ndarray,
    folds: np.ndarray,
    coverage: float = 0.8,
) -> dict[str, float]:
    """Coverage and median width on each fold of intervals calibrated on the other folds'
    out-of-fold predictions (cross-conformal: no job calibrates its own interval)."""
    low = np.empty_like(predicted)
    high = np.empty_like(predicted)
    for k in np.unique(folds):
        test = folds == k
        calibration = ConformalIntervals.calibrate(single[~test], y[~test], predicted[~test])
        low[test], high[test] = calibration.bounds(single[test], predicted[test], coverage)
    inside = (y >= low) & (y <= high)
    return {
        "coverage": float(np.mean(inside)),
        "median_width_s": float(np.median(high - low)),
        "single_coverage": float(np.mean(inside[single])) if single.any() else float("nan"),
        "multi_coverage": float(np.mean(inside[~single])) if (~single).any() else float("nan"),
    }
