"""Noisy trajectories that each give many shots: trajectory reuse for 13-30 active qubits.

Aer's noisy statevector and matrix-product-state methods draw one error trajectory per shot: a
16-qubit QFT on fake_torino costs ~0.1 s per trajectory, 6-7 minutes for 4000 shots. But the
outcome distribution of the noisy circuit is the mean of its trajectories' distributions, so
drawing several shots from each of M trajectories is unbiased for any M. What M costs is variance:
for an outcome x, the counts' variance per shot grows from p(x)(1 - p(x))/S (S shots) by
Var_t[p_t(x)]/M, the spread between trajectories. Summed over outcomes:

    extra = V_traj / M,   V_traj = E_t ||p_t||^2 - ||p||^2,   sampling = (1 - ||p||^2) / S

Spread-out outputs (QFT, random and QAOA circuits at 16 qubits) have V_traj of 1e-5 to 5e-4, so
8-20 trajectories keep the extra variance under a tenth of the sampling variance; a GHZ state's
two outcomes (V_traj ~ 0.1) need a trajectory per shot, and reuse buys nothing there.

:func:`run_trajectories` runs a pilot batch, measures V_traj from it, and runs as many more
trajectories as the bound ``extra <= EXTRA_VARIANCE * sampling`` needs (never more than one per
shot), with V_traj bounded by the mean collision probability E_t ||p_t||^2 (robust where the
pilot's own spread is not: see ``_statevector_reuse``). With statevectors Aer hands back each
trajectory's probabilities (``save_probabilities`` per shot); with matrix product states this
module samples each trajectory's MPS itself and estimates the collision probability from the
sampled strings' own probabilities. Readout errors are applied afterwards,
exactly: to the mean distribution (statevector) or as bit flips on the drawn strings (MPS).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import Delay
from qiskit.result.postprocess import format_counts_memory
from qiskit_aer import AerSimulator
from qiskit_aer.noise.passes import RelaxationNoisePass
from threadpoolctl import threadpool_limits

from kernel_server.backends.lazy_dm import LazyProgram, sample_counts
from kernel_server.backends.noise import NOISY_FUSION, CompactNoise
from kernel_server.backends.stratified import run_stratified, stratified_supported

__all__ = [
    "EXTRA_VARIANCE",
    "PILOT_TRAJECTORIES",
    "TRAJECTORY_METHODS",
    "TrajectoryRun",
    "body_circuit",
    "needed_trajectories",
    "run_trajectories",
    "sample_mps",
]

# Extra variance allowed from reusing trajectories, as a share of the sampling variance. At 0.1
# the counts' spread is that of ~0.9 S independent shots.
EXTRA_VARIANCE = 0.1
PILOT_TRAJECTORIES = 8
# Shots drawn from each pilot MPS trajectory to estimate its collision probability.
_PILOT_SAMPLES = 64
TRAJECTORY_METHODS = {
    "statevector_reuse": "statevector",
    "mps_reuse": "matrix_product_state",
}


@dataclass(frozen=True)
class TrajectoryRun:
    """Counts of one run by trajectory reuse and what it took."""

    counts: dict[str, int]
    trajectories: int
    collision: float  # E_t ||p_t||^2, the bound on V_traj the trajectory count was chosen by


def body_circuit(program: LazyProgram, noise: CompactNoise, save: str) -> QuantumCircuit:
    """The program's gates without its terminal measurements, ending in a per-shot save.

    ``save`` is "probabilities" (of the measured qubits, sorted) or "matrix_product_state".
    Delays relax their qubits as in ``from_backend`` (the same pass, with the compact T1/T2).
    """
    body = QuantumCircuit(program.num_qubits)
    for operation, qargs in program.ops:
        body.append(operation, list(qargs))
    if any(isinstance(operation, Delay) for operation, _ in program.ops):
        relax = RelaxationNoisePass(
            t1s=list(noise.t1s), t2s=list(noise.t2s), dt=noise.dt, op_types=Delay
        )
        body = relax(body)
    if save == "probabilities":
        body.save_probabilities(sorted(program.measured), pershot=True)
    else:
        body.save_matrix_product_state(pershot=True)
    return body


def needed_trajectories(collision: float, shots: int, bound: float = EXTRA_VARIANCE) -> int:
    """Trajectories M that keep ``collision / M <= bound * (1 - collision) / shots``, in [1, shots].

    ``collision`` = E_t ||p_t||^2 bounds V_traj from above, and 1 - ||p||^2 >= 1 - collision
    bounds the sampling variance from below, so the extra variance stays within the bound.
    """
    sampling = max(1.0 - collision, 1e-12) / shots
    return int(min(shots, max(1, math.ceil(collision / (bound * sampling)))))


def _seeds(seed: int | None) -> tuple[int | None, int | None, np.random.Generator]:
    if seed is None:
        return None, None, np.random.default_rng()
    state = np.random.SeedSequence(seed).generate_state(3)
    return int(state[0]), int(state[1]), np.random.default_rng(int(state[2]))


def _run_batch(simulator: AerSimulator, body: QuantumCircuit, count: int, seed: int | None) -> Any:
    options = {} if seed is None else {"seed_simulator": seed}
    return simulator.run(body, shots=count, **options).result().data(0)


@dataclass(frozen=True)
class _Reuse:
    """One reuse run: what both methods need."""

    program: LazyProgram
    noise: CompactNoise
    shots: int
    simulator: AerSimulator
    bound: float
    pilot: int
    rng: np.random.Generator
    seeds: tuple[int | None, int | None]  # the pilot's and the rest's simulator seeds
    check: Callable[[float], None]  # given the share done; raises when over the budget
    # Told after the pilot: the trajectories the circuit needs and the seconds left to run.
    learned: Callable[[int, float], None]


def run_trajectories(
    program: LazyProgram,
    noise: CompactNoise,
    shots: int,
    seed: int | None,
    method: str,
    simulator: AerSimulator,
    bound: float = EXTRA_VARIANCE,
    check: Callable[[float], None] | None = None,
    learned: Callable[[int, float], None] | None = None,
) -> TrajectoryRun:
    """Sample ``shots`` outcomes from as few noisy trajectories as the variance bound allows.

    ``method`` is "statevector_reuse" or "mps_reuse"; ``simulator`` an ``AerSimulator`` of the
    matching Aer method with the compact noise model (its readout errors are not used: the body
    has no measurements, readout is applied here). ``check(done)`` is called between batches of
    trajectories with the share of the work done (a run's budget: it raises to stop the run);
    ``learned(n, seconds)`` once the pilot has shown that the circuit needs ``n`` trajectories,
    ``seconds`` more at its pace. Statevector reuse draws the noise itself where it can
    (:mod:`kernel_server.backends.stratified`); where that pilot projects more than a few
    seconds, a pilot under Aer's noise model measures that path too, and the faster one goes
    on: small circuits that need many trajectories, where building each trajectory's circuit
    in Python costs more than Aer's evolution of it, run faster under Aer's noise model.
    """
    pilot_seed, rest_seed, rng = _seeds(seed)
    run = _Reuse(
        program,
        noise,
        shots,
        simulator,
        bound,
        min(PILOT_TRAJECTORIES, shots),
        rng,
        (pilot_seed, rest_seed),
        check or (lambda done: None),
        learned or (lambda needed, seconds: None),
    )
    if method == "statevector_reuse":
        return _statevector_reuse(run)
    if method == "mps_reuse":
        return _mps_reuse(run)
    raise ValueError(f"unknown trajectory method {method!r}")


# Probabilities held at once from one Aer call (doubles): 256 MB.
_BATCH_ENTRIES = 2**25
# Seconds one Aer call of trajectories should take at most (as the pilot's pace predicts): the
# budget is checked between calls, and each call pays Aer's noise-model hand-over once (0.15-0.3
# s on fake_torino's 17 qubits: 1 s batches were a third overhead).
_BATCH_S = 3.0


@functools.cache
def _ideal_simulator(device: str) -> AerSimulator:
    # Trajectories run as many circuits at once as there are cores, each on its own share of
    # them: 50 ms against 57 ms a trajectory on two cores (17 qubits), where both cores split
    # every gate of one circuit.
    # No truncation: Aer drops qubits whose gates cannot change the saved outcomes, which
    # holds for unitary gates only; a weighted trajectory's diagonals change its norm.
    return AerSimulator(
        method="statevector",
        device=device,
        max_parallel_experiments=0,
        enable_truncation=False,
        **NOISY_FUSION,
    )


# The Aer-noise path is measured too when the stratified pilot leaves more than this many
# seconds and this many pilots' worth of trajectories to run: its pilot (a hand-over of the noise
# model and 8 noisy trajectories, about twice an ideal one each) then costs a tenth of the rest.
_PROBE_AER_S = 2.0
_PROBE_AER_PILOTS = 20


def _statevector_reuse(run: _Reuse) -> TrajectoryRun:
    program = run.program
    body = body_circuit(program, run.noise, "probabilities")
    aer_pilot: tuple[np.ndarray, float] | None = None
    if stratified_supported(program):

        def worth_going_on(remaining: int, pace: float, collision: float) -> bool:
            nonlocal aer_pilot
            if remaining * pace <= _PROBE_AER_S or remaining <= _PROBE_AER_PILOTS * run.pilot:
                return True
            aer_pilot = aer_pilot or _aer_pilot(run, body)
            first, aer_pace = aer_pilot
            needed = needed_trajectories(float(np.mean(np.sum(first * first, axis=1))), run.shots)
            return remaining * pace <= (needed - len(first)) * aer_pace

        ideal = _ideal_simulator(str(run.simulator.options.device))
        drawn = run_stratified(
            program,
            run.noise,
            run.shots,
            run.rng,
            ideal,
            run.bound,
            run.pilot,
            run.check,
            run.learned,
            worth_going_on,
        )
        if drawn is not None:
            return _sampled(program, run, drawn.probabilities, drawn.trajectories, drawn.collision)
    first, per_trajectory = aer_pilot or _aer_pilot(run, body)
    total = first.sum(axis=0)
    count = len(first)
    # The bound V_traj <= E_t ||p_t||^2, not the pilot's own V_traj: a pilot of 8 often holds
    # only no-error trajectories (5 qubits, 20 gates: 80% of them), whose spread is 0 while the
    # rare error branches carry the variance. The collision probability does not hide them.
    collision = float(np.mean(np.sum(first * first, axis=1)))
    wanted = needed_trajectories(collision, run.shots, run.bound)
    run.learned(wanted, (wanted - count) * per_trajectory)
    # Batches of at most 256 MB of probabilities and a few seconds each, so that the budget is
    # checked (and progress seen) that often even when every shot needs its own trajectory.
    batch = max(1, min(_BATCH_ENTRIES // first.shape[1], int(_BATCH_S / per_trajectory)))
    seed = run.seeds[1]
    while count < wanted:
        run.check(count / wanted)
        size = min(batch, wanted - count)
        more = np.asarray(_run_batch(run.simulator, body, size, seed)["probabilities"])
        total = total + more.sum(axis=0)
        count += len(more)
        seed = None if seed is None else seed + size  # Aer seeds shot i with seed + i
    return _sampled(program, run, total / count, count, collision)


def _aer_pilot(run: _Reuse, body: QuantumCircuit) -> tuple[np.ndarray, float]:
    """Pilot trajectories under Aer's noise model and their pace: seconds per trajectory
    without the noise model's hand-over, which each Aer call pays once (one trajectory first,
    then the rest: the difference)."""
    seed = run.seeds[0]
    started = time.perf_counter()
    if run.pilot < 3:
        few = np.asarray(_run_batch(run.simulator, body, run.pilot, seed)["probabilities"])
        return few, (time.perf_counter() - started) / len(few)
    one = np.asarray(_run_batch(run.simulator, body, 1, seed)["probabilities"])
    middle = time.perf_counter()
    rest_seed = None if seed is None else seed + 1
    rest = np.asarray(_run_batch(run.simulator, body, run.pilot - 1, rest_seed)["probabilities"])
    ended = time.perf_counter()
    pace = max(((ended - middle) - (middle - started)) / max(run.pilot - 2, 1), 1e-6)
    return np.concatenate([one, rest]), pace


def _sampled(
    program: LazyProgram, run: _Reuse, mean: np.ndarray, trajectories: int, collision: float
) -> TrajectoryRun:
    """Counts drawn from the trajectories' mean distribution after readout errors."""
    labels = sorted(program.measured)
    probabilities = _with_readout(mean, labels, run.noise)
    # Axis a of the reshaped little-endian vector is qubit labels[m - 1 - a].
    clbits = [program.measured[q] for q in reversed(labels)]
    draw_seed = int(run.rng.integers(2**63))
    counts = sample_counts(probabilities, clbits, program, run.shots, draw_seed)
    return TrajectoryRun(counts, trajectories, collision)


