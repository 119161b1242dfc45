"""Error mitigation a researcher applies explicitly in a ``%%qonductor`` cell.

Thin wrappers over the orchestrator's own techniques (``kernel_server.estimator.mitigation``):
folding, extrapolation, DD insertion and readout calibration all happen there, through the same
:class:`~kernel_server.estimator.mitigation.stack.MitigationStack` the orchestrator uses. What
differs is who runs the circuits: ``sample`` compiles each circuit on its own, where the
orchestrator's executor gives a technique's circuits one layout at optimisation level 0. ZNE's
circuits are protected against that compiler (see ``_pin_gates``); every constructed circuit
carries its technique in ``metadata`` so the orchestrator can recognise the batch.
A cell uses them in three steps::

    folded = ZNE.apply(circuit)                # classical: build the circuits
    counts = sample(folded, shots=2000)        # quantum: run them
    value = ZNE.infer(folded, counts, "ZZZ")   # classical: combine

``kernel_server`` (and mitiq, 2-5 s) is imported inside the functions, so importing this module
costs only Qiskit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from qiskit import QuantumCircuit
from qiskit.providers import BackendV2

if TYPE_CHECKING:
    from kernel_server.estimator.mitigation.stack import MitigationPlan, MitigationStack

__all__ = ["DD", "REM", "ZNE", "MitigatedCircuits"]

Counts = Mapping[str, float]

# Circuit metadata keys: ``sample`` hands the orchestrator a plain list of circuits, so the tags
# on the circuits themselves are what survives of the user's choice of technique.
METADATA_TECHNIQUE = "qonductor_mitigation"
METADATA_INDEX = "qonductor_mitigation_index"

# What each technique's circuits are, for the "expected N results" message.
_RESULT_ROLES = {
    "zne": "one per folded circuit",
    "rem": "the circuit's, then its all-0 and all-1 calibration circuits'",
}


@dataclass(eq=False)
class MitigatedCircuits(list):
    """The circuits a technique made from one circuit, plus what combining their counts needs.

    It is a list of circuits, so ``sample(mitigated)`` runs them all and returns one counts dict
    per circuit, in order; hand that list back to the technique's ``infer``/``correct``. Treat
    it as read-only: ``circuits`` and the list contents are the same circuits, kept in step only
    if neither is modified.
    """

    circuits: list[QuantumCircuit]
    technique: str  # the stack's names joined by "+", e.g. "zne"
    config: Mapping[str, object]  # the technique's resolved configuration (its TypedDict)
    stack: MitigationStack = field(repr=False)
    plan: MitigationPlan = field(repr=False)

    def __post_init__(self) -> None:
        self.circuits = list(self.circuits)
        list.__init__(self, self.circuits)

    @property
    def stack_names(self) -> tuple[str, ...]:
        """The techniques applied, outermost first: what the user pinned for this circuit."""
        return self.stack.names

    def __repr__(self) -> str:
        return (
            f"MitigatedCircuits({self.technique}, {len(self.circuits)} circuits, "
            f"config={self.config})"
        )


# --------------------------------------------------------------------------------------------
# Shared plumbing
# --------------------------------------------------------------------------------------------


def _check_circuit(circuit: Any, function: str = "mitigate") -> QuantumCircuit:
    from kernel_server.core.circuits import check_circuit

    # One circuit at a time: a technique is applied to each circuit of a batch.
    check_circuit(circuit, False, f"circuit {getattr(circuit, 'name', '')!r}", function)
    return circuit


def _tagged(circuits: Sequence[QuantumCircuit], technique: str) -> list[QuantumCircuit]:
    """Copies carrying the technique in their metadata (the plan keeps the untagged originals,
    one of which may be the user's own circuit object)."""
    tagged = []
    for index, circuit in enumerate(circuits):
        copy = circuit.copy()
        copy.metadata = {
            **(circuit.metadata or {}),
            METADATA_TECHNIQUE: technique,
            METADATA_INDEX: index,
        }
        tagged.append(copy)
    return tagged


def _pin_gates(circuit: QuantumCircuit) -> QuantumCircuit:
    """``circuit`` with a barrier on each gate's own qubits right after it.

    ``sample`` compiles at the orchestrator's optimisation level, which cancels G G^dagger pairs
    and merges runs of gates: every folded circuit would come back as the unfolded one and ZNE
    would extrapolate noise that was never scaled. Local barriers keep each gate apart from its
    neighbours without making other qubits wait (a full-width barrier would serialise the
    circuit and add idle time).
    """
    pinned = circuit.copy_empty_like()
    for instruction in circuit.data:
        pinned.append(instruction)
        operation = instruction.operation
        if operation.name not in ("barrier", "measure") and not instruction.clbits:
            pinned.barrier(instruction.qubits)
    return pinned


def _mitigate(
    circuit: QuantumCircuit, name: str, config: Mapping[str, object], pin: bool = False
) -> MitigatedCircuits:
    """Construct the circuits of one technique through the orchestrator's stack."""
    from kernel_server.estimator.mitigation import MitigationStack, get_technique

    # Building the technique runs its own validation (e.g. ZNE's noise factors).
    technique = get_technique(name)(**config)
    stack = MitigationStack([technique])
    # per_outcome: the plan needs no observable yet; ZNE.infer supplies it when combining.
    plan = stack.construct(_check_circuit(circuit), per_outcome=True)
    label = "+".join(stack.names)
    circuits = [_pin_gates(c) for c in plan.circuits] if pin else plan.circuits
    return MitigatedCircuits(
        circuits=_tagged(circuits, label),
        technique=label,
        config=dict(technique.config),
        stack=stack,
        plan=plan,
    )


def _check_results(mitigated: Any, counts_list: Any, technique: str, caller: str) -> list[Counts]:
    if not isinstance(mitigated, MitigatedCircuits):
        raise ValueError(
            f"{caller} takes what {technique.upper()}.apply returned, "
            f"got {type(mitigated).__name__}"
        )
    if mitigated.technique != technique:
        raise ValueError(
            f"{caller} takes what {technique.upper()}.apply returned; these circuits come from "
            f"{mitigated.technique!r}"
        )
    if isinstance(counts_list, Mapping) or not isinstance(counts_list, Sequence):
        raise ValueError(
            f"{caller} needs a list of counts dicts, one per circuit (what sample(mitigated) "
            f"returns), got {type(counts_list).__name__}"
        )
    expected = len(mitigated.plan.circuits)
    if len(counts_list) != expected:
        role = _RESULT_ROLES.get(technique, "one per circuit")
        raise ValueError(f"expected {expected} results, {role}, got {len(counts_list)}")
    for index, counts in enumerate(counts_list):
        if not isinstance(counts, Mapping) or not counts:
            raise ValueError(f"result {index} is not a non-empty counts dict: {counts!r}")
    return list(counts_list)


def _resolve_backend(backend: BackendV2 | str) -> BackendV2:
    from kernel_server.backends.devices import load_backend

    if isinstance(backend, str):
        return load_backend(backend)
    if isinstance(backend, BackendV2):
        return backend
    raise ValueError(
        f"backend must be a BackendV2 or a fake backend name such as 'fake_kolkata', "
        f"got {backend!r}"
    )


# --------------------------------------------------------------------------------------------
# The techniques
# --------------------------------------------------------------------------------------------


class ZNE:
    """Zero-noise extrapolation: fold the circuit's gates, extrapolate to zero noise."""

    @staticmethod
    def apply(
        circuit: QuantumCircuit,
        noise_factors: Sequence[float] = (1, 3, 5),
        extrapolation: str = "linear",
        scaling: str = "random",
        seed: int = 0,
    ) -> MitigatedCircuits:
        """One folded copy of ``circuit`` (measured) per noise factor, in factor order.

        ``extrapolation`` is "linear" or "richardson"; ``scaling`` "random" (fold randomly chosen
        gates; odd integer factors fold every gate alike) or "global" (fold the whole circuit).
        """
        if isinstance(noise_factors, (str, bytes)) or not isinstance(noise_factors, Sequence):
            raise ValueError(
                f"noise_factors must be a sequence of numbers such as (1, 3, 5), "
                f"got {noise_factors!r}"
            )
        config = {
            "noise_factors": tuple(noise_factors),
            "extrapolation": extrapolation,
            "scaling": scaling,
            "seed": seed,
        }
        # Pinned: the orchestrator's compiler must not undo the folding (see _pin_gates).
        return _mitigate(circuit, "zne", config, pin=True)

    @staticmethod
    def infer(
        mitigated: MitigatedCircuits, counts_list: Sequence[Counts], observable: Any
    ) -> float:
        """The zero-noise estimate of a diagonal Pauli ``observable`` ("ZZI" or SparsePauliOp;
        qubit 0 is the rightmost letter) from the counts of ``mitigated``'s circuits."""
        from kernel_server.estimator.mitigation.base import as_observable

        results = _check_results(mitigated, counts_list, "zne", "ZNE.infer")
        spo = as_observable(observable)
        width = mitigated.plan.root.circuit.num_qubits
        if spo.num_qubits != width:
            raise ValueError(
                f"the observable acts on {spo.num_qubits} qubits but the circuit has {width}"
            )
        # The plan was made without an observable; combining reads it from the plan.
        plan = replace(mitigated.plan, observable=spo)
        return float(mitigated.stack.combine(results, plan))

    @staticmethod
    def infer_distribution(
        mitigated: MitigatedCircuits, counts_list: Sequence[Counts]
    ) -> dict[str, float]:
        """The zero-noise outcome distribution: every outcome's probability extrapolated on its
        own, negative estimates clipped, the rest renormalised."""
        results = _check_results(mitigated, counts_list, "zne", "ZNE.infer_distribution")
        return dict(mitigated.stack.combine_distribution(results, mitigated.plan))


class REM:
    """Readout error mitigation from two calibration circuits (all 0, all 1)."""

    @staticmethod
    def apply(circuit: QuantumCircuit, project: bool = True) -> MitigatedCircuits:
        """``circuit`` followed by its two calibration circuits.

        ``project`` makes :meth:`correct` return the nearest probability distribution; without
        it, the unbiased quasi-probabilities (some may be negative).
        """
        return _mitigate(circuit, "rem", {"project": bool(project)})

    @staticmethod
    def correct(mitigated: MitigatedCircuits, counts_list: Sequence[Counts]) -> dict[str, float]:
        """The readout-corrected distribution (sums to 1) of the circuit ``apply`` was given."""
        results = _check_results(mitigated, counts_list, "rem", "REM.correct")
        return dict(mitigated.stack.combine(results, mitigated.plan))


class DD:
    """Dynamical decoupling: pulse sequences in the idle windows of the circuit's layers."""

    @staticmethod
    def apply(
        circuit: QuantumCircuit,
        backend: BackendV2 | str,
        rule: str = "xyxy",
        scheduled: bool = False,
    ) -> QuantumCircuit:
        """``circuit`` with ``rule``'s pulses ("xx", "xyxy" or "yy") in its idle windows.

        The pulses are pinned to their layers by barriers, so the device's ALAP schedule keeps
        them spread over the window they protect. The result is a virtual circuit that
        ``sample`` can run on any device; ``backend`` must be able to hold it. With
        ``scheduled``, it is instead laid out, transpiled (level 0, so no pulse is cancelled) and
        scheduled for ``backend``: the physical circuit the orchestrator's own DD would run
        there, full device width.
        """
        import warnings

        from kernel_server.backends.compile import check_width, choose_layout, transpile_mitigated
        from kernel_server.estimator.mitigation import MitigationStack, get_technique

        device = _resolve_backend(backend)
        check_width(_check_circuit(circuit), device)
        stack = MitigationStack([get_technique("dd")(rule=rule)])
        plan = stack.construct(circuit)
        padded = plan.circuits[0]
        if padded.size() == plan.root.circuit.size():
            warnings.warn(
                f"DD ({rule}): no idle window in {circuit.name!r} is long enough for the "
                "sequence; the circuit is unchanged",
                UserWarning,
                stacklevel=2,
            )
        if scheduled:
            layout = choose_layout(plan.root.circuit, device)
            padded = transpile_mitigated(padded, device, layout, schedule=True)
        return _tagged([padded], "dd")[0]
