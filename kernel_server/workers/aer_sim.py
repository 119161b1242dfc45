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
3. runs it with the cheapest exact method for the circuit:

   * ``lazy_density_matrix``: the density matrix evolved once (no per-shot trajectories), in
     numpy, with qubits entering the state only at their first multi-qubit gate and leaving it
     (collapsed to their measurement-basis diagonal, or traced out) right after their last gate.
     Its size is 4^(qubits in flight) x 2^(qubits done), not 4^k: a GHZ ladder never holds more
     than a few qubits in flight. Shots are then drawn from the final distribution.
   * ``density_matrix``: Aer's density matrix on all k qubits, for circuits the engine above does
     not take (mid-circuit measurement, reset, control flow) or where it would be slower.
   * ``statevector``: Aer's noisy trajectories, beyond the density matrix's width and whenever
     Aer could not sample all shots from one evolution (mid-circuit measurement, control flow).

All three simulate the same noise model; none approximates it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from qiskit import QuantumCircuit, QuantumRegister
from qiskit.circuit import ControlFlowOp, Delay, Gate, Measure
from qiskit.providers import BackendV2
from qiskit.quantum_info import Statevector, hellinger_fidelity
from qiskit.result.postprocess import format_counts_memory
from qiskit_aer import AerSimulator
from qiskit_aer.noise import (
    NoiseModel,
    QuantumError,
    ReadoutError,
    depolarizing_error,
    thermal_relaxation_error,
)
from qiskit_aer.noise.passes import RelaxationNoisePass

from kernel_server.workers.devices import calibration_id

METHODS = ("auto", "lazy_density_matrix", "density_matrix", "statevector")

# Widest circuit Aer's density matrix takes: at 12 qubits it holds 2^24 entries (256 MB in double)
# and costs ~0.17 s per two-qubit gate on 2 cores; at 13 that is 1 GB and ~0.7 s per gate, and
# noisy statevector trajectories win.
AER_DENSITY_MATRIX_MAX_QUBITS = 12
# Largest state (complex entries) the numpy engine may hold: 4^12, the same memory as Aer's.
LAZY_MAX_ENTRIES = 4**12
# Throughputs measured on this 2-core machine (complex multiply-adds per second), used only to
# choose a method. On 8-12 qubit circuits the numpy engine was 4-100x faster than Aer's density
# matrix even when every qubit is in flight (12 qubits, 44 cx: 3.8 s against 11.8 s).
_LAZY_CMA_PER_S = 1.0e9
_LAZY_OP_S = 2e-5  # Python cost per operation of the numpy engine
_AER_DM_CMA_PER_S = 0.8e9
_AER_SV_CMA_PER_S = 1.0e9
# Fixed cost of one Aer call on the compact circuit (noise model hand-over, result parsing).
_AER_CALL_S = 0.04

_SKIPPED = frozenset({"barrier"})


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
# Device noise for a set of physical qubits
# --------------------------------------------------------------------------------------------


def _truncated_t2(t1: float | None, t2: float | None) -> float | None:
    # A T2 above 2*T1 is unphysical; from_backend clips it the same way.
    if t1 is None:
        return t2
    if t2 is None:
        return 2 * t1
    return min(t2, 2 * t1)


# Superoperators here act on the row-major vectorisation of a k-qubit density matrix: index
# a * 2^k + b for rho[a, b], a and b little-endian over the qargs as in Qiskit. Then
# vec(K rho K^dagger) = kron(K, conj(K)) vec(rho) and composition is matrix product.


def _tensor_superops(singles: list[np.ndarray]) -> np.ndarray:
    """Superop of independent single-qubit channels, ``singles[j]`` on qarg j (each 4 x 4)."""
    k = len(singles)
    full = singles[0].reshape(2, 2, 2, 2)  # (a', b', a, b)
    for single in singles[1:]:
        full = np.multiply.outer(full, single.reshape(2, 2, 2, 2))
    # Axes are (a'_j, b'_j, a_j, b_j) for j = 0..k-1; the superop wants each of the four
    # blocks big-endian (qarg k-1 first).
    order = [4 * j + part for part in range(4) for j in reversed(range(k))]
    return full.transpose(order).reshape(4**k, 4**k)


