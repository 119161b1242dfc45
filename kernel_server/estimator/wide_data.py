"""Runs of 17-40 qubit circuits on noisy simulated IBM devices: ground truth for wide circuits.

``fidelity_data`` can only run circuits whose noisy distribution an exact engine can compute
(up to ~12 qubits); the estimator meets wider ones. Here the circuits come from
``wide_circuits`` (ideal distribution known by construction) and their noisy runs from one of two
simulations that reach 40 qubits:

* ``twirled_stabilizer`` (Clifford families): the device noise Pauli-twirled
  (``backends.twirl``), sampled by Pauli frames (the same distribution as Aer's stabilizer method
  with that noise, ~100x faster). An approximation of the fleet's noise: :func:`twirl_check`
  measures it against the exact engine on the same families at 8-12 qubits.
* ``exact_blocks`` (non-Clifford block circuits): the compiled circuit splits into groups of
  qubits no gate connects; each group's exact noisy distribution (``aer_sim.noisy_probabilities``)
  is small, and the outcome's probability is their product. Exact, as the fleet's noise.

Each row is what ``fidelity_data`` writes for an unmitigated run (features of ``compile_for``'s
circuit, the run on the scheduled compilation of the same layout), with the ideal-distribution
columns UNKNOWN (what the estimator has for such a circuit), ``hellinger_fidelity`` from the
run's shots, and the shot-free ``exact_fidelity`` where the simulation gives one.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel_server.estimator.fidelity_data import SHOTS
from kernel_server.estimator.wide_circuits import (
    FAMILIES,
    MAX_QUBITS,
    MIN_QUBITS,
    WideCircuit,
    wide_circuit,
)

# Eagle (127 qubits) and Heron (133, 156) devices: the processors a 17-40 qubit job runs on.
BACKENDS: tuple[str, ...] = (
    "fake_sherbrooke",
    "fake_brisbane",
    "fake_kyiv",
    "fake_osaka",
    "fake_torino",
    "fake_fez",
)
CIRCUITS_PER_FAMILY = 24
DEVICES_PER_CIRCUIT = 3
# The exact engine's limit per group of connected qubits (4^12 entries, as aer_sim's).
MAX_BLOCK_QUBITS = 12

DEFAULT_DATA_PATH = (
    Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "wide_fidelity_runs.csv.gz"
)
DEFAULT_CHECK_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "twirl_check.csv"


@dataclass(frozen=True)
class WideTask:
    family: str
    size: int  # measured qubits
    seed: int
    backends: tuple[str, ...] = BACKENDS
    devices: int = DEVICES_PER_CIRCUIT

    @property
    def key(self) -> str:
        return f"{self.family}/{self.size}/{self.seed}"


def default_tasks(
    families: Sequence[str] = tuple(FAMILIES),
    circuits: int = CIRCUITS_PER_FAMILY,
    seed: int = 0,
    sizes: tuple[int, int] = (MIN_QUBITS, MAX_QUBITS),
) -> list[WideTask]:
    """``circuits`` per family, widths drawn evenly over ``sizes`` (seeded, shuffled)."""
    todo = []
    for family in families:
        rng = random.Random(f"{family}/{seed}")
        for index in range(circuits):
            width = sizes[0] + (index * (sizes[1] - sizes[0] + 1)) // circuits
            todo.append(WideTask(family, width, seed + 1000 * index + rng.randrange(1000)))
    random.Random(seed).shuffle(todo)
    return todo


def run_wide_task(task: WideTask) -> list[dict[str, Any]]:
    """Unmitigated runs of one wide circuit on ``task.devices`` devices."""
    from qiskit.quantum_info import hellinger_fidelity

    from kernel_server.backends.compile import choose_layout, transpile_mitigated
    from kernel_server.backends.devices import load_backend
    from kernel_server.estimator.features import circuit_features
    from kernel_server.estimator.fidelity import circuit_class_features, compile_for, stack_features
    from kernel_server.estimator.ideal import measured_bits, unknown_ideal_features

    wide = wide_circuit(task.family, task.size, task.seed)
    rng = random.Random(task.key)
    circuit_class = circuit_class_features(wide.circuit)
    bits = measured_bits(wide.circuit)
    rows = []
    for name in rng.sample(list(task.backends), min(task.devices, len(task.backends))):
        backend = load_backend(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # qiskit's dt-rounding notes when scheduling
            layout = choose_layout(wide.circuit, backend)
            transpiled = compile_for(wide.circuit, backend, layout)
            scheduled = transpile_mitigated(wide.circuit, backend, layout)
        shots = rng.choice(SHOTS)
        features = circuit_features(transpiled, backend.target, shots=shots)
        run_seed = rng.randrange(2**31)
        start = time.perf_counter()
        counts, exact, method = noisy_run(wide, backend, scheduled, shots, run_seed)
        rows.append(
            {
                "family": task.family,
                "size": task.size,
                "task_seed": task.seed,
                "backend": name,
                "stack": "none",
                **features.to_dict(),
                **unknown_ideal_features(bits),
                **stack_features("none", wide.circuit),
                **circuit_class,
                "numerical_fidelity": features.fidelity,
                "hellinger_fidelity": float(hellinger_fidelity(counts, wide.ideal)),
                "exact_fidelity": exact if np.isfinite(exact) else "",
                "ground_truth": method,
                "run_seconds": time.perf_counter() - start,
            }
        )
    return rows


def noisy_run(
    wide: WideCircuit, backend: Any, scheduled: Any, shots: int, seed: int
) -> tuple[dict[str, int], float, str]:
    """(counts, shot-free fidelity or NaN, simulation) of one run of a compiled wide circuit."""
    if wide.kind == "clifford":
        from kernel_server.backends.twirl import sample_twirled

        return sample_twirled(backend, scheduled, shots, seed), float("nan"), "twirled_stabilizer"
    (outcome,) = wide.ideal  # block circuits have one ideal outcome
    success = block_success_probability(backend, scheduled, outcome)
    hits = int(np.random.default_rng(seed).binomial(shots, success))
    # Only the ideal outcome's count enters the Hellinger fidelity to a one-outcome ideal.
    other = "1" + outcome[1:] if outcome[0] == "0" else "0" + outcome[1:]
    counts = {outcome: hits, other: shots - hits} if hits < shots else {outcome: hits}
    return counts, success, "exact_blocks"


def connected_groups(transpiled: Any) -> list[list[int]]:
    """Physical qubits of the circuit in groups no multi-qubit instruction connects."""
    index = {bit: i for i, bit in enumerate(transpiled.qubits)}
    parent: dict[int, int] = {}

    def root(q: int) -> int:
        while parent.setdefault(q, q) != q:
            q = parent[q]
        return q

    for instruction in transpiled.data:
        if instruction.operation.name in ("barrier", "delay"):
            continue
        qargs = [index[q] for q in instruction.qubits]
        for q in qargs[1:]:
            parent[root(q)] = root(qargs[0])
        root(qargs[0])
    groups: dict[int, list[int]] = {}
    for q in parent:
        groups.setdefault(root(q), []).append(q)
    return sorted(sorted(g) for g in groups.values())


def block_success_probability(backend: Any, transpiled: Any, outcome: str) -> float:
    """Exact probability of ``outcome`` (a one-register count key) under the device noise, as
    the product over :func:`connected_groups` of each group's exact probability of its bits."""
    from qiskit import ClassicalRegister, QuantumCircuit

    from kernel_server.backends.aer_sim import noisy_probabilities

    clbit_index = {bit: i for i, bit in enumerate(transpiled.clbits)}
    wanted = outcome[::-1]  # wanted[i] is clbit i's ideal value
    probability = 1.0
    for group in connected_groups(transpiled):
        if len(group) > MAX_BLOCK_QUBITS:
            raise ValueError(f"a group of {len(group)} connected qubits is too wide to be exact")
        members = {transpiled.qubits[q] for q in group}
        part = QuantumCircuit(list(transpiled.qubits))
        measured: list[int] = []
        for instruction in transpiled.data:
            if instruction.operation.name == "measure" and instruction.qubits[0] in members:
                measured.append(clbit_index[instruction.clbits[0]])
        if not measured:
            continue
        creg = ClassicalRegister(len(measured), "m")
        part.add_register(creg)
        slot = {c: creg[j] for j, c in enumerate(measured)}
        for instruction in transpiled.data:
            if instruction.operation.name == "barrier" or not members.issuperset(
                instruction.qubits
            ):
                continue
            clbits = [slot[clbit_index[c]] for c in instruction.clbits]
            part.append(instruction.operation, instruction.qubits, clbits)
        key = "".join(wanted[c] for c in reversed(measured))
        probability *= noisy_probabilities(backend, part).get(key, 0.0)
    return probability


