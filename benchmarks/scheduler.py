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
    ok = np.median(times) < 1.0
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


def end_to_end(seed: int, plots: str) -> None:
    print("== 3. End to end: 1500 jobs/h, 8 QPUs, one simulated hour ==")
    from kernel_server.simulation.cli import format_table

    base = ["--jobs-per-hour", "1500", "--qpus", "8", "--hours", "1", "--seed", str(seed)]
    results = simulate(
        base
        + ["--policies", "qonductor,qonductor:jct,qonductor:fidelity,fcfs,least-busy,round-robin"]
    )
    print(format_table(results))
    q, f = results["qonductor"], results["fcfs"]
    checks = {
        "mean JCT >= 50% below FCFS": q["mean_jct_s"] <= 0.5 * f["mean_jct_s"],
        "fidelity >= 97% of FCFS": q["mean_fidelity"] >= 0.97 * f["mean_fidelity"],
        "higher utilization": q["mean_utilization"] > f["mean_utilization"],
        "load within 15%": q["max_load_difference"] <= 0.15,
    }
    for name, ok in checks.items():
        print(f"-> {name}: {'met' if ok else 'NOT met'}")
    j, b, fi = results["qonductor:jct"], q, results["qonductor:fidelity"]
    ordered = (
        j["mean_jct_s"] <= b["mean_jct_s"] <= fi["mean_jct_s"]
        and j["mean_fidelity"] <= b["mean_fidelity"] <= fi["mean_fidelity"]
    )
    print(
        f"presets: jct {j['mean_jct_s']:.1f} s / {j['mean_fidelity']:.3f}, balanced "
        f"{b['mean_jct_s']:.1f} s / {b['mean_fidelity']:.3f}, fidelity {fi['mean_jct_s']:.1f} s / "
        f"{fi['mean_fidelity']:.3f} -> ordered: {'met' if ordered else 'NOT met'}"
    )
    fast = simulate(base + ["--policies", "qonductor", "--trigger-interval", "10"])["qonductor"]
    print(
        f"qonductor with 10 s cycles instead of 120 s: mean JCT {fast['mean_jct_s']:.1f} s, "
        f"fidelity {fast['mean_fidelity']:.3f}\n"
    )


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