def _relaxation_superop(t1: float, t2: float, duration: float) -> np.ndarray:
    """Thermal relaxation at 0 mK (T2 already <= 2 T1): populations decay to |0> with T1,
    coherences with T2 - the channel ``thermal_relaxation_error`` builds."""
    decay = np.exp(-duration / t1) if np.isfinite(t1) else 1.0
    dephase = np.exp(-duration / t2) if np.isfinite(t2) else 1.0
    superop = np.zeros((4, 4), dtype=complex)
    superop[0, 0] = 1.0  # rho00 <- rho00 + (1 - decay) rho11
    superop[0, 3] = 1.0 - decay
    superop[3, 3] = decay  # rho11 <- decay rho11
    superop[1, 1] = superop[2, 2] = dephase  # rho01, rho10
    return superop


def _depolarizing_superop(param: float, num_qubits: int) -> np.ndarray:
    """rho -> (1 - param) rho + param tr(rho) I / d, as ``depolarizing_error`` defines it."""
    dim = 2**num_qubits
    identity = np.eye(dim).reshape(-1)
    return (1 - param) * np.eye(dim * dim) + (param / dim) * np.outer(identity, identity)


def _average_gate_fidelity(superop: np.ndarray, num_qubits: int) -> float:
    dim = 2**num_qubits
    process_fidelity = float(np.real(np.trace(superop))) / dim**2
    return (dim * process_fidelity + 1) / (dim + 1)


def _depolarizing_param(num_qubits: int, gate_error: float, relax_fidelity: float) -> float | None:
    """Parameter of the depolarizing channel that, followed by relaxation of average fidelity
    ``relax_fidelity``, has average infidelity ``gate_error`` (the reported error is read as
    1 - average gate fidelity of the whole); None when relaxation alone explains it.
    Same arithmetic as qiskit-aer's device model."""
    if gate_error <= 1.0 - relax_fidelity:
        return None
    dim = 2**num_qubits
    gate_error = min(gate_error, dim / (dim + 1))
    param = dim * (gate_error - (1.0 - relax_fidelity)) / (dim * relax_fidelity - 1)
    return min(param, 4**num_qubits / (4**num_qubits - 1))


@dataclass(frozen=True)
class ErrorSpec:
    """The numbers behind one instruction's error: depolarizing, then relaxation on each qubit."""

    depolarizing: float | None  # depolarizing parameter (gates only)
    duration: float | None  # seconds of relaxation
    t1s: tuple[float, ...]  # per qarg, inf when unknown
    t2s: tuple[float, ...]  # per qarg, truncated to 2 T1, inf when unknown

    @property
    def num_qubits(self) -> int:
        return len(self.t1s)

    def relaxation_superop(self) -> np.ndarray | None:
        if not self.duration:
            return None
        return _tensor_superops(
            [
                _relaxation_superop(t1, t2, self.duration)
                for t1, t2 in zip(self.t1s, self.t2s, strict=True)
            ]
        )

    def superop(self) -> np.ndarray:
        superop = np.eye(4**self.num_qubits, dtype=complex)
        if self.depolarizing is not None:
            superop = _depolarizing_superop(self.depolarizing, self.num_qubits)
        relaxation = self.relaxation_superop()
        return superop if relaxation is None else relaxation @ superop

    def quantum_error(self) -> QuantumError:
        """The same channel as an Aer ``QuantumError`` (for Aer's own methods)."""
        error: QuantumError | None = None
        if self.depolarizing is not None:
            error = depolarizing_error(self.depolarizing, self.num_qubits)
        if self.duration:
            relaxation: QuantumError | None = None
            for t1, t2 in zip(self.t1s, self.t2s, strict=True):
                single = thermal_relaxation_error(t1, t2, self.duration, 0)
                relaxation = single if relaxation is None else relaxation.expand(single)
            error = relaxation if error is None else error.compose(relaxation)
        assert error is not None
        return error


def _error_spec(target: Any, qargs: tuple[int, ...], prop: Any, is_gate: bool) -> ErrorSpec | None:
    """The error ``NoiseModel.from_backend`` attaches to one target entry, or None if ideal."""
    t1s, t2s = [], []
    for q in qargs:
        qprops = target.qubit_properties[q] if target.qubit_properties else None
        t1 = qprops.t1 if qprops is not None else None
        t2 = _truncated_t2(t1, qprops.t2 if qprops is not None else None)
        t1s.append(np.inf if t1 is None else float(t1))
        t2s.append(np.inf if t2 is None else float(t2))
    duration = float(prop.duration) if prop.duration else None
    if duration is not None and all(np.isinf(t1s)) and all(np.isinf(t2s)):
        duration = None  # no T1/T2 known: the relaxation is the identity, from_backend drops it
    spec = ErrorSpec(None, duration, tuple(t1s), tuple(t2s))
    depolarizing = None
    if is_gate and prop.error:
        relaxation = spec.relaxation_superop()
        relax_fidelity = (
            1.0 if relaxation is None else _average_gate_fidelity(relaxation, len(qargs))
        )
        depolarizing = _depolarizing_param(len(qargs), float(prop.error), relax_fidelity)
    if depolarizing is None and duration is None:
        return None
    return ErrorSpec(depolarizing, duration, tuple(t1s), tuple(t2s))


