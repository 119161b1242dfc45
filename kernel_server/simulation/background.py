"""Other users' jobs on the simulated QPUs: background arrivals, synthetic or replayed from IBM.

The real trace (``ibm_queue_trace_2023-11.csv.gz``: pending jobs of 12 IBM QPUs per minute, ten
days of November 2023) carries what makes scheduling hard: a daily pattern and an imbalance of up to
~100x between QPUs. Replaying it, a simulated QPU's background arrival rate in each minute is
proportional to the pending jobs of the trace QPU it stands for, scaled so the fleet's mean
background utilisation is ``load``. Without the file, rates are constant per QPU with a seeded
log-normal spread around ``load``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernel_server.core.paths import SHARED_DATA_DIR

MEAN_BACKGROUND_S = 4.0  # seconds per background job (log-normal, sigma 0.5)
MAX_UTILISATION = 0.9  # no QPU is saturated by background work alone
DEFAULT_TRACE = SHARED_DATA_DIR / "ibm_queue_trace_2023-11.csv.gz"


def synthetic_rates(qpus: int, load: float, seed: int) -> np.ndarray:
    """(Q, 1) constant utilisation per QPU: mean ``load``, log-normal spread."""
    rng = np.random.default_rng(seed + 7)
    spread = rng.lognormal(0.0, 0.6, size=qpus)
    return np.clip(load * spread / spread.mean(), 0.0, MAX_UTILISATION)[:, None]


def trace_rates(path: str | Path, qpus: int, load: float, hours: float, seed: int) -> np.ndarray:
    """(Q, minutes) utilisation per QPU per minute, replayed from the pending-jobs trace."""
    import pandas as pd

    trace = pd.read_csv(path, usecols=["minute_utc", "backend", "pending_jobs"])
    table = trace.pivot_table(
        index="minute_utc", columns="backend", values="pending_jobs", aggfunc="mean"
    ).sort_index()
    table = table.ffill().fillna(0.0)
    minutes = int(np.ceil(hours * 60))
    if len(table) <= minutes:
        raise ValueError(f"{path}: the trace holds {len(table)} minutes, fewer than {minutes}")
    start = int(np.random.default_rng(seed + 11).integers(0, len(table) - minutes))
    window = table.iloc[start : start + minutes].to_numpy(dtype=float).T  # (backends, minutes)
    rows = np.asarray([window[k % len(window)] for k in range(qpus)])
    mean = rows.mean()
    if mean <= 0:
        return np.zeros_like(rows)
    return np.clip(load * rows / mean, 0.0, MAX_UTILISATION)


def background_jobs(
    utilisation: np.ndarray, hours: float, seed: int
) -> list[tuple[float, int, float]]:
    """(arrival s, QPU index, duration s) of background jobs, sorted by arrival.

    ``utilisation`` is (Q, T): T equal slices of the horizon (one column: constant).
    """
    rng = np.random.default_rng(seed + 13)
    horizon = hours * 3600.0
    q_count, slices = utilisation.shape
    width = horizon / slices
    jobs: list[tuple[float, int, float]] = []
    sigma = 0.5
    mu = np.log(MEAN_BACKGROUND_S) - sigma**2 / 2  # log-normal with that mean
    for q in range(q_count):
        for s in range(slices):
            rate = utilisation[q, s] / MEAN_BACKGROUND_S  # jobs per second
            count = rng.poisson(rate * width)
            for t in np.sort(rng.uniform(s * width, (s + 1) * width, size=count)):
                jobs.append((float(t), q, float(rng.lognormal(mu, sigma))))
    jobs.sort()
    return jobs
