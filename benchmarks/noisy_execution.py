"""Noisy execution of real-size circuits: the chosen method against Aer's reference, per job.

    python benchmarks/noisy_execution.py [--shots 4000] [--budget 15] [--devices a,b|default]
                                         [--circuits ghz12,qft16,...] [--quick] [--refresh]
                                         [--ours-only]

The reference runs of each case are cached in ``benchmarks/.reference_cache/`` (keyed by device
and calibration, circuit content, shots, budget and seeds): after the first run (over an hour)
a run costs our side only; ``--refresh`` recomputes them. ``--ours-only`` skips the references
(time, method and peak memory of ours), e.g. over every device of the default fleet.

Every circuit of the set (the issue's named circuits, GHZ-12 and MQT Bench circuits of 13-24
qubits) on an Eagle (fake_sherbrooke) and a Heron (fake_torino), transpiled once with
``transpile_for``. Per case:

* **ours**: ``run_noisy_detailed`` (method chosen by the machine-measured cost model) on a job of
  ``--shots`` shots, after one small warm-up job (noise and simulators built; the build is a
  one-time cost per device, qubits and calibration).
* **reference**: ``AerSimulator.from_backend`` on the full-width circuit. Its time per job is
  measured at two small shot counts and projected linearly to ``--shots``; where that projection
  passes 10 minutes, the reference is Aer's best method on the same noise instead (noisy
  trajectories with statevector or MPS on the compact circuit, projected the same way), named in
  the table. The ratio is reference time over ours.
* **agreement**: two reference runs with different seeds give the sampling floor (Hellinger
  fidelity between them); ours is compared with the first. A reference run gets as many shots as
  ``--budget`` seconds buy (at most ``--shots``), and ours is subsampled to the same count. On
  16-24 spread-out qubits a few thousand shots rarely repeat an outcome, so the full-distribution
  fidelity is near 0 for both; the table also gives it on the lowest 6 classical bits (64
  outcomes), which does resolve, and against the exact noisy distribution where the numpy engine
  can compute it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.quantum_info import hellinger_fidelity
from qiskit_aer import AerSimulator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel_server.backends import aer_sim  # noqa: E402
from kernel_server.backends.compile import transpile_for  # noqa: E402
from kernel_server.backends.cost_model import machine_rates  # noqa: E402
from kernel_server.backends.devices import DEFAULT_FLEET, family_of, load_backend  # noqa: E402
from kernel_server.backends.guard import resident_bytes  # noqa: E402
from kernel_server.backends.work import mps_bonds, mps_order  # noqa: E402

FROM_BACKEND_LIMIT_S = 600.0
# Widest circuit (active qubits after routing) a statevector reference is tried on. Aer's
# statevector trajectories cost about 0.7 s a shot at 20 qubits here (from_backend on
# fake_torino), doubling with each qubit: mqt_graphstate20 routed on fake_sherbrooke touches 28
# qubits (a 4 GB state), where four shots did not finish in 4 minutes and the 100 shots the
# agreement needs would take hours.
REFERENCE_MAX_STATEVECTOR_QUBITS = 27
# Aer's MPS on a circuit of high entanglement can spend minutes on one shot: only offered where
# the bond bound stays moderate (one shot of a 16-qubit random circuit took 114 s).
REFERENCE_MAX_MPS_BOND = 64
MARGINAL_BITS = 6


# --------------------------------------------------------------------------------------------
# The benchmark set
# --------------------------------------------------------------------------------------------


def ghz(n: int) -> QuantumCircuit:
    qc = QuantumCircuit(n, name=f"ghz{n}")
    qc.h(0)
    for q in range(n - 1):
        qc.cx(q, q + 1)
    qc.measure_all()
    return qc


def qaoa_ring(n: int) -> QuantumCircuit:
    """MaxCut QAOA p=1 on an n-ring, fixed angles."""
    qc = QuantumCircuit(n, name=f"qaoa_ring{n}")
    qc.h(range(n))
    for i in range(n):
        qc.rzz(0.9, i, (i + 1) % n)
    qc.rx(0.7, range(n))
    qc.measure_all()
    return qc


def qft(n: int) -> QuantumCircuit:
    from qiskit.circuit.library import QFTGate

    qc = QuantumCircuit(n, name=f"qft{n}")
    qc.x([0, 3, 7, n - 4])  # a basis state that is not |0>
    qc.append(QFTGate(n), range(n))
    qc.measure_all()
    return qc


def random_circuit(n: int, depth: int, seed: int) -> QuantumCircuit:
    from qiskit.circuit.random import random_circuit as make

    qc = make(n, depth, max_operands=2, seed=seed)
    qc.name = f"random{n}_d{depth}"
    qc.measure_all()
    return qc


def efficient_su2(n: int, reps: int = 2) -> QuantumCircuit:
    from qiskit.circuit.library import efficient_su2 as make

    body = make(n, reps=reps, entanglement="linear")
    angles = np.random.default_rng(1).uniform(0, 2 * np.pi, body.num_parameters)
    qc = QuantumCircuit(n, name=f"efficient_su2_{n}")
    qc.compose(body.assign_parameters(angles), inplace=True)
    qc.measure_all()
    return qc


def mqt(family: str, n: int) -> QuantumCircuit:
    from kernel_server.estimator.fidelity_data import benchmark_circuit

    circuit = benchmark_circuit(family, n)
    if circuit is None:
        raise ValueError(f"MQT Bench has no {family} circuit of {n} qubits")
    circuit.name = f"mqt_{family}{n}"
    return circuit


CIRCUITS = {
    "ghz12": lambda: ghz(12),
    "random10_d10": lambda: random_circuit(10, 10, seed=3),
    "qaoa_ring16": lambda: qaoa_ring(16),
    "qft16": lambda: qft(16),
    "random16_d10": lambda: random_circuit(16, 10, seed=0),
    "qaoa_ring24": lambda: qaoa_ring(24),
    "efficient_su2_24": lambda: efficient_su2(24),
    "mqt_ae13": lambda: mqt("ae", 13),
    "mqt_qaoa14": lambda: mqt("qaoa", 14),
    "mqt_vqe_su2_16": lambda: mqt("vqe_su2", 16),
    "mqt_graphstate20": lambda: mqt("graphstate", 20),
    "mqt_wstate24": lambda: mqt("wstate", 24),
}
QUICK = ("ghz12", "random10_d10", "qaoa_ring16", "mqt_wstate24")


# --------------------------------------------------------------------------------------------
# Reference paths
# --------------------------------------------------------------------------------------------


@dataclass
class Reference:
    label: str
    run: Any  # (shots, seed) -> counts
    per_shot_s: float
    fixed_s: float
    measured_shots: int  # the largest timed run: the job's own shots, or fewer (projected)

    def projected(self, shots: int) -> float:
        return self.fixed_s + self.per_shot_s * shots


def _fit(run: Any, first: int, limit: int, seconds: float = 1.5) -> tuple[float, float, int]:
    """(fixed seconds, seconds per shot, largest shots timed).

    Shots doubled from ``first`` until a run takes ``seconds`` (or reaches ``limit``); a line
    through the last two runs.
    """
    points: list[tuple[int, float]] = []
    shots = first
    while True:
        start = time.perf_counter()
        run(shots, 1000 + shots)
        points.append((shots, time.perf_counter() - start))
        if points[-1][1] >= seconds or shots >= limit:
            break
        shots = min(2 * shots, limit)
    if len(points) == 1:
        return 0.0, points[0][1] / points[0][0], points[0][0]
    (n0, t0), (n1, t1) = points[-2:]
    per_shot = max((t1 - t0) / (n1 - n0), 0.05 * t1 / n1)
    return max(t1 - per_shot * n1, 0.0), per_shot, n1


def _spread(seed: int) -> int:
    # Aer seeds shot i with seed + i: nearby seeds would share all but a few shots.
    return int(np.random.SeedSequence(seed).generate_state(1)[0])


def references(
    backend: Any, transpiled: QuantumCircuit, compact: Any, shots: int
) -> list[Reference]:
    """from_backend first; Aer's own trajectory methods on the compact circuit where it is slow
    (``compact``: ``aer_sim.compact_circuit(transpiled)``). None where the circuit is too wide
    for a statevector and too entangled for Aer's MPS."""
    bonds = mps_bonds(compact.circuit, mps_order(compact.circuit))
    mps = ["matrix_product_state"] if max(bonds, default=1) <= REFERENCE_MAX_MPS_BOND else []
    if compact.circuit.num_qubits > REFERENCE_MAX_STATEVECTOR_QUBITS:
        return _fitted(backend, compact, mps, shots) if mps else []
    simulator = aer_sim.reference_simulator(backend)

    def from_backend(n: int, seed: int) -> dict[str, int]:
        return aer_sim.run_reference(backend, transpiled, n, seed=seed)

    fixed, per_shot, timed = _fit(from_backend, 4, shots)
    found = [Reference("from_backend", from_backend, per_shot, fixed, timed)]
    if found[0].projected(shots) <= FROM_BACKEND_LIMIT_S:
        return found
    del simulator
    return found + _fitted(backend, compact, ["statevector", *mps], shots)