@dataclass
class CompactNoise:
    """The device's noise restricted to some physical qubits, indexed by compact qubits.

    Kept as numbers (:class:`ErrorSpec`): the numpy engine turns them into superoperators in
    closed form, and the Aer ``NoiseModel`` is only built when an Aer method runs (building
    ``QuantumError`` objects costs ~4 ms each, most of a cold run otherwise).
    """

    backend_name: str
    calibration_id: str
    physical_qubits: tuple[int, ...]
    basis_gates: tuple[str, ...]
    errors: dict[tuple[str, tuple[int, ...]], ErrorSpec]
    readout: dict[int, np.ndarray]  # compact qubit -> P[true, measured]
    t1s: np.ndarray
    t2s: np.ndarray
    dt: float | None
    # Superoperators of the numpy engine: (gate, qargs) for parameterless gates followed by their
    # error, ("error", gate, qargs) for errors alone.
    superops: dict[tuple, np.ndarray | None] = field(default_factory=dict, repr=False)
    simulators: dict[str, AerSimulator] = field(default_factory=dict, repr=False)
    _noise_model: NoiseModel | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def quantum_errors(self) -> dict[tuple[str, tuple[int, ...]], QuantumError]:
        return {key: spec.quantum_error() for key, spec in self.errors.items()}

    @property
    def noise_model(self) -> NoiseModel:
        """Aer noise model on the compact qubits (built on first use)."""
        with self._lock:
            if self._noise_model is None:
                model = NoiseModel(basis_gates=list(self.basis_gates))
                for (name, cargs), error in self.quantum_errors().items():
                    model.add_quantum_error(error, name, list(cargs))
                for qubit, matrix in sorted(self.readout.items()):
                    model.add_readout_error(ReadoutError(matrix), [qubit])
                self._noise_model = model
            return self._noise_model

    def error_superop(self, name: str, qargs: tuple[int, ...]) -> np.ndarray | None:
        """Superoperator of the error after ``name`` on ``qargs`` (cached), None if ideal."""
        key = ("error", name, qargs)
        if key not in self.superops:
            spec = self.errors.get((name, qargs))
            self.superops[key] = None if spec is None else spec.superop()
        return self.superops[key]


def build_compact_noise(backend: BackendV2, physical_qubits: tuple[int, ...]) -> CompactNoise:
    """Build, uncached, the noise of ``physical_qubits`` on ``backend`` (see :func:`compact_noise`).

    Mirrors ``NoiseModel.from_backend`` for BackendV2 (qiskit-aer 0.18) entry by entry: each gate
    gets a depolarizing error followed by thermal relaxation over its duration, other
    instructions (reset) relaxation only, measurement a readout error built from its error rate.
    Only target entries whose qubits all lie in ``physical_qubits`` are kept.
    """
    target = backend.target
    compact = {p: i for i, p in enumerate(physical_qubits)}
    errors: dict[tuple[str, tuple[int, ...]], ErrorSpec] = {}
    readout: dict[int, np.ndarray] = {}
    for name in target.operation_names:
        props = target[name]
        if props is None:
            continue
        operation = target.operation_from_name(name)
        for qargs, prop in props.items():
            if qargs is None or prop is None or any(q not in compact for q in qargs):
                continue
            cargs = tuple(compact[q] for q in qargs)
            if isinstance(operation, Measure):
                # Fake backends give one symmetric error per measurement, as from_backend reads it.
                p01 = getattr(prop, "prob_meas1_prep0", prop.error) or 0.0
                p10 = getattr(prop, "prob_meas0_prep1", prop.error) or 0.0
                readout[cargs[0]] = np.array([[1 - p01, p01], [p10, 1 - p10]])
                continue
            spec = _error_spec(target, qargs, prop, isinstance(operation, Gate))
            if spec is not None:
                errors[(name, cargs)] = spec
    t1s, t2s = [], []
    for p in physical_qubits:
        qprops = target.qubit_properties[p] if target.qubit_properties else None
        t1 = qprops.t1 if qprops is not None else None
        t2 = _truncated_t2(t1, qprops.t2 if qprops is not None else None)
        t1s.append(np.inf if t1 is None else t1)
        t2s.append(np.inf if t2 is None else t2)
    return CompactNoise(
        backend_name=backend.name,
        calibration_id=calibration_id(backend),
        physical_qubits=tuple(physical_qubits),
        basis_gates=tuple(backend.operation_names),
        errors=errors,
        readout=readout,
        t1s=np.array(t1s),
        t2s=np.array(t2s),
        dt=backend.dt,
    )


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    max_size: int


