"""Training data for the fidelity model: MQT Bench circuits run on noisy simulated IBM devices.

One row per (circuit, device, mitigation stack, shots): the features the estimator will see at
plan time (the circuit compiled for the device, the stack's parameters, the
ideal distribution's summary) and the ground truth, the Hellinger fidelity of the outcome
distribution the run produced against the ideal one.

Every row runs through ``run.run_mitigated_detailed``, the empty stack included, so that a
stack's effect is measured against the same compilation: the job's circuit is laid out once
(noise-aware), every constructed circuit is transpiled at level 0 on that layout and scheduled,
and each is sampled under the device's noise (``aer_sim.run_noisy``: Aer's noise model of the
device, on the circuit's active qubits). The features describe ``fidelity.compile_for``'s
circuit, the unmitigated circuit of that compilation.
Expectation techniques (ZNE, PEC) are combined per outcome
(:meth:`MitigationStack.combine_distribution`), so every row has a distribution to compare.

Deterministic for a given seed; rows are appended to the CSV as tasks finish, so an interrupted
run keeps what it made (rerun with ``--resume`` to skip finished tasks).
"""

from __future__ import annotations

import csv
import gzip
import math
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from kernel_server.estimator.fidelity import TRAINED_STACKS

# MQT Bench families and sizes. Left out: dynamic circuits (mid-circuit measurement: dynamic_qft,
# ghz_dynamic, iqpe), qwalk (hundreds of CX at 4 qubits), fixed-size codes and Shor (sizes far
# from the small-circuit range a noisy density-matrix run can afford many times over).
FAMILIES: tuple[str, ...] = (
    "ae",
    "bmw_quark_cardinality",
    "bmw_quark_copula",
    "bv",
    "cdkm_ripple_carry_adder",
    "dj",
    "draper_qft_adder",
    "full_adder",
    "ghz",
    "graphstate",
    "grover",
    "half_adder",
    "hhl",
    "modular_adder",
    "qaoa",
    "qft",
    "qftentangled",
    "qnn",
    "qpeexact",
    "qpeinexact",
    "randomcircuit",
    "vbe_ripple_carry_adder",
    "vqe_real_amp",
    "vqe_su2",
    "vqe_two_local",
    "wstate",
)
SEEDED_FAMILIES = frozenset({"graphstate"})
SIZES: tuple[int, ...] = (3, 4, 5, 6, 7, 8, 9)

# Devices of the three processor generations, more than the fleet so the error-rate features vary.
# fake_toronto is left out: under its own noise model (ours and AerSimulator.from_backend agree) it
# loses far more than its calibrated errors say (qpeexact, 5 qubits: Hellinger 0.08 where the
# product of its gate errors gives 0.73), an outlier the features cannot explain.
BACKENDS: tuple[str, ...] = (
    "fake_kolkata",
    "fake_auckland",
    "fake_hanoi",
    "fake_mumbai",
    "fake_montreal",
    "fake_sherbrooke",
    "fake_brisbane",
    "fake_kyiv",
    "fake_osaka",
    "fake_torino",
    "fake_fez",
    "fake_prague",
)

STACKS: tuple[str, ...] = TRAINED_STACKS
SHOTS: tuple[int, ...] = (1000, 4000, 8000)

# Bounds that keep one task to seconds: noisy density-matrix cost grows 4^qubits x gates.
MAX_TWO_QUBIT_GATES = 300  # of the compiled circuit
MAX_PEC_TWO_QUBIT_GATES = 40  # of the virtual circuit: 100 sampled circuits each
MAX_STACKED_TWO_QUBIT_GATES = 150  # compiled; stacks multiply the circuits (twirl+rem+dd: 30)
DEVICES_PER_CIRCUIT = 3  # unmitigated runs
MITIGATED_DEVICES_PER_CIRCUIT = 1  # every stack on one of them


@dataclass(frozen=True)
class Task:
    family: str
    size: int
    seed: int
    stacks: tuple[str, ...] = STACKS  # run on the first device
    backends: tuple[str, ...] = BACKENDS  # devices are drawn from these
    devices: int = DEVICES_PER_CIRCUIT  # unmitigated runs on this many devices

    @property
    def key(self) -> str:
        return f"{self.family}/{self.size}/{self.seed}"


def default_tasks(
    families: Sequence[str] = FAMILIES, sizes: Sequence[int] = SIZES, seed: int = 0
) -> list[Task]:
    """What ``qonductor train fidelity --regenerate`` runs: every stack on one device per
    circuit (task seed ``seed``), and the unmitigated circuit on every device (``seed + 1``; cheap,
    and it shows the model each family under every device's noise)."""
    return tasks(families, sizes, seed) + tasks(
        families, sizes, seed + 1, stacks=("none",), devices=len(BACKENDS)
    )


def tasks(
    families: Sequence[str] = FAMILIES,
    sizes: Sequence[int] = SIZES,
    seed: int = 0,
    **options: Any,
) -> list[Task]:
    """One task per (family, size); ``options`` are ``Task`` fields (stacks, backends, devices)."""
    # Shuffled (seeded): an interrupted run then holds every family, not the first few.
    todo = [Task(f, n, seed, **options) for f in families for n in sizes]
    random.Random(seed).shuffle(todo)
    return todo


