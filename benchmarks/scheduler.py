"""Scheduler targets (issues 4 and 15), each beside its baselines, in one run.

    python benchmarks/scheduler.py [--seed 1] [--quick]

1. Quality: NSGA-II's front against the exact front (all assignments) on 8 jobs x 4 QPUs.
2. Speed: one cycle of 100 jobs x 16 QPUs (estimates cached), NSGA-II vs the greedy baselines.
3. Against what users would pick: every policy (online qonductor's three presets, the paper's
   cycles with the same presets, fcfs, least-busy, round-robin, earliest-completion, fan,
   greedy-tolerance) on the same jobs at 1500, 3000, 4500 and 6000 jobs/h on 8 QPUs, at 1500 jobs/h
   with the IBM queue trace as other users' load (where the shared data is present), and at 4500
   jobs/h on 16 QPUs: mean and p95 JCT, fidelity, utilization, load difference, and whether each
   preset meets its target there; the online scheduler's decision times and wall time.
4. The load-balancing bound: the least load difference any placement could reach (LP).
5. With ``--sweep`` (alone): issue 33's sweep, the cloud at 20, 50, 80 and 95% utilization (the
   arrival rate least-busy needs for it) on 8 and 16 QPUs, with and without the IBM queue trace:
   every policy's table and issue 33's targets in each setting; at 80% and 95% also the
   time-indexed LP's tighter bound. ``--sweep --distance``: only that, for `jct` and the fastest
   baselines.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel_server.core.mcdm import front_2d  # noqa: E402
from kernel_server.scheduler.nsga2 import (  # noqa: E402
    all_assignments,
    best_fidelity_assignment,
    earliest_completion_assignment,
    nsga2_schedule,
)
from kernel_server.scheduler.problem import SchedulingProblem  # noqa: E402
from kernel_server.simulation.cloud import time_indexed_bound  # noqa: E402


def random_problem(n: int, q: int, seed: int) -> SchedulingProblem:
    rng = np.random.default_rng(seed)
    return SchedulingProblem(
        wait=rng.uniform(0, 300, q),
        qpu_qubits=rng.choice([27, 127, 133, 156], q),
        job_qubits=rng.integers(2, 27, n),
        runtime=rng.uniform(2, 20, (n, 1)) * rng.uniform(0.7, 1.3, (n, q)),
        fidelity=np.clip(rng.uniform(0.5, 0.95, (n, 1)) + rng.normal(0, 0.04, (n, q)), 0, 1),
    )


def quality(seed: int) -> None:
    from pymoo.indicators.hv import HV

    print("== 1. Quality: NSGA-II front vs the exact front (8 jobs x 4 QPUs, 65536 assignments) ==")
    ratios = []
    for s in range(seed, seed + 10):
        p = random_problem(8, 4, s)
        xs = all_assignments(8, 4)
        xs = xs[p.violation(xs) == 0]
        f = p.evaluate(xs)
        exact = f[front_2d(f)]
        result = nsga2_schedule(p, seed=s)
        hv = HV(ref_point=exact.max(axis=0) * 1.1)
        ratios.append(hv(result.front) / hv(exact))
    print(
        f"hypervolume ratio over 10 instances: min {min(ratios):.4f}, mean {np.mean(ratios):.4f}"
        f" -> target >= 0.99 {'met' if min(ratios) >= 0.99 else 'NOT met'}\n"
    )


def speed(seed: int) -> None:
    print("== 2. Speed: one cycle of 100 jobs x 16 QPUs ==")
    p = random_problem(100, 16, seed)
    times, gens = [], []
    for s in range(5):
        r = nsga2_schedule(p, seed=s)
        times.append(r.seconds)
        gens.append(r.generations)
    t0 = time.perf_counter()
    for _ in range(5):
        best_fidelity_assignment(p)
        earliest_completion_assignment(p)
    greedy = (time.perf_counter() - t0) / 5
    print(
        f"NSGA-II (pop 100, <= 80 generations): median {np.median(times):.2f} s "
        f"({np.median(gens):.0f} generations); greedy baselines {greedy * 1000:.1f} ms; "
        f"research prototype ~29 s per cycle (paper, Section 8.5)"
    )
    # The same cycle with load balancing, as the simulated cloud runs it: the QPUs' last hour
    # uneven, every QPU to end within 5% of the even level.
    rng = np.random.default_rng(seed)
    balanced = SchedulingProblem(
        p.wait, p.qpu_qubits, p.job_qubits, p.runtime, p.fidelity,
        load=rng.uniform(0, 600, p.num_qpus), balance=0.05,
    )  # fmt: skip
    timed = [nsga2_schedule(balanced, seed=s) for s in range(5)]
    balanced_s = float(np.median([r.seconds for r in timed]))
    within = min((balanced.load_excess(r.front_assignments) == 0).mean() for r in timed)
    print(
        f"with load balancing (5%): median {balanced_s:.2f} s; schedules on the front within "
        f"the balance: {within:.0%}"
    )
    ok = np.median(times) < 1.0 and balanced_s < 1.0
    print(f"-> target < 1 s {'met' if ok else 'NOT met'}\n")


def simulate(argv: list[str]) -> dict:
    import json

    from kernel_server.simulation.cli import main

    out = Path(tempfile.mkdtemp()) / "results.json"
    with open(os.devnull, "w") as devnull:  # its table and progress: this prints its own
        stdout, stderr, sys.stdout, sys.stderr = sys.stdout, sys.stderr, devnull, devnull
        try:
            code = main([*argv, "--out", str(out), "--plots", ""])
        finally:
            sys.stdout, sys.stderr = stdout, stderr
    if code != 0:
        raise SystemExit(f"simulate {argv} failed")
    return json.loads(out.read_text())


ONLINE = ("qonductor:jct", "qonductor", "qonductor:fidelity")
# The sweep also runs the online presets without load balance (qonductor simulate
# --online-balance off; `jct` and `balanced` balance by default), under these names.
UNBALANCED_ONLINE = tuple(f"{name}-balance" for name in ONLINE)
PAPER = ("qonductor-paper:jct", "qonductor-paper", "qonductor-paper:fidelity")
BASELINES = (
    "fcfs", "least-busy", "round-robin", "earliest-completion", "fan", "greedy-tolerance",
)  # fmt: skip


def settings() -> list[tuple[str, list[str]]]:
    from kernel_server.simulation.background import DEFAULT_TRACE

    out = [
        (f"{rate} jobs/h, 8 QPUs", ["--jobs-per-hour", str(rate), "--qpus", "8"])
        for rate in (1500, 3000, 4500, 6000)
    ]
    if DEFAULT_TRACE.exists():  # the shared data folder is optional
        out.append(
            (
                "1500 jobs/h, 8 QPUs, other users' load replayed from the IBM queue trace",
                ["--jobs-per-hour", "1500", "--qpus", "8", "--background", "trace"],
            )
        )
    else:
        print(f"(no IBM queue trace at {DEFAULT_TRACE}: the trace setting is skipped)")
    out.append(("4500 jobs/h, 16 QPUs", ["--jobs-per-hour", "4500", "--qpus", "16"]))
    return out


def dominates(a: dict, b: dict) -> bool:
    """a is at least as good as b on mean JCT and fidelity, and better on one."""
    no_worse = a["mean_jct_s"] <= b["mean_jct_s"] and a["mean_fidelity"] >= b["mean_fidelity"]
    better = a["mean_jct_s"] < b["mean_jct_s"] or a["mean_fidelity"] > b["mean_fidelity"]
    return no_worse and better


def targets(results: dict, presets: tuple[str, str, str]) -> dict[str, tuple[bool, str]]:
    """Issue 15's preset targets, against least-busy and the baselines of the same run."""
    lb = results["least-busy"]
    j, b, f = (results[p] for p in presets)
    beaten_by = [o for o in BASELINES if dominates(results[o], b)]
    within = {
        k: v
        for k, v in results.items()
        if isinstance(v, dict) and "mean_jct_s" in v and k != "fcfs"
        and not k.endswith("-balance")  # the presets' own variants
        and v["mean_jct_s"] <= 3 * lb["mean_jct_s"]
    }  # fmt: skip
    best = max(within, key=lambda k: within[k]["mean_fidelity"]) if within else "-"
    return {
        "jct: as fast as least-busy at no less fidelity": (
            j["mean_jct_s"] <= lb["mean_jct_s"] and j["mean_fidelity"] >= lb["mean_fidelity"],
            f"{j['mean_jct_s'] / lb['mean_jct_s']:.2f}x JCT, "
            f"{j['mean_fidelity'] - lb['mean_fidelity']:+.4f} fidelity",
        ),
        "balanced: <= 1.5x least-busy's JCT, >= +0.015 fidelity, dominated by no baseline": (
            b["mean_jct_s"] <= 1.5 * lb["mean_jct_s"]
            and b["mean_fidelity"] >= lb["mean_fidelity"] + 0.015
            and not beaten_by,
            f"{b['mean_jct_s'] / lb['mean_jct_s']:.2f}x JCT, "
            f"{b['mean_fidelity'] - lb['mean_fidelity']:+.4f} fidelity (the ceiling: "
            f"{b['fidelity_ceiling'] - lb['mean_fidelity']:+.4f}), dominated by "
            f"{', '.join(beaten_by) or 'none'}",
        ),
        "fidelity: the best fidelity within 3x least-busy's JCT (fcfs aside)": (
            f["mean_jct_s"] <= 3 * lb["mean_jct_s"] and best == presets[2],
            f"{f['mean_jct_s'] / lb['mean_jct_s']:.2f}x JCT; best within 3x: {best}",
        ),
    }