_NOISE_CACHE_SIZE = 256
_noise_lock = threading.Lock()
_noise_cache: OrderedDict[tuple[str, str, tuple[int, ...]], CompactNoise] = OrderedDict()
_noise_stats = {"hits": 0, "misses": 0}


def compact_noise(backend: BackendV2, physical_qubits: tuple[int, ...]) -> CompactNoise:
    """The noise of ``physical_qubits``, cached per (backend, calibration id, qubits), LRU."""
    key = (backend.name, calibration_id(backend), tuple(physical_qubits))
    with _noise_lock:
        cached = _noise_cache.get(key)
        if cached is not None:
            _noise_cache.move_to_end(key)
            _noise_stats["hits"] += 1
            return cached
        _noise_stats["misses"] += 1
    built = build_compact_noise(backend, tuple(physical_qubits))
    with _noise_lock:
        _noise_cache[key] = built
        while len(_noise_cache) > _NOISE_CACHE_SIZE:
            _noise_cache.popitem(last=False)
    return built


def noise_cache_info() -> CacheInfo:
    """Hits, misses and size of the compact noise-model cache."""
    with _noise_lock:
        return CacheInfo(
            _noise_stats["hits"], _noise_stats["misses"], len(_noise_cache), _NOISE_CACHE_SIZE
        )


def clear_caches() -> None:
    """Forget every noise model, reference simulator and statistic (benchmarks, tests)."""
    with _noise_lock:
        _noise_cache.clear()
        _noise_stats.update(hits=0, misses=0)
    with _reference_lock:
        _reference_simulators.clear()


# --------------------------------------------------------------------------------------------
# The lazy density-matrix engine
# --------------------------------------------------------------------------------------------
#
# State: one complex array whose axes are labelled (qubit, kind). A qubit in flight has two axes,
# kind "r" (ket index) and "c" (bra index); a finished, measured qubit has one axis "d" holding the
# diagonal. Operations are superoperators M (4^k x 4^k) acting on the row-major vectorisation of a
# k-qubit density matrix, vec index a * 2^k + b for rho[a, b], with a and b little-endian over the
# operation's qargs as in Qiskit. ``np.tensordot`` contracts M's input axes with the state's
# axes and leaves M's output axes in front; the label list follows, so nothing is transposed back.


def _embed_pair(first: np.ndarray | None, second: np.ndarray | None) -> np.ndarray:
    """Superop of ``first`` on qarg 0 and ``second`` on qarg 1 (identity where None), 16 x 16."""
    eye = np.eye(4, dtype=complex)
    return _tensor_superops([eye if first is None else first, eye if second is None else second])


@dataclass
class _Program:
    """A compact circuit the engine can run: unitary gates, then terminal measurements."""

    ops: list[tuple[Any, tuple[int, ...]]]  # (operation, compact qargs), in engine order
    last_op: dict[int, int]  # qubit -> index in ops of its last gate
    measured: dict[int, int]  # qubit -> clbit
    num_qubits: int
    num_clbits: int
    creg_sizes: list[list[Any]]
    cost_cma: float  # complex multiply-adds of one evolution, for method selection
    peak_entries: int


def _lazy_order(ops: list[tuple[Any, tuple[int, ...]]]) -> list[int]:
    """A topological order of ``ops`` that delays each qubit's first multi-qubit gate.

    Greedy: among ready operations, run those that bring no new qubit into the state first
    (single-qubit gates are buffered anyway), then the one bringing the fewest; ties keep circuit
    order. Everything that can happen on the qubits in flight happens before the state grows.
    """
    previous: dict[int, int] = {}
    blockers: list[int] = []
    successors: list[list[int]] = [[] for _ in ops]
    for i, (_, qargs) in enumerate(ops):
        preds = {previous[q] for q in qargs if q in previous}
        blockers.append(len(preds))
        for p in preds:
            successors[p].append(i)
        for q in qargs:
            previous[q] = i
    ready = [i for i, n in enumerate(blockers) if n == 0]
    in_state: set[int] = set()
    order: list[int] = []
    while ready:
        best = min(
            ready,
            key=lambda i: (
                0 if len(ops[i][1]) == 1 else sum(q not in in_state for q in ops[i][1]),
                i,
            ),
        )
        ready.remove(best)
        order.append(best)
        if len(ops[best][1]) > 1:
            in_state.update(ops[best][1])
        for s in successors[best]:
            blockers[s] -= 1
            if blockers[s] == 0:
                ready.append(s)
    return order