def benchmark_circuit(family: str, size: int) -> Any:
    """The MQT Bench circuit (target-independent level), measured; None if the size is invalid."""
    from mqt.bench import BenchmarkLevel, get_benchmark

    # graphstate draws a random graph unless seeded: seed it, so a row's circuit can be rebuilt.
    options: dict[str, Any] = {"seed": size} if family in SEEDED_FAMILIES else {}
    try:
        circuit = get_benchmark(family, BenchmarkLevel.INDEP, size, **options)
    except ValueError:  # the family has no circuit of that size (adders, multipliers)
        return None
    if circuit.num_qubits != size:
        return None
    if not any(ci.operation.name == "measure" for ci in circuit):
        circuit.measure_all()  # mqt.bench 2.3's qaoa comes without measurements
    return circuit


def run_task(task: Task) -> list[dict[str, Any]]:
    """All rows of one (family, size): unmitigated on a few devices, every stack on one."""
    from qiskit.quantum_info import hellinger_fidelity

    from kernel_server.backends.aer_sim import ideal_probabilities
    from kernel_server.backends.compile import choose_layout
    from kernel_server.backends.devices import load_backend
    from kernel_server.estimator.features import circuit_features
    from kernel_server.estimator.fidelity import (
        circuit_class_features,
        compile_for,
        stack_features,
    )
    from kernel_server.estimator.ideal import ideal_features, ideal_summary
    from kernel_server.estimator.mitigation.run import run_mitigated_detailed
    from kernel_server.estimator.mitigation.stack import parse_stack

    circuit = benchmark_circuit(task.family, task.size)
    if circuit is None:
        return []
    rng = random.Random(f"{task.family}/{task.size}/{task.seed}")
    ideal = ideal_summary(circuit)
    assert ideal is not None  # sizes here are far below the statevector limit
    ideal_dict = ideal_probabilities(circuit)
    circuit_class = circuit_class_features(circuit)
    chosen = rng.sample(list(task.backends), min(task.devices, len(task.backends)))
    rows: list[dict[str, Any]] = []
    for position, name in enumerate(chosen):
        backend = load_backend(name)
        # One layout for the features and every run, as the orchestrator would lay the job out.
        layout = choose_layout(circuit, backend)
        transpiled = compile_for(circuit, backend, layout)
        stacks = task.stacks if position < MITIGATED_DEVICES_PER_CIRCUIT else ("none",)
        for stack_name in stacks:
            stack = parse_stack(stack_name)
            shots = rng.choice(SHOTS)
            features = circuit_features(transpiled, backend.target, shots=shots)
            if features.two_qubit_gates > MAX_TWO_QUBIT_GATES:
                return rows
            if "pec" in stack.names and _two_qubit(circuit) > MAX_PEC_TWO_QUBIT_GATES:
                continue
            if len(stack) > 1 and features.two_qubit_gates > MAX_STACKED_TWO_QUBIT_GATES:
                continue
            run_seed = rng.randrange(2**31)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # qiskit's dt-rounding notes when scheduling
                distribution = run_mitigated_detailed(
                    circuit, backend, stack, shots, seed=run_seed, per_outcome=True, layout=layout
                ).value
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "family": task.family,
                    "size": task.size,
                    "task_seed": task.seed,
                    "backend": name,
                    "stack": stack_name,
                    **features.to_dict(),
                    **ideal_features(
                        ideal, ideal.measured_bits, features.to_dict(), transpiled, backend.target
                    ),
                    **stack_features(stack, circuit),
                    **circuit_class,
                    "numerical_fidelity": features.fidelity,
                    "hellinger_fidelity": float(hellinger_fidelity(distribution, ideal_dict)),
                    "run_seconds": seconds,
                }
            )
    return rows


def _two_qubit(circuit: Any) -> int:
    return sum(1 for ci in circuit.data if len(ci.qubits) == 2 and ci.operation.name != "barrier")


def _run_logged(
    task: Any, runner: Callable[[Any], list[dict[str, Any]]] | None = None
) -> tuple[Any, list[dict[str, Any]], str | None]:
    try:
        return task, (runner or run_task)(task), None
    except Exception as exc:  # one bad circuit must not end a long run; reported, not hidden
        return task, [], f"{type(exc).__name__}: {exc}"


def _open(path: Path, mode: str) -> IO[str]:
    """Text file, gzip-compressed when the name ends in .gz (appending adds a gzip member)."""
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", newline="")  # type: ignore[return-value]
    return path.open(mode, newline="")


def _header(path: Path) -> list[str]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    with _open(path, "r") as f:
        return next(csv.reader(f), [])


def _finished(path: Path) -> set[str]:
    if not path.exists():
        return set()
    with _open(path, "r") as f:
        return {
            f"{row['family']}/{int(float(row['size']))}/{int(float(row['task_seed']))}"
            for row in csv.DictReader(f)
        }