def table(results: dict) -> str:
    head = (
        f"{'policy':<26}{'mean JCT':>10}{'p95 JCT':>10}{'/bound':>8}{'fidelity':>10}{'util.':>8}"
        f"{'load diff':>11}{'decision p50/p95':>19}{'wall':>8}"
    )
    lines = [head, "-" * len(head)]
    lb = results["least-busy"]
    extra = tuple(name for name in UNBALANCED_ONLINE if name in results)
    for name in (*ONLINE, *extra, *PAPER, *BASELINES):
        m = results[name]
        decision = (
            f"{m['median_decision_ms']:.2f}/{m['p95_decision_ms']:.1f} ms"
            if m.get("decisions")
            else "-"
        )
        lines.append(
            f"{name:<26}{m['mean_jct_s']:>9.2f}s{m['p95_jct_s']:>9.2f}s"
            f"{m['jct_over_bound']:>7.2f}x{m['mean_fidelity']:>10.4f}{m['mean_utilization']:>8.1%}"
            f"{m['max_load_difference']:>11.1%}{decision:>19}{m['wall_seconds']:>7.1f}s"
            f"   ({m['mean_jct_s'] / lb['mean_jct_s']:.2f}x least-busy's JCT)"
        )
    lines.append(
        f"lower bound on the mean JCT of any schedule: {lb['lower_bound_jct_s']:.2f} s"
        " (max of the mean fastest run and SRPT on one machine as fast as the fleet, each job"
        " behind the other users' jobs that came before it; kernel_server/simulation/bounds.py)"
    )
    lines.append(
        f"ceiling on the mean fidelity of any schedule: {lb['fidelity_ceiling']:.4f} (each job on"
        " its best QPU at that QPU's best calibration from its arrival on; bounds.py)"
    )
    return "\n".join(lines)


