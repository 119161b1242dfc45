"""One PUB as one QPU job: the circuits it asks a QPU to run, and its result from their counts.

Pure pre- and post-processing around whoever runs the circuits (mitiq's ``construct_circuits`` /
``combine_results`` split), used by the Sampler and the Estimator alike:

* a Sampler PUB is its circuit once, with every parameter set of its ``BindingsArray`` as a row
  of values bound on the QPU;
* an Estimator PUB is its circuit once per measurement basis that its observables need (every
  Pauli term of every observable in the array, grouped qubit-wise commuting, as qiskit's
  ``BackendEstimatorV2`` groups them), times the same rows of values.

The circuits travel unbound with a ``(rows, parameters)`` array of values, so the orchestrator
estimates and transpiles each of them once and binds the rows on the QPU; their counts come back
template-major (``counts[t * rows + r]``). Results are qiskit's own containers: one ``BitArray``
per classical register under the register's name, ``evs``/``stds`` of the PUB's broadcast shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from qiskit import ClassicalRegister, QuantumCircuit
from qiskit.primitives.containers import BitArray, DataBin
from qiskit.primitives.containers.bindings_array import BindingsArray
from qiskit.primitives.containers.estimator_pub import EstimatorPub
from qiskit.primitives.containers.sampler_pub import SamplerPub
from qiskit.quantum_info import PauliList

# The register an Estimator PUB's measurement circuits add (never a user's: those are removed
# with the final measurements, and a name clash is renamed away below).
BASIS_REGISTER = "qonductor_basis"

Counts = Mapping[str, int | float]


def parameter_rows(circuit: QuantumCircuit, values: BindingsArray) -> np.ndarray:
    """The PUB's parameter sets as a ``(rows, parameters)`` float array, rows in C order of the
    bindings' shape, columns in the order of ``circuit.parameters``."""
    rows = max(int(values.size), 1)
    if circuit.num_parameters == 0:
        return np.zeros((rows, 0))
    array = np.asarray(values.as_array(circuit.parameters), dtype=float)
    return array.reshape(rows, circuit.num_parameters)


@dataclass
class PubJob:
    """The QPU job of one PUB: unbound circuits, the rows bound into each, and the shots."""

    templates: list[QuantumCircuit]
    parameter_values: np.ndarray  # (rows, parameters)
    shots: int
    # Estimator only: what each template measures (same order as ``templates``).
    groups: list[MeasuredBasis] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return int(self.parameter_values.shape[0])

    @property
    def num_circuits(self) -> int:
        return len(self.templates) * self.rows


# ------------------------------------------------------------------------------------ sampler
def sampler_job(pub: SamplerPub) -> PubJob:
    assert pub.shots is not None  # coerced with the sampler's default
    return PubJob([pub.circuit], parameter_rows(pub.circuit, pub.parameter_values), pub.shots)


def _clbit_indices(circuit: QuantumCircuit, register: ClassicalRegister) -> list[int]:
    return [circuit.find_bit(bit).index for bit in register]


def _memory_values(counts: Counts) -> tuple[list[int], np.ndarray]:
    """Each count key as the integer of its memory (clbit i is bit i; register spaces dropped)."""
    keys = [int(key.replace(" ", ""), 2) if key.strip() else 0 for key in counts]
    return keys, np.fromiter((int(v) for v in counts.values()), dtype=np.int64, count=len(keys))


def _register_value(memory: int, clbits: Sequence[int]) -> int:
    value = 0
    for j, index in enumerate(clbits):
        value |= ((memory >> index) & 1) << j
    return value


