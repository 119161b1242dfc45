"""The small runs :func:`kernel_server.backends.cost_model.calibrate` times on this machine.

A generic 16-qubit line device (qiskit's ``GenericBackendV2``, fixed seed) provides realistic noise;
circuits are brickwork layers of sx/rz and cx on the compact qubits, built directly (no
transpiling), so each run costs what the work formulas of :mod:`kernel_server.backends.work` say.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from qiskit import QuantumCircuit
from qiskit_aer import AerSimulator

from kernel_server.backends.branching_sv import run_branching_statevector, statevector_profile
from kernel_server.backends.lazy_dm import LazyProgram, LazyState, plan_lazy, run_lazy
from kernel_server.backends.noise import CompactNoise, build_compact_noise
from kernel_server.backends.work import (
    density_matrix_work,
    gate_count,
    mps_order,
    mps_work,
    trajectory_work,
)

__all__ = [
    "calibration_noise",
    "gpu_present",
    "density_matrix_work",
    "gate_count",
    "layered",
    "lazy_case",
    "mps_work",
    "run_aer",
    "run_mps",
    "trajectory_work",
]

_WIDTH = 16


@cache
def gpu_present() -> bool:
    """Whether qiskit-aer was built with GPU support and sees a device (qiskit-aer-gpu)."""
    try:
        return "GPU" in AerSimulator().available_devices()
    except Exception:  # an Aer build without device queries: no GPU to use
        return False


@cache
def calibration_noise() -> CompactNoise:
    """Noise of a generic 16-qubit line device (seeded: the same numbers every time).

    A line, like the compact circuits of real devices: an all-to-all device's 240 cx errors make
    each Aer run ~0.4 s slower (the noise model is handed over per run), which jobs do not pay.
    """
    from qiskit.providers import QubitProperties
    from qiskit.providers.fake_provider import GenericBackendV2
    from qiskit.transpiler import CouplingMap

    backend = GenericBackendV2(
        _WIDTH,
        basis_gates=["cx", "id", "rz", "sx", "x"],
        coupling_map=CouplingMap.from_line(_WIDTH),
        seed=11,
    )
    # T2 cut to T1 so that the stabilizer method can run under this noise too.
    backend.target.qubit_properties = [
        QubitProperties(t1=p.t1, t2=min(p.t2, p.t1), frequency=p.frequency)
        for p in backend.target.qubit_properties
    ]
    return build_compact_noise(backend, tuple(range(_WIDTH)))


def layered(num_qubits: int, layers: int, clifford: bool = False) -> QuantumCircuit:
    """Brickwork: per layer sx and rz on every qubit, then cx on alternating neighbour pairs.

    ``clifford``: every rz by pi/2, so that the stabilizer method can run it.
    """
    circuit = QuantumCircuit(num_qubits, num_qubits)
    for layer in range(layers):
        for q in range(num_qubits):
            circuit.sx(q)
            circuit.rz(np.pi / 2 if clifford else 0.3 + 0.1 * q + layer, q)
        for q in range(layer % 2, num_qubits - 1, 2):
            circuit.cx(q, q + 1)
    circuit.measure(range(num_qubits), range(num_qubits))
    return circuit


def lazy_case(
    circuit: QuantumCircuit, noise: CompactNoise
) -> tuple[Callable[[], object], tuple[float, float]]:
    """A run of the numpy engine and its (operations, multiply-adds)."""
    program = plan_lazy(circuit)
    assert isinstance(program, LazyProgram)
    return (lambda: run_lazy(program, noise)), (float(len(program.ops)), program.cost_cma)


def branching_sv_case(
    circuit: QuantumCircuit, noise: CompactNoise, shots: int
) -> tuple[Callable[[], object], tuple[float, float]]:
    """A run of the branching statevector and its (operations x shots, amplitudes passed)."""
    program = plan_lazy(circuit)
    assert isinstance(program, LazyProgram)
    touched, _ = statevector_profile(program)
    work = (float(len(program.ops) * shots), touched * shots)
    return (lambda: run_branching_statevector(program, noise, shots, seed=1)), work


# Entries of the state the numpy engine's large-state rate is measured on (complex64, 128 MB:
# past the caches, where each operation is bound by memory traffic).
BIG_STATE_ENTRIES = 2**24


def big_state_case() -> tuple[Callable[[], object], float]:
    """Two-qubit operations of the numpy engine on a state far larger than the caches, and
    their multiply-adds: the engine's own ``apply``, whose axes are never where the operation
    wants them (the transposing copy is part of the price)."""
    state = LazyState(np.complex64)
    axes = int(np.log2(BIG_STATE_ENTRIES))
    state.tensor = np.full([2] * axes, 1e-3, dtype=np.complex64)
    state.labels = [(q, kind) for q in range(axes // 2) for kind in ("r", "c")]
    superop = np.eye(16, dtype=complex)
    pairs = [(1, 5), (3, 7)]

    def run() -> None:
        for pair in pairs:
            state.apply(superop, pair)

    return run, float(len(pairs) * 16 * BIG_STATE_ENTRIES)


def run_aer(circuit: QuantumCircuit, noise: CompactNoise, method: str, shots: int) -> None:
    # The simulator the noisy path runs (kept per method: building one costs ~0.4 s).
    simulator = noise.simulator(method, gpu=gpu_present())
    simulator.run(circuit, shots=shots, seed_simulator=1).result()


def run_mps(circuit: QuantumCircuit, noise: CompactNoise, trajectories: int) -> None:
    order = mps_order(circuit)
    assert order == sorted(order)  # brickwork is already a line
    run_aer(circuit, noise, "matrix_product_state", trajectories)
