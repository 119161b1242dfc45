"""What makes two circuits the same, and how they travel between processes.

A fingerprint lets the orchestrator reuse estimates and resource plans when a cell runs again
(the common case in a notebook): it digests a circuit's content through qpy, not its name, which
Qiskit numbers afresh for every unnamed circuit ("circuit-41"), so that equal circuits from two
runs of a cell match.

Qiskit's ``CASE_DEFAULT`` (the default case of a ``switch``) is a singleton that pickle copies
into a look-alike the switch then refuses ("invalid case specifier"); the reducer registered here
makes it unpickle as itself, in every process that sends circuits.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
from dataclasses import dataclass
from typing import Any


def fingerprint(circuits: list[Any]) -> str:
    """A digest of the circuits' content, or "" where qpy cannot write them (no reuse then).

    A transpiled (ISA) circuit's layout is digested as its index lists, not through qpy: qpy
    writes the layout's registers in set order, which changes from one dump to the next, so
    the same ISA circuit sent twice fingerprinted two ways and half its reruns missed reuse."""
    from qiskit import qpy

    buffer = io.BytesIO()
    try:
        qpy.dump([_without_layout(circuit) for circuit in circuits], buffer)
    except Exception:  # qpy refuses some custom objects; such circuits are just not reused
        return ""
    digest = hashlib.sha256(buffer.getvalue())
    for circuit in circuits:
        layout = circuit.layout
        if layout is not None:
            initial = layout.initial_index_layout(filter_ancillas=False)
            digest.update(f"|{initial}|{layout.routing_permutation()}".encode())
            digest.update(f"|{len(layout.input_qubit_mapping)}".encode())
    return digest.hexdigest()


def _without_layout(circuit: Any) -> Any:
    copy = circuit.copy(name="c")
    copy._layout = None  # no public way to drop it; digested apart in ``fingerprint``
    return copy


def _case_default() -> Any:
    from qiskit.circuit.controlflow import CASE_DEFAULT

    return CASE_DEFAULT


def _reduce_case_default(_: Any) -> tuple[Any, tuple[()]]:
    return _case_default, ()


def register_reducers() -> None:
    """Make switch circuits with a default case survive pickling (idempotent, cheap)."""
    from qiskit.circuit.controlflow import CASE_DEFAULT

    copyreg.pickle(type(CASE_DEFAULT), _reduce_case_default)


class CircuitFormatError(ValueError):
    """Circuits that are not a QPY document (or one QPY cannot write)."""


def dump_circuits(circuits: list[Any]) -> bytes:
    """Circuits as they travel from a step to the orchestrator: QPY, a data format.

    Cloudpickle would let a step run code wherever its circuits are read (the orchestrator's
    QPU processes, shared by every user); QPY holds only the circuits.
    """
    from qiskit import qpy

    buffer = io.BytesIO()
    try:
        qpy.dump(list(circuits), buffer)
    except Exception as exc:  # qpy raises several types for what it cannot write
        raise CircuitFormatError(
            f"this circuit cannot be sent to a QPU: Qiskit's QPY format cannot write it ({exc})"
        ) from None
    return buffer.getvalue()


def load_circuits(blob: bytes) -> list[Any]:
    """Circuits from ``dump_circuits``; CircuitFormatError for anything else."""
    from qiskit import qpy

    if not blob.startswith(b"QISKIT"):
        raise CircuitFormatError("circuits must be sent as QPY (kernel_server.wire.circuits)")
    try:
        circuits = qpy.load(io.BytesIO(blob))
    except Exception as exc:  # a truncated or forged document
        raise CircuitFormatError(f"the circuits could not be read: {exc}") from None
    if not circuits:
        raise CircuitFormatError("no circuits were sent")
    return list(circuits)


def read_circuits(blob: bytes) -> tuple[int, str]:
    """The width (qubits of the widest circuit) and fingerprint of sent circuits."""
    circuits = load_circuits(blob)
    return max(c.num_qubits for c in circuits), fingerprint(circuits)


def dump_parameter_values(values: Any) -> bytes:
    """A (rows, parameters) float array as it travels with a PUB's circuits: ``.npy`` bytes."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values, dtype=np.float64), allow_pickle=False)
    return buffer.getvalue()


def load_parameter_values(blob: bytes) -> Any:
    """The array of ``dump_parameter_values``; CircuitFormatError for anything else."""
    import numpy as np

    try:
        values = np.load(io.BytesIO(blob), allow_pickle=False)
    except Exception as exc:  # not an .npy document (numpy raises several types)
        raise CircuitFormatError(f"the parameter values could not be read: {exc}") from None
    if values.ndim != 2 or values.dtype != np.float64 or values.shape[0] < 1:
        raise CircuitFormatError(
            f"parameter values must be a float64 array of shape (rows, parameters), got "
            f"{values.dtype} {values.shape}"
        )
    return values


def bind_rows(circuits: list[Any], values: Any) -> list[Any]:
    """Every circuit bound with every row (circuit-major), in ``circuit.parameters`` order."""
    if values is None:
        return list(circuits)
    bound = []
    for circuit in circuits:
        parameters = list(circuit.parameters)
        for row in values:
            if not parameters:
                bound.append(circuit)
                continue
            bound.append(circuit.assign_parameters(dict(zip(parameters, row, strict=True))))
    return bound


@dataclass(frozen=True)
class CircuitFacts:
    """What the orchestrator reads off a quantum call's circuits (never taken from the caller)."""

    num_qubits: int
    fingerprint: str
    rows: int  # parameter sets bound into each circuit


def read_call(blob: bytes, values_blob: bytes = b"") -> CircuitFacts:
    """Width, fingerprint and rows of a call's circuits; CircuitFormatError when the
    parameter values do not fit them (a parametrized circuit needs one value per parameter)."""
    circuits = load_circuits(blob)
    rows = 1
    if values_blob:
        values = load_parameter_values(values_blob)
        rows = int(values.shape[0])
        for circuit in circuits:
            if circuit.num_parameters != values.shape[1]:
                raise CircuitFormatError(
                    f"{values.shape[1]} parameter values for a circuit with "
                    f"{circuit.num_parameters} parameters"
                )
    else:
        unbound = [c for c in circuits if c.num_parameters]
        if unbound:
            raise CircuitFormatError("a circuit with parameters was sent without their values")
    return CircuitFacts(max(c.num_qubits for c in circuits), fingerprint(circuits), rows)
