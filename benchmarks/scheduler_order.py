"""Issue 33: does ordering pending jobs shortest-first with aging pay on a busy cloud?

    python benchmarks/scheduler_order.py [--seed 1] [--hours 0.5]

The online `jct` preset with its jobs in arrival order against the same preset
ordering them shortest expected run first less an aging credit (``OnlinePreset.aging``: 1.0, 0.5
and 0.1 s per s waited), and least-busy as the rule users would write, on the same jobs: 6000
jobs/h on 8 QPUs at 5000, 6000 and 8000 mean shots (utilization about 0.8, 0.9 and saturated).
Prints mean and p95 JCT, mean fidelity, utilization and each run's lower bound on the mean JCT
(``simulation.bounds``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel_server.scheduler.online import ONLINE_PRESETS  # noqa: E402
from kernel_server.simulation.cloud import simulate  # noqa: E402
from kernel_server.simulation.workload import WorkloadSpec, generate, sim_qpus  # noqa: E402

SETTINGS = ((6000, 5000), (6000, 6000), (6000, 8000))  # (jobs/h, mean shots)


def policies() -> list[tuple[str, str, object]]:
    jct = ONLINE_PRESETS["jct"]
    return [
        ("least-busy", "least-busy", "balanced"),
        ("jct, arrival order", "qonductor", replace(jct, aging=None)),
        ("jct, aging 1.0 (its default)", "qonductor", replace(jct, aging=1.0)),
        ("jct, aging 0.5", "qonductor", replace(jct, aging=0.5)),
        ("jct, aging 0.1", "qonductor", replace(jct, aging=0.1)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=0.5)
    args = parser.parse_args()
    qpus = sim_qpus(8)
    for jobs_per_hour, shots in SETTINGS:
        spec = WorkloadSpec(jobs_per_hour=jobs_per_hour, hours=args.hours, mean_shots=shots)
        workload = generate(spec, qpus, seed=args.seed)
        setting = f"{jobs_per_hour} jobs/h, {shots} mean shots, 8 QPUs, {args.hours:g} h"
        print(f"{setting}, seed {args.seed}")
        print(
            f"  {'policy':<20}{'mean JCT':>10}{'p95 JCT':>10}{'fidelity':>10}{'util.':>7}"
            f"{'/bound':>8}{'wall':>7}"
        )
        for label, policy, preference in policies():
            start = time.perf_counter()
            m = simulate(workload, policy, preference, seed=args.seed).metrics()
            print(
                f"  {label:<20}{m['mean_jct_s']:>9.1f}s{m['p95_jct_s']:>9.1f}s"
                f"{m['mean_fidelity']:>10.4f}{m['mean_utilization']:>7.2f}"
                f"{m['jct_over_bound']:>7.1f}x{time.perf_counter() - start:>6.0f}s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
