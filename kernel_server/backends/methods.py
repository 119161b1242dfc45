"""Which simulation method runs a compact noisy circuit: priced per circuit, on this machine.

Every method simulates the same noise model; none approximates it (trajectory reuse trades a
bounded share of extra shot variance for speed, see :mod:`kernel_server.backends.trajectories`).
Each method's price is its work units (:mod:`kernel_server.backends.work`) over the rates measured
on this machine (:mod:`kernel_server.backends.cost_model`); ``auto`` takes the cheapest method that
can run the circuit. What each is for:

* ``lazy_density_matrix``: the numpy engine (one density-matrix evolution, qubits in flight only);
  circuits whose qubits enter and leave one by one, any width.
* ``branching_density_matrix``: the numpy engine measuring each qubit as it leaves, shots that
  agree so far sharing one state (:mod:`kernel_server.backends.branching`); exact samples where
  few qubits are in flight but many are done (W states at 24 qubits).
* ``branching_statevector``: the same with one pure state per shot, its noise drawn per shot
  (:mod:`kernel_server.backends.branching_sv`); exact samples where the histories are as many as
  the shots and several qubits are in flight (EfficientSU2 routed on a Falcon).
* ``density_matrix``: Aer's, up to 12 qubits, including what the engine does not take.
* ``statevector``: Aer's noisy trajectories, one per shot; anything, at any cost.
* ``statevector_reuse``: statevector trajectories with several shots each; spread-out outputs at
  13-24 qubits (QFT, random, QAOA).
* ``mps_reuse``: matrix-product-state trajectories with several shots each; wide circuits of low
  entanglement (QAOA rings, linear ansatzes at 20-30 qubits).
* ``stabilizer``: Aer's stabilizer method, where it is exact: Clifford gates and noise that is a
  mixture of Paulis and resets (depolarizing, and relaxation of qubits with T2 <= T1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import ControlFlowOp, Measure

from kernel_server.backends.branching import branching_entries
from kernel_server.backends.branching_sv import statevector_profile
from kernel_server.backends.cost_model import MachineRates, machine_rates
from kernel_server.backends.dynamic import costliest_path
from kernel_server.backends.guard import settings as guard_settings
from kernel_server.backends.lazy_dm import LazyProgram, plan_lazy
from kernel_server.backends.mps_probe import NOISY_OVER_IDEAL, PROBE_CAP, measured_bond
from kernel_server.backends.noise import CompactNoise
from kernel_server.backends.trajectories import (
    PILOT_TRAJECTORIES,
    TRAJECTORY_METHODS,
    needed_trajectories,
)
from kernel_server.backends.work import (
    MPS_MAX_BOND,
    clifford_support_bits,
    density_matrix_work,
    gate_count,
    mps_bonds,
    mps_order,
    mps_work,
    trajectory_work,
)

__all__ = [
    "AER_DENSITY_MATRIX_MAX_QUBITS",
    "LAZY_MAX_ENTRIES",
    "METHODS",
    "REUSE_MAX_QUBITS",
    "NoisyRunPlan",
    "plan_methods",
]

METHODS = (
    "auto",
    "lazy_density_matrix",
    "branching_density_matrix",
    "branching_statevector",
    "density_matrix",
    "statevector",
    "statevector_reuse",
    "mps_reuse",
    "stabilizer",
)

# Widest circuit Aer's density matrix takes: at 12 qubits it holds 2^24 entries (256 MB).
AER_DENSITY_MATRIX_MAX_QUBITS = 12
# Largest state (complex entries) the numpy engine may hold: 2^26 = 1 GB. A 16-qubit QAOA ring
# on fake_torino peaks at 2^27 (3.3 GB resident, 9.9 s) where statevector reuse takes 0.5 s.
LAZY_MAX_ENTRIES = 2**26
# Statevector reuse keeps the pilot's probabilities (8 x 2^m doubles) and a 2^k state per core;
# past 24 qubits the guard's memory budget decides (25 qubits: about 2 GB on 2 cores).
REUSE_MAX_QUBITS = 26
# Width from which a loose MPS bond bound is measured (mps_probe): below it statevector
# trajectories are cheap enough, and a probe of an entangled circuit would cost more than it saves.
PROBE_MIN_QUBITS = 20
# ... and only when statevector reuse and every method priced before it (the numpy engines,
# Aer's own) would take longer than this (a probe can take seconds: 8 s for a 24-qubit
# EfficientSU2 routed on fake_hanoi, which the branching statevector runs in 1 s).
PROBE_WORTH_S = 20.0
# Methods that run the lazy engine's program (gates, then terminal measurements).
_NEEDS_PROGRAM = frozenset(
    {
        "lazy_density_matrix",
        "branching_density_matrix",
        "branching_statevector",
        "statevector_reuse",
        "mps_reuse",
    }
)
_CLIFFORD = {"cx", "cy", "cz", "ecr", "h", "id", "s", "sdg", "swap", "sx", "sxdg", "x", "y", "z"}


@dataclass(frozen=True)
class NoisyRunPlan:
    """How a noisy run will simulate one circuit, and why."""

    method: str
    physical_qubits: tuple[int, ...]
    estimated_seconds: dict[str, float]  # per method that can run the circuit
    lazy_unsupported: str | None  # why the numpy engine cannot take the circuit, if it cannot
    rates_measured: bool  # False when the built-in rates priced it (QONDUCTOR_COST_MODEL)
    # Resident bytes each method needs at its peak (the guard skips what does not fit).
    estimated_memory: dict[str, float] = field(default_factory=dict)
    # Methods priced up because they overran on this circuit before (cost_model.record_miss).
    missed: tuple[str, ...] = ()
    # Trajectories the reuse methods' prices assume: the fewest the circuit could need.
    trajectories: int = 0

    def ranked(self) -> list[str]:
        """The methods that can run the circuit, cheapest first."""
        return sorted(self.estimated_seconds, key=self.estimated_seconds.__getitem__)

    def scales_with_trajectories(self, name: str) -> bool:
        """Whether ``name``'s price is per trajectory at ``trajectories`` (a reuse method not
        priced by its own misses on this circuit: those are priced by experience)."""
        return name in TRAJECTORY_METHODS and name not in self.missed

    def repriced(self, trajectories: int) -> NoisyRunPlan:
        """This plan once a reuse run has measured that the circuit needs ``trajectories``: the
        reuse methods priced at that many (their price is nearly all per trajectory)."""
        if not self.trajectories or trajectories <= self.trajectories:
            return self
        scale = trajectories / self.trajectories
        # A method priced by its own past misses on this circuit is priced by experience.
        seconds = {
            name: value * scale if name in TRAJECTORY_METHODS and name not in self.missed else value
            for name, value in self.estimated_seconds.items()
        }
        return replace(self, estimated_seconds=seconds, trajectories=trajectories)


def _samples_once(circuit: QuantumCircuit) -> bool:
    """Whether Aer can evolve the circuit once and sample every shot from the result.

    Not so with a measurement followed by more work on its qubit, or with control flow: Aer's
    density matrix then runs shot by shot (7 qubits, 1000 shots: 2.1 s against 0.07 s for
    trajectories; 11 qubits did not finish in 15 minutes).
    """
    measured: set[Any] = set()
    for instruction in circuit.data:
        operation = instruction.operation
        if isinstance(operation, ControlFlowOp):
            return False
        if operation.name == "barrier":
            continue
        if isinstance(operation, Measure):
            measured.update(instruction.qubits)
        elif measured.intersection(instruction.qubits):
            return False
    return True


def reuse_trajectories(program: LazyProgram, shots: int, support_bits: int | None = None) -> int:
    """Trajectories the reuse methods are priced at, the fewest they could need: the pilot, or
    what a uniform output would need (never more than one per shot). A Clifford circuit's
    ideal output is uniform over 2^``support_bits`` outcomes, which a trajectory's keeps (Pauli
    errors move a stabilizer state's outcomes, not their number): that output's need prices it.
    """
    bits = len(program.measured)
    if support_bits is not None:
        bits = min(bits, support_bits)
    if bits == 0:  # one outcome: every trajectory's noise shows only shot by shot
        return shots
    return min(shots, max(PILOT_TRAJECTORIES, needed_trajectories(2.0**-bits, shots)))


def _aer_estimates(circuit: QuantumCircuit, shots: int, rates: MachineRates) -> dict[str, float]:
    k = circuit.num_qubits
    # Control flow costs its heaviest branch, a for_loop its body times its iterations.
    path = costliest_path(circuit)
    gates, _ = gate_count(path)
    estimates: dict[str, float] = {}
    if k <= AER_DENSITY_MATRIX_MAX_QUBITS:
        runs = 1 if _samples_once(circuit) else shots
        evolution = density_matrix_work(path) / rates.aer_dm_cma_per_s
        estimates["density_matrix"] = rates.aer_call_s + runs * evolution
    per_trajectory = gates * rates.aer_sv_op_s + trajectory_work(path) / rates.aer_sv_amp_per_s
    estimates["statevector"] = rates.aer_call_s + shots * per_trajectory
    return estimates


def _reuse_estimates(
    program: LazyProgram,
    circuit: QuantumCircuit,
    shots: int,
    rates: MachineRates,
    trajectories: int,
    probe_allowed: bool = True,
) -> tuple[dict[str, float], int]:
    """Statevector and MPS reuse at the fewest trajectories they could need (a lower bound for
    concentrated outputs, which make them fall back to one trajectory per shot); also the MPS
    bond bound, which prices its memory."""
    estimates: dict[str, float] = {}
    gates, _ = gate_count(circuit)
    if circuit.num_qubits <= REUSE_MAX_QUBITS:
        per_trajectory = (
            gates * rates.aer_sv_op_s
            + (trajectory_work(circuit) + 2.0 ** len(program.measured)) / rates.aer_sv_amp_per_s
        )
        estimates["statevector_reuse"] = 2 * rates.aer_call_s + trajectories * per_trajectory
    # Unmeasured active qubits (routing ancillas) are sampled with the rest and dropped.
    order = mps_order(circuit)
    bond = max(mps_bonds(circuit, order), default=1)
    probe = None
    # Worth a probe where statevector reuse is slow or would not fit the guard's memory ceiling.
    over_memory = _statevector_reuse_bytes(circuit.num_qubits, len(program.measured)) > (
        guard_settings().memory_bytes
    )
    dear = over_memory or estimates.get("statevector_reuse", float("inf")) > PROBE_WORTH_S
    if probe_allowed and bond > PROBE_CAP and circuit.num_qubits >= PROBE_MIN_QUBITS and dear:
        probe = measured_bond(circuit)
        if probe.bond is not None:  # noisy trajectories priced at twice what the gates reach
            bond = min(bond, 2 * probe.bond)
    if bond <= MPS_MAX_BOND:
        if probe is not None and probe.bond is not None:
            # The probe ran these very gates: its time prices them better than brickwork rates.
            per_trajectory = NOISY_OVER_IDEAL * probe.seconds
        else:
            ops, units = mps_work(circuit, order)
            per_trajectory = ops * rates.aer_mps_op_s + units / rates.aer_mps_chi3_per_s
        sampling = shots * circuit.num_qubits * bond**2 * 4e-9
        estimates["mps_reuse"] = 2 * rates.aer_call_s + trajectories * per_trajectory + sampling
    return estimates, bond


def _non_clifford(circuit: QuantumCircuit) -> str | None:
    """The first gate that makes ``circuit`` other than Clifford, said in words, or None."""
    for instruction in circuit.data:
        operation = instruction.operation
        name = operation.name
        if name in ("barrier", "measure", "delay") or name in _CLIFFORD:
            continue
        if name == "rz":
            turns = float(operation.params[0]) / (np.pi / 2)
            if abs(turns - round(turns)) < 1e-9:
                continue
            return "rz by a non-Clifford angle"
        return f"non-Clifford gate {name!r}"
    return None


def stabilizer_exact(circuit: QuantumCircuit, noise: CompactNoise) -> str | None:
    """Why the stabilizer method would not be exact for this circuit and noise, or None."""
    gate = _non_clifford(circuit)
    if gate is not None:
        return gate
    # Thermal relaxation is a mixture of I, Z and reset only when T2 <= T1.
    if any(t2 > t1 * (1 + 1e-12) for t1, t2 in zip(noise.t1s, noise.t2s, strict=True)):
        return "relaxation with T2 > T1 is not a Pauli-and-reset mixture"
    return None


def plan_methods(
    circuit: QuantumCircuit,
    noise: CompactNoise | None,
    physical_qubits: tuple[int, ...],
    shots: int,
    method: str,
    probe: bool = True,
) -> tuple[NoisyRunPlan, LazyProgram | str]:
    """Price every method that can run the compact ``circuit`` and pick one.

    ``noise`` is needed only to tell whether the stabilizer method is exact (None: not offered).
    ``probe=False`` prices MPS by its bond bound alone (no ideal probe run, which can take
    seconds): for estimates, which the run's own plan refines.
    Raises ``ValueError`` for an unknown method or one that cannot run the circuit.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    rates = machine_rates()
    program = plan_lazy(circuit)
    estimates = _aer_estimates(circuit, shots, rates)
    unsupported = program if isinstance(program, str) else None
    bond, trajectories = 1, 0
    if isinstance(program, LazyProgram):
        if program.peak_entries <= LAZY_MAX_ENTRIES:
            estimates["lazy_density_matrix"] = (
                program.cost_cma / _lazy_rate(program.peak_entries, rates)
                + len(program.ops) * rates.lazy_op_s
                + 1e-3
            )
        else:
            unsupported = f"peak state of {program.peak_entries} entries"
        if branching_entries(program, shots) <= LAZY_MAX_ENTRIES:
            estimates["branching_density_matrix"] = _branching_estimate(program, shots, rates)
        touched, peak = statevector_profile(program)
        if shots * peak <= LAZY_MAX_ENTRIES:
            estimates["branching_statevector"] = _shot_states_estimate(
                program, shots, touched, peak, rates
            )
        support = None
        if _non_clifford(circuit) is None:
            support = clifford_support_bits(circuit, sorted(program.measured))
        trajectories = reuse_trajectories(program, shots, support)
        # A probe costs seconds: not where a method priced already is quicker than its
        # threshold and fits the guard's memory ceiling.
        fitting = _memory_estimates(circuit, program, estimates, 1, shots)
        ceiling = guard_settings().memory_bytes
        probe = probe and not any(
            seconds <= PROBE_WORTH_S and fitting[name] <= ceiling
            for name, seconds in estimates.items()
        )
        reuse, bond = _reuse_estimates(program, circuit, shots, rates, trajectories, probe)
        estimates.update(reuse)
    if noise is not None and stabilizer_exact(circuit, noise) is None:
        gates, _ = gate_count(costliest_path(circuit))
        estimates["stabilizer"] = rates.aer_call_s + shots * gates * rates.aer_stabilizer_op_s
    missed = _apply_misses(circuit, estimates)
    if method == "auto":
        method = min(estimates, key=estimates.__getitem__)
    elif method not in estimates:
        reason = _why_not(method, circuit, noise, program, shots)
        raise ValueError(f"{method} cannot run this circuit: {reason}")
    memory = _memory_estimates(circuit, program, estimates, bond, shots)
    plan = NoisyRunPlan(
        method,
        physical_qubits,
        estimates,
        unsupported,
        rates.measured,
        memory,
        missed,
        trajectories,
    )
    return plan, program


