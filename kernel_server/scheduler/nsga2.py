"""Optimisation and selection stages of quantum scheduling: pymoo NSGA-II, then pseudo-weights MCDM.

NSGA-II (Deb et al. 2002) searches assignments of the cycle's jobs to QPUs for the Pareto front of
(mean JCT, mean error); the decision maker then picks one schedule on that front by the user's
preference. Operators as the paper's §7 describes them: integer random sampling, simulated binary
crossover and polynomial mutation on real values rounded back to QPU indices, duplicate elimination,
caps on generations and evaluations and a sliding-window tolerance termination.

Two additions of ours, both measured in ``benchmarks/scheduler.py``:

* The initial population holds, beside the random schedules, the greedy ones (best fidelity per
  job; earliest completion per job; and between them). They are what a person or a baseline would
  propose, they pin both ends of the front, and the search converges in fewer generations.
* Genes that put a job on a QPU too small for it are repaired to the nearest wide-enough QPU, so
  every evaluated schedule is feasible; the qubit constraint is still declared to pymoo.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair

from kernel_server.core.mcdm import front_2d, preference_weights, select
from kernel_server.scheduler.problem import SchedulingError, SchedulingProblem

POPULATION = 100
MAX_GENERATIONS = 80
MAX_EVALUATIONS = 20_000
# 80 generations: on 8 jobs x 4 QPUs the front's hypervolume equals the exact front's from 50 on,
# and 100 jobs x 16 QPUs take ~0.7 s (200 took ~1.4 s); benchmarks/scheduler.py prints both.
# Sliding-window termination: stop when, over this many generations, neither the front's objective
# values (relative) nor the designs moved more than the tolerances.
WINDOW = 20
FTOL = 0.0025
XTOL = 0.0005
EXACT_LIMIT = 4096  # enumerate every assignment when there are at most this many
MATING_RETRIES = 5


@dataclass
class ScheduleResult:
    """The optimisation's Pareto front and the schedule selected on it."""

    assignment: np.ndarray  # (N,) QPU index per job
    front: np.ndarray  # (K, 2) objectives [mean JCT s, mean error] of the non-dominated set
    front_assignments: np.ndarray  # (K, N)
    chosen: int  # index into front
    weights: tuple[float, float]
    generations: int
    evaluations: int
    seconds: float

    @property
    def objectives(self) -> np.ndarray:
        return self.front[self.chosen]


# --------------------------------------------------------------------------------------------
# Greedy schedules: the population's seeds and the building blocks of the baselines
# --------------------------------------------------------------------------------------------


def best_fidelity_assignment(problem: SchedulingProblem) -> np.ndarray:
    """Each job on its highest-fidelity wide-enough QPU (ties: lower index)."""
    masked = np.where(problem.feasible, problem.fidelity, -np.inf)
    return np.argmax(masked, axis=1)


def earliest_completion_assignment(
    problem: SchedulingProblem, fidelity_slack: float = np.inf
) -> np.ndarray:
    """Jobs in order, each on the QPU where it would finish first among wide-enough QPUs within
    ``fidelity_slack`` of its best fidelity (list scheduling)."""
    free = problem.wait.astype(float).copy()
    out = np.empty(problem.num_jobs, dtype=int)
    for i in range(problem.num_jobs):
        ok = problem.feasible[i].copy()
        best = problem.fidelity[i][ok].max()
        ok &= problem.fidelity[i] >= best - fidelity_slack - 1e-12
        finish = np.where(ok, free + problem.runtime[i], np.inf)
        q = int(np.argmin(finish))
        out[i] = q
        free[q] = finish[q]
    return out


def _load(problem: SchedulingProblem) -> np.ndarray:
    """The window's load per QPU (``SchedulingProblem`` fills in zeros when it was not given)."""
    assert problem.load is not None
    return problem.load


def _seed_level(problem: SchedulingProblem) -> float:
    """The even level the balanced seeds aim at: the window's load plus the cycle's work with
    every job on its best-fidelity QPU (the real schedule's work is not known yet)."""
    work = problem.runtime[np.arange(problem.num_jobs), best_fidelity_assignment(problem)].sum()
    return float(problem.even_level(np.asarray([work]))[0])