def against_baselines(seed: int) -> None:
    print("== 3. Against what users would pick: one simulated hour, seed", seed, "==")
    policies = ",".join((*ONLINE, *PAPER, *BASELINES))
    scoreboard = []
    for title, argv in settings():
        results = simulate([*argv, "--hours", "1", "--seed", str(seed), "--policies", policies])
        print(f"-- {title}: {results['setup']['jobs']} jobs --")
        print(table(results))
        for mode, presets in (("online", ONLINE), ("paper mode", PAPER)):
            for target, (ok, detail) in targets(results, presets).items():
                scoreboard.append((title, mode, target.split(":")[0], ok))
                print(f"-> {mode} {target}: {'met' if ok else 'NOT met'} ({detail})")
        q = results["qonductor"]
        if title.startswith("4500 jobs/h, 16"):
            print(
                f"-> decision time per arrival (median) < 50 ms: "
                f"{'met' if q['median_decision_ms'] < 50 else 'NOT met'} "
                f"({q['median_decision_ms']:.2f} ms, p95 {q['p95_decision_ms']:.1f} ms, "
                f"{q['decisions']} decisions over {q['mean_decision_jobs']:.1f} pending jobs on "
                f"average); one simulated hour < 60 s wall: "
                f"{'met' if q['wall_seconds'] < 60 else 'NOT met'} ({q['wall_seconds']:.1f} s)"
            )
        print()
    print("-- preset targets met, online / paper mode --")
    for title, _ in settings():
        row = [s for s in scoreboard if s[0] == title]
        cells = []
        for preset in ("jct", "balanced", "fidelity"):
            marks = ["yes" if ok else "no" for t, m, p, ok in row if p == preset]
            cells.append(f"{preset} {'/'.join(marks)}")
        print(f"{title:<76} {'  '.join(cells)}")
    print()


