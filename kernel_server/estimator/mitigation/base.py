"""The mitigation technique interface, its registry and the helpers the techniques share.

Mitigation is pure pre- and post-processing (mitiq's own split): a technique turns one circuit into
the circuits to run (``construct_circuits``) and turns their results back into one mitigated result
(``combine_results``). Running the circuits belongs to whoever runs circuits (the orchestrator, or
:func:`kernel_server.estimator.mitigation.run.run_mitigated` in tests and benchmarks).

Two kinds of technique, by what ``combine_results`` consumes:

* ``"distribution"``: ``results[i]`` is the counts dict of constructed circuit ``i`` (Qiskit count
  keys, register groups separated by spaces; values are counts, or floats when an inner technique
  already turned counts into a (quasi-)probability distribution). Values need not be normalised.
* ``"expectation"``: ``results[i]`` is the expectation value (a real float) of the observable on
  constructed circuit ``i``.

``produces`` says what ``combine_results`` returns: ``"distribution"`` is a ``dict[str, float]``
normalised to 1 (quasi-probabilities may be negative) with the same key format as the counts;
``"expectation"`` is a float. Techniques whose combination is an average (``linear``) accept either
kind and return the kind they were given.

Observables are Pauli operators on the *virtual* circuit's qubits (Qiskit's little-endian labels:
the rightmost character is qubit 0), a label string or a ``SparsePauliOp``. Expectation values are
read from counts through the circuit's terminal measurements, so those observables must be
diagonal (``I``/``Z`` only); circuit cutting also takes ``X``/``Y`` terms.

Nothing here imports mitiq (3-5 s): the techniques import it inside the functions that need it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar, cast

import numpy as np
from qiskit import QuantumCircuit
from qiskit.circuit import Measure
from qiskit.quantum_info import Pauli, SparsePauliOp

from kernel_server.backends.dynamic import has_control_flow

__all__ = [
    "TECHNIQUES",
    "Constructed",
    "Counts",
    "MitigationTechnique",
    "Observable",
    "Overhead",
    "UnknownMitigation",
    "as_observable",
    "AveragingTechnique",
    "average_results",
    "expectation_value",
    "get_technique",
    "has_control_flow",
    "measurement_map",
    "normalize",
    "reattach_measurements",
    "register",
    "split_terminal_measurements",
]

Counts: TypeAlias = Mapping[str, float]
Observable: TypeAlias = str | Pauli | SparsePauliOp

EXPECTATION = "expectation"
DISTRIBUTION = "distribution"


@dataclass(frozen=True)
class Overhead:
    """What a mitigation costs one job, relative to running the circuit once unmitigated.

    ``num_circuits``: circuits to execute instead of one. ``shots_factor``: total shots over all of
    them divided by the job's shots (ZNE runs every scaled circuit with the job's shots: 3 factors
    give 3; twirling splits the job's shots over its variants: 1; PEC spreads gamma^2 times the
    shots over its samples, gamma being the quasi-probability one-norm). ``classical_seconds``:
    estimated CPU time of the technique's own classical work for the job, construction (folding,
    sampling, cutting) and combination together, excluding the one-off mitiq import (3-5 s per
    process) and the transpilation and execution of the circuits.
    """

    num_circuits: int
    shots_factor: float
    classical_seconds: float

    def then(self, inner: Overhead) -> Overhead:
        """This overhead followed by ``inner`` applied to each of this technique's circuits.

        Circuits and shots multiply. Classical time adds up with the inner technique's counted
        once per circuit it is applied to, since it constructs and combines once per outer circuit.
        """
        return Overhead(
            num_circuits=self.num_circuits * inner.num_circuits,
            shots_factor=self.shots_factor * inner.shots_factor,
            classical_seconds=self.classical_seconds + self.num_circuits * inner.classical_seconds,
        )


NO_OVERHEAD = Overhead(num_circuits=1, shots_factor=1.0, classical_seconds=0.0)


class Constructed(list):  # list[QuantumCircuit]
    """The circuits a technique constructed, in execution order, plus what combining needs.

    ``context`` carries per-job data that ``combine_results`` needs and cannot recompute from the
    config (PEC's sampled signs and one-norm, cutting's coefficients); pass it back unchanged.
    ``shots_ratio`` is the shots each of these circuits gets per shot of the circuit they replace.
    """

    def __init__(
        self,
        circuits: Sequence[QuantumCircuit] = (),
        context: Mapping[str, Any] | None = None,
        shots_ratio: float = 1.0,
    ) -> None:
        super().__init__(circuits)
        self.context: dict[str, Any] = dict(context or {})
        self.shots_ratio = float(shots_ratio)


class UnknownMitigation(ValueError):
    """A mitigation name that no technique answers to."""

    def __init__(self, name: str) -> None:
        valid = ", ".join(sorted(TECHNIQUES))
        aliases = ", ".join(f"{a}={c}" for a, c in sorted(ALIASES.items()))
        super().__init__(
            f"unknown mitigation technique {name!r}; valid names: {valid} (aliases: {aliases})"
        )
        self.name = name


# A technique's configuration: a TypedDict of every key it knows (``default_config``).
C = TypeVar("C", bound=Mapping[str, Any])


class MitigationTechnique(ABC, Generic[C]):
    """One error mitigation technique: circuit construction and result combination.

    Instances are stateless apart from ``config`` overrides given at construction, so one instance
    can serve many jobs and threads. Every method takes an optional ``config`` mapping that is laid
    over ``default_config()`` and the instance's overrides; unknown keys raise ``ValueError``.
    ``C`` is the technique's config type: ``resolve_config`` returns one, typed key by key.
    """

    name: ClassVar[str]
    kind: ClassVar[str]  # what combine_results consumes: "expectation" or "distribution"
    produces: ClassVar[str]  # what combine_results returns: "expectation" or "distribution"
    # combine_results is an average: it takes expectation values as well as distributions.
    linear: ClassVar[bool] = False
    # Constructed circuits must run on the same physical qubits as the circuit they come from
    # (readout calibration, folded copies); False when they are different circuits (cutting).
    same_qubits: ClassVar[bool] = True
    # Needs terminal measurements only (mitiq's conversions); cutting's subexperiments have
    # mid-circuit measurements, so these techniques cannot follow it in a stack.
    terminal_measurements_only: ClassVar[bool] = True
    # Constructed circuits carry mid-circuit measurements.
    adds_midcircuit_measurements: ClassVar[bool] = False
    # construct_circuits needs config["observable"] (the stack fills it in).
    needs_observable: ClassVar[bool] = False
    # Why the technique cannot take a dynamic circuit (control flow: if_test, switch, loops);
    # None when it can. Techniques that rewrite the circuit as a static unitary cannot.
    control_flow_limitation: ClassVar[str | None] = (
        "it rewrites the circuit as a static unitary, and a dynamic circuit is none"
    )

    def __init__(self, **config: Any) -> None:
        self.config: C = self.resolve_config(config)

    # -- configuration -------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def default_config(cls) -> C:
        """Every config key the technique knows, with its default."""

    def resolve_config(self, config: Mapping[str, Any] | None = None) -> C:
        """Defaults, then this instance's overrides, then ``config``; unknown keys raise (so
        the result has exactly the keys of ``C``; ``validate_config`` checks their values)."""
        resolved = dict(self.default_config())
        for layer in (getattr(self, "config", None), config):
            if not layer:
                continue
            if not isinstance(layer, Mapping):
                raise TypeError(f"{self.name}: a config is a mapping, not {layer!r}")
            unknown = set(layer) - set(resolved)
            if unknown:
                raise ValueError(
                    f"{self.name}: unknown config keys {sorted(unknown)}; known: {sorted(resolved)}"
                )
            resolved.update(layer)
        checked = cast(C, resolved)
        self.validate_config(checked)
        return checked

    def validate_config(self, config: C) -> None:
        """Raise ``ValueError`` on a bad config value (overridden by techniques)."""
        return None

    # -- the three operations ------------------------------------------------------------

    @abstractmethod
    def construct_circuits(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Constructed:
        """The circuits to run in place of ``circuit`` (a virtual, measured circuit)."""

    @abstractmethod
    def combine_results(
        self,
        results: Sequence[Any],
        config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Any:
        """One mitigated result from ``results``, aligned with the constructed circuits.

        ``results`` holds counts dicts for ``kind == "distribution"`` and floats for
        ``kind == "expectation"`` (see the module docstring); ``context`` is the ``context`` of
        the :class:`Constructed` list, needed by techniques whose construction is random.
        """

    @abstractmethod
    def overhead(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Overhead:
        """Estimated cost of mitigating ``circuit`` (without constructing the circuits where that
        is expensive)."""

    def unsupported_reason(self, circuit: QuantumCircuit) -> str | None:
        """Why this technique cannot mitigate ``circuit``, or None when it can (cheap: no
        construction). Checked before plans offer the technique and before constructing."""
        if self.control_flow_limitation is not None and has_control_flow(circuit):
            return (
                f"{self.name} cannot mitigate a circuit with control flow: "
                f"{self.control_flow_limitation}"
            )
        return None

    def __repr__(self) -> str:
        overrides = {k: v for k, v in self.config.items() if self.default_config().get(k) != v}
        args = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        return f"{type(self).__name__}({args})"


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

TECHNIQUES: dict[str, type[MitigationTechnique]] = {}
# Other spellings users write; each maps to a canonical name in TECHNIQUES.
ALIASES: dict[str, str] = {}


def register(
    *aliases: str,
) -> Any:
    """Class decorator: add a technique to :data:`TECHNIQUES` under its ``name`` and aliases."""

    def decorate(cls: type[MitigationTechnique]) -> type[MitigationTechnique]:
        TECHNIQUES[cls.name] = cls
        for alias in aliases:
            ALIASES[alias] = cls.name
        return cls

    return decorate


def _load_techniques() -> None:
    # The technique modules register themselves on import; importing the package imports them
    # all (cheap: none of them imports mitiq at module level).
    import kernel_server.estimator.mitigation  # noqa: F401


def get_technique(name: str) -> type[MitigationTechnique]:
    """The technique class called ``name`` (case-insensitive, aliases accepted)."""
    _load_techniques()
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    try:
        return TECHNIQUES[key]
    except KeyError:
        raise UnknownMitigation(name) from None


# --------------------------------------------------------------------------------------------
# Measurements, counts and observables
# --------------------------------------------------------------------------------------------


def _check_no_control_flow(circuit: QuantumCircuit) -> None:
    if has_control_flow(circuit):
        raise ValueError(
            "this technique needs a static circuit (unitary gates, then terminal measurements); "
            "the circuit has control flow"
        )


def split_terminal_measurements(
    circuit: QuantumCircuit,
) -> tuple[QuantumCircuit, list[tuple[int, int]]]:
    """The unitary part of ``circuit`` and its terminal measurements as (qubit, clbit) pairs.

    The unitary part has the same qubits (by index) and no clbits; barriers are dropped (mitiq
    drops them anyway). Raises ``ValueError`` on a measurement followed by more work on its qubit,
    on resets and on control flow: folding, sampling and twirling need a unitary to act on.
    """
    _check_no_control_flow(circuit)
    unitary = QuantumCircuit(circuit.num_qubits, name=circuit.name)
    unitary.global_phase = circuit.global_phase
    measurements: list[tuple[int, int]] = []
    measured: set[int] = set()
    for instruction in circuit.data:
        operation = instruction.operation
        qargs = [circuit.find_bit(q).index for q in instruction.qubits]
        if operation.name == "barrier":
            continue
        if isinstance(operation, Measure):
            measurements.append((qargs[0], circuit.find_bit(instruction.clbits[0]).index))
            measured.add(qargs[0])
            continue
        if measured.intersection(qargs):
            raise ValueError(
                f"mid-circuit measurement (a {operation.name} follows a measurement on qubit "
                f"{sorted(measured.intersection(qargs))}); this technique needs terminal "
                "measurements"
            )
        if operation.name == "reset" or instruction.clbits:
            raise ValueError(f"{operation.name} is not supported; the circuit must be unitary")
        unitary.append(operation, qargs)
    if not measurements:
        raise ValueError("the circuit has no measurements")
    return unitary, measurements


def reattach_measurements(
    unitary: QuantumCircuit, original: QuantumCircuit, measurements: Sequence[tuple[int, int]]
) -> QuantumCircuit:
    """``unitary`` on ``original``'s registers, then a barrier and ``measurements``.

    Count keys of the result are those of ``original``: same classical registers, same clbit of
    each measured qubit. The barrier keeps the measurements together at the end.
    """
    if unitary.num_qubits != original.num_qubits:
        raise ValueError(
            f"constructed circuit has {unitary.num_qubits} qubits, expected {original.num_qubits}"
        )
    out = original.copy_empty_like()
    out.compose(unitary, qubits=range(original.num_qubits), inplace=True)
    out.barrier()
    for qubit, clbit in measurements:
        out.measure(qubit, clbit)
    return out


def measurement_map(circuit: QuantumCircuit) -> dict[int, int]:
    """Qubit index -> clbit index of each qubit's last measurement."""
    mapping: dict[int, int] = {}
    for instruction in circuit.data:
        if isinstance(instruction.operation, Measure):
            qubit = circuit.find_bit(instruction.qubits[0]).index
            mapping[qubit] = circuit.find_bit(instruction.clbits[0]).index
    return mapping