def balanced_assignment(problem: SchedulingProblem, fidelity_first: bool = True) -> np.ndarray:
    """A greedy schedule within the load-balance caps (seeds the search when ``balance`` is set).

    Jobs with the most fidelity to lose go first; each takes its best QPU (highest fidelity, or
    earliest completion with ``fidelity_first=False``) among those still under their cap, where
    the cap is the even level of the window's load plus this cycle's work at best fidelity.
    """
    cap = _seed_level(problem) * (1.0 + (problem.balance or 0.0))
    masked = np.where(problem.feasible, problem.fidelity, -np.inf)
    top2 = (
        np.sort(masked, axis=1)[:, -2:] if problem.num_qpus > 1 else np.zeros((problem.num_jobs, 2))
    )
    regret = np.where(np.isfinite(top2[:, 0]), top2[:, 1] - top2[:, 0], np.inf)
    carried = _load(problem).astype(float).copy()
    free = problem.wait.astype(float).copy()
    out = np.empty(problem.num_jobs, dtype=int)
    for i in np.argsort(-regret, kind="stable"):
        room = problem.feasible[i] & (carried < cap)
        if not room.any():  # every wide-enough QPU is at its cap: the one that stays lowest
            after = np.where(problem.feasible[i], carried + problem.runtime[i], np.inf)
            room = after == after.min()
        if fidelity_first:
            q = int(np.argmax(np.where(room, problem.fidelity[i], -np.inf)))
        else:
            q = int(np.argmin(np.where(room, free + problem.runtime[i], np.inf)))
        out[i] = q
        carried[q] += problem.runtime[i, q]
        free[q] += problem.runtime[i, q]
    return out


@dataclass(frozen=True)
class PlacementLP:
    """The linear-programming form of placing N jobs on Q QPUs: one variable x_k in [0, 1] per
    (job, QPU) pair where the job fits, the share of job ``job_of[k]`` on QPU ``qpu_of[k]``."""

    pair: np.ndarray  # (K,) flat indices i * Q + q of the fitting pairs
    job_of: np.ndarray  # (K,)
    qpu_of: np.ndarray  # (K,)
    one_each: Any  # (N, K) sparse: each job's shares sum to 1
    work: Any  # (Q, K) sparse: the seconds each QPU receives

    @classmethod
    def of(cls, feasible: np.ndarray, runtime: np.ndarray) -> PlacementLP:
        from scipy.sparse import csr_matrix

        n, q = feasible.shape
        pair = np.flatnonzero(feasible.ravel())
        job_of, qpu_of = np.divmod(pair, q)
        k = np.arange(len(pair))
        one_each = csr_matrix((np.ones(len(pair)), (job_of, k)), shape=(n, len(pair)))
        work = csr_matrix((runtime.ravel()[pair], (qpu_of, k)), shape=(q, len(pair)))
        return cls(pair, job_of, qpu_of, one_each, work)


def balanced_fidelity_lp(problem: SchedulingProblem) -> np.ndarray | None:
    """Highest mean fidelity within the load-balance caps, by linear programming (rounded).

    The LP relaxation of the assignment (x_iq in [0, 1], one QPU per job, each QPU's added work
    within its room under the cap) has at most Q fractional jobs at a vertex; each job then takes
    its largest share. None when no fractional schedule meets the caps and floors (the greedy
    seed covers that case).
    """
    from scipy.optimize import linprog
    from scipy.sparse import vstack

    n, q = problem.num_jobs, problem.num_qpus
    level = _seed_level(problem)
    tolerance = problem.balance or 0.0
    room = np.clip(level * (1.0 + tolerance) - _load(problem), 0.0, None)
    # The floor, less one mean job (as ``load_excess`` allows), for QPUs some job fits.
    usable = problem.feasible.any(axis=0)
    need = np.clip(level * (1.0 - tolerance) - _load(problem) - problem.mean_job_s(), 0.0, None)
    need = need * usable
    lp = PlacementLP.of(problem.feasible, problem.runtime)
    solution = linprog(
        -problem.fidelity.ravel()[lp.pair],
        A_ub=vstack([lp.work, -lp.work]),
        b_ub=np.concatenate([room, -need]),
        A_eq=lp.one_each,
        b_eq=np.ones(n),
        bounds=(0.0, 1.0),
        method="highs",
    )
    if solution.status != 0:
        return None
    share = np.zeros((n, q))
    share[lp.job_of, lp.qpu_of] = solution.x
    return np.argmax(share, axis=1)


