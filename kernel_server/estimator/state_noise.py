"""State-aware error budget: how much of a device's noise can change *this* circuit's state.

An error product (``features.cone_log_fidelity``) charges every gate its full error. Whether an
error harms depends on the state it hits: a phase flip on a qubit in |0> changes nothing, decay
(T1) of a qubit in |0> changes nothing, and a classical-reversible circuit on a basis input (an
adder) spends its whole run in such states. How a device compiles the same circuit matters too:
CX keeps basis states basis states, an echoed cross-resonance gate (ECR) does not, so the same
adder loses ~0.2 of fidelity on an Eagle device and ~0.05 on a Falcon in noisy Aer runs.

This module walks the compiled circuit once with a noiseless statevector (its active qubits only)
and charges each noise event by its first-order harm to the state it meets:

* gates: the device's noise as Aer's ``NoiseModel.from_backend`` builds it, thermal relaxation
  over the gate's duration, then depolarizing for the rest of the reported error (the split of
  ``qiskit_aer.noise.device.models``: p = d (F_relax - F) / (d F_relax - 1));
* idle time: thermal relaxation over the gaps of the as-late-as-possible schedule (the runs are
  scheduled ALAP and Aer relaxes qubits during delays).

Harm of a Pauli P hitting pure state |psi>: 1 - <P>^2. Of amplitude damping gamma on qubit q:
gamma (P1 - |<sigma_minus>|^2). Of pure dephasing (flip probability p_z): p_z (1 - <Z>^2). Only
events in the measurements' backward light cone count. Local expectations of a qubit do not
change under gates on other qubits, so each event reads the state after its qubits' last gate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from qiskit import QuantumCircuit
from qiskit.transpiler import Target

from kernel_server.estimator.features import LOG_FIDELITY_FLOOR

# The statevector walk costs ~30 us per instruction at 10 qubits and doubles per qubit above
# ~12; wider circuits keep the plain error product.
STATE_MAX_QUBITS = 12
_SKIPPED = frozenset({"barrier", "delay", "measure", "reset"})

_I = np.eye(2, dtype=complex)
_X = np.array([[0, 1], [1, 0]], dtype=complex)
_Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
_Z = np.array([[1, 0], [0, -1]], dtype=complex)
_PAULIS_1 = (_X, _Y, _Z)
_PAULIS_2 = tuple(np.kron(a, b) for a in (_I, _X, _Y, _Z) for b in (_I, _X, _Y, _Z))[
    1:
]  # the 15 non-identity two-qubit Paulis


def relaxation_fidelity(seconds: float, t1: float, t2: float) -> float:
    """Average gate fidelity of one qubit's T1/T2 relaxation over ``seconds`` (T2 <= 2 T1)."""
    if seconds <= 0 or t1 <= 0:
        return 1.0
    t2 = min(t2, 2 * t1) if t2 > 0 else 2 * t1
    process = (1.0 + 2.0 * math.exp(-seconds / t2) + math.exp(-seconds / t1)) / 4.0
    return (2.0 * process + 1.0) / 3.0


def depolarizing_probability(error: float, relax_fidelities: Sequence[float]) -> float:
    """Aer's depolarizing parameter for a gate whose relaxation has these per-qubit fidelities."""
    n = len(relax_fidelities)
    dim = 2**n
    # Relaxation of several qubits is a tensor product: multiply the process fidelities.
    process = 1.0
    for f in relax_fidelities:
        process *= (3.0 * f - 1.0) / 2.0
    relax_fid = (dim * process + 1.0) / (dim + 1.0)
    if error <= 1.0 - relax_fid:
        return 0.0
    error = min(error, dim / (dim + 1.0))
    p = dim * (error - (1.0 - relax_fid)) / (dim * relax_fid - 1.0)
    return min(p, 4**n / (4**n - 1.0))