def _plan_lazy(circuit: QuantumCircuit) -> _Program | str:
    """Analyse a compact circuit for the engine; return the reason when it cannot take it."""
    qindex = {bit: i for i, bit in enumerate(circuit.qubits)}
    cindex = {bit: i for i, bit in enumerate(circuit.clbits)}
    ops: list[tuple[Any, tuple[int, ...]]] = []
    measured: dict[int, int] = {}
    written: set[int] = set()
    for instruction in circuit.data:
        operation = instruction.operation
        qargs = tuple(qindex[q] for q in instruction.qubits)
        if operation.name in _SKIPPED:
            continue
        if any(q in measured for q in qargs):
            return f"{operation.name} after a measurement (mid-circuit measurement)"
        if isinstance(operation, Measure):
            clbit = cindex[instruction.clbits[0]]
            if clbit in written:
                return "a clbit written twice"
            measured[qargs[0]] = clbit
            written.add(clbit)
            continue
        is_delay = isinstance(operation, Delay)
        if not (isinstance(operation, Gate) or is_delay):
            return f"non-gate instruction {operation.name!r}"
        if operation.is_parameterized():
            return f"unbound parameters in {operation.name!r}"
        ops.append((operation, qargs))
    if not measured:
        return "no measurements"
    order = _lazy_order(ops)
    ops = [ops[i] for i in order]
    last_op: dict[int, int] = {}
    for i, (_, qargs) in enumerate(ops):
        for q in qargs:
            last_op[q] = i
    # Dry run of the state's size to cost the evolution before choosing a method.
    in_flight: set[int] = set()
    done = 0
    cost = 0.0
    peak = 1
    for i, (_, qargs) in enumerate(ops):
        if len(qargs) > 1:
            in_flight.update(qargs)
            size = 4 ** len(in_flight) * 2**done
            peak = max(peak, size)
            cost += size * 4 ** len(qargs)
        for q in qargs:
            if last_op[q] == i:
                if q in in_flight:
                    in_flight.discard(q)
                    cost += 4 ** (len(in_flight) + 1) * 2**done * 4
                done += q in measured
                peak = max(peak, 4 ** len(in_flight) * 2**done)
    return _Program(
        ops=ops,
        last_op=last_op,
        measured=measured,
        num_qubits=circuit.num_qubits,
        num_clbits=circuit.num_clbits,
        creg_sizes=[[creg.name, creg.size] for creg in circuit.cregs],
        cost_cma=cost,
        peak_entries=peak,
    )


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}


def _op_superop(noise: CompactNoise, operation: Any, qargs: tuple[int, ...]) -> np.ndarray:
    """Superoperator of ``operation`` on ``qargs`` followed by its device error.

    A delay is thermal relaxation over its duration, as from_backend's RelaxationNoisePass has it.
    Cached per (name, qargs) for parameterless gates; a parameterised gate (rz angles differ
    from job to job in a VQE loop) reuses only its cached error, so the cache stays bounded.
    """
    if isinstance(operation, Delay):
        scale = noise.dt if operation.unit == "dt" else _SECONDS[operation.unit]
        seconds = float(operation.duration) * float(scale or 0.0)
        return _relaxation_superop(noise.t1s[qargs[0]], noise.t2s[qargs[0]], seconds)
    key = (operation.name, qargs)
    if not operation.params:
        cached = noise.superops.get(key)
        if cached is not None:
            return cached
    unitary = np.asarray(operation.to_matrix(), dtype=complex)
    superop = np.kron(unitary, unitary.conj())
    error = noise.error_superop(operation.name, qargs)
    if error is not None:
        superop = error @ superop
    if not operation.params:
        noise.superops[key] = superop
    return superop