def _with_readout(little_endian: np.ndarray, labels: list[int], noise: CompactNoise) -> np.ndarray:
    """The distribution after readout errors, as an array with one axis per measured qubit."""
    m = len(labels)
    probabilities = np.clip(little_endian, 0.0, None).reshape([2] * m)
    for axis in range(m):
        matrix = noise.readout.get(labels[m - 1 - axis])
        if matrix is not None:
            mixed = np.tensordot(matrix, probabilities, axes=([0], [axis]))
            probabilities = np.moveaxis(mixed, 0, axis)
    return probabilities


def _measured_collision(strings: np.ndarray, program: LazyProgram) -> float:
    """The chance two outcomes agree on the measured qubits, from samples (unbiased): with
    unmeasured qubits (routing ancillas) the full strings' own probabilities would understate
    it, and the trajectories needed with it."""
    mask = sum(1 << q for q in program.measured)
    _, numbers = np.unique(strings & mask, return_counts=True)
    n = len(strings)
    return float(np.sum(numbers * (numbers - 1)) / (n * (n - 1))) if n > 1 else 1.0


# MPS trajectories per Aer call after the pilot: the budget is checked between calls.
_MPS_BATCH = 128


def _mps_reuse(run: _Reuse) -> TrajectoryRun:
    program, noise, shots, rng = run.program, run.noise, run.shots, run.rng
    body = body_circuit(program, noise, "matrix_product_state")
    started = time.perf_counter()
    states = list(_run_batch(run.simulator, body, run.pilot, run.seeds[0])["matrix_product_state"])
    per_trajectory = (time.perf_counter() - started) / max(len(states), 1)
    batch = max(1, min(_MPS_BATCH, int(_BATCH_S / per_trajectory)))
    if len(program.measured) == program.num_qubits:
        collisions = [float(np.mean(sample_mps(s, _PILOT_SAMPLES, rng)[1])) for s in states]
    else:
        collisions = [_measured_collision(sample_mps(s, _PILOT_SAMPLES, rng)[0], program)
                      for s in states]  # fmt: skip
    collision = float(np.mean(collisions))
    wanted = needed_trajectories(collision, shots, run.bound)
    # Half the pilot's pace: a pilot of few trajectories is up to half Aer's per-call hand-over
    # of the noise model (0.15-0.3 s), which the later, larger calls amortise.
    run.learned(wanted, 0.5 * (wanted - len(states)) * per_trajectory)
    seed = run.seeds[1]
    while len(states) < wanted:
        # Sampling the states afterwards takes about a third of the time drawing them does.
        run.check(0.75 * len(states) / wanted)
        size = min(batch, wanted - len(states))
        states.extend(_run_batch(run.simulator, body, size, seed)["matrix_product_state"])
        seed = None if seed is None else seed + size  # Aer seeds shot i with seed + i
    # Equal shares of the shots (the remainder to random trajectories): stratified, unbiased.
    share = np.full(len(states), shots // len(states))
    share[rng.choice(len(states), shots % len(states), replace=False)] += 1
    parts = []
    # One BLAS-thread limit for the whole loop: threadpoolctl reads /proc/self/maps each time it
    # is entered (2 ms), which per state cost more than the sampling itself.
    with threadpool_limits(1):
        for i, (state, n) in enumerate(zip(states, share, strict=True)):
            if n:
                run.check(0.75 + 0.25 * i / len(states))
                parts.append(_sample_sites(_right_canonical(state), int(n), rng)[0])
    strings = np.concatenate(parts)
    counts = _format_strings(_flip_readout(strings, program.num_qubits, noise, rng), program)
    return TrajectoryRun(counts, len(states), collision)


def sample_mps(state: Any, shots: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``shots`` bitstrings from an Aer matrix product state; also each one's probability.

    ``state`` is what ``save_matrix_product_state`` gives: per qubit the pair of matrices
    Gamma[0], Gamma[1], and the Schmidt values between neighbours. The sites are brought to
    right-canonical form first (noise Kraus operators leave Aer's state off canonical form), so
    each qubit's conditional probability is the squared norm of the left vector times its
    matrix. Returns integers, bit i for qubit i.
    """
    # Matrices of at most (shots x 2 chi): one BLAS thread. OpenBLAS's two threads made each
    # product 40x slower whenever another process kept the cores busy.
    with threadpool_limits(1):
        return _sample_sites(_right_canonical(state), shots, rng)


def _sample_sites(
    sites: list[np.ndarray], shots: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    left = np.ones((shots, 1), dtype=complex)
    values = np.zeros(shots, dtype=np.int64)
    probability = np.ones(shots)
    for i, site in enumerate(sites):
        width = site.shape[1] // 2
        both = left @ site  # (shots, 2 * width): branch 0, then branch 1
        weights = np.square(np.abs(both)).reshape(shots, 2, width).sum(axis=2)
        norm = np.maximum(weights.sum(axis=1), 1e-300)
        p_one = np.clip(weights[:, 1] / norm, 0.0, 1.0)
        ones = rng.random(shots) < p_one
        values |= ones.astype(np.int64) << i
        probability *= np.where(ones, p_one, 1.0 - p_one)
        chosen = np.where(ones[:, None], both[:, width:], both[:, :width])
        scale = np.sqrt(np.maximum(np.where(ones, weights[:, 1], weights[:, 0]), 1e-300))
        left = chosen / scale[:, None]
    return values, probability


def _right_canonical(state: Any) -> list[np.ndarray]:
    """Site matrices [A[0] | A[1]] (left bond x 2 right bond), every site but the first right-
    orthonormal (sum_s A[s] A[s]^dagger = I), by LQ sweeps from the right."""
    gammas, lambdas = state
    n = len(gammas)
    sites = []
    for i in range(n):
        pair = [np.asarray(g, dtype=complex) for g in gammas[i]]
        if i < n - 1:
            pair = [g * np.asarray(lambdas[i])[None, :] for g in pair]
        sites.append(np.concatenate(pair, axis=1))
    for i in range(n - 1, 0, -1):
        # site = L Q with orthonormal rows of Q (the QR of its conjugate transpose).
        q, r = np.linalg.qr(sites[i].conj().T)
        sites[i] = q.conj().T
        lower = r.conj().T
        width = sites[i - 1].shape[1] // 2
        previous = sites[i - 1]
        sites[i - 1] = np.concatenate(
            [previous[:, :width] @ lower, previous[:, width:] @ lower], axis=1
        )
    return sites


def _flip_readout(
    strings: np.ndarray, num_qubits: int, noise: CompactNoise, rng: np.random.Generator
) -> np.ndarray:
    """Each qubit's bit read through its assignment matrix P[true, measured]."""
    out = strings.copy()
    for q in range(num_qubits):
        matrix = noise.readout.get(q)
        if matrix is None:
            continue
        bits = (strings >> q) & 1
        flip = rng.random(len(strings)) < np.where(bits == 1, matrix[1, 0], matrix[0, 1])
        out ^= flip.astype(np.int64) << q
    return out


def _format_strings(strings: np.ndarray, program: LazyProgram) -> dict[str, int]:
    """Counts keyed as Aer keys them, from integers with bit q for compact qubit q."""
    memory = np.zeros(len(strings), dtype=np.int64)
    for q, clbit in program.measured.items():
        memory |= ((strings >> q) & 1) << clbit
    values, numbers = np.unique(memory, return_counts=True)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    return {
        format_counts_memory(hex(int(v)), header): int(c)
        for v, c in zip(values, numbers, strict=True)
    }