def _branching_estimate(program: LazyProgram, shots: int, rates: MachineRates) -> float:
    """The branching engine at its most branches. Each measurement splits every branch (some 20
    numpy calls), and each shot's bits are expanded, read out and counted at the end (a few ms
    at 4000 shots: where both engines take milliseconds the lazy one, exact, is chosen)."""
    calls = len(program.ops) + 20 * len(program.measured)
    tail = 3e-3 + shots * program.num_clbits * 2e-8
    seconds = 0.0
    for done, work, top in program.branch_profile:
        branches = min(shots, 2**done)
        seconds += branches * work / _lazy_rate(branches * top, rates)
    return seconds + calls * rates.lazy_op_s + tail


def _shot_states_estimate(
    program: LazyProgram, shots: int, touched: float, peak: int, rates: MachineRates
) -> float:
    """The branching statevector: per shot, its amplitude passes and a noise draw per operation;
    past the caches its passes slow as the numpy engine's do."""
    amp_rate = rates.shot_sv_amp_per_s
    if shots * peak > _CACHED_ENTRIES:
        amp_rate *= rates.lazy_big_cma_per_s / rates.lazy_cma_per_s
    per_shot = touched / amp_rate + len(program.ops) * rates.shot_sv_op_s
    tail = 3e-3 + shots * program.num_clbits * 2e-8
    return shots * per_shot + len(program.ops) * rates.lazy_op_s + tail


