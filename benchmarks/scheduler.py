"""Scheduler targets (issue 4), each beside its baseline, in one run.

    python benchmarks/scheduler.py [--seed 1] [--quick]

1. Quality: NSGA-II's front against the exact front (all assignments) on 8 jobs x 4 QPUs.
2. Speed: one cycle of 100 jobs x 16 QPUs (estimates cached), NSGA-II vs the greedy baselines.
3. End to end: 1500 jobs/h, 8 QPUs, one simulated hour: qonductor (balanced) vs fcfs, least-busy,
   round-robin; the presets jct / balanced / fidelity; qonductor with 10 s cycles.
4. Scale: mean JCT on 4, 8 and 16 QPUs; scheduling-queue and QPU backlog at 1500, 3000, 4500
   jobs/h (16 QPUs), and the wall time of one simulated hour at 4500 jobs/h.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel_server.estimator.pareto import front_2d  # noqa: E402
from kernel_server.scheduler.nsga2 import (  # noqa: E402
    all_assignments,
    best_fidelity_assignment,
    earliest_completion_assignment,
    nsga2_schedule,
)
from kernel_server.scheduler.problem import SchedulingProblem  # noqa: E402


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
    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            code = main([*argv, "--out", str(out), "--plots", ""])
        finally:
            sys.stdout = stdout
    if code != 0:
        raise SystemExit(f"simulate {argv} failed")
    return json.loads(out.read_text())


SETTINGS = (
    # The paper's setting and simulate's default: its 1500 jobs/h is the IBM cloud's whole load
    # (measured from the queue trace), so nobody else's work shares the QPUs.
    ("1500 jobs/h are the whole cloud (the paper's setting, the default)", []),
    (
        "plus other users' load on the same QPUs (--background synthetic, 25% utilization)",
        ["--background", "synthetic"],
    ),
)


END_TO_END = ["--jobs-per-hour", "1500", "--qpus", "8", "--hours", "1"]


def end_to_end(seed: int, plots: str) -> None:
    print("== 3. End to end: 1500 jobs/h, 8 QPUs, one simulated hour ==")
    from kernel_server.simulation.cli import format_table

    base = [*END_TO_END, "--seed", str(seed)]
    policies = "qonductor,qonductor:jct,qonductor:fidelity,fcfs,least-busy,round-robin"
    from kernel_server.simulation.background import DEFAULT_TRACE

    settings = list(SETTINGS)
    if DEFAULT_TRACE.exists():  # ../shared/data is optional
        settings.append(
            (
                "plus other users' load replayed from the IBM queue trace (--background trace)",
                ["--background", "trace"],
            )
        )
    for title, extra in settings:
        print(f"-- {title} --")
        results = simulate(base + extra + ["--policies", policies])
        print(format_table(results))
        q, f = results["qonductor"], results["fcfs"]
        checks = {
            "mean JCT >= 50% below FCFS": q["mean_jct_s"] <= 0.5 * f["mean_jct_s"],
            "fidelity >= 97% of FCFS": q["mean_fidelity"] >= 0.97 * f["mean_fidelity"],
            "higher utilization": q["mean_utilization"] > f["mean_utilization"],
            "load within 15%": q["max_load_difference"] <= 0.15,
        }
        print(
            f"balanced vs FCFS: JCT {1 - q['mean_jct_s'] / f['mean_jct_s']:.1%} lower, fidelity "
            f"{q['mean_fidelity'] / f['mean_fidelity']:.1%} of FCFS's, utilization "
            f"{q['mean_utilization'] / f['mean_utilization']:.3f}x, load difference "
            f"{q['max_load_difference']:.1%}"
        )
        for name, ok in checks.items():
            print(f"-> {name}: {'met' if ok else 'NOT met'}")
        j, b, fi = results["qonductor:jct"], q, results["qonductor:fidelity"]
        ordered = (
            j["mean_jct_s"] <= b["mean_jct_s"] <= fi["mean_jct_s"]
            and j["mean_fidelity"] <= b["mean_fidelity"] <= fi["mean_fidelity"]
        )
        print(
            f"presets: jct {j['mean_jct_s']:.1f} s / {j['mean_fidelity']:.4f}, balanced "
            f"{b['mean_jct_s']:.1f} s / {b['mean_fidelity']:.4f}, fidelity "
            f"{fi['mean_jct_s']:.1f} s / {fi['mean_fidelity']:.4f} -> ordered: "
            f"{'met' if ordered else 'NOT met'}"
        )
        off = simulate(base + extra + ["--policies", "qonductor", "--balance", "off"])["qonductor"]
        print(
            f"qonductor without load balancing (--balance off): mean JCT {off['mean_jct_s']:.1f} s,"
            f" fidelity {off['mean_fidelity']:.4f}, load difference "
            f"{off['max_load_difference']:.1%}"
        )
        bound = least_load_difference(seed, extra)
        print(
            f"the least load difference any placement of these jobs could reach (LP, estimated "
            f"run times): {bound:.1%}\n"
        )
    fast = simulate(base + ["--policies", "qonductor", "--trigger-interval", "10"])["qonductor"]
    print(
        f"qonductor with 10 s cycles instead of 120 s (the whole cloud): mean JCT "
        f"{fast['mean_jct_s']:.1f} s, fidelity {fast['mean_fidelity']:.3f}\n"
    )


def least_load_difference(seed: int, extra: list[str]) -> float:
    """The smallest (busiest - least busy) / busiest over every fractional placement of the
    hour's jobs, other users' work fixed: a bound no scheduler can beat (bisection over LPs)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, hstack, vstack

    from kernel_server.scheduler.nsga2 import PlacementLP
    from kernel_server.simulation.cli import build_parser, workload_and_background

    # The very jobs and background load of the simulate run with these options.
    args = build_parser().parse_args([*END_TO_END, "--seed", str(seed), *extra])
    work, background = workload_and_background(args)
    other = np.zeros(args.qpus)
    for _, q, seconds in background:
        other[q] += seconds
    lp = PlacementLP.of(np.isfinite(work.quantum_s), work.quantum_s)
    n, q_count = work.quantum_s.shape
    load, variables = lp.work, len(lp.pair)
    column = csr_matrix(np.ones((q_count, 1)))

    def feasible(ratio: float) -> bool:
        # other + load <= U and ratio * U <= other + load, over x >= 0 and U.
        a_ub = vstack([hstack([load, -column]), hstack([-load, ratio * column])])
        b_ub = np.concatenate([-other, other])
        a_eq = hstack([lp.one_each, csr_matrix((n, 1))])
        r = linprog(np.zeros(variables + 1), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n),
                    bounds=(0, None), method="highs")  # fmt: skip
        return r.status == 0

    lo, hi = 0.0, 1.0  # ratio least / busiest: lo feasible, hi not (unless equal loads)
    if feasible(1.0):
        return 0.0
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    return 1.0 - lo


