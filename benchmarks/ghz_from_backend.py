"""Fast noisy path against ``AerSimulator.from_backend``: time per job and Hellinger fidelity.

    python benchmarks/ghz_from_backend.py [--seeds 5] [--backend fake_sherbrooke] [--qubits 12]
                                         [--shots 4000] [--falcon fake_kolkata] [--aer-methods]

For each device: a GHZ circuit transpiled once (``transpile_for``), then per seed one job on each
path. "build" is the one-time cost per device and calibration: ``from_backend`` for the
reference, a cold 1-shot ``run_noisy`` (compaction, noise of the active qubits, superoperators)
for the fast path. Fidelity is Hellinger against the ideal distribution.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from qiskit.quantum_info import hellinger_fidelity

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from noisy_execution import ghz  # noqa: E402  (the real-size benchmark's set)

from kernel_server.backends import aer_sim  # noqa: E402
from kernel_server.backends.compile import transpile_for  # noqa: E402
from kernel_server.backends.devices import family_of, load_backend  # noqa: E402
from kernel_server.estimator.numerical import numerical_estimate  # noqa: E402


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _row(label: str, reference: float, fast: float) -> None:
    print(f"{label:28}{reference:14.4f}{fast:14.4f}{reference / fast:11.1f}x")


def bench_device(
    name: str, num_qubits: int, shots: int, seeds: int, aer_methods: bool = False
) -> None:
    backend = load_backend(name)
    circuit = ghz(num_qubits)
    transpiled = transpile_for(circuit, backend, seed=0)
    ideal = aer_sim.ideal_probabilities(transpiled)
    estimate = numerical_estimate(circuit, backend, seed=0)
    aer_sim.clear_caches()

    start = time.perf_counter()
    aer_sim.reference_simulator(backend)
    ref_build = time.perf_counter() - start
    start = time.perf_counter()
    method = aer_sim.run_noisy_detailed(backend, transpiled, 1, seed=0).method
    fast_build = time.perf_counter() - start

    ref_times, fast_times, ref_fids, fast_fids = [], [], [], []
    for seed in range(seeds):
        start = time.perf_counter()
        counts = aer_sim.run_reference(backend, transpiled, shots, seed=seed)
        ref_times.append(time.perf_counter() - start)
        ref_fids.append(hellinger_fidelity(counts, ideal))
        start = time.perf_counter()
        counts = aer_sim.run_noisy(backend, transpiled, shots, seed=seed)
        fast_times.append(time.perf_counter() - start)
        fast_fids.append(hellinger_fidelity(counts, ideal))
    exact = hellinger_fidelity(aer_sim.noisy_probabilities(backend, transpiled), ideal)

    ref_run, fast_run = statistics.fmean(ref_times), statistics.fmean(fast_times)
    ref_fid, ref_sd = _mean_std(ref_fids)
    fast_fid, fast_sd = _mean_std(fast_fids)
    layout = estimate.layout
    print(
        f"\n== {name} ({family_of(backend)}, {backend.num_qubits}q): GHZ-{num_qubits}, "
        f"{shots} shots, {seeds} seeds; fast method: {method}"
    )
    print(f"   layout {layout}, {estimate.two_qubit_gates} two-qubit gates, depth {estimate.depth}")
    print(f"{'':28}{'from_backend':>14}{'fast path':>14}{'speed-up':>12}")
    _row("build (once) [s]", ref_build, fast_build)
    _row("run per job [s]", ref_run, fast_run)
    _row("first job, build incl. [s]", ref_build + ref_run, fast_build + fast_run)
    _row(f"all {seeds} jobs + build [s]", ref_build + sum(ref_times), fast_build + sum(fast_times))
    print(
        f"{'Hellinger fidelity':28}{ref_fid:8.4f}±{ref_sd:.4f}{fast_fid:8.4f}±{fast_sd:.4f}"
        f"   diff {fast_fid - ref_fid:+.4f}"
    )
    print(
        f"{'':28}exact noisy distribution {exact:.4f}; numerical estimate {estimate.fidelity:.4f}"
    )
    if aer_methods:
        # The same compact circuit and noise through Aer's own methods (one job each).
        for method in ("density_matrix", "statevector"):
            run = aer_sim.run_noisy_detailed(backend, transpiled, shots, seed=0, method=method)
            fidelity = hellinger_fidelity(run.counts, ideal)
            label = f"compact + Aer {method} [s]"
            print(f"{label:28}{'':14}{run.seconds:14.3f}   fidelity {fidelity:.4f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--backend", default="fake_sherbrooke")
    parser.add_argument("--qubits", type=int, default=12)
    parser.add_argument("--shots", type=int, default=4000)
    parser.add_argument("--falcon", default="fake_kolkata", help="second device ('' to skip)")
    parser.add_argument(
        "--aer-methods", action="store_true", help="also time Aer's methods on the compact circuit"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    bench_device(args.backend, args.qubits, args.shots, args.seeds, args.aer_methods)
    if args.falcon:
        bench_device(args.falcon, args.qubits, args.shots, args.seeds, args.aer_methods)
    print(f"\ntotal wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
