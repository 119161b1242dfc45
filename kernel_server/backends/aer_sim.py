"""Noisy execution of transpiled circuits on simulated QPUs: the hot spot of the fleet.

A job arrives as the output of ``transpile_for``: full device width (127-156 qubits), of which a
handful are used. ``AerSimulator.from_backend`` pays for the whole device on every job (8-16 s for
a 12-qubit GHZ at 4000 shots on an Eagle, almost all of it in per-shot noisy trajectories). The
fast path here:

1. compacts the circuit to the qubits it touches (renumbered 0..k-1, classical bits untouched, so
   count keys are what the original circuit gives);
2. builds the device noise for those qubits only, the same channels ``NoiseModel.from_backend``
   builds (depolarizing composed with thermal relaxation per gate, readout error per measurement),
   cached per (backend, calibration id, physical qubits);
3. runs it with the method the cost model prices cheapest for this circuit on this machine
   (:mod:`kernel_server.backends.methods`: the numpy lazy density matrix of
   :mod:`kernel_server.backends.lazy_dm`, Aer's density matrix, Aer's per-shot trajectories,
   statevector or MPS trajectories that give several shots each
   (:mod:`kernel_server.backends.trajectories`), or the stabilizer method where it is exact).
   Dynamic circuits (feed-forward) run with the noise as Kraus channels
   (``CompactNoise.kraus_noise_model``), so Aer does not draw a new noisy circuit per shot.

All methods simulate the same noise model; none approximates it. The noise lives in
:mod:`kernel_server.backends.noise`; this module compacts circuits, runs the chosen method, and
holds the reference and ideal paths.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from qiskit import QuantumCircuit, QuantumRegister
from qiskit.circuit import Delay, Measure
from qiskit.providers import BackendV2
from qiskit.quantum_info import Statevector, hellinger_fidelity
from qiskit.result.postprocess import format_counts_memory
from qiskit_aer import AerSimulator
from qiskit_aer.noise.passes import RelaxationNoisePass

from kernel_server.backends.branching import run_branching
from kernel_server.backends.branching_sv import run_branching_statevector
from kernel_server.backends.cost_model import machine_rates
from kernel_server.backends.devices import calibration_id
from kernel_server.backends.dynamic import has_control_flow
from kernel_server.backends.guard import (
    Alternative,
    Budget,
    BudgetExceeded,
    NoBudget,
    fitting_methods,
    remember_miss,
    still_fitting,
)
from kernel_server.backends.guard import settings as guard_settings
from kernel_server.backends.lazy_dm import (
    LazyProgram,
    format_probabilities,
    plan_lazy,
    run_lazy,
    sample_counts,
)
from kernel_server.backends.methods import (
    AER_DENSITY_MATRIX_MAX_QUBITS,
    LAZY_MAX_ENTRIES,
    METHODS,
    NoisyRunPlan,
    plan_methods,
)
from kernel_server.backends.noise import (
    CacheInfo,
    CompactNoise,
    ErrorSpec,
    build_compact_noise,
    clear_noise_cache,
    compact_noise,
    noise_cache_info,
)
from kernel_server.backends.trajectories import TRAJECTORY_METHODS, run_trajectories
from kernel_server.core.circuits import require_shots

__all__ = [
    # noise of the active qubits (kernel_server.backends.noise), re-exported
    "CacheInfo",
    "CompactNoise",
    "ErrorSpec",
    "build_compact_noise",
    "compact_noise",
    "noise_cache_info",
    # this module
    "AER_DENSITY_MATRIX_MAX_QUBITS",
    "LAZY_MAX_ENTRIES",
    "METHODS",
    "CompactCircuit",
    "NoisyRun",
    "NoisyRunPlan",
    "NoisyRunTooCostly",
    "clear_caches",
    "compact_circuit",
    "fidelity_to_ideal",
    "ideal_counts",
    "ideal_probabilities",
    "noisy_probabilities",
    "plan_noisy_run",
    "reference_simulator",
    "run_noisy",
    "run_noisy_detailed",
    "run_reference",
]

# --------------------------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactCircuit:
    """A transpiled circuit renumbered onto the physical qubits it touches."""

    circuit: QuantumCircuit  # k qubits, the original's clbits and classical registers
    physical_qubits: tuple[int, ...]  # compact qubit i is physical qubit physical_qubits[i]


def compact_circuit(transpiled: QuantumCircuit) -> CompactCircuit:
    """Drop the idle qubits of a full-width circuit and renumber the rest 0..k-1 in physical order.

    A qubit counts as touched when any instruction other than a barrier or delay acts on it (a
    qubit that only idles stays in |0> and cannot change any outcome). Clbits and classical
    registers are carried over as the same objects in the same order, so memory slots, and
    therefore count keys, are unchanged.
    """
    index = {bit: i for i, bit in enumerate(transpiled.qubits)}
    active = sorted(
        {
            index[q]
            for instruction in transpiled.data
            if instruction.operation.name not in ("barrier", "delay")
            for q in instruction.qubits
        }
    )
    qreg = QuantumRegister(len(active), "q")
    new_qubit = {transpiled.qubits[p]: qreg[i] for i, p in enumerate(active)}
    compact = QuantumCircuit(qreg, list(transpiled.clbits), name=transpiled.name)
    for creg in transpiled.cregs:
        compact.add_register(creg)
    compact.global_phase = transpiled.global_phase
    for instruction in transpiled.data:
        qubits = [new_qubit[q] for q in instruction.qubits if q in new_qubit]
        if len(qubits) != len(instruction.qubits):
            # A barrier may span idle qubits (keep its part on active ones); a delay on an idle
            # qubit goes.
            if instruction.operation.name == "barrier" and qubits:
                compact.barrier(*qubits)
            continue
        compact.append(instruction.operation, qubits, instruction.clbits, copy=False)
    return CompactCircuit(compact, tuple(active))


# --------------------------------------------------------------------------------------------
# Method selection and execution
# --------------------------------------------------------------------------------------------


def plan_noisy_run(
    transpiled: QuantumCircuit,
    shots: int,
    method: str = "auto",
    backend: BackendV2 | None = None,
    probe: bool = True,
) -> NoisyRunPlan:
    """The method :func:`run_noisy` would use for ``transpiled``, with the cost estimates.

    Without ``backend`` the stabilizer method is not considered (its exactness depends on the
    device's T1/T2). ``probe=False``: no MPS probe run (see ``plan_methods``).
    """
    compact = compact_circuit(transpiled)
    noise = None if backend is None else compact_noise(backend, compact.physical_qubits)
    physical = compact.physical_qubits
    return plan_methods(compact.circuit, noise, physical, shots, method, probe)[0]


def _aer_simulator(noise: CompactNoise, method: str, kraus: bool = False) -> AerSimulator:
    # The cost model measured the GPU methods on the GPU too (calibration uses the same device).
    return noise.simulator(method, kraus, gpu=machine_rates().gpu)


# A guarded Aer run predicted to take longer than this runs its shots in chunks of about this
# long, with the budget checked between them (one Aer call cannot be stopped).
_CHUNK_S = 1.0


def _run_aer(
    circuit: QuantumCircuit,
    noise: CompactNoise,
    method: str,
    shots: int,
    seed: int | None,
    budget: Budget | None = None,
) -> dict[str, int]:
    if any(isinstance(ci.operation, Delay) for ci in circuit.data):
        # from_backend relaxes idle qubits during delays through this pass; do the same on the
        # compact circuit with the compact qubits' T1/T2.
        relax = RelaxationNoisePass(
            t1s=list(noise.t1s), t2s=list(noise.t2s), dt=noise.dt, op_types=Delay
        )
        circuit = relax(circuit)
    # Trajectories that run shot by shot anyway go faster with Kraus noise (kraus_noise_model);
    # static circuits keep the model they always had (and their seeded samples).
    kraus = method == "statevector" and has_control_flow(circuit)
    simulator = _aer_simulator(noise, method, kraus)
    chunks = 1
    if budget is not None and budget.predicted_s > 2 * _CHUNK_S and method != "density_matrix":
        chunks = min(shots, int(np.ceil(budget.predicted_s / _CHUNK_S)))
    if chunks == 1:
        result = simulator.run(circuit, shots=shots, **_aer_seed(seed)).result()
        return dict(result.get_counts(0))
    assert budget is not None
    counts: dict[str, int] = {}
    sizes = np.full(chunks, shots // chunks)
    sizes[: shots % chunks] += 1
    seeds = [None] * chunks if seed is None else np.random.SeedSequence(seed).generate_state(chunks)
    for done, (size, chunk_seed) in enumerate(zip(sizes, seeds, strict=True)):
        budget.progress(done / chunks)
        budget.check()
        options = {} if chunk_seed is None else {"seed_simulator": int(chunk_seed)}
        for key, n in (
            simulator.run(circuit, shots=int(size), **options).result().get_counts(0).items()
        ):
            counts[key] = counts.get(key, 0) + int(n)
    return counts


def _aer_seed(seed: int | None) -> dict[str, int]:
    """``seed_simulator`` for a user seed, spread so that nearby seeds give unrelated samples.

    Aer seeds shot i with seed + i when it runs shots in parallel (12+ qubit noisy runs on 2
    cores): seeds 0 and 1 then share 3999 of 4000 shots and their counts come out identical.
    """
    if seed is None:
        return {}
    return {"seed_simulator": int(np.random.SeedSequence(seed).generate_state(1)[0])}


@dataclass
class NoisyRun:
    """Counts of one noisy run, how they were simulated and how long it took."""

    counts: dict[str, int]
    method: str
    physical_qubits: tuple[int, ...]
    seconds: float
    trajectories: int | None = None  # noisy trajectories drawn, for the reuse methods
    # Methods tried first and given up, each with why (over its budget, or too big to try).
    fallbacks: tuple[str, ...] = ()


class NoisyRunTooCostly(RuntimeError):
    """No simulation method can run the circuit within its budget (each one's reason said)."""


def run_noisy_detailed(
    backend: BackendV2,
    transpiled: QuantumCircuit,
    shots: int,
    seed: int | None = None,
    method: str = "auto",
) -> NoisyRun:
    """:func:`run_noisy`, also reporting the method used and the wall time (noise build included
    when the noise of these qubits was not cached yet).

    With ``method="auto"`` every run is guarded (:mod:`kernel_server.backends.guard`): methods
    whose memory would not fit are skipped, a method that overruns its budget is stopped and the
    next-cheapest takes over, the miss is recorded in the cost model, and ``fallbacks`` says what
    happened. A method named explicitly runs as told.
    """
    require_shots(shots)
    start = time.perf_counter()
    compact = compact_circuit(transpiled)
    noise = compact_noise(backend, compact.physical_qubits)
    plan, program = plan_methods(compact.circuit, noise, compact.physical_qubits, shots, method)
    if method != "auto":
        counts, trajectories = _run_method(
            plan.method, compact, noise, program, shots, seed, NoBudget()
        )
        return NoisyRun(
            counts, plan.method, compact.physical_qubits, time.perf_counter() - start, trajectories
        )
    guard = guard_settings()
    fallbacks: list[str] = []
    candidates = fitting_methods(plan, guard, fallbacks)
    while candidates:
        name = candidates.pop(0)
        budget = Budget(name, plan.estimated_seconds[name], guard, _alternative(plan, candidates))
        try:
            counts, trajectories = _run_method(name, compact, noise, program, shots, seed, budget)
        except BudgetExceeded as exc:
            remember_miss(compact.circuit, budget, stopped=True)
            fallbacks.append(f"{exc}; stopped")
            if budget.trajectories:  # what the pilot measured holds for the other reuse method
                plan = plan.repriced(budget.trajectories)
                candidates = still_fitting(plan, guard, candidates, fallbacks)
            continue
        if budget.overran():
            remember_miss(compact.circuit, budget, stopped=False)
        seconds = time.perf_counter() - start
        return NoisyRun(
            counts, name, compact.physical_qubits, seconds, trajectories, tuple(fallbacks)
        )
    raise NoisyRunTooCostly(
        f"no simulation method runs this {compact.circuit.num_qubits}-qubit circuit within its "
        "budget (QONDUCTOR_NOISY_GUARD): " + "; ".join(fallbacks)
    )


def _alternative(plan: NoisyRunPlan, later: list[str]) -> Alternative | None:
    """The method a run may be stopped for: the next candidate."""
    if not later:
        return None
    reuse = plan.trajectories if plan.scales_with_trajectories(later[0]) else 0
    return Alternative(later[0], plan.estimated_seconds[later[0]], reuse)


def _run_method(
    name: str,
    compact: CompactCircuit,
    noise: CompactNoise,
    program: LazyProgram | str,
    shots: int,
    seed: int | None,
    budget: Budget,
) -> tuple[dict[str, int], int | None]:
    """(counts, trajectories drawn) of one method on the compact circuit, within ``budget``."""
    if name == "lazy_density_matrix":
        assert isinstance(program, LazyProgram)
        probabilities, clbits = run_lazy(program, noise, budget.check)
        return sample_counts(probabilities, clbits, program, shots, seed), None
    if name == "branching_density_matrix":
        assert isinstance(program, LazyProgram)
        return run_branching(program, noise, shots, seed, budget.check), None
    if name == "branching_statevector":
        assert isinstance(program, LazyProgram)
        return run_branching_statevector(program, noise, shots, seed, budget.check), None
    if name in TRAJECTORY_METHODS:
        assert isinstance(program, LazyProgram)
        simulator = _aer_simulator(noise, TRAJECTORY_METHODS[name])
        run = run_trajectories(
            program, noise, shots, seed, name, simulator, check=budget.check, learned=budget.learn
        )
        return run.counts, run.trajectories
    return _run_aer(compact.circuit, noise, name, shots, seed, budget), None


def run_noisy(
    backend: BackendV2,
    transpiled: QuantumCircuit,
    shots: int,
    seed: int | None = None,
    method: str = "auto",
) -> dict[str, int]:
    """Sample ``transpiled`` (output of ``transpile_for``) under ``backend``'s noise.

    Same noise model and same count keys as :func:`run_reference`, at a fraction of its cost on
    127-156 qubit devices. ``method`` is "auto" (cheapest estimated) or one of
    :data:`~kernel_server.backends.methods.METHODS`. Deterministic for a given seed.
    """
    return run_noisy_detailed(backend, transpiled, shots, seed=seed, method=method).counts


def noisy_probabilities(backend: BackendV2, transpiled: QuantumCircuit) -> dict[str, float]:
    """The exact outcome distribution of ``transpiled`` under ``backend``'s noise (no shots).

    A shot-noise-free ground truth for fidelity models. Needs a circuit the lazy engine takes
    (gates then terminal measurements); raises ``ValueError`` otherwise.
    """
    compact = compact_circuit(transpiled)
    program = plan_lazy(compact.circuit)
    if isinstance(program, str):
        raise ValueError(f"no exact distribution for this circuit: {program}")
    if program.peak_entries > LAZY_MAX_ENTRIES:
        raise ValueError(f"state too large for an exact distribution: {program.peak_entries}")
    noise = compact_noise(backend, compact.physical_qubits)
    probabilities, clbits = run_lazy(program, noise)
    return format_probabilities(probabilities, clbits, program)


# --------------------------------------------------------------------------------------------
# The reference path and the ideal distribution
# --------------------------------------------------------------------------------------------

_reference_lock = threading.Lock()
_reference_simulators: dict[str, AerSimulator] = {}


def reference_simulator(backend: BackendV2) -> AerSimulator:
    """``AerSimulator.from_backend(backend)``, built once per backend and calibration (1-8 s)."""
    key = calibration_id(backend)
    with _reference_lock:
        simulator = _reference_simulators.get(key)
    if simulator is None:
        simulator = AerSimulator.from_backend(backend)
        with _reference_lock:
            _reference_simulators[key] = simulator
    return simulator


def run_reference(
    backend: BackendV2, transpiled: QuantumCircuit, shots: int, seed: int | None = None
) -> dict[str, int]:
    """The baseline: the full-device ``from_backend`` simulator on the full-width circuit.

    The seed is spread before it reaches Aer (see ``_aer_seed``), as in :func:`run_noisy`.
    """
    require_shots(shots)
    simulator = reference_simulator(backend)
    result = simulator.run(transpiled, shots=shots, **_aer_seed(seed)).result()
    return dict(result.get_counts(0))


def clear_caches() -> None:
    """Forget every noise model, reference simulator and statistic (benchmarks, tests)."""
    clear_noise_cache()
    with _reference_lock:
        _reference_simulators.clear()


_IDEAL_MAX_QUBITS = 24


def ideal_probabilities(circuit: QuantumCircuit) -> dict[str, float]:
    """Noiseless outcome distribution of a circuit whose measurements are all at the end.

    Works on virtual circuits and on full-width transpiled ones (idle qubits are dropped first).
    Keys are formatted like counts, so the result goes straight into ``hellinger_fidelity``.
    """
    if has_control_flow(circuit):
        raise ValueError(
            "ideal_probabilities takes static circuits; for control flow, sample ideal_counts"
        )
    compact = compact_circuit(circuit).circuit
    if compact.num_qubits > _IDEAL_MAX_QUBITS:
        raise ValueError(f"{compact.num_qubits} active qubits is too many for a statevector")
    measured: dict[int, int] = {}
    unitary_part = QuantumCircuit(compact.num_qubits, global_phase=compact.global_phase)
    qindex = {bit: i for i, bit in enumerate(compact.qubits)}
    cindex = {bit: i for i, bit in enumerate(compact.clbits)}
    for instruction in compact.data:
        qargs = [qindex[q] for q in instruction.qubits]
        if instruction.operation.name in ("barrier", "delay"):
            continue
        if any(q in measured for q in qargs):
            raise ValueError("ideal_probabilities needs all measurements at the end")
        if isinstance(instruction.operation, Measure):
            measured[qargs[0]] = cindex[instruction.clbits[0]]
            continue
        unitary_part.append(instruction.operation, qargs)
    if not measured:
        raise ValueError("circuit has no measurements")
    qubits = sorted(measured)
    # probabilities(qargs) is little-endian over qargs: index bit j belongs to qubits[j].
    probabilities = Statevector(unitary_part).probabilities(qubits)
    header = {
        "creg_sizes": [[creg.name, creg.size] for creg in compact.cregs],
        "memory_slots": compact.num_clbits,
    }
    result: dict[str, float] = {}
    for index in np.flatnonzero(probabilities > 1e-12):
        memory = 0
        for j, q in enumerate(qubits):
            memory |= ((int(index) >> j) & 1) << measured[q]
        key = format_counts_memory(hex(memory), header)
        result[key] = result.get(key, 0.0) + float(probabilities[index])
    return result


def ideal_counts(circuit: QuantumCircuit, shots: int, seed: int | None = None) -> dict[str, int]:
    """Noiseless counts (Aer, on the circuit's active qubits); any measurement pattern."""
    require_shots(shots)
    compact = compact_circuit(circuit).circuit
    result = AerSimulator(method="automatic").run(compact, shots=shots, **_aer_seed(seed)).result()
    return dict(result.get_counts(0))


def fidelity_to_ideal(counts: dict[str, int | float], circuit: QuantumCircuit) -> float:
    """Hellinger fidelity of measured counts to the circuit's ideal distribution."""
    return float(hellinger_fidelity(counts, ideal_probabilities(circuit)))