def scale(seed: int) -> None:
    print("== 4. Scale ==")
    for qpus in (4, 8, 16):
        r = simulate(
            ["--jobs-per-hour", "1500", "--qpus", str(qpus), "--hours", "1", "--seed", str(seed),
             "--policies", "qonductor,fcfs"]
        )  # fmt: skip
        print(
            f"{qpus:>2} QPUs, 1500 jobs/h: qonductor mean JCT {r['qonductor']['mean_jct_s']:8.1f} s"
            f" (fcfs {r['fcfs']['mean_jct_s']:8.1f} s)"
        )
    for rate in (1500, 3000, 4500):
        t0 = time.perf_counter()
        r = simulate(
            ["--jobs-per-hour", str(rate), "--qpus", "16", "--hours", "1", "--seed", str(seed),
             "--policies", "qonductor"]
        )  # fmt: skip
        wall = time.perf_counter() - t0
        m = r["qonductor"]
        print(
            f"{rate} jobs/h on 16 QPUs: max scheduling queue {m['max_pending']}, mean JCT "
            f"{m['mean_jct_s']:.1f} s, last job done {m['makespan_s'] / 60:.1f} min after start "
            f"(arrivals end at 60 min); wall {wall:.1f} s"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="sections 1-2 only")
    args = parser.parse_args()
    os.environ.setdefault("QONDUCTOR_HOME", str(Path(tempfile.gettempdir()) / "qonductor-bench"))
    quality(args.seed)
    speed(args.seed)
    if not args.quick:
        end_to_end(args.seed, "")
        scale(args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
