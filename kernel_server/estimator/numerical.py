"""The numerical baseline estimator (paper §6 keeps it beside the learned models to compare to).

Fidelity is the product of (1 - error) over the transpiled circuit's gates and measurements, taken
from the device target; runtime of one shot is the critical-path length of the transpiled circuit
with the target's durations. Both are cheap (well under a millisecond for small circuits) once the
circuit is transpiled, which is why transpilation (``backends.compile.transpile_for``) must be fast
and land on healthy qubits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from qiskit import QuantumCircuit
from qiskit.circuit import Delay
from qiskit.providers import BackendV2
from qiskit.transpiler import Target

from kernel_server.backends.compile import transpile_for
from kernel_server.backends.dynamic import costliest_path

_SKIPPED = frozenset({"barrier", "delay"})


@dataclass
class NumericalEstimate:
    """The numerical baseline's prediction for one circuit on one device."""

    backend: str
    fidelity: float
    duration_s: float
    num_qubits: int
    depth: int
    two_qubit_gates: int
    layout: tuple[int, ...]  # physical qubit of each virtual qubit at the start of the circuit
    transpiled: QuantumCircuit

    def to_dict(self) -> dict[str, Any]:
        """The numbers only (the transpiled circuit stays with the caller)."""
        return {
            "backend": self.backend,
            "fidelity": self.fidelity,
            "duration_s": self.duration_s,
            "num_qubits": self.num_qubits,
            "depth": self.depth,
            "two_qubit_gates": self.two_qubit_gates,
            "layout": list(self.layout),
        }


def _instruction_seconds(operation: Any, qargs: tuple[int, ...], target: Target) -> float:
    """Duration of one instruction in seconds; delays carry their own, missing entries count 0."""
    if isinstance(operation, Delay):
        if operation.unit == "dt":
            return float(operation.duration) * float(target.dt or 0.0)
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12}
        return float(operation.duration) * scale.get(operation.unit, 0.0)
    props = target[operation.name] if operation.name in target.operation_names else None
    prop = props.get(qargs) if props else None
    return float(prop.duration) if prop is not None and prop.duration else 0.0


def fidelity_and_duration(transpiled: QuantumCircuit, target: Target) -> tuple[float, float]:
    """Product of (1 - error) and critical-path seconds of an already transpiled circuit.

    The critical path is an ASAP pass over the instructions: each starts when all its qubits and
    clbits are free. Its length equals the ALAP schedule's, at a tenth of the cost of running
    ``ALAPScheduleAnalysis``. Barriers synchronize their qubits and take no time. Control flow
    counts along its costliest branch (``dynamic.costliest_path``): the worst shot.
    """
    transpiled = costliest_path(transpiled, target)
    fidelity = 1.0
    qubit_free: dict[int, float] = {}
    clbit_free: dict[int, float] = {}
    for instruction in transpiled.data:
        operation = instruction.operation
        qargs = tuple(transpiled.find_bit(q).index for q in instruction.qubits)
        cargs = tuple(transpiled.find_bit(c).index for c in instruction.clbits)
        start = max(
            [qubit_free.get(q, 0.0) for q in qargs] + [clbit_free.get(c, 0.0) for c in cargs],
            default=0.0,
        )
        end = start + _instruction_seconds(operation, qargs, target)
        for q in qargs:
            qubit_free[q] = end
        for c in cargs:
            clbit_free[c] = end
        if operation.name in _SKIPPED or operation.name not in target.operation_names:
            continue
        props = target[operation.name]
        prop = props.get(qargs) if props else None
        if prop is not None and prop.error:
            fidelity *= 1.0 - float(prop.error)
    duration = max(list(qubit_free.values()) + list(clbit_free.values()), default=0.0)
    return fidelity, duration


def numerical_estimate(
    circuit: QuantumCircuit, backend: BackendV2, seed: int = 0
) -> NumericalEstimate:
    """Transpile ``circuit`` for ``backend`` and estimate its fidelity and one-shot duration."""
    transpiled = transpile_for(circuit, backend, seed=seed)
    fidelity, duration = fidelity_and_duration(transpiled, backend.target)
    if transpiled.layout is not None:
        layout = tuple(transpiled.layout.initial_index_layout(filter_ancillas=True))
    else:
        layout = tuple(range(circuit.num_qubits))
    view = costliest_path(transpiled, backend.target)
    two_qubit_gates = sum(
        1
        for instruction in view.data
        if len(instruction.qubits) >= 2 and instruction.operation.name not in _SKIPPED
    )
    depth = view.depth(lambda instruction: instruction.operation.name not in _SKIPPED)
    return NumericalEstimate(
        backend=backend.name,
        fidelity=fidelity,
        duration_s=duration,
        num_qubits=circuit.num_qubits,
        depth=depth,
        two_qubit_gates=two_qubit_gates,
        layout=layout,
        transpiled=transpiled,
    )


class NumericalEstimator:
    """The numerical baseline as a named, pluggable estimator."""

    name: ClassVar[str] = "numerical"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def estimate(self, circuit: QuantumCircuit, backend: BackendV2) -> NumericalEstimate:
        return numerical_estimate(circuit, backend, seed=self.seed)

    __call__ = estimate