@lru_cache(maxsize=4096)
def _matrix(name: str, params: tuple[float, ...], num_qubits: int) -> np.ndarray:
    from qiskit.circuit.library import get_standard_gate_name_mapping
    from qiskit.quantum_info import Operator

    gate = get_standard_gate_name_mapping()[name]
    if params:
        gate = type(gate)(*params)
    matrix = Operator(gate).data
    # Operator's little-endian order (qubit 0 = lowest bit) -> tensor axes (first qarg first).
    return matrix.reshape((2,) * (2 * num_qubits)).transpose(
        tuple(reversed(range(num_qubits))) + tuple(reversed(range(num_qubits, 2 * num_qubits)))
    )


class _State:
    """A statevector as an n-axis tensor, axis i = compact qubit i."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.psi = np.zeros((2,) * n, dtype=complex)
        self.psi[(0,) * n] = 1.0

    def apply(self, matrix: np.ndarray, qubits: tuple[int, ...]) -> None:
        k = len(qubits)
        out = np.tensordot(matrix, self.psi, axes=(tuple(range(k, 2 * k)), qubits))
        self.psi = np.moveaxis(out, tuple(range(k)), qubits)

    def reduced(self, qubits: tuple[int, ...]) -> np.ndarray:
        """Density matrix of ``qubits`` (first qubit = most significant index)."""
        k = len(qubits)
        flat = np.moveaxis(self.psi, qubits, tuple(range(k))).reshape(2**k, -1)
        return flat @ flat.conj().T


def _pauli_harm(rho: np.ndarray) -> float:
    """Mean over the non-identity Paulis of 1 - <P>^2 (the state infidelity they cause)."""
    paulis = _PAULIS_1 if rho.shape[0] == 2 else _PAULIS_2
    return float(np.mean([1.0 - np.real(np.trace(rho @ p)) ** 2 for p in paulis]))


def _relaxation_harm(rho: np.ndarray, seconds: float, t1: float, t2: float) -> float:
    if seconds <= 0 or t1 <= 0:
        return 0.0
    t2 = min(t2, 2 * t1) if t2 > 0 else 2 * t1
    gamma = 1.0 - math.exp(-seconds / t1)
    # Off-diagonals decay by exp(-t/T2); amplitude damping accounts for sqrt(1 - gamma) of it.
    dephase = math.exp(-seconds / t2) / math.sqrt(max(1.0 - gamma, 1e-300))
    p_z = max(0.0, (1.0 - min(dephase, 1.0)) / 2.0)
    p1 = float(np.real(rho[1, 1]))
    coherence = float(abs(rho[0, 1]) ** 2)
    z = float(np.real(rho[0, 0] - rho[1, 1]))
    return gamma * max(p1 - coherence, 0.0) + p_z * (1.0 - z * z)


# One gate of the walk: name, compact qubits, parameters, error, seconds.
Op = tuple[str, tuple[int, ...], tuple[float, ...], float, float]


def state_log_fidelity(
    transpiled: QuantumCircuit, target: Target, max_qubits: int = STATE_MAX_QUBITS
) -> float | None:
    """Log of the probability that no harmful error hits the run's state, or None when the
    circuit's active qubits exceed ``max_qubits`` or it holds operations the walk cannot follow
    (control flow, mid-circuit measurement, reset)."""
    from kernel_server.backends.aer_sim import compact_circuit

    compact = compact_circuit(transpiled)
    circuit, physical = compact.circuit, compact.physical_qubits
    n = circuit.num_qubits
    if n == 0 or n > max_qubits:
        return None
    gates = _gates(circuit, physical, target)
    if gates is None:
        return None
    ops, measured = gates
    qprops = target.qubit_properties or []

    def coherence(q: int) -> tuple[float, float]:
        p = qprops[physical[q]] if physical[q] < len(qprops) else None
        t1 = float(p.t1) if p is not None and p.t1 else 0.0
        t2 = float(p.t2) if p is not None and p.t2 else 0.0
        return t1, t2

    times = [coherence(q) for q in range(n)]
    in_cone, start_from_end = _cone_and_schedule(ops, measured, n)
    return max(_walk(ops, in_cone, start_from_end, times, n), LOG_FIDELITY_FLOOR)


def _gates(
    circuit: QuantumCircuit, physical: Sequence[int], target: Target
) -> tuple[list[Op], set[int]] | None:
    """The gates with their error and duration on ``physical`` qubits, and the measured qubits;
    None when the walk cannot follow the circuit."""
    ops: list[Op] = []
    measured: set[int] = set()
    for instruction in circuit.data:
        operation = instruction.operation
        name = operation.name
        qargs = tuple(circuit.find_bit(q).index for q in instruction.qubits)
        if name in ("barrier", "delay"):
            continue
        if name == "measure":
            measured.update(qargs)
            continue
        if (
            name == "reset"
            or len(qargs) > 2
            or getattr(operation, "blocks", None)
            or measured.intersection(qargs)
        ):
            return None
        prop = None
        if name in target.operation_names:
            props = target[name]
            prop = props.get(tuple(physical[q] for q in qargs)) if props else None
        error = float(prop.error) if prop is not None and prop.error else 0.0
        seconds = float(prop.duration) if prop is not None and prop.duration else 0.0
        params = tuple(float(p) for p in operation.params)
        ops.append((name, qargs, params, error, seconds))
    return ops, measured


def _cone_and_schedule(
    ops: Sequence[Op], measured: set[int], n: int
) -> tuple[list[bool], list[float]]:
    """Backward pass: the light cone of the measurements and the ALAP start of every gate
    (seconds before the end of the shot), whose gaps are the idle time Aer relaxes."""
    in_cone = [False] * len(ops)
    cone = set(measured)
    free = dict.fromkeys(range(n), 0.0)
    start_from_end = [0.0] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        _, qargs, _, _, seconds = ops[i]
        if cone.intersection(qargs):
            in_cone[i] = True
            cone.update(qargs)
        end = max(free[q] for q in qargs)
        start_from_end[i] = end + seconds
        for q in qargs:
            free[q] = end + seconds
    return in_cone, start_from_end


def _walk(
    ops: Sequence[Op],
    in_cone: Sequence[bool],
    start_from_end: Sequence[float],
    times: Sequence[tuple[float, float]],
    n: int,
) -> float:
    """Forward pass with the statevector: the log-fidelity each event in the cone costs."""
    state = _State(n)
    last_end: dict[int, float] = {}  # per qubit: its last gate's end, in seconds before the end
    total = 0.0
    for i, (name, qargs, params, error, seconds) in enumerate(ops):
        start = start_from_end[i]
        if in_cone[i]:
            # Idle gaps before this gate, in the state the qubit's previous gate left.
            for q in qargs:
                gap = last_end.get(q, start) - start
                if gap > 0:
                    harm = _relaxation_harm(state.reduced((q,)), gap, *times[q])
                    total += math.log1p(-min(harm, 0.999999))
        state.apply(_matrix(name, params, len(qargs)), qargs)
        for q in qargs:
            last_end[q] = start - seconds
        if not in_cone[i] or (error <= 0 and seconds <= 0):
            continue
        relax = [relaxation_fidelity(seconds, *times[q]) for q in qargs]
        harm = sum(_relaxation_harm(state.reduced((q,)), seconds, *times[q]) for q in qargs)
        depol = depolarizing_probability(error, relax) if error > 0 else 0.0
        if depol > 0:
            dim2 = 4 ** len(qargs)
            # Each non-identity Pauli with probability p / d^2 (Aer's depolarizing_error).
            harm += depol * (dim2 - 1) / dim2 * _pauli_harm(state.reduced(qargs))
        total += math.log1p(-min(harm, 0.999999))
    return total