def _repair_to_feasible(problem: SchedulingProblem, x: np.ndarray) -> np.ndarray:
    """Move genes on too-small QPUs to the nearest (by index) wide-enough QPU."""
    x = np.clip(np.rint(x), 0, problem.num_qpus - 1).astype(int)
    bad = ~problem.feasible[np.arange(problem.num_jobs)[None, :], x]
    if bad.any():
        rows, jobs = np.nonzero(bad)
        for r, j in zip(rows, jobs, strict=True):
            allowed = np.flatnonzero(problem.feasible[j])
            x[r, j] = allowed[np.argmin(np.abs(allowed - x[r, j]))]
    return x


def all_assignments(n: int, q: int) -> np.ndarray:
    """Every assignment of n jobs to q QPUs, as a (q**n, n) array."""
    return np.indices((q,) * n).reshape(n, -1).T


def _initial_population(
    problem: SchedulingProblem,
    size: int,
    rng: np.random.Generator,
    extra: np.ndarray | None = None,
) -> np.ndarray:
    seeds = [
        *(np.asarray(extra, dtype=int) if extra is not None else ()),
        best_fidelity_assignment(problem),
        earliest_completion_assignment(problem),
        *(earliest_completion_assignment(problem, s) for s in (0.01, 0.03, 0.1)),
    ]
    if problem.balance is not None:
        seeds += [balanced_assignment(problem, True), balanced_assignment(problem, False)]
        lp = balanced_fidelity_lp(problem)
        if lp is not None:
            seeds.append(lp)
    random = rng.integers(0, problem.num_qpus, size=(max(size - len(seeds), 0), problem.num_jobs))
    return _repair_to_feasible(problem, np.vstack([np.asarray(seeds), random])[:size])


class AssignmentProblem(Problem):
    """A scheduling problem as pymoo sees it: one integer variable per job (its QPU index), the
    objectives mean JCT and mean error, the constraints the qubits jobs lack on their QPUs and
    the load over the balance caps."""

    def __init__(self, scheduling: SchedulingProblem) -> None:
        super().__init__(
            n_var=scheduling.num_jobs,
            n_obj=2,
            n_ieq_constr=2,
            xl=0,
            xu=scheduling.num_qpus - 1,
            vtype=int,
        )
        self.scheduling = scheduling

    def _evaluate(self, x: np.ndarray, out: dict, *args: Any, **kwargs: Any) -> None:
        xi = np.rint(x).astype(int)  # pymoo hands over repaired designs as floats
        out["F"] = self.scheduling.evaluate(xi)
        out["G"] = np.stack(
            [self.scheduling.violation(xi), self.scheduling.load_excess(xi)], axis=1
        )


class FeasibleQPURepair(Repair):
    """Genes on QPUs too small for their job move to the nearest wide-enough QPU."""

    def _do(self, problem: AssignmentProblem, x: np.ndarray, **kwargs: Any) -> np.ndarray:
        return _repair_to_feasible(problem.scheduling, x)