def generate(
    out: str | Path,
    todo: Iterable[Any] | None = None,
    workers: int = 1,
    resume: bool = False,
    log: Any = print,
    runner: Callable[[Any], list[dict[str, Any]]] | None = None,
) -> Path:
    """Run ``todo`` (default: ``default_tasks()``) and append the rows to the CSV ``out``.

    ``runner`` makes one task's rows (default :func:`run_task`; ``wide_data`` passes its own, a
    module-level function so that worker processes can receive it).

    Rows go to a plain CSV as each circuit finishes (``out`` itself, or ``out`` without its
    ``.gz`` while running: an unfinished gzip stream is unreadable), so a killed run keeps its
    rows and ``resume=True`` goes on from them. A ``.gz`` target is compressed at the end.
    """
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    work = path.with_suffix("") if path.suffix == ".gz" else path
    if resume and work != path and path.exists() and not work.exists():
        with gzip.open(path, "rb") as src, work.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    if not resume:
        for stale in {path, work}:
            stale.unlink(missing_ok=True)
    pending = list(default_tasks() if todo is None else todo)
    if resume:
        done = _finished(work)
        pending = [t for t in pending if t.key not in done]
    start = time.perf_counter()
    written = 0
    writer: csv.DictWriter | None = None
    existing = _header(work)
    with _open(work, "a") as f:
        for index, (task, rows, error) in enumerate(_map(pending, workers, runner), 1):
            if error:
                log(f"  {task.key}: skipped ({error})")
            for row in rows:
                if writer is None:
                    if existing and existing != list(row):
                        raise ValueError(
                            f"{work} holds other columns than this version writes; bring it up "
                            "to date with refresh_feature_columns() or start a new file"
                        )
                    writer = csv.DictWriter(f, fieldnames=list(row))
                    if not existing:
                        writer.writeheader()
                writer.writerow(row)
            f.flush()
            written += len(rows)
            if index % 10 == 0 or index == len(pending):
                elapsed = time.perf_counter() - start
                log(f"  {index}/{len(pending)} circuits, {written} rows, {elapsed:.0f} s")
    if work != path:
        with work.open("rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        work.unlink()
    return path


def _map(
    pending: list[Any], workers: int, runner: Callable[[Any], list[dict[str, Any]]] | None = None
) -> Iterator[tuple[Any, list[dict[str, Any]], str | None]]:
    run = partial(_run_logged, runner=runner)
    if workers <= 1:
        yield from map(run, pending)
        return
    import multiprocessing
    import os

    from kernel_server.core.lifeline import start_lifeline

    # Spawned workers: fork after Aer or BLAS threads start is unsafe. The lifeline ends them
    # when this process is killed (they would otherwise simulate on for minutes as orphans).
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(workers, initializer=start_lifeline, initargs=(os.getpid(),)) as pool:
        yield from pool.imap_unordered(run, pending)


_INTEGERS = frozenset({"size", "task_seed"})


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """The CSV's rows with numbers as floats (strings for the identifying columns)."""
    text_columns = {"family", "backend", "stack", "ground_truth"}
    with _open(Path(path), "r") as f:
        return [
            {k: (v if k in text_columns else _number(v)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def _number(text: str) -> float:
    if text == "":
        return float("nan")
    value = float(text)
    return value if math.isfinite(value) else 0.0


def refresh_feature_columns(path: str | Path, out: str | Path | None = None) -> Path:
    """Recompute every row's circuit features (``features.circuit_features``) and ideal columns.

    For when a feature's definition changes: each (circuit, device) is compiled again exactly as
    the run compiled it (deterministic) and described anew; the noisy runs, the expensive part,
    are kept. Writes ``out`` (default: ``path`` itself).
    """
    from kernel_server.backends.devices import load_backend
    from kernel_server.estimator.features import circuit_features
    from kernel_server.estimator.fidelity import circuit_class_features, compile_for
    from kernel_server.estimator.ideal import ideal_features, ideal_summary

    rows = load_rows(path)
    compiled: dict[tuple[str, int, str], Any] = {}
    summaries: dict[tuple[str, int], Any] = {}
    for row in rows:
        key = (str(row["family"]), int(row["size"]))
        circuit = benchmark_circuit(*key)
        device = (*key, str(row["backend"]))
        if device not in compiled:
            backend = load_backend(device[2])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled[device] = (compile_for(circuit, backend), backend.target)
        transpiled, target = compiled[device]
        features = circuit_features(transpiled, target, shots=int(row["shots"])).to_dict()
        row.update(features)
        if key not in summaries:
            summaries[key] = (ideal_summary(circuit), circuit_class_features(circuit))
        ideal, circuit_class = summaries[key]
        row.update(circuit_class)
        row.update(ideal_features(ideal, ideal.measured_bits, features, transpiled, target))
    return _write_rows(rows, Path(out) if out is not None else Path(path))


def _write_rows(rows: list[dict[str, Any]], target: Path) -> Path:
    tmp = target.with_name(target.name + ".tmp" + "".join(target.suffixes[-1:]))
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with _open(tmp, "w") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (int(v) if k in _INTEGERS else v) for k, v in row.items()})
    tmp.replace(target)
    return target