# Issue 33's sweep: the cloud loaded to these utilizations (set by the arrival rate).
UTILIZATIONS = (0.2, 0.5, 0.8, 0.95)


def rate_for(utilization: float, base: list[str], seed: int) -> float | None:
    """Jobs/h at which least-busy runs the fleet at ``utilization``: utilization is close to
    linear in the arrival rate below saturation, so two short runs fix the line. None where
    other users' load alone exceeds it."""
    points = []
    for rate in (1000, 2500):
        argv = [*base, "--jobs-per-hour", str(rate), "--hours", "0.25", "--seed", str(seed)]
        points.append((rate, simulate([*argv, "--policies", "least-busy"])["least-busy"]))
    (r0, m0), (r1, m1) = points
    u0, u1 = m0["mean_utilization"], m1["mean_utilization"]
    slope = (u1 - u0) / (r1 - r0)
    if slope <= 0 or utilization <= u0 - slope * r0:
        return None
    return r0 + (utilization - u0) / slope


def sweep_targets(
    results: dict,
    utilization: float,
    least_load: tuple[float, np.ndarray] | None = None,
    most_fidelity: float | None = None,
    tight_bound: float | None = None,
) -> list[tuple[str, bool, str]]:
    """Issue 33's targets in one setting of the sweep. ``least_load``: the least load difference
    any placement could reach there (other users' load can put 16% out of anyone's reach) and
    the other users' work per QPU; ``most_fidelity``: the most mean fidelity any placement
    within 16% gets (``most_fidelity_within``); ``tight_bound``: the time-indexed LP's mean-JCT
    bound (``simulation.cloud.time_indexed_bound``), printed beside the issue's SRPT bound,
    which the target is judged by."""
    j, b, lb = results["qonductor:jct"], results["qonductor"], results["least-busy"]
    beaten_by = [o for o in BASELINES if dominates(results[o], j)]
    issue15 = targets(results, ONLINE)
    reach = ""
    if least_load is not None:
        spread = spread_difference(b, least_load[1])
        reach = (
            f"; the least any placement could reach: {least_load[0]:.1%} (LP, jobs free to run "
            f"where they are slower), {spread:.1%} spreading `balanced`'s own work"
        )
    if most_fidelity is not None:
        reach += (
            f"; within 16% any placement gets at most {most_fidelity:.4f} mean fidelity (LP on "
            f"the estimates, waiting ignored) against `balanced`'s {b['mean_fidelity']:.4f}"
        )
    out = [
        ("jct dominated by no baseline", not beaten_by, f"by {', '.join(beaten_by) or 'none'}"),
        ("balanced max load difference <= 16%", b["max_load_difference"] <= 0.16,
         f"{b['max_load_difference']:.1%}{reach}"),
        *((name, ok, detail) for name, (ok, detail) in issue15.items()),
    ]  # fmt: skip
    if utilization >= 0.8:
        tighter = ""
        if tight_bound is not None:
            ratios = ", ".join(
                f"{k} {results[k]['mean_jct_s'] / tight_bound:.2f}x"
                for k in ("qonductor:jct", "earliest-completion", "least-busy")
            )
            tighter = f"; over the time-indexed LP's {tight_bound:.2f} s: {ratios}"
        out.append(
            (
                "jct mean JCT within 1.3x the lower bound, p95 <= least-busy's",
                j["jct_over_bound"] <= 1.3 and j["p95_jct_s"] <= lb["p95_jct_s"],
                f"{j['jct_over_bound']:.2f}x bound, p95 {j['p95_jct_s']:.1f} s vs "
                f"{lb['p95_jct_s']:.1f} s{tighter}",
            )
        )
    return out