class _LazyState:
    """The engine's state and its axis labels."""

    def __init__(self, dtype: type) -> None:
        self.tensor = np.ones((), dtype=dtype)
        self.labels: list[tuple[int, str]] = []

    def activate(self, qubit: int, rho: np.ndarray) -> None:
        self.tensor = self.tensor[..., None, None] * rho.astype(self.tensor.dtype)
        self.labels += [(qubit, "r"), (qubit, "c")]

    def apply(self, superop: np.ndarray, qargs: tuple[int, ...]) -> None:
        k = len(qargs)
        tensor_m = superop.astype(self.tensor.dtype, copy=False).reshape([2] * (4 * k))
        # M's axes: out rows, out cols, in rows, in cols; each block big-endian over qargs.
        m_in = [3 * k - 1 - j for j in range(k)] + [4 * k - 1 - j for j in range(k)]
        s_in = [self.labels.index((q, "r")) for q in qargs]
        s_in += [self.labels.index((q, "c")) for q in qargs]
        self.tensor = np.tensordot(tensor_m, self.tensor, axes=(m_in, s_in))
        contracted = set(s_in)
        rest = [label for i, label in enumerate(self.labels) if i not in contracted]
        out_rows = [(qargs[k - 1 - j], "r") for j in range(k)]
        out_cols = [(qargs[k - 1 - j], "c") for j in range(k)]
        self.labels = out_rows + out_cols + rest

    def finish(self, qubit: int, keep: bool) -> None:
        """Collapse a qubit that has no gates left to its diagonal (``keep``) or trace it out."""
        row, col = self.labels.index((qubit, "r")), self.labels.index((qubit, "c"))
        reduce = np.diagonal if keep else np.trace
        self.tensor = reduce(self.tensor, axis1=row, axis2=col)
        self.labels = [label for label in self.labels if label[0] != qubit or label[1] == "d"]
        if keep:
            self.labels.append((qubit, "d"))  # np.diagonal puts the diagonal last


_ZERO = np.array([[1, 0], [0, 0]], dtype=complex)


def _run_lazy(program: _Program, noise: CompactNoise) -> tuple[np.ndarray, list[int]]:
    """Evolve the density matrix; return measured-outcome probabilities and their clbits.

    The probability array has one axis per measured qubit, readout error applied, axes in the
    order of the returned clbit list.
    """
    dtype = np.complex64 if program.peak_entries > 4**10 else np.complex128
    state = _LazyState(dtype)
    pending: dict[int, np.ndarray] = {}  # buffered single-qubit superops, not yet applied
    active: set[int] = set()

    def flush(qubit: int) -> None:
        # Apply a qubit's buffered single-qubit channel; a qubit not in the state enters it.
        superop = pending.pop(qubit, None)
        if qubit in active:
            if superop is not None:
                state.apply(superop, (qubit,))
            return
        rho = _ZERO if superop is None else (superop @ _ZERO.reshape(4)).reshape(2, 2)
        state.activate(qubit, rho)
        active.add(qubit)

    for i, (operation, qargs) in enumerate(program.ops):
        superop = _op_superop(noise, operation, qargs)
        if len(qargs) == 1:
            q = qargs[0]
            pending[q] = superop if q not in pending else superop @ pending[q]
        elif len(qargs) == 2:
            # New qubits enter with their buffered channel applied to |0><0|; buffered channels
            # of qubits in flight are folded into the gate's superop (one tensordot, not three).
            folded = [None, None]
            for j, q in enumerate(qargs):
                if q in active:
                    folded[j] = pending.pop(q, None)
                else:
                    flush(q)
            if folded[0] is not None or folded[1] is not None:
                superop = superop @ _embed_pair(folded[0], folded[1])
            state.apply(superop, qargs)
        else:
            for q in qargs:
                flush(q)
            state.apply(superop, qargs)
        for q in qargs:
            if program.last_op[q] == i:
                flush(q)
                state.finish(q, keep=q in program.measured)

    # Measured qubits that no gate touched are still |0>.
    for q in program.measured:
        if q not in active:
            state.tensor = state.tensor[..., None] * np.array([1, 0], dtype=state.tensor.dtype)
            state.labels.append((q, "d"))
    probabilities = np.clip(state.tensor.real.astype(np.float64), 0.0, None)
    labels = [label[0] for label in state.labels]
    for axis, q in enumerate(labels):
        matrix = noise.readout.get(q)
        if matrix is not None:
            # p'[m] = sum_t P[t, m] p[t]; the new axis comes first, so put it back in place.
            mixed = np.tensordot(matrix, probabilities, axes=([0], [axis]))
            probabilities = np.moveaxis(mixed, 0, axis)
    return probabilities, [program.measured[q] for q in labels]


def _memory_values(clbits: list[int]) -> np.ndarray:
    """Memory value (clbit c -> bit c) of each flat index of a probability array whose axes are
    the measured qubits, axis j read into ``clbits[j]``; C order puts axis 0 on the top bit."""
    width = len(clbits)
    positions = np.arange(2**width, dtype=np.int64)
    memory = np.zeros(2**width, dtype=np.int64)
    for axis, clbit in enumerate(clbits):
        memory |= ((positions >> (width - 1 - axis)) & 1) << clbit
    return memory


