"""The device's noise restricted to the physical qubits a circuit uses.

``NoiseModel.from_backend`` builds an error for every instruction of the whole device (127-156
qubits); a job touches a handful. :func:`build_compact_noise` builds the same channels entry by
entry for those qubits only, renumbered 0..k-1: depolarizing composed with thermal relaxation per
gate, relaxation alone for other instructions (reset), a readout error per measurement.
:func:`compact_noise` caches the result per (backend, calibration id, physical qubits), LRU.

Each error is kept as its numbers (:class:`ErrorSpec`), from which come both the closed-form
superoperator the numpy engine (:mod:`kernel_server.backends.lazy_dm`) applies and the Aer
``QuantumError`` / ``NoiseModel`` Aer's own methods run with.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qiskit.circuit import Gate, Measure
from qiskit.providers import BackendV2
from qiskit.quantum_info import Kraus
from qiskit_aer import AerSimulator
from qiskit_aer.noise import (
    NoiseModel,
    QuantumError,
    ReadoutError,
    depolarizing_error,
    thermal_relaxation_error,
)

from kernel_server.backends.devices import calibration_id
from kernel_server.core.cache import LRU, CacheInfo


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


def tensor_superops(singles: list[np.ndarray]) -> np.ndarray:
    """Superop of independent single-qubit channels, ``singles[j]`` on qarg j (each 4 x 4)."""
    k = len(singles)
    full = singles[0].reshape(2, 2, 2, 2)  # (a', b', a, b)
    for single in singles[1:]:
        full = np.multiply.outer(full, single.reshape(2, 2, 2, 2))
    # Axes are (a'_j, b'_j, a_j, b_j) for j = 0..k-1; the superop wants each of the four
    # blocks big-endian (qarg k-1 first).
    order = [4 * j + part for part in range(4) for j in reversed(range(k))]
    return full.transpose(order).reshape(4**k, 4**k)


def relaxation_factors(t1: float, t2: float, duration: float) -> tuple[float, float]:
    """(d, e): how much of the excited population (exp(-t/T1)) and of the coherences
    (exp(-t/T2)) are left after ``duration`` seconds; 1 where the time is unknown (inf)."""
    decay = float(np.exp(-duration / t1)) if np.isfinite(t1) else 1.0
    dephase = float(np.exp(-duration / t2)) if np.isfinite(t2) else 1.0
    return decay, dephase


def thermal_relaxation_superop(t1: float, t2: float, duration: float) -> np.ndarray:
    """Thermal relaxation at 0 mK (T2 already <= 2 T1): populations decay to |0> with T1,
    coherences with T2 - the channel ``thermal_relaxation_error`` builds."""
    decay, dephase = relaxation_factors(t1, t2, duration)
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
        return tensor_superops(
            [
                thermal_relaxation_superop(t1, t2, self.duration)
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


# Aer fuses gates only from 14 qubits on by default, and two at a time under noise. A noisy
# trajectory runs its gates once per shot, so fusing pays from the smallest widths: mqt_ae13
# (13 qubits, 1401 gates on fake_torino, one trajectory per shot) took 47.6 ms a shot unfused,
# 10.4 ms fusing up to two qubits and 8.9 ms up to three (four: slower again).
NOISY_FUSION: dict[str, int] = {"fusion_threshold": 1, "fusion_max_qubit": 3}
GPU_METHODS = ("statevector", "density_matrix")  # what qiskit-aer-gpu runs on a GPU


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
    _kraus_noise_model: NoiseModel | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def quantum_errors(self) -> dict[tuple[str, tuple[int, ...]], QuantumError]:
        return {key: spec.quantum_error() for key, spec in self.errors.items()}

    def _build_model(self, kraus: bool) -> NoiseModel:
        model = NoiseModel(basis_gates=list(self.basis_gates))
        for (name, cargs), error in self.quantum_errors().items():
            channel = QuantumError(Kraus(error)) if kraus else error
            model.add_quantum_error(channel, name, list(cargs))
        for qubit, matrix in sorted(self.readout.items()):
            model.add_readout_error(ReadoutError(matrix), [qubit])
        return model

    @property
    def noise_model(self) -> NoiseModel:
        """Aer noise model on the compact qubits (built on first use)."""
        with self._lock:
            if self._noise_model is None:
                self._noise_model = self._build_model(kraus=False)
            return self._noise_model

    @property
    def kraus_noise_model(self) -> NoiseModel:
        """The same channels, each as one Kraus channel (built on first use).

        For circuits with control flow, which Aer runs shot by shot: a model holding a Kraus
        error makes Aer insert the channels once and pick a Kraus operator per shot, where a
        model of Pauli and reset mixtures only (every qubit with T2 <= T1) makes it draw a new
        noisy circuit per shot. Same distribution; on a 2-qubit branch of 12 ECR with
        8000 shots on fake_sherbrooke, 0.44 s against 2.2 s.
        """
        with self._lock:
            if self._kraus_noise_model is None:
                self._kraus_noise_model = self._build_model(kraus=True)
            return self._kraus_noise_model

    def simulator(self, method: str, kraus: bool = False, gpu: bool = False) -> AerSimulator:
        """The Aer simulator of ``method`` under this noise (one per method, kept: building one
        hands Aer the whole noise model, ~0.4 s, which a job should not pay each time).

        ``gpu``: a GPU is present (qiskit-aer-gpu); the statevector and density-matrix methods
        then run on it."""
        key = f"{method}+kraus" if kraus else method
        with self._lock:
            simulator = self.simulators.get(key)
        if simulator is not None:
            return simulator
        model = self.kraus_noise_model if kraus else self.noise_model
        gpu = gpu and method in GPU_METHODS
        options = NOISY_FUSION if method == "statevector" and not gpu else {}
        # Double precision: on this machine Aer's single-precision density matrix was no
        # faster (12 qubits: 1.9-2.5 s single, 2.0-2.1 s double).
        simulator = AerSimulator(
            method=method,
            noise_model=model,
            precision="double",
            device="GPU" if gpu else "CPU",
            **options,
        )
        with self._lock:
            return self.simulators.setdefault(key, simulator)

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


_noise_cache: LRU[CompactNoise] = LRU(256)


def compact_noise(backend: BackendV2, physical_qubits: tuple[int, ...]) -> CompactNoise:
    """The noise of ``physical_qubits``, cached per (backend, calibration id, qubits), LRU."""
    key = (backend.name, calibration_id(backend), tuple(physical_qubits))
    return _noise_cache.get_or_make(
        key, lambda: build_compact_noise(backend, tuple(physical_qubits))
    )


def noise_cache_info() -> CacheInfo:
    """Hits, misses and size of the compact noise-model cache."""
    return _noise_cache.info()


def clear_noise_cache() -> None:
    """Forget every cached noise model and the cache statistics."""
    _noise_cache.clear()
