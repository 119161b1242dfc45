"""Circuit cutting with qiskit-addon-cutting: subexperiments in, one expectation value out.

Gates (and, in the automatic mode, wires) are replaced by quasi-probability decompositions into
local operations; the subexperiments are smaller or better-connected circuits, and their results
recombine into the expectation value of the observable on the whole circuit. Three ways to say
what to cut (config):

* ``gates``: qubit pairs, e.g. ``[(0, 3)]``: every two-qubit gate between a pair is cut, the
  circuit stays whole. This is how cutting *mitigates*: a gate that needs SWAPs on the device's
  coupling map is replaced by local operations, so the subexperiments need no routing.
* ``partition_labels``: one label per qubit (``"AABB"``): gates across labels are cut and each
  label's qubits become a separate subcircuit.
* neither: the addon's ``find_cuts`` chooses gate and wire cuts so that every subcircuit has at
  most ``max_subcircuit_width`` qubits (default: half the circuit, rounded up).

Each cut gate multiplies the subexperiments by 6 (exact enumeration, ``num_samples`` = inf) and the
estimator's variance by gamma^2 (9 for a CX). The observable (``config["observable"]``, filled in by
the stack) may have X/Y terms: the subexperiments measure in the right bases. Counts keys of the
subexperiments hold the addon's two registers; results may be quasi-distributions (from REM).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypedDict

from qiskit import QuantumCircuit

from kernel_server.estimator.mitigation.base import (
    DISTRIBUTION,
    EXPECTATION,
    Constructed,
    MitigationTechnique,
    Overhead,
    as_observable,
    normalize,
    register,
    split_terminal_measurements,
)

# classical_seconds model: decomposition and experiment generation ~27 ms, then the addon's
# reconstruction loops over outcomes in Python. Measured on this 2-core machine, a 4-qubit CZ ring
# with 1 and 2 cut gates (6 and 36 subexperiments, 4000-shot counts): combination 2.7 and 7.6 ms.
# 30 ms + 0.15 ms per subexperiment.
_SECONDS_FIXED = 0.03
_SECONDS_PER_SUBEXPERIMENT = 1.5e-4


class CutConfig(TypedDict):
    observable: Any  # Pauli label or SparsePauliOp on the circuit's qubits
    gates: list[tuple[int, int]] | None  # qubit pairs whose gates are cut, e.g. [(0, 3)]
    partition_labels: str | None  # one label per qubit, e.g. "AABB"
    max_subcircuit_width: int | None  # automatic mode (find_cuts); None: half the circuit
    num_samples: float  # inf: enumerate the decomposition exactly
    seed: int  # find_cuts search / sampling of the decomposition
    max_terms: int  # refuse decompositions with more terms (exact enumeration is 6^cuts)


@register("cutting", "circuit_cutting", "knitting")
class Cutting(MitigationTechnique[CutConfig]):
    """Gate/wire cutting (qiskit-addon-cutting) reconstructing an expectation value."""

    name: ClassVar[str] = "cut"
    kind: ClassVar[str] = DISTRIBUTION
    produces: ClassVar[str] = EXPECTATION
    same_qubits: ClassVar[bool] = False  # subexperiments are new circuits: lay each out afresh
    terminal_measurements_only: ClassVar[bool] = False
    adds_midcircuit_measurements: ClassVar[bool] = True
    needs_observable: ClassVar[bool] = True
    control_flow_limitation: ClassVar[str | None] = (
        "the quasi-probability decomposition needs a static circuit: a gate inside a branch runs "
        "in some shots only, so its cut has no fixed coefficients"
    )

    @classmethod
    def default_config(cls) -> CutConfig:
        return CutConfig(
            observable=None,
            gates=None,
            partition_labels=None,
            max_subcircuit_width=None,
            num_samples=math.inf,
            seed=0,
            max_terms=1000,
        )

    def validate_config(self, config: CutConfig) -> None:
        given = [k for k in ("gates", "partition_labels") if config[k] is not None]
        if len(given) > 1:
            raise ValueError("cut: give either gates or partition_labels, not both")
        if not config["num_samples"] >= 1:
            raise ValueError("cut: num_samples must be at least 1 (or math.inf)")

    # -- construction --------------------------------------------------------------------

    @staticmethod
    def _check_size(bases: Sequence[Any], cfg: Mapping[str, Any]) -> None:
        # Checked before generating anything: "gates" cuts every gate on a pair, and 8 CX on one
        # pair would be 6^8 = 1.7 million subexperiments.
        terms = math.prod(len(basis.coeffs) for basis in bases)
        if cfg["num_samples"] != math.inf:
            terms = min(terms, int(cfg["num_samples"]))
        if terms > cfg["max_terms"]:
            raise ValueError(
                f"cut: {len(bases)} cuts give {terms} decomposition terms (max_terms "
                f"{cfg['max_terms']}); cut fewer gates or sample (num_samples)"
            )

    def _decompose(self, circuit: QuantumCircuit, cfg: Mapping[str, Any]) -> dict[str, Any]:
        from qiskit_addon_cutting import (
            DeviceConstraints,
            OptimizationParameters,
            cut_gates,
            cut_wires,
            expand_observables,
            find_cuts,
            generate_cutting_experiments,
            partition_problem,
        )

        if cfg["observable"] is None:
            raise ValueError("cut: needs an observable (config['observable'])")
        observable = as_observable(cfg["observable"])
        if observable.num_qubits != circuit.num_qubits:
            raise ValueError(
                f"cut: observable has {observable.num_qubits} qubits, "
                f"the circuit {circuit.num_qubits}"
            )
        unitary, _ = split_terminal_measurements(circuit)
        paulis = observable.paulis
        if cfg["gates"] is not None:
            pairs = {frozenset(map(int, pair)) for pair in cfg["gates"]}
            ids = [
                i
                for i, ci in enumerate(unitary.data)
                if len(ci.qubits) == 2
                and frozenset(unitary.find_bit(q).index for q in ci.qubits) in pairs
            ]
            if not ids:
                raise ValueError(f"cut: no two-qubit gate acts on {sorted(map(sorted, pairs))}")
            cut_circuit, bases = cut_gates(unitary, ids)
            self._check_size(bases, cfg)
            experiments, coefficients = generate_cutting_experiments(
                cut_circuit, paulis, cfg["num_samples"]
            )
            groups = {None: list(experiments)}
            subobservables: Any = paulis
        else:
            if cfg["partition_labels"] is not None:
                problem = partition_problem(unitary, cfg["partition_labels"], observables=paulis)
            else:
                width = cfg["max_subcircuit_width"] or math.ceil(circuit.num_qubits / 2)
                cut_circuit, _ = find_cuts(
                    unitary, OptimizationParameters(seed=cfg["seed"]), DeviceConstraints(width)
                )
                with_ancillas = cut_wires(cut_circuit)
                expanded = expand_observables(paulis, unitary, with_ancillas)
                problem = partition_problem(with_ancillas, observables=expanded)
            self._check_size(problem.bases, cfg)
            experiments, coefficients = generate_cutting_experiments(
                problem.subcircuits, problem.subobservables, cfg["num_samples"]
            )
            groups = {label: list(experiments[label]) for label in sorted(experiments, key=str)}
            subobservables = problem.subobservables
        return {
            "groups": groups,
            "coefficients": coefficients,
            "subobservables": subobservables,
            "coeffs": [float(c.real) for c in observable.coeffs],
        }

    def construct_circuits(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Constructed:
        cfg = self.resolve_config(config)
        parts = self._decompose(circuit, cfg)
        circuits = [c for group in parts["groups"].values() for c in group]
        context = {
            "labels": [(label, len(group)) for label, group in parts["groups"].items()],
            "coefficients": parts["coefficients"],
            "subobservables": parts["subobservables"],
            "coeffs": parts["coeffs"],
        }
        return Constructed(circuits, context=context)

    # -- combination ---------------------------------------------------------------------

    def combine_results(
        self,
        results: Sequence[Any],
        config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> float:
        from qiskit.primitives import SamplerResult
        from qiskit_addon_cutting import reconstruct_expectation_values

        if not context or "labels" not in context:
            raise ValueError("cut: combine_results needs the context construct_circuits returned")
        expected = sum(count for _, count in context["labels"])
        if len(results) != expected:
            raise ValueError(f"cut: {len(results)} results for {expected} subexperiments")
        # SamplerV1-style results: the addon then reads (quasi-)probabilities per outcome, which
        # also takes REM's corrected distributions.
        per_label: dict[Any, Any] = {}
        start = 0
        for label, count in context["labels"]:
            dists = [normalize(r) for r in results[start : start + count]]
            start += count
            per_label[label] = SamplerResult(quasi_dists=dists, metadata=[{}] * count)
        if list(per_label) == [None]:
            values = reconstruct_expectation_values(
                per_label[None], context["coefficients"], context["subobservables"]
            )
        else:
            values = reconstruct_expectation_values(
                per_label, context["coefficients"], context["subobservables"]
            )
        return float(sum(c * float(v) for c, v in zip(context["coeffs"], values, strict=True)))

    def overhead(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Overhead:
        # Decomposing is cheap (tens of ms) next to running the subexperiments: count them.
        # Without an observable, count for Z on every qubit (one commuting group, like any
        # diagonal observable).
        cfg = self.resolve_config(config)
        if cfg["observable"] is None:
            cfg["observable"] = "Z" * circuit.num_qubits
        parts = self._decompose(circuit, cfg)
        num = sum(len(group) for group in parts["groups"].values())
        return Overhead(num, float(num), _SECONDS_FIXED + _SECONDS_PER_SUBEXPERIMENT * num)