def nsga2_schedule(
    problem: SchedulingProblem,
    preference: Any = "balanced",
    seed: int = 0,
    *,
    population: int = POPULATION,
    max_generations: int = MAX_GENERATIONS,
    max_evaluations: int = MAX_EVALUATIONS,
    window: int = WINDOW,
    seeds: np.ndarray | None = None,
) -> ScheduleResult:
    """Run NSGA-II on ``problem`` and pick a schedule on its front by ``preference``.

    ``seeds``: (K, N) schedules to start the population with besides the greedy ones (the online
    scheduler's list schedules and its previous plan)."""
    weights = preference_weights(preference)
    start = time.perf_counter()
    lost = problem.unplaceable()
    if len(lost):
        raise SchedulingError(
            f"jobs {lost.tolist()} fit no QPU (pre-processing must drop them before optimising)"
        )
    n, q = problem.num_jobs, problem.num_qpus
    if n == 0:
        empty = np.zeros((0,), dtype=int)
        return ScheduleResult(empty, np.zeros((1, 2)), empty[None, :], 0, weights, 0, 0, 0.0)
    if q**n <= EXACT_LIMIT:
        # Small enough to enumerate (a lone notebook job, a few jobs on a few QPUs): the exact
        # front, in milliseconds; a genetic search there only re-draws duplicates.
        return exact_schedule(problem, weights, start)
    result = _search(problem, seed, population, max_generations, max_evaluations, window, seeds)
    pop = result.opt if result.opt is not None else result.pop
    xs = _repair_to_feasible(problem, np.atleast_2d(pop.get("X")))
    xs = np.unique(xs, axis=0)
    front = problem.evaluate(xs)
    chosen = select(front, weights)
    return ScheduleResult(
        assignment=xs[chosen],
        front=front,
        front_assignments=xs,
        chosen=chosen,
        weights=weights,
        generations=int(result.algorithm.n_gen),
        evaluations=int(result.algorithm.evaluator.n_eval),
        seconds=time.perf_counter() - start,
    )


def exact_schedule(
    problem: SchedulingProblem, weights: tuple[float, float], start: float
) -> ScheduleResult:
    """The exact front, from every assignment (``q**n`` of them: small problems only), and the
    schedule ``weights`` pick on it; ``start`` is when the scheduling began (perf_counter)."""
    xs = _repair_to_feasible(problem, all_assignments(problem.num_jobs, problem.num_qpus))
    xs = np.unique(xs, axis=0)
    excess = problem.load_excess(xs)
    xs = xs[excess <= excess.min() + 1e-9]  # balanced ones (or the least unbalanced)
    front_idx = front_2d(problem.evaluate(xs))
    xs = xs[front_idx]
    front = problem.evaluate(xs)
    chosen = select(front, weights)
    return ScheduleResult(
        xs[chosen], front, xs, chosen, weights, 0, len(front_idx), time.perf_counter() - start
    )


def _search(
    problem: SchedulingProblem,
    seed: int,
    population: int,
    max_generations: int,
    max_evaluations: int,
    window: int,
    seeds: np.ndarray | None,
) -> Any:
    """pymoo's NSGA-II run on ``problem`` (its ``Result``)."""
    from pymoo.algorithms.moo.nsga2 import NSGA2, binary_tournament
    from pymoo.core.duplicate import DefaultDuplicateElimination
    from pymoo.core.mating import Mating
    from pymoo.operators.crossover.sbx import SBX
    from pymoo.operators.mutation.pm import PM
    from pymoo.operators.selection.tournament import TournamentSelection
    from pymoo.optimize import minimize
    from pymoo.termination.default import DefaultMultiObjectiveTermination

    rng = np.random.default_rng(seed)
    crossover = SBX(prob=0.9, eta=15, vtype=float, repair=FeasibleQPURepair())
    mutation = PM(prob=1.0, eta=20, vtype=float, repair=FeasibleQPURepair())
    algorithm = NSGA2(
        pop_size=population,
        sampling=_initial_population(problem, population, rng, seeds),
        crossover=crossover,
        mutation=mutation,
        repair=FeasibleQPURepair(),
        eliminate_duplicates=True,
        # pymoo retries mating up to 100 times per generation to find offspring that are not
        # duplicates; on small search spaces that is most of the run time for nothing.
        mating=Mating(
            TournamentSelection(func_comp=binary_tournament),
            crossover,
            mutation,
            repair=FeasibleQPURepair(),
            eliminate_duplicates=DefaultDuplicateElimination(),
            n_max_iterations=MATING_RETRIES,
        ),
    )
    termination = DefaultMultiObjectiveTermination(
        xtol=XTOL,
        ftol=FTOL,
        period=window,
        n_max_gen=max_generations,
        n_max_evals=max_evaluations,
    )
    return minimize(AssignmentProblem(problem), algorithm, termination, seed=seed, verbose=False)