def normalize(counts: Counts) -> dict[str, float]:
    """Counts (or weights) as a distribution summing to 1."""
    total = float(sum(counts.values()))
    if total == 0:
        raise ValueError("empty counts")
    return {key: float(value) / total for key, value in counts.items()}


def as_observable(observable: Observable) -> SparsePauliOp:
    """A label, ``Pauli`` or ``SparsePauliOp`` as a ``SparsePauliOp``."""
    if isinstance(observable, SparsePauliOp):
        return observable
    if isinstance(observable, (str, Pauli)):
        return SparsePauliOp(observable)
    raise TypeError(f"an observable is a Pauli label or SparsePauliOp, not {type(observable)}")


def _parity_masks(observable: SparsePauliOp, mapping: Mapping[int, int]) -> list[tuple[int, float]]:
    """(clbit mask, real coefficient) per term of a diagonal observable."""
    terms = []
    for pauli, coeff in zip(observable.paulis, observable.coeffs, strict=True):
        if np.any(pauli.x):
            raise ValueError(
                f"observable term {pauli.to_label()} is not diagonal; add the basis change to the "
                "circuit and measure Z"
            )
        mask = 0
        for qubit in np.flatnonzero(pauli.z):
            if int(qubit) not in mapping:
                raise ValueError(f"observable acts on qubit {int(qubit)}, which is not measured")
            mask |= 1 << mapping[int(qubit)]
        terms.append((mask, float(np.real(coeff))))
    return terms