def _packed(values: Sequence[int], num_bits: int) -> np.ndarray:
    """Integers as BitArray rows: big-endian bytes, the last byte holding bits 0-7."""
    num_bytes = max(1, (num_bits + 7) // 8)
    data = b"".join(int(v).to_bytes(num_bytes, "big") for v in values)
    return np.frombuffer(data, dtype=np.uint8).reshape(len(values), num_bytes)


def _shot_order(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which distinct outcome each shot had, in a random order: counts are exchangeable shots,
    so a uniformly random order of them is distributed exactly like the shots themselves."""
    return rng.permutation(np.repeat(np.arange(len(counts)), counts))


def sampler_data(pub: SamplerPub, counts: Sequence[Counts], rng: np.random.Generator) -> DataBin:
    """One ``BitArray`` per classical register of the PUB's circuit, of the PUB's shape."""
    circuit = pub.circuit
    assert pub.shots is not None
    shape = pub.shape
    registers = {reg.name: (reg, _clbit_indices(circuit, reg)) for reg in circuit.cregs}
    arrays = {
        name: np.zeros((max(int(np.prod(shape)), 1), pub.shots, max(1, (reg.size + 7) // 8)), "u1")
        for name, (reg, _) in registers.items()
    }
    for row, element in enumerate(counts):
        memories, numbers = _memory_values(element)
        if int(numbers.sum()) != pub.shots:
            raise ValueError(
                f"the QPU returned {int(numbers.sum())} shots for parameter set {row}, "
                f"{pub.shots} were asked"
            )
        order = _shot_order(numbers, rng)
        for name, (reg, clbits) in registers.items():
            distinct = _packed([_register_value(m, clbits) for m in memories], reg.size)
            arrays[name][row] = distinct[order]
    bits = {
        name: BitArray(arrays[name].reshape(*shape, pub.shots, -1), reg.size)
        for name, (reg, _) in registers.items()
    }
    return DataBin(**bits, shape=shape)


# ---------------------------------------------------------------------------------- estimator
@dataclass(frozen=True)
class MeasuredBasis:
    """One measurement setting: the qubits measured (bit j of the basis register measures
    ``qubits[j]``) and the Pauli terms read from it, each as a mask over those bits."""

    qubits: tuple[int, ...]
    labels: tuple[str, ...]
    masks: tuple[int, ...]


def _without_final_measurements(circuit: QuantumCircuit) -> QuantumCircuit:
    if not any(instruction.operation.name == "measure" for instruction in circuit.data):
        return circuit
    return circuit.remove_final_measurements(inplace=False)


def _observable_labels(pub: EstimatorPub) -> list[str]:
    labels = {label for element in pub.observables.ravel() for label in element}
    return sorted(label for label in labels if set(label) - {"I"})


def measure_in_basis(
    circuit: QuantumCircuit, qubits: Sequence[int], letters: Sequence[str], register_name: str
) -> QuantumCircuit:
    """A copy of ``circuit`` that rotates each of ``qubits`` from its letter's basis ("X", "Y",
    "Z") onto Z (H for X, S-dagger then H for Y) and measures qubit ``qubits[j]`` into bit j of a
    new register (its name made unique among the circuit's)."""
    measured = circuit.copy()
    name = register_name
    while any(reg.name == name for reg in measured.cregs):
        name += "_"
    register = ClassicalRegister(len(qubits), name)
    measured.add_register(register)
    for q, letter in zip(qubits, letters, strict=True):
        if letter == "X":
            measured.h(q)
        elif letter == "Y":
            measured.sdg(q)
            measured.h(q)
    for j, q in enumerate(qubits):
        measured.measure(q, register[j])
    return measured


def estimator_job(pub: EstimatorPub, shots: int) -> PubJob:
    """The PUB's circuit once per qubit-wise commuting group of its observables' terms."""
    circuit = _without_final_measurements(pub.circuit)
    labels = _observable_labels(pub)
    templates: list[QuantumCircuit] = []
    groups: list[MeasuredBasis] = []
    if labels:
        for group in PauliList(labels).group_qubit_wise_commuting():
            z = np.logical_or.reduce(group.z, axis=0)
            x = np.logical_or.reduce(group.x, axis=0)
            qubits = tuple(int(q) for q in np.flatnonzero(z | x))
            letters = ["Y" if (zq and xq) else ("X" if xq else ("Z" if zq else "I"))
                       for zq, xq in zip(z, x, strict=True)]  # fmt: skip
            basis = "".join(reversed(letters))
            templates.append(
                measure_in_basis(circuit, qubits, [basis[-1 - q] for q in qubits], BASIS_REGISTER)
            )
            group_labels = tuple(p.to_label() for p in group)
            masks = tuple(
                sum(1 << j for j, q in enumerate(qubits) if label[-1 - q] != "I")
                for label in group_labels
            )
            groups.append(MeasuredBasis(qubits, group_labels, masks))
    rows = parameter_rows(pub.circuit, pub.parameter_values)
    return PubJob(templates, rows, shots, groups)


def _term_statistics(
    template: QuantumCircuit, basis: MeasuredBasis, counts: Counts
) -> tuple[np.ndarray, np.ndarray, int]:
    """(signs (outcomes x terms), number of shots of each outcome, shots) of one basis."""
    register = template.cregs[-1]
    clbits = _clbit_indices(template, register)
    memories, numbers = _memory_values(counts)
    values = np.array([_register_value(m, clbits) for m in memories], dtype=object)
    signs = np.empty((len(values), len(basis.masks)))
    for t, mask in enumerate(basis.masks):
        signs[:, t] = [1.0 - 2.0 * (bin(int(v) & mask).count("1") & 1) for v in values]
    return signs, numbers, int(numbers.sum())


def estimator_data(pub: EstimatorPub, job: PubJob, counts: Sequence[Counts]) -> DataBin:
    """``evs`` and ``stds`` of the PUB's broadcast shape from its bases' counts.

    The standard error is exact for the sampled estimator: per basis, the variance over shots of
    each observable's part measured there (terms of one basis are correlated, so they are summed
    shot by shot, not in quadrature), divided by the shots; the bases are independent runs, so
    their variances add.
    """
    observables = list(pub.observables.ravel())
    rows = job.rows
    if len(counts) != len(job.templates) * rows:
        raise ValueError(f"{len(counts)} results for {len(job.templates) * rows} circuits")
    # Constant parts (identity terms) and each observable's coefficient on each measured term.
    evs = np.array([float(np.real(obs.get("I" * pub.circuit.num_qubits, 0.0))) for obs in
                    observables])[None, :].repeat(rows, axis=0)  # fmt: skip
    variances = np.zeros_like(evs)
    for t, (template, basis) in enumerate(zip(job.templates, job.groups, strict=True)):
        coefficients = np.array(
            [[float(np.real(obs.get(label, 0.0))) for obs in observables] for label in basis.labels]
        )
        for r in range(rows):
            signs, numbers, shots = _term_statistics(template, basis, counts[t * rows + r])
            per_outcome = signs @ coefficients  # (outcomes, observables)
            mean = numbers @ per_outcome / shots
            second = numbers @ per_outcome**2 / shots
            evs[r] += mean
            if shots > 1:
                variances[r] += np.maximum(second - mean**2, 0.0) / (shots - 1)
    row_index = np.arange(rows).reshape(pub.parameter_values.shape or ())
    obs_index = np.arange(len(observables)).reshape(pub.observables.shape)
    row_b, obs_b = np.broadcast_arrays(row_index, obs_index)
    shape = pub.shape
    return DataBin(
        evs=evs[row_b, obs_b].reshape(shape),
        stds=np.sqrt(variances[row_b, obs_b]).reshape(shape),
        shape=shape,
    )


def precision_shots(precision: float) -> int:
    """Shots per measurement basis for a target standard error (Qiskit Runtime's rule: a term's
    variance is at most 1, so 1/precision**2 shots reach it)."""
    return int(np.ceil(1.0 / precision**2))
