"""The quantum scheduling problem of one cycle: which QPU runs each pending job.

Formulation (Qonductor paper, §7, eq. 1): one integer variable per job, ``x_i`` = index of its
QPU; minimise the mean job completion time (JCT) and the mean error (1 - estimated fidelity),
subject to ``job_qubits[i] <= qpu_qubits[x_i]``.

**JCT as the queues really behave.** The paper's f1 charges each job with its QPU's current wait
plus the run times of *every* job of the cycle sent to that QPU: as if a job waited for its whole
batch, including the jobs queued behind it. Our QPU queues are FIFO and the cycle enqueues its jobs
in their arrival order (index order here), so job ``i`` waits only for the jobs *ahead* of it:

    JCT_i = wait[x_i] + sum_{k <= i, x_k = x_i} runtime[k, x_k]

(its own run included: completion, not start). This is what the simulator then measures, so the
optimiser's objective and the outcome agree; the paper's version overstates JCT by about half a
batch and rewards splitting batches evenly rather than finishing jobs early.

**Load balancing** (optional, a constraint rather than a third objective): the JCT objective only
sees queues, and on a lightly loaded cloud the best QPUs have short queues, so a schedule can pile
work on them without a JCT penalty. A cloud provider wants the fleet evenly used; with ``balance``
set, a schedule is feasible only if every QPU ends the cycle within ``balance`` of the even level
of the recent load, give or take one job (``load_excess``). The Pareto front is then the trade-off
between JCT and fidelity among balanced schedules.

Everything here is numpy on whole populations (an (M, N) array of assignments at once): NSGA-II
evaluates 100 candidate schedules per generation, and a Python loop per schedule would dominate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class SchedulingError(ValueError):
    """The problem's arrays do not describe a schedulable cycle."""


def water_level(load: np.ndarray, added: np.ndarray | float) -> np.ndarray:
    """(M,) level every QPU would carry if each of ``added`` (M,) seconds of new work were spread
    over QPUs with ``load`` (Q,) seconds to even them out as far as it goes: the least loaded are
    filled first, QPUs already above the level get nothing."""
    a = np.sort(np.asarray(load, dtype=float))
    k = np.arange(1, len(a) + 1)
    # Filling the k least-loaded QPUs to one level: (added + their load) / k; the right k is
    # the one whose level lies between its k-th and (k+1)-th loads.
    level = (np.atleast_1d(np.asarray(added, dtype=float))[:, None] + np.cumsum(a)[None, :]) / k
    upper = np.append(a[1:], np.inf)
    fits = (level >= a[None, :] - 1e-9) & (level <= upper[None, :] + 1e-9)
    return level[np.arange(len(level)), np.argmax(fits, axis=1)]