def _fitted(backend: Any, compact: Any, methods: list[str], shots: int) -> list[Reference]:
    """Aer's trajectory methods on the compact circuit, each timed (``_fit``)."""
    noise = aer_sim.compact_noise(backend, compact.physical_qubits)
    found: list[Reference] = []
    for method in methods:
        aer = AerSimulator(method=method, noise_model=noise.noise_model)

        def run(n: int, seed: int, aer: AerSimulator = aer) -> dict[str, int]:
            job = aer.run(compact.circuit, shots=n, seed_simulator=_spread(seed))
            return dict(job.result().get_counts())

        fixed, per_shot, timed = _fit(run, 1, shots)
        found.append(Reference(f"Aer {method}", run, per_shot, fixed, timed))
    return found


# --------------------------------------------------------------------------------------------
# Agreement
# --------------------------------------------------------------------------------------------


def subsample(counts: dict[str, int], shots: int, rng: np.random.Generator) -> dict[str, int]:
    """``shots`` outcomes drawn without replacement from ``counts``."""
    total = sum(counts.values())
    if shots >= total:
        return dict(counts)
    keys = list(counts)
    drawn = rng.multivariate_hypergeometric([counts[k] for k in keys], shots)
    return {k: int(n) for k, n in zip(keys, drawn, strict=True) if n}