def expectation_value(
    distribution: Counts, observable: Observable, mapping: Mapping[int, int]
) -> float:
    """Expectation of a diagonal ``observable`` from counts or a (quasi-)distribution.

    ``mapping`` is qubit -> clbit (:func:`measurement_map` of the circuit that produced the counts).
    """
    spo = as_observable(observable)
    terms = _parity_masks(spo, mapping)
    total = float(sum(distribution.values()))
    if total == 0:
        raise ValueError("empty counts")
    value = 0.0
    for key, weight in distribution.items():
        bits = int(key.replace(" ", ""), 2)
        for mask, coeff in terms:
            sign = -1.0 if (bits & mask).bit_count() & 1 else 1.0
            value += coeff * sign * float(weight)
    return value / total


def check_positive(name: str, value: Any, *, integer: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive (integer) number."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if integer:
        ok = ok and float(value).is_integer()
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def average_results(results: Sequence[Any]) -> Any:
    """Mean of expectation values, or of distributions (each normalised first).

    The combination of the linear techniques (twirling, DD): equal weights, because they give
    every constructed circuit the same shots.
    """
    if not results:
        raise ValueError("nothing to average")
    if all(isinstance(r, (int, float, np.floating, np.integer)) for r in results):
        return float(np.mean([float(r) for r in results]))
    if all(isinstance(r, Mapping) for r in results):
        average: dict[str, float] = {}
        for result in results:
            for key, p in normalize(result).items():
                average[key] = average.get(key, 0.0) + p / len(results)
        return average
    raise TypeError("results must be all expectation values or all counts/distributions")


class AveragingTechnique(MitigationTechnique[C]):
    """A linear technique: its constructed circuits are equally weighted estimates of the same
    quantity, so combining them is an average (twirling, DD). One place for that rule."""

    linear: ClassVar[bool] = True

    def combine_results(
        self,
        results: Sequence[Any],
        config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Any:
        return average_results(results)
