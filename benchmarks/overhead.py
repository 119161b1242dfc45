"""Overhead of running a cell through %%qonductor versus running its circuit directly on Aer.

    python benchmarks/overhead.py [--repeats 5] [--fleet default] [--qubits 5] [--shots 4000]

Both sides run the same 5-qubit GHZ with 4000 shots with the noise of the same device (the QPU the
orchestrator chose). The direct side is what a user writes without Qonductor: transpile for the
device, then ``AerSimulator.from_backend(device).run(...)`` (the simulator built once, outside the
timing, and a second figure that includes building it). The Qonductor side is the whole cell: split,
ship, estimate on every QPU of the fleet, place, queue, execute, return the variables.
Prints one table; ratios because this machine is noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

CELL = """\
from qiskit import QuantumCircuit
ghz = QuantumCircuit({n})
ghz.h(0)
for q in range({n} - 1):
    ghz.cx(q, q + 1)
ghz.measure_all()
counts = sample(ghz)
p = (counts.get("0" * {n}, 0) + counts.get("1" * {n}, 0)) / sum(counts.values())
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fleet", default="default")
    parser.add_argument("--qubits", type=int, default=5)
    parser.add_argument("--shots", type=int, default=4000)
    args = parser.parse_args()

    os.environ.setdefault("QONDUCTOR_HOME", tempfile.mkdtemp(prefix="qonductor-bench-"))
    os.environ["QONDUCTOR_FLEET"] = args.fleet

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from qonductor_jupyter import api
    from qonductor_jupyter.client import start_server, stop_server

    t0 = time.perf_counter()
    start_server()
    startup = time.perf_counter() - t0
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "qonductor_jupyter")
    cell = CELL.format(n=args.qubits)

    def qonductor_run() -> tuple[float, dict]:
        t = time.perf_counter()
        with capture_output():  # the per-cell report would drown the table
            result = shell.run_cell(f"%%qonductor --shots {args.shots}\n{cell}", silent=True)
        elapsed = time.perf_counter() - t
        if result.error_in_exec is not None:
            raise SystemExit(f"qonductor run failed: {result.error_in_exec}")
        info = api.workflow_info(api.list_workflows(limit=1)[0]["id"])
        return elapsed, info.steps

    # Warm-up: first use pays for worker imports and device loading (reported separately).
    t = time.perf_counter()
    _, steps = qonductor_run()
    first = time.perf_counter() - t
    q_times, q_exec, q_queue = [], [], []
    chosen = None
    for _ in range(args.repeats):
        elapsed, steps = qonductor_run()
        job = next(j for s in steps for j in s["qpu_jobs"])
        chosen = job["qpu"]
        q_times.append(elapsed)
        q_exec.append(job["run_s"])
        q_queue.append(job["queue_s"])

    from qiskit import QuantumCircuit, transpile
    from qiskit_aer import AerSimulator

    from kernel_server.workers.devices import load_backend

    backend = load_backend(chosen)
    qc = QuantumCircuit(args.qubits)
    qc.h(0)
    for q in range(args.qubits - 1):
        qc.cx(q, q + 1)
    qc.measure_all()
    t = time.perf_counter()
    sim = AerSimulator.from_backend(backend)
    build = time.perf_counter() - t
    d_times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        tqc = transpile(qc, backend, optimization_level=2)
        sim.run(tqc, shots=args.shots).result().get_counts()
        d_times.append(time.perf_counter() - t)
    # The same fast execution path called in-process, without the orchestrator: what remains of
    # the %%qonductor time beyond this is orchestration (split, ship, estimate on every QPU, queue).
    from kernel_server.estimator.numerical import transpile_for
    from kernel_server.workers.aer_sim import run_noisy

    run_noisy(backend, transpile_for(qc, backend), args.shots)  # build the noise cache once
    f_times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        run_noisy(backend, transpile_for(qc, backend), args.shots)
        f_times.append(time.perf_counter() - t)
    stop_server()

    q_mean, d_mean = statistics.mean(q_times), statistics.mean(d_times)
    print(
        f"{args.qubits}-qubit GHZ, {args.shots} shots, {args.repeats} repeats, fleet "
        f"'{args.fleet}', chosen QPU {chosen}"
    )
    print(f"{'':44s}{'mean s':>9s}{'stdev':>8s}")
    rows = [
        ("direct: transpile + from_backend run", d_times),
        ("direct: transpile + fast path, in-process", f_times),
        ("%%qonductor cell, end to end", q_times),
        ("  of which QPU execution (fast Aer path)", q_exec),
        ("  of which QPU queue", q_queue),
    ]
    for label, values in rows:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{label:44s}{statistics.mean(values):9.3f}{sd:8.3f}")
    print(f"{'direct incl. building from_backend once':44s}{d_mean + build:9.3f}")
    print(f"ratio qonductor / direct:              {q_mean / d_mean:6.2f}x")
    print(f"ratio qonductor / direct incl. build:  {q_mean / (d_mean + build):6.2f}x")
    f_mean = statistics.mean(f_times)
    print(f"fixed cost beyond direct (qonductor - direct): {q_mean - d_mean:+.3f} s")
    print(f"orchestration cost (qonductor - in-process fast path): {q_mean - f_mean:+.3f} s")
    print(f"orchestrator start: {startup:.1f} s; first cell (workers warming): {first:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
