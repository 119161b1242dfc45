"""Statevector trajectories with the noise drawn here: stratified, weighted, prefixes shared.

Trajectory reuse (:mod:`kernel_server.backends.trajectories`) averages the output
distributions of noisy statevector trajectories. Left to Aer's noise model, each trajectory
costs about twice an ideal evolution (17 qubits, 1200 gates on fake_torino: 105 ms against 50
ms): every gate on a qubit whose T2 exceeds T1 carries a Kraus channel, applied with a norm
computation per operator, and those break gate fusion. This module draws the noise itself and
hands Aer plain circuits, which buys three things:

* **Weighted unravelling.** A channel ``sum_k K_k rho K_k^dagger`` is also the mean of
  ``(K_k/sqrt(q_k)) rho (K_k/sqrt(q_k))^dagger`` over branches drawn with any fixed
  probabilities ``q_k``: the state is carried unnormalised, its norm is its weight, and the
  mean of the trajectories' (unnormalised) output distributions is the exact noisy one. So
  amplitude damping's no-jump operator diag(1, sqrt(d)) becomes a fixed diagonal in the circuit
  (fused like any gate), and a jump happens with probability (1-d)/2 whatever the state.
  Depolarizing and dephasing are Pauli mixtures. A reset (relaxation where T2 <= T1) is Aer's
  own, which draws its outcome by the state and renormalises it: the circuit saves the norm
  just before it, and that weight multiplies the trajectory's distribution.
* **Stratification on the error-free trajectory.** With probability ``P0`` (the product of
  every site's no-event probability) a trajectory draws no event; that trajectory is one fixed
  circuit, evolved once. The others are drawn conditioned on at least one event, and the
  estimate ``P0 c + (1 - P0) mean_t p_t`` has the variance of the unstratified mean times
  about ``(1 - P0)^2`` (fake_torino's 16-qubit random circuit: P0 = 0.14, a third fewer
  trajectories).
* **Shared prefixes.** The error-free run saves its state at a few checkpoints; a trajectory
  starts from the last checkpoint before its first event.

Noiseless single-qubit gates (rz) are multiplied into the next gate on their qubit, which cuts
the instructions Aer takes in per trajectory by 40% on Eagle circuits. Measured on this 2-core
machine kind (``benchmarks/noisy_execution.py``, 4000 shots): the 16-qubit random circuit of
depth 10 in 1.2 s on fake_torino and 2.3 s on fake_brisbane, from 4.0 s and 3.3 s.

The branches of every site compose to the site's channel exactly (tested against the
superoperators of :mod:`kernel_server.backends.noise`); readout errors are applied to the mean
distribution afterwards, as in the Aer-noise path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import CircuitInstruction, Delay, Operation, Reset
from qiskit.circuit.library import DiagonalGate, UnitaryGate, XGate, YGate, ZGate
from qiskit_aer import AerSimulator

from kernel_server.backends.lazy_dm import LazyProgram
from kernel_server.backends.noise import CompactNoise, ErrorSpec, relaxation_factors

__all__ = [
    "Event",
    "NoisySites",
    "Site",
    "StratifiedRun",
    "TrajectoryCircuits",
    "noisy_sites",
    "run_stratified",
    "stratified_supported",
]

# A single-qubit operator of a branch: a Pauli's name, or the diagonal of a diagonal operator.
SingleOp = str | tuple[complex, complex]
_PAULIS: dict[str, Operation] = {"x": XGate(), "y": YGate(), "z": ZGate(), "reset": Reset()}


def _operation(op: SingleOp) -> Operation:
    if isinstance(op, str):
        return _PAULIS[op]
    # Aer applies a circuit's "diagonal" instruction as given, unitary or not (its noise model
    # would refuse one); qiskit checks unit modulus only when the gate is built.
    gate = DiagonalGate([1, 1])
    gate.params = [complex(v) for v in op]
    return gate


@dataclass(frozen=True)
class Event:
    """What one branch of a site does to the error-free circuit: ``ops`` go in before its
    instruction ``position``; ``replace`` (an instruction's index) gets ``replacement``."""

    position: int
    ops: tuple[tuple[SingleOp, int], ...]  # (operator, compact qubit), in order
    replace: int | None = None
    replacement: SingleOp | None = None

    @property
    def earliest(self) -> int:
        return self.position if self.replace is None else min(self.position, self.replace)


@dataclass(frozen=True)
class Site:
    """One independent error draw. Event k happens with ``probabilities[k]`` and multiplies the
    trajectory's weight by ``factors[k]``; no event (the rest) by ``none_factor``."""

    probabilities: np.ndarray
    factors: np.ndarray
    events: tuple[Event, ...]
    none_factor: float = 1.0
    op_index: int = 0  # the program operation whose error this is
    damping: _Damping | None = None  # amplitude damping: what its branches are drawn from


@dataclass(frozen=True)
class _Damping:
    """An amplitude-damping site's numbers, to draw its jump again at a measured P(1)."""

    qubit: int
    decay: float
    dephase: float
    position: int
    fixed: int

    def site(self, op_index: int, excited: float = 0.5) -> Site:
        """Amplitude damping (no jump K0 = diag(1, sqrt d), fixed in the circuit; jump
        sqrt(1 - d)|0><1|, drawn at (1 - d) p and weighted by P(1)/p), then dephasing by
        e / sqrt(d) (Z). ``excited``: p, ideally the state's own P(1) there (weights near 1)."""
        d, q, position = self.decay, self.qubit, self.position
        jump = (1.0 - d) * min(max(excited, _EXCITED_FLOOR), 1.0)
        lam = min(self.dephase / math.sqrt(d), 1.0)  # T2 = 2 T1 (truncated) may round over 1
        events = (
            Event(position, (("z", q),)),
            Event(position, (("x", q),), self.fixed, (0.0, math.sqrt(1.0 - d))),
        )
        probabilities = np.array([(1.0 - jump) * (1.0 - lam) / 2, jump])
        none = 1.0 / (1.0 - jump)
        factors = np.array([none, 1.0 / jump])
        return Site(probabilities, factors, events, none, op_index, self)


# A jump is drawn at no less than this share of its rate, for a qubit the error-free state
# holds at |0> but an earlier error may have flipped (its weight is then at most 1/0.05).
_EXCITED_FLOOR = 0.25


def _relaxation_site(
    qubit: int, decay: float, dephase: float, position: int, fixed: int | None, op_index: int
) -> Site | None:
    """A qubit's relaxation after a gate (d = exp(-t/T1), e = exp(-t/T2)); ``fixed``: T2 > T1,
    the index of its no-jump diagonal in the error-free circuit."""
    d, e, q = decay, dephase, qubit
    if fixed is None:
        # T2 <= T1: identity, Z ((d - e)/2) or reset to 0 (1 - d), as thermal_relaxation_error.
        # Aer's reset draws its outcome by the state and leaves it normalised: the circuit
        # saves the weight (the norm) just before it.
        z, reset = (d - e) / 2, 1.0 - d
        if z <= 0 and reset <= 0:
            return None
        events = (Event(position, (("z", q),)), Event(position, (("reset", q),)))
        return Site(np.array([z, reset]), np.ones(2), events, 1.0, op_index)
    return _Damping(q, d, e, position, fixed).site(op_index)


@dataclass(frozen=True)
class NoisySites:
    """A program's error-free circuit (gates and the fixed no-jump diagonals) and its error
    sites in circuit order (within a gate: its depolarizing draw, then each qubit's relaxation)."""

    clean: tuple[CircuitInstruction, ...]
    sites: tuple[Site, ...]
    num_qubits: int

    @property
    def rates(self) -> np.ndarray:
        """Per site, the probability of any event."""
        return np.array([site.probabilities.sum() for site in self.sites])

    @property
    def clean_probability(self) -> float:
        """P0: the chance that a trajectory draws no event at all."""
        return float(np.exp(np.sum(np.log1p(-self.rates))))

    @property
    def clean_weight(self) -> float:
        """The error-free trajectory's weight (its no-jump branches' factors)."""
        return float(np.prod([site.none_factor for site in self.sites]))

    @property
    def expected_jumps(self) -> float:
        """Amplitude-damping jumps a trajectory would see if every such qubit were excited."""
        return sum(1.0 - site.damping.decay for site in self.sites if site.damping)

    def drawn_at(self, excited: dict[int, float]) -> NoisySites:
        """These sites with the jumps of sites ``k`` drawn at P(1) = ``excited[k]``."""
        sites = list(self.sites)
        for k, p1 in excited.items():
            damping = sites[k].damping
            assert damping is not None
            sites[k] = damping.site(sites[k].op_index, p1)
        return replace(self, sites=tuple(sites))


def stratified_supported(program: LazyProgram) -> bool:
    """Whether this module can draw the program's noise (delays relax through Aer's pass)."""
    return not any(isinstance(operation, Delay) for operation, _ in program.ops)


def _depolarizing_site(spec: ErrorSpec, qargs: tuple[int, ...], position: int, op: int) -> Site:
    """Each non-identity Pauli with probability p / 4^n (``depolarizing_error``'s mixture)."""
    n = len(qargs)
    events = []
    for label in range(1, 4**n):
        letters = [(label >> (2 * j)) & 3 for j in range(n)]
        ops = tuple(("ixyz"[letter], qargs[j]) for j, letter in enumerate(letters) if letter)
        events.append(Event(position, ops))
    assert spec.depolarizing is not None
    probabilities = np.full(4**n - 1, spec.depolarizing / 4**n)
    return Site(probabilities, np.ones(4**n - 1), tuple(events), 1.0, op)


def noisy_sites(program: LazyProgram, noise: CompactNoise) -> NoisySites:
    """The error-free circuit and the error sites of ``program`` under ``noise``: after each
    gate its depolarizing Paulis, then each qubit's relaxation (``ErrorSpec``'s order)."""
    clean: list[CircuitInstruction] = []
    sites: list[Site] = []
    qubits = QuantumCircuit(program.num_qubits).qubits
    # Noiseless single-qubit gates (rz: 40% of a transpiled circuit) wait for the next gate on
    # their qubit and go into it: fewer instructions for Aer to take in and fuse per trajectory.
    waiting: dict[int, np.ndarray] = {}
    for index, (operation, qargs) in enumerate(program.ops):
        spec = noise.errors.get((operation.name, tuple(qargs)))
        if spec is None and len(qargs) == 1:
            (qubit,) = qargs
            waiting[qubit] = _matrix(operation) @ waiting.get(qubit, np.eye(2))
            continue
        clean.append(_instruction(operation, qargs, waiting, qubits))
        if spec is None:
            continue
        if spec.depolarizing:
            sites.append(_depolarizing_site(spec, tuple(qargs), len(clean), index))
        if not spec.duration:
            continue
        pending = []
        for qubit, t1, t2 in zip(qargs, spec.t1s, spec.t2s, strict=True):
            decay, dephase = relaxation_factors(t1, t2, spec.duration)
            fixed = None
            if dephase > decay:  # T2 > T1: the no-jump diagonal goes into the circuit
                fixed = len(clean)
                no_jump = (1.0, math.sqrt(decay))
                clean.append(CircuitInstruction(_operation(no_jump), (qubits[qubit],)))
            pending.append((qubit, decay, dephase, fixed))
        end = len(clean)  # relaxation events go after every fixed diagonal of this gate
        for qubit, decay, dephase, fixed in pending:
            site = _relaxation_site(qubit, decay, dephase, end, fixed, index)
            if site is not None:
                sites.append(site)
    for qubit, matrix in sorted(waiting.items()):
        clean.append(CircuitInstruction(UnitaryGate(matrix, check_input=False), (qubits[qubit],)))
    return NoisySites(tuple(clean), tuple(sites), program.num_qubits)


def _instruction(
    operation: Operation, qargs: tuple[int, ...], waiting: dict[int, np.ndarray], qubits: list
) -> CircuitInstruction:
    """``operation`` on ``qargs`` with the noiseless gates waiting on those qubits before it."""
    before = [waiting.pop(q, None) for q in qargs]
    if any(m is not None for m in before):
        full = np.eye(1, dtype=complex)
        for m in before:  # qargs[0] is the lowest bit: the rightmost factor
            full = np.kron(np.eye(2) if m is None else m, full)
        operation = UnitaryGate(_matrix(operation) @ full, check_input=False)
    return CircuitInstruction(operation, tuple(qubits[q] for q in qargs))


@dataclass(frozen=True)
class StratifiedRun:
    """The mean output distribution (little-endian over the measured qubits, sorted) and what
    it took."""

    probabilities: np.ndarray
    trajectories: int  # drawn with an event, plus the error-free one
    collision: float  # E_t ||p_t||^2 over all trajectories (the bound the count came from)
    clean_probability: float


# Expected jumps per trajectory (at P(1) = 1) from which the error-free run measures P(1) at
# every amplitude-damping site (saves that cost fusion: 0.1 s more on 17 qubits).
_JUMPS_WORTH_MEASURING = 0.5
# Checkpoints of the error-free run (states a trajectory may start from) and their memory.
_CHECKPOINTS = 16
_CHECKPOINT_BYTES = 2**28


class TrajectoryCircuits:
    """Builds and runs the trajectory circuits of one program."""

    def __init__(self, noisy: NoisySites, measured: list[int], simulator: AerSimulator) -> None:
        self.noisy = noisy
        self.measured = measured
        self.simulator = simulator
        self.qubits = QuantumCircuit(noisy.num_qubits).qubits
        length = len(noisy.clean)
        room = _CHECKPOINT_BYTES // (16 * 2**noisy.num_qubits)
        count = max(0, min(_CHECKPOINTS, room, length // 64))
        self.checkpoints = sorted({length * (k + 1) // (count + 1) for k in range(count)})
        self.states: list[tuple[np.ndarray, float]] = []  # (unit state, norm^2) per checkpoint
        self.rates = noisy.rates
        self.first_event = 1.0 - np.exp(np.cumsum(np.log1p(-self.rates)))  # P(first <= site)

    def clean(self) -> np.ndarray:
        """The error-free trajectory's (weighted) distribution. Keeps its checkpoint states;
        where jumps are frequent, also its P(1) at each amplitude-damping site, which the jumps
        are then drawn at (at P(1) = 1/2 otherwise, their weights are 2 P(1) and, compounded
        over several jumps, spread far: 16 qubits on fake_kolkata drew a trajectory of weight
        22 among 15 near 1)."""
        circuit = QuantumCircuit(self.noisy.num_qubits)
        marks = set(self.checkpoints)
        saves: dict[int, list[tuple[int, int]]] = {}  # position -> (site, qubit)
        if self.noisy.expected_jumps > _JUMPS_WORTH_MEASURING:
            for k, site in enumerate(self.noisy.sites):
                if site.damping is not None:
                    saves.setdefault(site.damping.position, []).append((k, site.damping.qubit))
        for index in range(len(self.noisy.clean) + 1):
            for k, qubit in saves.get(index, ()):
                circuit.save_probabilities([qubit], label=f"excited{k}")
            if index in marks:
                circuit.save_statevector(label=f"checkpoint{index}")
            if index < len(self.noisy.clean):
                circuit._append(self.noisy.clean[index])
        circuit.save_probabilities(self.measured)
        data = self.simulator.run(circuit, shots=1).result().data(0)
        for index in self.checkpoints:
            state = np.asarray(data[f"checkpoint{index}"])
            norm2 = float(np.vdot(state, state).real)
            self.states.append((state / math.sqrt(norm2), norm2))
        if saves:
            excited = {}
            for pairs in saves.values():
                for k, _ in pairs:
                    marginal = np.asarray(data[f"excited{k}"])
                    excited[k] = float(marginal[1] / max(float(marginal.sum()), 1e-300))
            self.noisy = self.noisy.drawn_at(excited)
            self.rates = self.noisy.rates
            self.first_event = 1.0 - np.exp(np.cumsum(np.log1p(-self.rates)))
        return np.asarray(data["probabilities"]) * self.noisy.clean_weight

    def draw(self, rng: np.random.Generator) -> tuple[list[Event], float]:
        """One trajectory's events, conditioned on at least one, and its weight."""
        rates = self.rates
        first = int(np.searchsorted(self.first_event, rng.random() * self.first_event[-1]))
        first = min(first, len(rates) - 1)
        later = first + 1 + np.flatnonzero(rng.random(len(rates) - first - 1) < rates[first + 1 :])
        events, weight = [], self.noisy.clean_weight
        for s in [first, *later.tolist()]:
            site = self.noisy.sites[s]
            k = int(rng.choice(len(site.probabilities), p=site.probabilities / rates[s]))
            events.append(site.events[k])
            weight *= site.factors[k] / site.none_factor
        return events, weight

    def circuit(self, events: list[Event]) -> tuple[QuantumCircuit, float, int]:
        """A trajectory's circuit, from the last checkpoint before its first edit; with the
        checkpoint's norm^2, which scales its probabilities, and its number of resets (each
        saves the norm^2 before it as ``weight<i>``)."""
        earliest = min(event.earliest for event in events)
        start, norm2, state = 0, 1.0, None
        for k, index in enumerate(self.checkpoints):
            if index <= earliest:
                start, (state, norm2) = index, self.states[k]
        data = list(self.noisy.clean[start:])
        inserts: dict[int, list[CircuitInstruction]] = {}
        for event in events:
            if event.replace is not None and event.replacement is not None:
                target = data[event.replace - start]
                data[event.replace - start] = target.replace(
                    operation=_operation(event.replacement)
                )
            inserts.setdefault(event.position, []).extend(
                CircuitInstruction(_operation(op), (self.qubits[q],)) for op, q in event.ops
            )
        circuit = QuantumCircuit(self.noisy.num_qubits)
        if state is not None:
            circuit.set_statevector(state)
        resets = 0

        def insert(position: int) -> None:
            nonlocal resets
            for extra in inserts.get(position, ()):
                if extra.operation.name == "reset":  # the weight the reset will normalise away
                    circuit.save_probabilities(list(extra.qubits), label=f"weight{resets}")
                    resets += 1
                circuit._append(extra)

        for offset, instruction in enumerate(data):
            insert(start + offset)
            circuit._append(instruction)
        insert(len(self.noisy.clean))
        circuit.save_probabilities(self.measured)
        return circuit, norm2, resets

    def batch(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` trajectories drawn with at least one event: their weighted distributions."""
        circuits, scales, resets = [], [], []
        for _ in range(count):
            events, weight = self.draw(rng)
            circuit, norm2, reset_count = self.circuit(events)
            circuits.append(circuit)
            scales.append(weight * norm2)
            resets.append(reset_count)
        seed = int(rng.integers(2**31))
        result = self.simulator.run(circuits, shots=1, seed_simulator=seed).result()
        rows = []
        for i, scale in enumerate(scales):
            data = result.data(i)
            for r in range(resets[i]):
                scale *= float(np.sum(data[f"weight{r}"]))
            probabilities = np.asarray(data["probabilities"])
            # Weight 0 (a jump or projection the state could not take, then a reset of the
            # zero vector, which Aer leaves as NaN) contributes nothing.
            rows.append(probabilities * scale if scale > 0 else np.zeros_like(probabilities))
        return np.array(rows)


def _matrix(operation: Operation) -> np.ndarray:
    if operation.name == "diagonal":
        return np.diag(np.asarray(operation.params, dtype=complex))
    return np.asarray(operation.to_matrix(), dtype=complex)


# Seconds one Aer call of trajectories should take at most (the budget is checked between).
_BATCH_S = 2.0


def run_stratified(
    program: LazyProgram,
    noise: CompactNoise,
    shots: int,
    rng: np.random.Generator,
    simulator: AerSimulator,
    bound: float,
    pilot: int,
    check: Callable[[float], None],
    learned: Callable[[int, float], None],
    worth_going_on: Callable[[int, float, float], bool] = lambda remaining, pace, collision: True,
) -> StratifiedRun | None:
    """The mean distribution of the program's measured qubits over as few trajectories as the
    variance bound allows (see the module docstring; ``simulator``: an ideal statevector one).

    The bound is trajectory reuse's (``extra <= bound * sampling``) for the stratified
    estimate: ``(1 - P0)^2 V / M``, V bounded by the drawn trajectories' mean collision
    probability. Never more trajectories than the shots that fall to them, (1 - P0) x shots.
    After the pilot, and whenever the need has doubled since, ``worth_going_on(remaining
    trajectories, seconds each, collision probability of the unstratified trajectories)``;
    None when it says no.
    """
    runner = TrajectoryCircuits(noisy_sites(program, noise), sorted(program.measured), simulator)
    started = time.perf_counter()
    clean = runner.clean()
    p0 = runner.noisy.clean_probability
    cap = max(1, math.ceil((1.0 - p0) * shots)) if p0 < 1.0 else 0
    if cap == 0:
        return StratifiedRun(clean, 1, float(clean @ clean), p0)
    drawn = runner.batch(min(pilot, cap), rng)
    per_trajectory = (time.perf_counter() - started) / (len(drawn) + 1)
    total, squares, count = drawn.sum(axis=0), float(np.sum(drawn * drawn)), len(drawn)

    def wanted() -> tuple[int, float]:
        """Trajectories needed by the collision probability of all drawn so far (re-read after
        every batch: a pilot of 8 misjudges it by a third either way), and that of the
        unstratified trajectories."""
        collision = squares / count
        overall = p0 * float(clean @ clean) + (1.0 - p0) * collision
        sampling = max(1.0 - overall, 1e-12) / shots
        need = math.ceil((1.0 - p0) ** 2 * collision / (bound * sampling))
        return min(cap, max(count, need)), overall

    need, overall = wanted()
    if not worth_going_on(need - count, per_trajectory, overall):
        return None
    learned(need + 1, (need - count) * per_trajectory)
    size = max(pilot, int(_BATCH_S / per_trajectory))
    asked = need
    while count < need:
        check(count / need)
        more = runner.batch(min(size, need - count, 2 * pilot), rng)
        total, count = total + more.sum(axis=0), count + len(more)
        squares += float(np.sum(more * more))
        need, overall = wanted()
        # A trajectory weighted far from 1 (many jumps drawn against the state) can multiply
        # the need: ask again whenever it has doubled.
        if need > 2 * asked:
            if not worth_going_on(need - count, per_trajectory, overall):
                return None
            asked = need
            learned(need + 1, (need - count) * per_trajectory)
    mean = p0 * clean + (1.0 - p0) * total / count
    return StratifiedRun(mean, count + 1, overall, p0)
