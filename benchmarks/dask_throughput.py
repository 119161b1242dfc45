"""Throughput of simulated-QPU jobs: the embedded local process pool vs a 2-worker Dask cluster.

    python benchmarks/dask_throughput.py [--jobs 200] [--qubits 3] [--shots 200] [--fleet small]

Both sides run the same orchestrator code on the same fleet; only where the noisy Aer executions
(and the workflows' classical steps) run differs: the local pool (2 QPU worker processes) or a
``distributed.LocalCluster`` (2 worker processes, 1 thread each, loopback). Every job is its own
``%%qonductor``-style workflow with one ``sample()`` call, all submitted at once; the clock runs
from the first submission to the last result. Prints one table with jobs per second and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

CELL = """\
from qiskit import QuantumCircuit
c = QuantumCircuit({n})
c.h(0)
for q in range({n} - 1):
    c.cx(q, q + 1)
c.measure_all()
counts = sample(c, shots={shots})
"""


def run_side(label: str, jobs: int, cell: str, cluster: str | None) -> dict[str, float]:
    """Start an orchestrator in a fresh home, push ``jobs`` workflows through it, stop it."""
    from qonductor_jupyter import api
    from qonductor_jupyter import client as client_module

    os.environ["QONDUCTOR_HOME"] = tempfile.mkdtemp(prefix=f"qonductor-bench-{label}-")
    client_module._default = None
    info = client_module.start_server(cluster=cluster)
    client_module._default = client_module.Client(info=info)
    try:
        # One warm-up job: worker imports and device loading are not throughput.
        warm, _ = api.submit_cell(cell, {})
        api.wait(warm, 300)
        t0 = time.perf_counter()
        ids = [api.submit_cell(cell, {})[0] for _ in range(jobs)]
        submitted = time.perf_counter() - t0
        states = [api.wait(i, 1800).state for i in ids]
        wall = time.perf_counter() - t0
        workers = {
            j.worker for i in ids[:20] for s in api.workflow_info(i).steps for j in s.qpu_jobs
        }
    finally:
        client_module.stop_server()
        client_module._default = None
    done = states.count("done")
    return {
        "done": done,
        "wall_s": wall,
        "submit_s": submitted,
        "jobs_per_s": done / wall,
        "workers": len(workers),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--qubits", type=int, default=3)
    parser.add_argument("--shots", type=int, default=200)
    parser.add_argument("--fleet", default="small")
    args = parser.parse_args()
    os.environ["QONDUCTOR_FLEET"] = args.fleet
    from distributed import LocalCluster

    cell = CELL.format(n=args.qubits, shots=args.shots)
    local = run_side("local", args.jobs, cell, None)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        dask = run_side("dask", args.jobs, cell, cluster.scheduler_address)
    print(
        f"{args.jobs} simulated-QPU jobs ({args.qubits}-qubit GHZ, {args.shots} shots, "
        f"fleet {args.fleet}), each its own workflow, submitted at once; {os.cpu_count()} cores"
    )
    print(f"{'executor':<34}{'done':>6}{'wall s':>9}{'jobs/s':>9}{'workers seen':>14}")
    for name, r in (("local process pool (2 workers)", local), ("Dask LocalCluster (2x1)", dask)):
        print(
            f"{name:<34}{r['done']:>6}{r['wall_s']:>9.1f}{r['jobs_per_s']:>9.2f}{r['workers']:>14}"
        )
    print(f"Dask / local throughput: {dask['jobs_per_s'] / local['jobs_per_s']:.2f}x")
    return 0 if local["done"] == dask["done"] == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