def _sample(
    probabilities: np.ndarray,
    clbits: list[int],
    program: _Program,
    shots: int,
    seed: int | None,
) -> dict[str, int]:
    """Draw ``shots`` outcomes and format them as Aer formats counts (same keys, same spaces)."""
    flat = probabilities.reshape(-1)
    draws = np.random.default_rng(seed).multinomial(shots, flat / flat.sum())
    memory = _memory_values(clbits)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    return {
        format_counts_memory(hex(int(memory[i])), header): int(draws[i])
        for i in np.flatnonzero(draws)
    }


def _format_probabilities(
    probabilities: np.ndarray, clbits: list[int], program: _Program, cutoff: float = 1e-12
) -> dict[str, float]:
    flat = probabilities.reshape(-1)
    flat = flat / flat.sum()
    memory = _memory_values(clbits)
    header = {"creg_sizes": program.creg_sizes, "memory_slots": program.num_clbits}
    return {
        format_counts_memory(hex(int(memory[i])), header): float(flat[i])
        for i in np.flatnonzero(flat > cutoff)
    }


# --------------------------------------------------------------------------------------------
# Method selection and execution
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoisyRunPlan:
    """How :func:`run_noisy` will simulate one circuit, and why."""

    method: str
    physical_qubits: tuple[int, ...]
    estimated_seconds: dict[str, float]
    lazy_unsupported: str | None  # why the numpy engine cannot take the circuit, if it cannot


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


def _aer_estimates(circuit: QuantumCircuit, shots: int) -> dict[str, float]:
    k = circuit.num_qubits
    gates = [ci for ci in circuit.data if ci.operation.name not in ("barrier", "measure", "delay")]
    multi = sum(1 for ci in gates if len(ci.qubits) > 1)
    estimates: dict[str, float] = {}
    if k <= AER_DENSITY_MATRIX_MAX_QUBITS:
        # Aer fuses each multi-qubit gate with its neighbours into one 2-qubit superop (16 CMA
        # per density-matrix entry); single-qubit-only circuits still cost one pass per qubit.
        passes = max(multi, 1) + (k if multi == 0 else 0)
        evolution = passes * 16 * 4**k / _AER_DM_CMA_PER_S
        runs = 1 if _samples_once(circuit) else shots
        estimates["density_matrix"] = _AER_CALL_S + runs * evolution
    # Noisy trajectories: every gate and its error per shot over 2^k amplitudes.
    estimates["statevector"] = _AER_CALL_S + shots * 3 * len(gates) * 2**k / _AER_SV_CMA_PER_S
    return estimates


def _plan(compact: CompactCircuit, shots: int, method: str) -> tuple[NoisyRunPlan, Any]:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    circuit = compact.circuit
    program = _plan_lazy(circuit)
    estimates = _aer_estimates(circuit, shots)
    unsupported = program if isinstance(program, str) else None
    if isinstance(program, _Program):
        if program.peak_entries <= LAZY_MAX_ENTRIES:
            estimates["lazy_density_matrix"] = (
                program.cost_cma / _LAZY_CMA_PER_S + len(program.ops) * _LAZY_OP_S + 1e-3
            )
        else:
            unsupported = f"peak state of {program.peak_entries} entries"
    if method == "auto":
        method = min(estimates, key=estimates.__getitem__)
    elif method == "lazy_density_matrix" and unsupported is not None:
        raise ValueError(f"lazy_density_matrix cannot run this circuit: {unsupported}")
    plan = NoisyRunPlan(method, compact.physical_qubits, estimates, unsupported)
    return plan, program


def plan_noisy_run(transpiled: QuantumCircuit, shots: int, method: str = "auto") -> NoisyRunPlan:
    """The method :func:`run_noisy` would use for ``transpiled``, with the cost estimates."""
    return _plan(compact_circuit(transpiled), shots, method)[0]


def _aer_simulator(noise: CompactNoise, method: str) -> AerSimulator:
    # Double precision: on this machine Aer's single-precision density matrix was no faster
    # (12 qubits: 1.9-2.5 s single, 2.0-2.1 s double).
    simulator = noise.simulators.get(method)
    if simulator is None:
        simulator = AerSimulator(method=method, noise_model=noise.noise_model, precision="double")
        noise.simulators[method] = simulator
    return simulator


def _run_aer(
    circuit: QuantumCircuit, noise: CompactNoise, method: str, shots: int, seed: int | None
) -> dict[str, int]:
    if any(isinstance(ci.operation, Delay) for ci in circuit.data):
        # from_backend relaxes idle qubits during delays through this pass; do the same on the
        # compact circuit with the compact qubits' T1/T2.
        relax = RelaxationNoisePass(
            t1s=list(noise.t1s), t2s=list(noise.t2s), dt=noise.dt, op_types=Delay
        )
        circuit = relax(circuit)
    result = _aer_simulator(noise, method).run(circuit, shots=shots, **_aer_seed(seed)).result()
    return dict(result.get_counts(0))


