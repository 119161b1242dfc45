"""Qiskit's primitives on the fleet beside Aer's own, same device, same circuits, same shots.

    python benchmarks/primitives.py [--device fake_kolkata] [--repeats 5] [--vqe-iterations 100]
                                    [--skip-qaoa]

An orchestrator of its own (a temp QONDUCTOR_HOME, the default 8-QPU fleet) is started; every
primitive of ours is pinned to ``--device`` (``mode=device``, resilience level 0: no mitigation,
as Aer's primitives have none) and Aer's run on ``AerSimulator.from_backend(device)``, built
once beforehand (not timed). Both take the same ISA circuits (transpiled for the device at
optimization level 2) and observables mapped onto their layout; precision 1/64 (4096 shots per
measurement basis for ours; Aer's EstimatorV2 adds Gaussian noise of that width to exact
values).

(a) CHSH-style sweep: one Estimator PUB, 2 qubits, 21 parameter sets x 2 observables of 4 Pauli
    terms. Time per ``run(...).result()`` (median of ``--repeats`` after one warm-up; ours includes
    the orchestrator round trip), QPU jobs ours used (from the workflow), and how many of the 42
    ``evs`` agree with Aer's within 3 combined ``stds``; the same beside qiskit's
    ``BackendEstimatorV2`` on the same simulator, which measures as a QPU does (Aer's EstimatorV2
    reads values off the simulated state: its values carry no readout error), and ours with
    readout mitigation (resilience level 1) beside Aer's EstimatorV2.
(b) VQE: 6-qubit Heisenberg chain (15 Pauli terms), EfficientSU2 ansatz (reps 1, 24 parameters),
    COBYLA for ``--vqe-iterations`` energy evaluations; ours in a ``Session``. Iterations per
    second, the lowest energy each measured, and the noiseless energy at each run's best
    parameters, beside the exact ground energy.
(c) QAOA sampler sweep: 12 qubits on a ring, p=1, one Sampler PUB of 20 (gamma, beta) sets,
    4000 shots each. Time per run (Aer's: one run, minutes of simulation), and each set's
    Hellinger fidelity to Aer's distribution beside the sampling floor (Aer against Aer with
    another seed: two samples of one distribution).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

PRECISION = 1 / 64
PAULIS = ("ZZ", "ZX", "XZ", "XX")


def _time(fn: Any, repeats: int) -> tuple[float, Any]:
    fn()  # warm-up: caches, worker processes, compiled circuits
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def _isa(circuit: Any, device: Any) -> Any:
    from qiskit.transpiler import generate_preset_pass_manager

    return generate_preset_pass_manager(
        optimization_level=2, backend=device, seed_transpiler=7
    ).run(circuit)


def chsh(device: Any, qj: Any, aer_estimator: Any, simulator: Any, repeats: int) -> None:
    from qiskit import QuantumCircuit
    from qiskit.circuit import Parameter
    from qiskit.quantum_info import SparsePauliOp

    theta = Parameter("theta")
    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.ry(theta, 0)
    isa = _isa(circuit, device)
    signs = [(1, -1, 1, 1), (1, 1, -1, 1)]
    observables = [
        [SparsePauliOp.from_list(list(zip(PAULIS, s, strict=True))).apply_layout(isa.layout)]
        for s in signs
    ]
    values = np.linspace(0, 2 * np.pi, 21).reshape(-1, 1)
    pub = (isa, observables, values)
    ours = qj.Estimator(mode=device.name, options={"resilience_level": 0})
    jobs: list[Any] = []

    def run_ours() -> Any:
        job = ours.run([pub], precision=PRECISION)
        jobs.append(job)
        return job.result()[0]

    t_ours, mine = _time(run_ours, repeats)
    t_aer, theirs = _time(
        lambda: aer_estimator.run([pub], precision=PRECISION).result()[0], repeats
    )
    from qiskit.primitives import BackendEstimatorV2

    # What the same device gives when it is measured (readout error and basis rotations): qiskit's
    # estimator over the same AerSimulator.from_backend. Aer's EstimatorV2 reads expectation
    # values off the simulated state, so readout error never enters its values.
    measured = BackendEstimatorV2(backend=simulator, options={"seed_simulator": 3})
    t_measured, by_shots = _time(
        lambda: measured.run([pub], precision=PRECISION).result()[0], max(1, repeats // 2)
    )
    info = qj.workflow_info(jobs[-1].job_id())
    qpu_jobs = [j for s in info.steps for j in s.qpu_jobs]
    print(f"(a) CHSH sweep on {device.name}: 1 PUB, 21 parameter sets x 2 observables (4 terms)")
    print(
        f"    time per run     ours {t_ours:7.3f} s   Aer EstimatorV2 {t_aer:7.3f} s   "
        f"ratio {t_ours / t_aer:5.2f}x (target <= 1.5x)   [BackendEstimatorV2 on the same "
        f"simulator {t_measured:.3f} s]"
    )
    print(
        f"    QPU jobs         ours {len(qpu_jobs)} (target 1), {qpu_jobs[0].num_circuits} "
        f"circuits in it ({len(mine.data.evs.ravel())} evs from 4 bases x 21 rows)"
    )
    for label, other in (("Aer EstimatorV2", theirs), ("BackendEstimatorV2", by_shots)):
        combined = np.sqrt(mine.data.stds**2 + other.data.stds**2)
        gaps = np.abs(mine.data.evs - other.data.evs) / combined
        print(
            f"    agreement with {label:18s} {int(np.sum(gaps <= 3))}/{gaps.size} evs within 3 "
            f"combined stds (largest gap {float(gaps.max()):.2f}; mean |difference| "
            f"{float(np.mean(np.abs(mine.data.evs - other.data.evs))):.4f})"
        )
    # Readout error is what separates ours from Aer's EstimatorV2: with readout mitigation
    # (resilience level 1, REM) ours should land on Aer's values.
    mitigated = qj.Estimator(mode=device.name, options={"resilience_level": 1})
    t_rem, rem = _time(lambda: mitigated.run([pub], precision=PRECISION).result()[0], repeats)
    gaps = np.abs(rem.data.evs - theirs.data.evs) / np.sqrt(rem.data.stds**2 + theirs.data.stds**2)
    print(
        f"    ours with resilience_level 1 (REM): {t_rem:.3f} s per run, "
        f"{t_rem / t_aer:.2f}x Aer's (target <= 1.5x); agreement with Aer "
        f"EstimatorV2 {int(np.sum(gaps <= 3))}/{gaps.size} within 3 combined stds (largest gap "
        f"{float(gaps.max()):.2f}; mean |difference| "
        f"{float(np.mean(np.abs(rem.data.evs - theirs.data.evs))):.4f})"
    )
    print(
        f"    mean std         ours {mine.data.stds.mean():.4f}   Aer EstimatorV2 "
        f"{theirs.data.stds.mean():.4f} (the precision asked)   BackendEstimatorV2 "
        f"{by_shots.data.stds.mean():.4f}"
    )


def _heisenberg(n: int) -> Any:
    from qiskit.quantum_info import SparsePauliOp

    terms = []
    for i in range(n - 1):
        for pauli in "XYZ":
            label = ["I"] * n
            label[n - 1 - i] = label[n - 2 - i] = pauli
            terms.append(("".join(label), 1.0))
    return SparsePauliOp.from_list(terms)


@dataclass
class _Optimisation:
    rate: float  # energy evaluations per second
    lowest: float  # the lowest energy measured
    evaluations: int
    noiseless: float  # the exact energy at the parameters of the lowest measured one
    mean_std: float  # the estimator's mean standard error


def _optimise(
    estimator: Any, isa: Any, observable: Any, ansatz: Any, hamiltonian: Any, x0: Any, **run: Any
) -> _Optimisation:
    from qiskit.quantum_info import Statevector
    from scipy.optimize import minimize

    energies: list[float] = []
    stds: list[float] = []
    points: list[np.ndarray] = []
    iterations = run.pop("iterations")

    def energy(x: np.ndarray) -> float:
        points.append(np.array(x))
        data = estimator.run([(isa, observable, x)], **run).result()[0].data
        energies.append(float(data.evs))
        stds.append(float(data.stds))
        return energies[-1]

    start = time.perf_counter()
    minimize(energy, x0, method="COBYLA", options={"maxiter": iterations, "rhobeg": 0.4})
    seconds = time.perf_counter() - start
    best = points[int(np.argmin(energies))]
    noiseless = Statevector(ansatz.assign_parameters(best)).expectation_value(hamiltonian)
    return _Optimisation(
        len(energies) / seconds,
        min(energies),
        len(energies),
        float(np.real(noiseless)),
        float(np.mean(stds)),
    )


def vqe(device: Any, qj: Any, aer_estimator: Any, iterations: int) -> None:
    from qiskit.circuit.library import efficient_su2

    hamiltonian = _heisenberg(6)
    ansatz = efficient_su2(6, reps=1)
    isa = _isa(ansatz, device)
    observable = hamiltonian.apply_layout(isa.layout)
    x0 = np.random.default_rng(11).uniform(-0.3, 0.3, ansatz.num_parameters)
    exact = float(np.linalg.eigvalsh(hamiltonian.to_matrix())[0])
    problem = (isa, observable, ansatz, hamiltonian, x0)
    with qj.Session(backend=device.name) as session:
        ours = qj.Estimator(mode=session, options={"resilience_level": 0})
        mine = _optimise(ours, *problem, precision=PRECISION, iterations=iterations)
    aer = _optimise(aer_estimator, *problem, precision=PRECISION, iterations=iterations)
    # Aer's precision is the width of the noise it adds to the whole observable; 4096 shots per
    # basis give a 15-term energy a standard error several times larger. The same optimisation
    # with Aer's noise as wide as ours compares the optimisers' progress fairly.
    equal = _optimise(aer_estimator, *problem, precision=mine.mean_std, iterations=iterations)
    print(
        f"(b) VQE on {device.name}: 6-qubit Heisenberg chain ({len(hamiltonian)} terms), "
        f"EfficientSU2 reps 1 ({ansatz.num_parameters} parameters), COBYLA"
    )
    print(
        f"    iterations/s     ours (Session) {mine.rate:6.1f}   Aer EstimatorV2 {aer.rate:6.1f}"
        f"   ratio {mine.rate / aer.rate:5.2f}x (target >= 1)"
        f"   [{mine.evaluations} / {aer.evaluations} evaluations]"
    )
    print(f"    exact ground energy {exact:7.3f}; per run: lowest measured energy / noiseless")
    print("    energy at its parameters / mean standard error of an evaluation")
    for label, run in (
        ("ours (4096 shots per basis)", mine),
        (f"Aer, precision {PRECISION:.4f}", aer),
        (f"Aer, precision {mine.mean_std:.4f} (ours)", equal),
    ):
        print(f"      {label:34s} {run.lowest:7.3f} / {run.noiseless:7.3f} / {run.mean_std:.4f}")


def _qaoa_ring(n: int) -> Any:
    from qiskit import QuantumCircuit
    from qiskit.circuit import Parameter

    gamma, beta = Parameter("gamma"), Parameter("beta")
    circuit = QuantumCircuit(n)
    circuit.h(range(n))
    for i in range(n):
        circuit.rzz(2 * gamma, i, (i + 1) % n)
    circuit.rx(2 * beta, range(n))
    circuit.measure_all()
    return circuit


def _hellinger(a: dict[str, int], b: dict[str, int]) -> float:
    from qiskit.quantum_info import hellinger_fidelity

    return float(hellinger_fidelity(a, b))


def qaoa(device: Any, qj: Any, simulator: Any, repeats: int) -> None:
    from qiskit_aer.primitives import SamplerV2

    isa = _isa(_qaoa_ring(12), device)
    grid = np.array([(g, b) for g in np.linspace(0.2, 1.0, 5) for b in np.linspace(0.2, 0.8, 4)])
    values = grid[:, [1, 0]]  # circuit.parameters is (beta, gamma)
    pub = (isa, values)
    ours = qj.Sampler(mode=device.name, options={"resilience_level": 0})
    # Seeds far apart: Aer seeds shot i with seed + i, so seeds 1 and 2 share 3999 of 4000 shots.
    aer = SamplerV2.from_backend(simulator, seed=1)
    aer_other = SamplerV2.from_backend(simulator, seed=1_000_003)
    t_ours, mine = _time(lambda: ours.run([pub], shots=4000).result()[0], repeats)
    start = time.perf_counter()  # one run: its simulation dominates (minutes), nothing to warm
    theirs = aer.run([pub], shots=4000).result()[0]
    t_aer = time.perf_counter() - start
    floor_run = aer_other.run([pub], shots=4000).result()[0]
    reference = [theirs.data.meas.get_counts(i) for i in range(20)]
    to_aer = [_hellinger(mine.data.meas.get_counts(i), reference[i]) for i in range(20)]
    floor = [_hellinger(floor_run.data.meas.get_counts(i), reference[i]) for i in range(20)]
    print(f"(c) QAOA sampler sweep on {device.name}: 12-qubit ring, p=1, 20 sets, 4000 shots")
    print(
        f"    time per run     ours {t_ours:7.3f} s   Aer SamplerV2 {t_aer:7.3f} s   "
        f"ratio {t_ours / t_aer:.4f}x (Aer takes {t_aer / t_ours:.0f}x ours)"
    )
    print(
        f"    Hellinger to Aer ours min {min(to_aer):.3f} median {statistics.median(to_aer):.3f}"
        f"   floor (Aer vs Aer, other seed) min {min(floor):.3f}"
        f" median {statistics.median(floor):.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="fake_kolkata")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vqe-iterations", type=int, default=100)
    parser.add_argument("--skip-qaoa", action="store_true")
    parser.add_argument("--cases", default="a,b,c", help="which of (a), (b), (c) to run")
    args = parser.parse_args(argv)
    home = tempfile.mkdtemp(prefix="qonductor-bench-primitives-")
    os.environ["QONDUCTOR_HOME"] = home
    from qiskit_aer import AerSimulator
    from qiskit_aer.primitives import EstimatorV2

    import qonductor_jupyter as qj
    from kernel_server.backends.devices import load_backend
    from qonductor_jupyter.client import start_server, stop_server

    start_server()
    try:
        device = qj.backend(args.device)
        fake = load_backend(args.device)  # the very device object the fleet runs
        simulator = AerSimulator.from_backend(fake)
        aer_estimator = EstimatorV2.from_backend(
            simulator, options={"default_precision": PRECISION}
        )
        print(
            f"device {args.device} ({device.num_qubits} qubits); ours pinned to it, Aer on "
            f"AerSimulator.from_backend; precision {PRECISION} (4096 shots per basis)\n"
        )
        cases = set(args.cases.split(",")) - ({"c"} if args.skip_qaoa else set())
        if "a" in cases:
            chsh(device, qj, aer_estimator, simulator, args.repeats)
            print()
        if "b" in cases:
            vqe(device, qj, aer_estimator, args.vqe_iterations)
            print()
        if "c" in cases:
            qaoa(device, qj, simulator, args.repeats)
    finally:
        stop_server()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