def marginal(counts: dict[str, int], bits: int = MARGINAL_BITS) -> dict[str, int]:
    """Counts of the lowest ``bits`` classical bits (the rightmost characters of the keys)."""
    out: Counter[str] = Counter()
    for key, n in counts.items():
        out[key.replace(" ", "")[-bits:]] += n
    return dict(out)


def _exact(backend: Any, transpiled: QuantumCircuit) -> dict[str, float] | None:
    try:
        return aer_sim.noisy_probabilities(backend, transpiled)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------------------------


CACHE = Path(__file__).resolve().parent / ".reference_cache"


class PeakMemory:
    """The largest resident memory this process reaches while the block runs (sampled)."""

    def __enter__(self) -> PeakMemory:
        self.base = resident_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, resident_bytes())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes())

    @property
    def gigabytes(self) -> float:
        return self.peak / 2**30


def _content_digest(circuit: QuantumCircuit) -> str:
    """The circuit's operations, their parameters and bits, and its global phase: what it runs.

    Not its QPY bytes: QPY writes a transpiled circuit's layout registers in set order, which
    changes from one compilation to the next (the same random10_d10 fingerprinted two ways in
    one process), so a reference cached under them was computed again on the next run."""
    digest = hashlib.sha256(
        f"{circuit.num_qubits}|{circuit.num_clbits}|{circuit.global_phase!r}".encode()
    )
    for item in circuit.data:
        qubits = [circuit.find_bit(q).index for q in item.qubits]
        clbits = [circuit.find_bit(c).index for c in item.clbits]
        params = [repr(p) for p in item.operation.params]
        digest.update(f"|{item.operation.name}{params}{qubits}{clbits}".encode())
    return digest.hexdigest()