def _aer_seed(seed: int | None) -> dict[str, int]:
    """``seed_simulator`` for a user seed, spread so that nearby seeds give unrelated samples.

    Aer seeds shot i with seed + i when it runs shots in parallel (12+ qubit noisy runs on 2
    cores): seeds 0 and 1 then share 3999 of 4000 shots and their counts come out identical.
    """
    if seed is None:
        return {}
    return {"seed_simulator": int(np.random.SeedSequence(seed).generate_state(1)[0])}


def _check_shots(shots: int) -> None:
    if shots < 1:
        raise ValueError(f"shots must be positive, got {shots}")


@dataclass
class NoisyRun:
    """Counts of one noisy run, how they were simulated and how long it took."""

    counts: dict[str, int]
    method: str
    physical_qubits: tuple[int, ...]
    seconds: float


def run_noisy_detailed(
    backend: BackendV2,
    transpiled: QuantumCircuit,
    shots: int,
    seed: int | None = None,
    method: str = "auto",
) -> NoisyRun:
    """:func:`run_noisy`, also reporting the method used and the wall time (noise build included
    when the noise of these qubits was not cached yet)."""
    _check_shots(shots)
    start = time.perf_counter()
    compact = compact_circuit(transpiled)
    plan, program = _plan(compact, shots, method)
    noise = compact_noise(backend, compact.physical_qubits)
    if plan.method == "lazy_density_matrix":
        probabilities, clbits = _run_lazy(program, noise)
        counts = _sample(probabilities, clbits, program, shots, seed)
    else:
        counts = _run_aer(compact.circuit, noise, plan.method, shots, seed)
    return NoisyRun(counts, plan.method, compact.physical_qubits, time.perf_counter() - start)


def run_noisy(
    backend: BackendV2,
    transpiled: QuantumCircuit,
    shots: int,
    seed: int | None = None,
    method: str = "auto",
) -> dict[str, int]:
    """Sample ``transpiled`` (output of ``transpile_for``) under ``backend``'s noise.

    Same noise model and same count keys as :func:`run_reference`, at a fraction of its cost on
    127-156 qubit devices. ``method`` is "auto" (cheapest estimated), "lazy_density_matrix",
    "density_matrix" or "statevector". Deterministic for a given seed.
    """
    return run_noisy_detailed(backend, transpiled, shots, seed=seed, method=method).counts


def noisy_probabilities(backend: BackendV2, transpiled: QuantumCircuit) -> dict[str, float]:
    """The exact outcome distribution of ``transpiled`` under ``backend``'s noise (no shots).

    A shot-noise-free ground truth for fidelity models. Needs a circuit the lazy engine takes
    (gates then terminal measurements); raises ``ValueError`` otherwise.
    """
    compact = compact_circuit(transpiled)
    program = _plan_lazy(compact.circuit)
    if isinstance(program, str):
        raise ValueError(f"no exact distribution for this circuit: {program}")
    if program.peak_entries > LAZY_MAX_ENTRIES:
        raise ValueError(f"state too large for an exact distribution: {program.peak_entries}")
    noise = compact_noise(backend, compact.physical_qubits)
    probabilities, clbits = _run_lazy(program, noise)
    return _format_probabilities(probabilities, clbits, program)


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
    _check_shots(shots)
    simulator = reference_simulator(backend)
    result = simulator.run(transpiled, shots=shots, **_aer_seed(seed)).result()
    return dict(result.get_counts(0))


_IDEAL_MAX_QUBITS = 24


def ideal_probabilities(circuit: QuantumCircuit) -> dict[str, float]:
    """Noiseless outcome distribution of a circuit whose measurements are all at the end.

    Works on virtual circuits and on full-width transpiled ones (idle qubits are dropped first).
    Keys are formatted like counts, so the result goes straight into ``hellinger_fidelity``.
    """
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
    _check_shots(shots)
    compact = compact_circuit(circuit).circuit
    result = AerSimulator(method="automatic").run(compact, shots=shots, **_aer_seed(seed)).result()
    return dict(result.get_counts(0))


def fidelity_to_ideal(counts: dict[str, int | float], circuit: QuantumCircuit) -> float:
    """Hellinger fidelity of measured counts to the circuit's ideal distribution."""
    return float(hellinger_fidelity(counts, ideal_probabilities(circuit)))