def generate(
    out: str | Path = DEFAULT_DATA_PATH,
    todo: Sequence[WideTask] | None = None,
    workers: int = 1,
    resume: bool = False,
    log: Any = print,
) -> Path:
    """Run ``todo`` (default :func:`default_tasks`) into the CSV ``out`` (see
    ``fidelity_data.generate``: appended as tasks finish, ``resume`` goes on from them)."""
    from kernel_server.estimator import fidelity_data

    tasks = default_tasks() if todo is None else list(todo)
    return fidelity_data.generate(out, tasks, workers, resume, log, runner=run_wide_task)


# --------------------------------------------------------------------------------------------
# How far the twirl is from the fleet's noise
# --------------------------------------------------------------------------------------------

CHECK_SIZES: tuple[int, ...] = (8, 10, 12)
CHECK_BACKENDS: tuple[str, ...] = ("fake_sherbrooke", "fake_torino")
CHECK_SHOTS = 40_000  # Pauli-frame shots: standard error <= 0.0025 on the fidelity
CHECK_AER_SHOTS = 2_000  # Aer's stabilizer method on the same twirled noise, for comparison


def check_one(family: str, size: int, seed: int, backend_name: str) -> dict[str, Any]:
    """Exact vs twirled fidelity of one Clifford circuit small enough for the exact engine."""
    from qiskit.quantum_info import hellinger_fidelity

    from kernel_server.backends.aer_sim import noisy_probabilities
    from kernel_server.backends.compile import choose_layout, transpile_mitigated
    from kernel_server.backends.devices import load_backend
    from kernel_server.backends.twirl import run_twirled_stabilizer, sample_twirled

    wide = wide_circuit(family, size, seed)
    backend = load_backend(backend_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduled = transpile_mitigated(wide.circuit, backend, choose_layout(wide.circuit, backend))
    start = time.perf_counter()
    exact = hellinger_fidelity(noisy_probabilities(backend, scheduled), wide.ideal)
    exact_seconds = time.perf_counter() - start
    frames = sample_twirled(backend, scheduled, CHECK_SHOTS, seed)
    aer = run_twirled_stabilizer(backend, scheduled, CHECK_AER_SHOTS, seed)
    return {
        "family": family,
        "size": size,
        "task_seed": seed,
        "backend": backend_name,
        "exact_fidelity": float(exact),
        "twirled_fidelity": float(hellinger_fidelity(frames, wide.ideal)),
        "aer_stabilizer_fidelity": float(hellinger_fidelity(aer, wide.ideal)),
        "exact_seconds": exact_seconds,
    }


def _check_task(task: tuple[str, int, int, str]) -> dict[str, Any]:
    return check_one(*task)


def twirl_check(
    out: str | Path = DEFAULT_CHECK_PATH,
    families: Sequence[str] | None = None,
    sizes: Sequence[int] = CHECK_SIZES,
    backends: Sequence[str] = CHECK_BACKENDS,
    seed: int = 0,
    workers: int = 1,
) -> Path:
    """Measure the twirl on every Clifford family at ``sizes`` on ``backends``; write a CSV."""
    import csv
    import multiprocessing

    clifford = [f for f in FAMILIES if wide_circuit(f, MIN_QUBITS, 0).kind == "clifford"]
    todo = [
        (family, size, seed + size, name)
        for family in (families or clifford)
        for size in sizes
        for name in backends
    ]
    if workers > 1:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            rows = pool.map(_check_task, todo)
    else:
        rows = [_check_task(task) for task in todo]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def twirl_summary(path: str | Path = DEFAULT_CHECK_PATH) -> dict[str, Any]:
    """Mean and largest |twirled - exact| (and |Aer stabilizer - Pauli frames|) of a check."""
    import csv

    with Path(path).open() as f:
        rows = list(csv.DictReader(f))
    exact = np.array([float(r["exact_fidelity"]) for r in rows])
    twirled = np.array([float(r["twirled_fidelity"]) for r in rows])
    aer = np.array([float(r["aer_stabilizer_fidelity"]) for r in rows])
    return {
        "runs": len(rows),
        "sizes": sorted({int(r["size"]) for r in rows}),
        "families": sorted({r["family"] for r in rows}),
        "backends": sorted({r["backend"] for r in rows}),
        "mean_difference": float(np.mean(twirled - exact)),
        "mean_abs_difference": float(np.mean(np.abs(twirled - exact))),
        "max_abs_difference": float(np.max(np.abs(twirled - exact))),
        "mean_abs_aer_vs_frames": float(np.mean(np.abs(aer - twirled))),
        "rows": rows,
    }