def _reference_key(backend: Any, transpiled: QuantumCircuit, shots: int, budget: float) -> str:
    """What a reference is cached under: device and calibration, circuit content, shots,
    budget and the seeds of its two runs (11, 12)."""
    from kernel_server.backends.devices import calibration_id

    text = f"{calibration_id(backend)}|{_content_digest(transpiled)}|{shots}|{budget}|11,12"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cached_reference(
    backend: Any, transpiled: QuantumCircuit, shots: int, budget: float, refresh: bool
) -> dict[str, Any]:
    """The reference runs of a case: from the cache (``CACHE``), or computed and stored."""
    path = CACHE / f"{_reference_key(backend, transpiled, shots, budget)}.json"
    if path.is_file() and not refresh:
        return dict(json.loads(path.read_text()))
    compact = aer_sim.compact_circuit(transpiled)
    candidates = references(backend, transpiled, compact, shots)
    if not candidates:  # not cached: a wider machine may reach it
        width = compact.circuit.num_qubits
        why = f"{width} active qubits, Aer's MPS bond bound over {REFERENCE_MAX_MPS_BOND}"
        return {"label": None, "why": why}
    reference = min(candidates, key=lambda r: r.projected(shots))
    if candidates[0].projected(shots) <= FROM_BACKEND_LIMIT_S:
        reference = candidates[0]
    ref_shots = int(min(shots, max(100, (budget - reference.fixed_s) / reference.per_shot_s)))
    found = {
        "label": reference.label,
        "reference_s": reference.projected(shots),
        "from_backend_s": candidates[0].projected(shots),
        "ref_shots": ref_shots,
        "projected": reference.measured_shots < shots,
        "a": reference.run(ref_shots, 11),
        "b": reference.run(ref_shots, 12),
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found))
    return found


def bench_case(
    backend: Any,
    name: str,
    shots: int,
    budget: float,
    refresh: bool = False,
    ours_only: bool = False,
) -> dict[str, Any]:
    circuit = CIRCUITS[name]()
    transpiled = transpile_for(circuit, backend, seed=0)
    plan = aer_sim.plan_noisy_run(transpiled, shots, backend=backend)
    start = time.perf_counter()
    try:
        aer_sim.run_noisy_detailed(backend, transpiled, 64, seed=99)  # warm-up: noise, simulators
        with PeakMemory() as memory:
            ours = aer_sim.run_noisy_detailed(backend, transpiled, shots, seed=1)
    except aer_sim.NoisyRunTooCostly as exc:  # the guard refused it: a row that says so
        return {
            "name": name,
            "k": len(plan.physical_qubits),
            "method": "refused",
            "trajectories": None,
            "fallbacks": (str(exc),),
            "estimate": min(plan.estimated_seconds.values()),
            "ours_s": time.perf_counter() - start,
            "peak_gb": resident_bytes() / 2**30,
            "refused": True,
        }
    row = {
        "name": name,
        "k": len(ours.physical_qubits),
        "method": ours.method,
        "trajectories": ours.trajectories,
        "fallbacks": ours.fallbacks,
        "estimate": plan.estimated_seconds[ours.method],
        "ours_s": ours.seconds,
        "peak_gb": memory.gigabytes,
    }
    if ours_only:
        return row
    found = cached_reference(backend, transpiled, shots, budget, refresh)
    if found["label"] is None:
        return {**row, "reference": None, "why": found["why"]}
    ref_shots, ref_a, ref_b = found["ref_shots"], found["a"], found["b"]
    rng = np.random.default_rng(0)
    mine = subsample(ours.counts, ref_shots, rng)
    exact = _exact(backend, transpiled)
    return {
        **row,
        "reference": found["label"],
        "reference_s": found["reference_s"],
        "from_backend_s": found["from_backend_s"],
        "ref_shots": ref_shots,
        "projected": found["projected"],
        "full": (hellinger_fidelity(mine, ref_a), hellinger_fidelity(ref_b, ref_a)),
        "marginal": (
            hellinger_fidelity(marginal(mine), marginal(ref_a)),
            hellinger_fidelity(marginal(ref_b), marginal(ref_a)),
        ),
        "exact": None
        if exact is None
        else (hellinger_fidelity(ours.counts, exact), hellinger_fidelity(ref_a, exact)),
    }


