"""``estimate(circuit, observable)`` on top of sampling.

A QPU only samples bitstrings, so an expectation value is assembled from counts: the observable's
Pauli terms are grouped so that every group can be measured with one circuit (qubit-wise
commuting terms share a measurement basis on every qubit), each group's circuit rotates that basis
onto Z and measures, and each term's value is the average parity of its qubits' bits. This is pure
pre- and post-processing (mitiq's ``construct_circuits`` / ``combine_results`` split): whoever runs
the circuits sits in between.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from qiskit import QuantumCircuit
from qiskit.quantum_info import SparsePauliOp

from kernel_server.core.pubs import measure_in_basis

# Name of the register the measurement circuits add; its bits are the group's measured qubits.
MEASURE_REGISTER = "pauli_meas"

ObservableLike: TypeAlias = SparsePauliOp | str | Sequence[str] | Sequence[tuple[str, complex]]


@dataclass(frozen=True)
class PauliGroup:
    """One measurement setting: qubit-wise commuting terms measured by one circuit.

    ``measured_qubits[j]`` is read into bit j of the added register; ``labels`` are Qiskit Pauli
    labels (rightmost character is qubit 0).
    """

    labels: tuple[str, ...]
    coeffs: tuple[float, ...]
    measured_qubits: tuple[int, ...]
    basis: tuple[str, ...]  # "X", "Y" or "Z" for each measured qubit


def as_observable(observable: ObservableLike, num_qubits: int | None = None) -> SparsePauliOp:
    """Accept a SparsePauliOp, one Pauli label ("ZZ"), a list of labels (equal weights of 1) or
    a list of (label, coefficient) pairs; require Hermitian (real) coefficients."""
    if isinstance(observable, SparsePauliOp):
        op = observable
    elif isinstance(observable, str):
        op = SparsePauliOp(observable)
    else:
        items = list(observable)
        if not items:
            raise ValueError("empty observable")
        if all(isinstance(item, str) for item in items):
            op = SparsePauliOp(items)
        else:
            op = SparsePauliOp.from_list([(label, coeff) for label, coeff in items])
    if num_qubits is not None and op.num_qubits != num_qubits:
        raise ValueError(f"observable acts on {op.num_qubits} qubits, circuit has {num_qubits}")
    op = op.simplify()
    if np.any(np.abs(np.imag(op.coeffs)) > 1e-12):
        # A non-Hermitian operator has no real expectation value to estimate from counts.
        raise ValueError("observable must be Hermitian (real coefficients)")
    return op


def _identity_offset(op: SparsePauliOp) -> float:
    return float(
        sum(
            np.real(coeff)
            for pauli, coeff in zip(op.paulis, op.coeffs, strict=True)
            if not (pauli.x.any() or pauli.z.any())
        )
    )


def measurement_circuits(
    circuit: QuantumCircuit, observable: ObservableLike
) -> list[tuple[QuantumCircuit, PauliGroup]]:
    """One measurement circuit per group of qubit-wise commuting terms of ``observable``.

    ``circuit`` must have no measurements. Each returned circuit is a copy with basis rotations
    (H for X, S-dagger then H for Y) and measurements of the group's qubits into a new register
    named ``pauli_meas``. The identity term needs no circuit; it enters through
    :func:`expectation_from_counts`.
    """
    if any(instruction.operation.name == "measure" for instruction in circuit.data):
        raise ValueError("measurement_circuits needs a circuit without measurements")
    op = as_observable(observable, circuit.num_qubits)
    non_identity = [
        (pauli, float(np.real(coeff)))
        for pauli, coeff in zip(op.paulis, op.coeffs, strict=True)
        if pauli.x.any() or pauli.z.any()
    ]
    if not non_identity:
        return []
    terms = SparsePauliOp([p for p, _ in non_identity], [c for _, c in non_identity])
    results: list[tuple[QuantumCircuit, PauliGroup]] = []
    for group in terms.group_commuting(qubit_wise=True):
        # Qubit-wise commuting: on each qubit all terms agree on one non-identity letter (or I).
        basis_of: dict[int, str] = {}
        for pauli in group.paulis:
            for q in range(group.num_qubits):
                x, z = bool(pauli.x[q]), bool(pauli.z[q])
                if x or z:
                    basis_of[q] = "Y" if (x and z) else ("X" if x else "Z")
        qubits = tuple(sorted(basis_of))
        basis = tuple(basis_of[q] for q in qubits)
        measured = measure_in_basis(circuit, qubits, basis, MEASURE_REGISTER)
        meta = PauliGroup(
            labels=tuple(p.to_label() for p in group.paulis),
            coeffs=tuple(float(np.real(c)) for c in group.coeffs),
            measured_qubits=qubits,
            basis=basis,
        )
        results.append((measured, meta))
    return results


def _register_bits(key: str, register_size: int) -> str:
    """The ``pauli_meas`` part of a count key (the last register added, leftmost in the key)."""
    bits = key.split(" ")[0] if " " in key else key
    if len(bits) != register_size:
        raise ValueError(f"count key {key!r} does not match a {register_size}-bit register")
    return bits


def group_expectations(group: PauliGroup, counts: Mapping[str, int | float]) -> list[float]:
    """Expectation value of each term of ``group`` from that group's counts (qiskit's
    ``sampled_expectation_value`` over the group's register, one Z string per term)."""
    from qiskit.result import sampled_expectation_value

    if float(sum(counts.values())) <= 0:
        raise ValueError("empty counts")
    position = {q: j for j, q in enumerate(group.measured_qubits)}
    size = len(group.measured_qubits)
    register: dict[str, float] = {}
    for key, count in counts.items():
        bits = _register_bits(key, size)
        register[bits] = register.get(bits, 0.0) + float(count)
    values: list[float] = []
    for label in group.labels:
        # label[-1 - q] is the letter on qubit q; bit j of the register is key[size - 1 - j].
        support = {position[q] for q in range(len(label)) if label[-1 - q] != "I"}
        zs = "".join("Z" if size - 1 - i in support else "I" for i in range(size))
        values.append(float(sampled_expectation_value(register, zs)) if size else 1.0)
    return values


def expectation_from_counts(
    observable: ObservableLike,
    groups_meta: Sequence[PauliGroup],
    counts_list: Sequence[Mapping[str, int | float]],
) -> float:
    """Combine the counts of :func:`measurement_circuits`' circuits into <observable> (real)."""
    if len(groups_meta) != len(counts_list):
        raise ValueError(f"{len(groups_meta)} groups but {len(counts_list)} count dictionaries")
    op = as_observable(observable)
    value = _identity_offset(op)
    for group, counts in zip(groups_meta, counts_list, strict=True):
        for coeff, term in zip(group.coeffs, group_expectations(group, counts), strict=True):
            value += coeff * term
    return float(value)