# States of more entries than this are priced at the numpy engine's large-state rate: past the
# caches an operation is bound by memory traffic (efficient_su2_24 on the Falcons, 65M entries at
# its peak, ran at half the in-cache rate: 17 s where 8.8 s was predicted).
_CACHED_ENTRIES = 2**21


def _lazy_rate(entries: float, rates: MachineRates) -> float:
    """Multiply-adds per second of the numpy engine on a state of ``entries``."""
    return rates.lazy_big_cma_per_s if entries > _CACHED_ENTRIES else rates.lazy_cma_per_s


def _apply_misses(circuit: QuantumCircuit, estimates: dict[str, float]) -> tuple[str, ...]:
    """Price up the methods that overran on this very circuit before (they would again)."""
    from kernel_server.backends.cost_model import miss_factors

    factors = miss_factors(circuit)
    for name, factor in factors.items():
        if name in estimates:
            estimates[name] *= factor
    return tuple(sorted(n for n in factors if n in estimates))


_COMPLEX = 16  # bytes of a double-precision complex amplitude


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _statevector_reuse_bytes(num_qubits: int, measured: int) -> float:
    """A state per core, twice (Aer's working copy), and the pilot's probabilities."""
    return 2.0 * _COMPLEX * 2.0**num_qubits * _cores() + 8.0 * min(2.0**measured, 2**25)