def _print_header(ours_only: bool = False) -> None:
    head = f"{'circuit':18s}{'k':>3s}  {'method (traj.)':22s}{'ours s':>8s}{'est. s':>8s}{'GB':>6s}"
    if not ours_only:
        head += (
            f"  {'reference':22s}{'ref. s':>9s}{'ratio':>8s}{'shots':>6s}  "
            f"{'H full ours/floor':>18s}{'H 6-bit ours/floor':>20s}{'H exact ours/ref':>18s}"
        )
    print(head)


def _print_row(r: dict[str, Any], ours_only: bool = False) -> None:
    method = r["method"] + (f" ({r['trajectories']})" if r["trajectories"] else "")
    line = (
        f"{r['name']:18s}{r['k']:3d}  {method:22s}{r['ours_s']:8.2f}{r['estimate']:8.2f}"
        f"{r['peak_gb']:6.2f}"
    )
    if ours_only or r.get("refused"):
        pass
    elif r["reference"] is None:
        line += f"  no Aer reference within reach ({r['why']})"
    else:
        projected = "*" if r["projected"] else " "
        exact = "" if r["exact"] is None else f"{r['exact'][0]:.4f}/{r['exact'][1]:.4f}"
        ratio = r["reference_s"] / r["ours_s"]
        line += (
            f"  {r['reference']:22s}{r['reference_s']:8.0f}{projected}{ratio:7.0f}x"
            f"{r['ref_shots']:6d}  {r['full'][0]:8.4f}/{r['full'][1]:.4f}"
            f"{r['marginal'][0]:11.4f}/{r['marginal'][1]:.4f}{exact:>18s}"
        )
    print(line, flush=True)
    for reason in r["fallbacks"]:
        print(f"    guard: {reason}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shots", type=int, default=4000)
    parser.add_argument("--budget", type=float, default=15.0, help="seconds per reference run")
    parser.add_argument("--devices", default="fake_sherbrooke,fake_torino")
    parser.add_argument("--circuits", default=",".join(CIRCUITS))
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--refresh", action="store_true", help="recompute cached references")
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="our side only (time, method, peak memory): no references; with --devices default "
        "every device of the default fleet",
    )
    args = parser.parse_args(argv)
    if args.devices == "default":
        args.devices = ",".join(DEFAULT_FLEET)
    warnings.filterwarnings("ignore")
    names = list(QUICK) if args.quick else args.circuits.split(",")
    started = time.perf_counter()
    rates = machine_rates()
    print(
        f"cost model: {'measured on this machine' if rates.measured else 'built-in rates'} "
        f"({rates.fingerprint}); GPU {'yes' if rates.gpu else 'no'}; {args.shots} shots per job"
    )
    results = []
    for device in args.devices.split(","):
        backend = load_backend(device)
        print(f"\n== {device} ({family_of(backend)}, {backend.num_qubits} qubits) ==")
        _print_header(args.ours_only)
        for name in names:
            row = bench_case(backend, name, args.shots, args.budget, args.refresh, args.ours_only)
            row["device"] = device
            results.append(row)
            _print_row(row, args.ours_only)
        aer_sim.clear_caches()
    _summary(results, args.ours_only)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0