def sweep_settings(
    seed: int,
    fleets: list[int],
    hours: float,
    with_trace: bool,
    trace_only: bool = False,
    utilizations: tuple[float, ...] = UTILIZATIONS,
) -> Iterator[tuple[str, float, list[str], list[str]]]:
    """The sweep's settings: (title, utilization, simulate's arguments, the load's own)."""
    from kernel_server.simulation.background import DEFAULT_TRACE

    loads: list[tuple[str, list[str]]] = [] if trace_only else [("", [])]
    if with_trace and DEFAULT_TRACE.exists():
        loads.append((", other users' load from the IBM queue trace", ["--background", "trace"]))
    elif with_trace:  # the shared data folder is optional (QONDUCTOR_DATA)
        print(f"(no IBM queue trace at {DEFAULT_TRACE}: the settings with it are skipped)\n")
    for qpus in fleets:
        for label, extra in loads:
            base = ["--qpus", str(qpus), *extra]
            for utilization in utilizations:
                rate = rate_for(utilization, base, seed)
                title = f"{qpus} QPUs{label}, utilization {utilization:.0%}"
                if rate is None:
                    print(f"-- {title}: other users' load alone exceeds it; skipped --\n")
                    continue
                argv = [*base, "--jobs-per-hour", f"{rate:.0f}", "--hours", str(hours)]
                yield title, utilization, [*argv, "--seed", str(seed)], extra


def sweep(
    seed: int, fleets: list[int], hours: float, with_trace: bool, trace_only: bool = False
) -> None:
    print(f"== 5. Utilization sweep (issue 33): {hours:g} h, seed {seed} ==")
    policies = ",".join((*ONLINE, *PAPER, *BASELINES))
    for title, utilization, argv, extra in sweep_settings(
        seed, fleets, hours, with_trace, trace_only
    ):
        results = simulate([*argv, "--policies", policies])
        free = simulate([*argv, "--policies", ",".join(ONLINE), "--online-balance", "off"])
        results.update({f"{k}-balance": free[k] for k in ONLINE})
        setup = results["setup"]
        print(f"-- {title}: {setup['jobs_per_hour']:.0f} jobs/h, {setup['jobs']} jobs --")
        print(table(results))
        # Other users' load is fixed: whether 16% is within anyone's reach (an LP).
        placements = Placements.of(seed, argv)  # the LPs' jobs, built once
        least = (least_load_difference(placements), placements.other) if extra else None
        most = most_fidelity_within(placements)
        tight = None
        if utilization >= 0.8:  # where the jobs contend for QPUs and the LP is tighter
            tight = time_indexed_bound(placements.work, placements.background, seed)
        for target, ok, detail in sweep_targets(results, utilization, least, most, tight):
            print(f"-> {target}: {'met' if ok else 'NOT met'} ({detail})")
        print(flush=True)