@dataclass
class SchedulingProblem:
    """Pending jobs x QPUs with their estimates.

    ``wait``: (Q,) seconds until each QPU's queue clears of earlier work.
    ``qpu_qubits``: (Q,) width of each QPU. ``job_qubits``: (N,) width of each job.
    ``runtime``: (N, Q) estimated seconds of job i on QPU q (quantum execution).
    ``fidelity``: (N, Q) estimated fidelity of job i on QPU q (0-1).
    ``offset``: (N,) seconds each job has already spent before this cycle (time in the scheduling
    queue); added to its JCT so cycles compare jobs fairly. Optional, zeros by default.
    """

    wait: np.ndarray
    qpu_qubits: np.ndarray
    job_qubits: np.ndarray
    runtime: np.ndarray
    fidelity: np.ndarray
    offset: np.ndarray | None = None
    # "fifo": the jobs ahead of each job (what our queues do, the default); "batch": the paper's
    # f1, every job charged with its QPU's whole batch (kept to compare against, not to schedule).
    jct_model: str = "fifo"
    # Load balancing (off unless ``balance`` is set): ``load`` (Q,) seconds of work each QPU has
    # carried in the balancing window before this cycle, ours and other users', its queue included;
    # ``balance`` the tolerance over the even spread (see ``load_excess``).
    load: np.ndarray | None = None
    balance: float | None = None
    feasible: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.wait = np.asarray(self.wait, dtype=float).reshape(-1)
        self.qpu_qubits = np.asarray(self.qpu_qubits, dtype=int).reshape(-1)
        self.job_qubits = np.asarray(self.job_qubits, dtype=int).reshape(-1)
        n, q = len(self.job_qubits), len(self.qpu_qubits)
        self.runtime = np.asarray(self.runtime, dtype=float)
        self.fidelity = np.asarray(self.fidelity, dtype=float)
        if len(self.wait) != q:
            raise SchedulingError(f"wait has {len(self.wait)} entries for {q} QPUs")
        for name, array in (("runtime", self.runtime), ("fidelity", self.fidelity)):
            if array.shape != (n, q):
                raise SchedulingError(f"{name} has shape {array.shape}, expected ({n}, {q})")
            if not np.isfinite(array).all():
                raise SchedulingError(f"{name} holds NaN or infinite values")
        if (self.runtime < 0).any() or (self.wait < 0).any():
            raise SchedulingError("runtimes and waits must be non-negative")
        self.offset = np.zeros(n) if self.offset is None else np.asarray(self.offset, dtype=float)
        if self.offset.shape != (n,):
            raise SchedulingError(f"offset has shape {self.offset.shape}, expected ({n},)")
        self.feasible = self.job_qubits[:, None] <= self.qpu_qubits[None, :]
        if self.jct_model not in ("fifo", "batch"):
            raise SchedulingError(f"jct_model is 'fifo' or 'batch', not {self.jct_model!r}")
        self.load = np.zeros(q) if self.load is None else np.asarray(self.load, dtype=float)
        if self.load.shape != (q,) or not np.isfinite(self.load).all() or (self.load < 0).any():
            raise SchedulingError(f"load must hold {q} non-negative seconds, got {self.load!r}")
        if self.balance is not None and not self.balance >= 0:
            raise SchedulingError(f"balance is a tolerance >= 0 (or None: off), not {self.balance}")

    @property
    def num_jobs(self) -> int:
        return len(self.job_qubits)

    @property
    def num_qpus(self) -> int:
        return len(self.qpu_qubits)

    def unplaceable(self) -> np.ndarray:
        """Indices of jobs no QPU is wide enough for (pre-processing drops them)."""
        return np.flatnonzero(~self.feasible.any(axis=1))

    def completion_times(self, assignments: np.ndarray) -> np.ndarray:
        """(M, N) JCT of every job under each of M assignments (FIFO, jobs in index order)."""
        x = self._check(assignments)
        rows = np.arange(self.num_jobs)
        run = self.runtime[rows[None, :], x]  # (M, N) runtime of each job on its QPU
        jct = np.empty_like(run)
        for q in range(self.num_qpus):
            on_q = x == q
            if not on_q.any():
                continue
            work = np.where(on_q, run, 0.0)
            if self.jct_model == "fifo":
                ahead = np.cumsum(work, axis=1)
            else:
                ahead = np.broadcast_to(work.sum(axis=1, keepdims=True), work.shape)
            jct = np.where(on_q, self.wait[q] + ahead, jct)
        assert self.offset is not None  # made an array in __post_init__
        return jct + self.offset[None, :]

    def violation(self, assignments: np.ndarray) -> np.ndarray:
        """(M,) total qubits by which jobs exceed their QPU (0 = feasible schedule)."""
        x = self._check(assignments)
        excess = self.job_qubits[None, :] - self.qpu_qubits[x]
        return np.clip(excess, 0, None).sum(axis=1).astype(float)

    def even_level(self, added: np.ndarray) -> np.ndarray:
        """(M,) water level: the load every QPU would carry if ``added`` (M,) seconds of new work
        were spread to even out ``load`` as far as it goes (QPUs already above it get nothing)."""
        assert self.load is not None  # made an array in __post_init__
        return water_level(self.load, added)

    def mean_job_s(self) -> np.ndarray:
        """(Q,) mean run time on each QPU of the cycle's jobs that fit it (0 where none does): the
        one job of slack that balancing allows under a QPU's floor."""
        fitting = np.where(self.feasible, self.runtime, 0.0).sum(axis=0)
        return fitting / np.maximum(self.feasible.sum(axis=0), 1)

    def load_excess(self, assignments: np.ndarray) -> np.ndarray:
        """(M,) seconds by which a schedule unbalances the fleet (0: within ``balance``).

        Against the even level ``L`` of the window's load (``even_level`` of the cycle's work as
        assigned): a QPU that receives jobs may end the cycle at most ``(1 + balance) L``, and a QPU
        some job could use may not end it below ``(1 - balance) L``; each give or take one job
        (jobs are indivisible, and without that slack a lone job on an idle fleet would fit
        nowhere). The cap and the floor together bound the busiest QPU against the least busy.
        A QPU that other users' work keeps above the level receives nothing and is not counted.
        Always 0 when ``balance`` is None.
        """
        x = self._check(assignments)
        if self.balance is None:
            return np.zeros(len(x))
        rows = np.arange(self.num_jobs)
        run = self.runtime[rows[None, :], x]
        level = self.even_level(run.sum(axis=1))
        cap, floor = level * (1.0 + self.balance), level * (1.0 - self.balance)
        excess = np.zeros(len(x))
        mean_job = self.mean_job_s()
        assert self.load is not None  # made an array in __post_init__
        for q in range(self.num_qpus):
            if not self.feasible[:, q].any():
                continue
            mine = np.where(x == q, run, 0.0)
            carried = self.load[q] + mine.sum(axis=1)
            over = carried - cap - mine.max(axis=1, initial=0.0)
            under = floor - carried - mean_job[q]
            excess = np.maximum(excess, np.where((x == q).any(axis=1), over, 0.0))
            excess = np.maximum(excess, under)
        return np.maximum(excess, 0.0)

    def evaluate(self, assignments: np.ndarray) -> np.ndarray:
        """(M, 2) objectives [mean JCT in seconds, mean error] of M assignments.

        A single assignment of shape (N,) gives shape (2,).
        """
        single = np.asarray(assignments).ndim == 1
        x = self._check(assignments)
        jct = self.completion_times(x).mean(axis=1)
        rows = np.arange(self.num_jobs)
        error = 1.0 - self.fidelity[rows[None, :], x].mean(axis=1)
        out = np.stack([jct, error], axis=1)
        return out[0] if single else out

    def _check(self, assignments: np.ndarray) -> np.ndarray:
        x = np.asarray(assignments)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.num_jobs:
            raise SchedulingError(
                f"assignments must have shape (M, {self.num_jobs}), got {np.shape(assignments)}"
            )
        if not np.issubdtype(x.dtype, np.integer):
            rounded = np.rint(x)
            if not np.allclose(x, rounded):
                raise SchedulingError("assignments must be integer QPU indices")
            x = rounded
        x = x.astype(int)
        if (x < 0).any() or (x >= self.num_qpus).any():
            raise SchedulingError(f"QPU indices must lie in 0..{self.num_qpus - 1}")
        return x