def agrees(ours: float, floor: float) -> bool:
    """Ours within the sampling floor: at most twice the floor's own infidelity.

    One pair of reference runs gives one draw of the floor; the factor 2 allows for that draw
    and for the extra variance trajectory reuse admits (at most a tenth).
    """
    return 1.0 - ours <= 2.0 * (1.0 - floor) + 1e-3


def _targets(results: list[dict[str, Any]]) -> None:
    """The issue's targets: 16-qubit circuits <= 3 s, 20-24 qubits <= 10 s, none over 60 s or
    4 GB (by the circuit's own width, not its active qubits after routing)."""
    width = {name: CIRCUITS[name]().num_qubits for name in {r["name"] for r in results}}
    sixteen = [r for r in results if width[r["name"]] == 16]
    wide = [r for r in results if 20 <= width[r["name"]] <= 24]
    slow16 = [f"{r['name']} on {r['device']}" for r in sixteen if r["ours_s"] > 3.0]
    slow_wide = [f"{r['name']} on {r['device']}" for r in wide if r["ours_s"] > 10.0]
    refused = [f"{r['name']} on {r['device']}" for r in results if r.get("refused")]
    if refused:
        print(f"refused by the guard (no method within its budget): {', '.join(refused)}")
    worst = max(results, key=lambda r: r["ours_s"])
    heaviest = max(results, key=lambda r: r["peak_gb"])
    print(
        f"targets: 16-qubit <= 3 s: {len(sixteen) - len(slow16)} of {len(sixteen)}"
        + (f" (over: {', '.join(slow16)})" if slow16 else "")
        + f"; 20-24 qubits <= 10 s: {len(wide) - len(slow_wide)} of {len(wide)}"
        + (f" (over: {', '.join(slow_wide)})" if slow_wide else "")
        + f"; slowest case {worst['ours_s']:.1f} s ({worst['name']} on {worst['device']}), "
        f"most memory {heaviest['peak_gb']:.2f} GB ({heaviest['name']} on {heaviest['device']}); "
        "none over 60 s or 4 GB: "
        + ("yes" if worst["ours_s"] <= 60 and heaviest["peak_gb"] <= 4 else "NO")
    )


def _summary(results: list[dict[str, Any]], ours_only: bool = False) -> None:
    _targets(results)
    results = [r for r in results if not r.get("refused")]
    if ours_only:
        return
    unreached = [f"{r['name']} on {r['device']}" for r in results if r["reference"] is None]
    if unreached:
        print(f"no Aer reference within reach (not counted below): {', '.join(unreached)}")
    within_3 = sum(1 for r in results if r["ours_s"] <= 3.0)
    within_10 = sum(1 for r in results if r["ours_s"] <= 10.0)
    jobs = len(results)
    results = [r for r in results if r["reference"] is not None]
    marginal_ok = sum(1 for r in results if agrees(*r["marginal"]))
    resolved = [r for r in results if r["full"][1] > 0.5]
    full_ok = sum(1 for r in resolved if agrees(*r["full"]))
    print(
        "\n* projected: the reference timed at growing shot counts and scaled to the job's shots "
        "('ratio' = reference s / ours s); its agreement runs have the shots listed."
    )
    print(
        f"agreement within the floor (1 - H ours <= 2 x (1 - H floor)): 6-bit marginal "
        f"{marginal_ok} of {len(results)}; full distribution {full_ok} of {len(resolved)} "
        f"cases where the floor resolves it (H floor > 0.5)"
    )
    print(f"jobs <= 3 s: {within_3} of {jobs}; <= 10 s: {within_10} of {jobs}")


if __name__ == "__main__":
    sys.exit(main())