def distance_to_best(
    seed: int, fleets: list[int], hours: float, with_trace: bool, trace_only: bool = False
) -> None:
    """The busy settings of the sweep (80% and 95%), `jct` and the fastest baselines only, each
    over both lower bounds: the SRPT machine's (``lower_bound_jct_s``, every run's) and the
    time-indexed LP's, tighter where jobs contend for QPUs."""
    print(f"== Distance to the best possible schedule: {hours:g} h, seed {seed} ==")
    policies = ("qonductor:jct", "earliest-completion", "least-busy")
    for title, _, argv, _ in sweep_settings(
        seed, fleets, hours, with_trace, trace_only, utilizations=(0.8, 0.95)
    ):
        results = simulate([*argv, "--policies", ",".join(policies)])
        placements = Placements.of(seed, argv)
        tight = time_indexed_bound(placements.work, placements.background, seed)
        simple = results[policies[0]]["lower_bound_jct_s"]
        rate = results["setup"]["jobs_per_hour"]
        print(
            f"-- {title}: {rate:.0f} jobs/h; bounds: SRPT machine {simple:.3f} s, "
            f"time-indexed LP {tight:.3f} s ({tight / simple - 1:+.1%})"
        )
        for name in policies:
            mean = results[name]["mean_jct_s"]
            print(f"   {name:<22}{mean:>7.2f} s  {mean / simple:.2f}x SRPT bound  "
                  f"{mean / tight:.2f}x LP bound")  # fmt: skip
        print(flush=True)


END_TO_END = ["--jobs-per-hour", "1500", "--qpus", "8", "--hours", "1"]


def spread_difference(run: dict, other: np.ndarray) -> float:
    """The least load difference a policy's own work in ``run`` (its seconds, as it ran them)
    could leave over the other users' work ``other``, spread from the least loaded QPU up."""
    from kernel_server.scheduler.online import reachable_difference

    return reachable_difference(other, float(sum(run["our_load_s"].values())))


@dataclass(frozen=True)
class Placements:
    """The hour's jobs of the simulate run with some options, as fractional placements: what the
    LPs below, which bound any scheduler, are built on (once per setting)."""

    work: Any  # kernel_server.simulation.workload.Workload
    lp: Any  # kernel_server.scheduler.nsga2.PlacementLP
    background: list[tuple[float, int, float]]  # other users' jobs (arrival, QPU, seconds)

    @property
    def other(self) -> np.ndarray:
        """(Q,) seconds of other users' work on each QPU."""
        other = np.zeros(len(self.work.qpus))
        for _, q, seconds in self.background:
            other[q] += seconds
        return other

    @classmethod
    def of(cls, seed: int, extra: list[str]) -> Placements:
        from kernel_server.scheduler.nsga2 import PlacementLP
        from kernel_server.simulation.cli import build_parser, workload_and_background

        args = build_parser().parse_args([*END_TO_END, "--seed", str(seed), *extra])
        work, background = workload_and_background(args)
        return cls(work, PlacementLP.of(work.usable, work.quantum_s), list(background))