def _memory_estimates(
    circuit: QuantumCircuit,
    program: LazyProgram | str,
    estimates: dict[str, float],
    bond: int,
    shots: int,
) -> dict[str, float]:
    """Peak resident bytes of each method on the compact circuit (twice the state: numpy and
    Aer keep a working copy; Aer's statevector one state per core; ``bond`` the MPS bound)."""
    k = circuit.num_qubits
    cores = _cores()
    memory: dict[str, float] = {}
    for name in estimates:
        if name == "lazy_density_matrix" and isinstance(program, LazyProgram):
            width = 8 if program.peak_entries > 4**10 else _COMPLEX
            memory[name] = 3.0 * program.peak_entries * width
        elif name == "branching_density_matrix" and isinstance(program, LazyProgram):
            memory[name] = 3.0 * branching_entries(program, shots) * _COMPLEX
        elif name == "branching_statevector" and isinstance(program, LazyProgram):
            memory[name] = 3.0 * shots * statevector_profile(program)[1] * _COMPLEX
        elif name == "density_matrix":
            memory[name] = 2.0 * _COMPLEX * 4.0**k
        elif name == "statevector":
            memory[name] = 2.0 * _COMPLEX * 2.0**k * cores
        elif name == "statevector_reuse":
            measured = len(program.measured) if isinstance(program, LazyProgram) else k
            memory[name] = _statevector_reuse_bytes(k, measured)
        elif name == "mps_reuse":
            memory[name] = 64.0 * k * bond**2 * _COMPLEX
        else:
            memory[name] = 2.0 * k * k
    return memory


def _why_not(
    method: str,
    circuit: QuantumCircuit,
    noise: CompactNoise | None,
    program: LazyProgram | str,
    shots: int,
) -> str:
    if isinstance(program, str) and method in _NEEDS_PROGRAM:
        return program
    if method == "lazy_density_matrix" and isinstance(program, LazyProgram):
        return f"peak state of {program.peak_entries} entries"
    if method == "branching_density_matrix":
        return f"more than {LAZY_MAX_ENTRIES} entries in its branches at {shots} shots"
    if method == "branching_statevector":
        return f"more than {LAZY_MAX_ENTRIES} amplitudes over its {shots} shots"
    if method == "density_matrix":
        return f"{circuit.num_qubits} qubits (at most {AER_DENSITY_MATRIX_MAX_QUBITS})"
    if method == "stabilizer":
        return "no noise given" if noise is None else str(stabilizer_exact(circuit, noise))
    if method == "statevector_reuse" and circuit.num_qubits > REUSE_MAX_QUBITS:
        return f"{circuit.num_qubits} qubits (at most {REUSE_MAX_QUBITS})"
    return "it needs gates then terminal measurements of every active qubit (MPS: bonds <= 1024)"