def least_load_difference(placements: Placements) -> float:
    """The smallest (busiest - least busy) / busiest over every fractional placement of the
    hour's jobs, other users' work fixed: a bound no scheduler can beat. Jobs may go where they
    run slower, which adds work: with the IBM trace at 80% on 8 QPUs it reaches 0% only so,
    filling every QPU up to the one other users keep busy 88% of the hour.

    One LP (Charnes and Cooper's change of variables for a ratio): scale the placement x by
    s >= 0 so that the busiest QPU's load is at most 1, and maximise the least loaded one's; at
    the optimum that is the largest least / busiest ratio. (A bisection over feasibility LPs
    took over half an hour per setting on 16 QPUs.)"""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, vstack

    lp, other = placements.lp, placements.other
    n, q, variables = placements.work.num_jobs, len(other), len(lp.pair)
    other_column, ones, zeros = (
        csr_matrix(c.reshape(-1, 1)) for c in (other, np.ones(q), np.zeros(q))
    )
    # Variables (y = s x, s, t): other s + load y <= 1 and t - other s - load y <= 0.
    a_ub = vstack([hstack([lp.work, other_column, zeros]), hstack([-lp.work, -other_column, ones])])
    b_ub = np.concatenate([np.ones(q), np.zeros(q)])
    a_eq = hstack([lp.one_each, csr_matrix(-np.ones((n, 1))), csr_matrix((n, 1))])
    cost = np.zeros(variables + 2)
    cost[-1] = -1.0
    r = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(n), bounds=(0, None),
                method="highs")  # fmt: skip
    if r.status != 0:
        raise RuntimeError(f"the least-load-difference LP failed: {r.message}")
    return float(1.0 - r.x[-1])


def most_fidelity_within(placements: Placements, difference: float = 0.16) -> float | None:
    """The most mean fidelity (the estimates) of any fractional placement of the hour's jobs
    whose load difference stays within ``difference``, queues and waiting ignored: what a
    balanced schedule could reach at best (None where no placement stays within it)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, vstack

    lp, other, work = placements.lp, placements.other, placements.work
    n, ones = work.num_jobs, csr_matrix(np.ones((len(other), 1)))
    # Variables (x, U): other + load <= U and (1 - difference) U <= other + load.
    a_ub = vstack([hstack([lp.work, -ones]), hstack([-lp.work, (1.0 - difference) * ones])])
    gain = np.concatenate([work.fidelity.ravel()[lp.pair], [0.0]])
    r = linprog(-gain, A_ub=a_ub, b_ub=np.concatenate([-other, other]),
                A_eq=hstack([lp.one_each, csr_matrix((n, 1))]), b_eq=np.ones(n),
                bounds=(0, None), method="highs")  # fmt: skip
    return float(-r.fun / n) if r.status == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="sections 1-2 only")
    parser.add_argument(
        "--sweep", action="store_true", help="section 5 only: issue 33's utilization sweep"
    )
    parser.add_argument("--sweep-qpus", default="8,16", help="fleet sizes of the sweep")
    parser.add_argument("--sweep-hours", type=float, default=1.0)
    parser.add_argument("--no-trace", action="store_true", help="the sweep without the trace")
    parser.add_argument("--trace-only", action="store_true", help="the sweep with the trace only")
    parser.add_argument(
        "--distance",
        action="store_true",
        help="with --sweep: its 80%% and 95%% settings only, `jct` and the fastest baselines "
        "over both lower bounds (the time-indexed LP: minutes per setting)",
    )
    args = parser.parse_args()
    os.environ.setdefault("QONDUCTOR_HOME", str(Path(tempfile.gettempdir()) / "qonductor-bench"))
    if args.sweep:
        fleets = [int(q) for q in args.sweep_qpus.split(",")]
        run = distance_to_best if args.distance else sweep
        run(args.seed, fleets, args.sweep_hours, not args.no_trace, args.trace_only)
        return 0
    quality(args.seed)
    speed(args.seed)
    if not args.quick:
        against_baselines(args.seed)
        print("== 4. The load-balancing bound (1500 jobs/h, 8 QPUs) ==")
        results = simulate([*END_TO_END, "--seed", str(args.seed), "--policies", "qonductor"])
        print(
            f"online qonductor's load difference {results['qonductor']['max_load_difference']:.1%};"
            f" the least any placement of these jobs could reach (LP, estimated run times): "
            f"{least_load_difference(Placements.of(args.seed, [])):.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
