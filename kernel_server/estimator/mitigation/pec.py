"""Probabilistic error cancellation with mitiq, from a local depolarizing noise model.

Each gate's ideal action is written as a quasi-probability combination of noisy implementable
gates (mitiq ``represent_operation_with_local_depolarizing_noise``: the noisy gate followed by
Paulis, with negative weights). Circuits are sampled from that combination and the signed average
of their expectation values, times the one-norm gamma, is unbiased for the ideal value *if* the
noise model is right. The variance grows as gamma^2, which is why ``shots_factor`` is gamma^2.

``noise_level`` is the per-qubit depolarizing probability mitiq's representation assumes. For a
two-qubit gate with reported error e (1 - average gate fidelity) on independent single-qubit
depolarizing channels of probability p: process infidelity ~ 2p, average infidelity 4/5 of that,
so p ~ e / 1.6. Readout error and idle noise are not represented (stack REM inside PEC for the
former).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypedDict

import numpy as np
from qiskit import QuantumCircuit

from kernel_server.core.cache import LRU
from kernel_server.estimator.mitigation.base import (
    EXPECTATION,
    Constructed,
    MitigationTechnique,
    Overhead,
    check_positive,
    reattach_measurements,
    register,
    split_terminal_measurements,
)

OPERATIONS = ("two_qubit", "all")

# Representations per (operation, noise level): mitiq builds each in ~80 ms (deep copies of its
# 16 noisy Pauli variants), and the same gates on the same qubits recur from job to job.
_representations: LRU[Any] = LRU(256)

# classical_seconds model: mitiq samples each circuit in Cirq and converts it back to Qiskit
# through QASM. Measured on this 2-core machine (3-5 qubit circuits of 11-58 gates, 30 and 100
# samples, representations cached): ~20 ms, then ~0.8 ms + 0.16 ms per gate for each sampled
# circuit (100 samples: 0.17-0.23 s at 11 gates, 0.94-1.2 s at 58; +-30% with machine load).
# Not modelled: the first use of a gate
# on given qubits at a given noise level, ~80 ms for mitiq to build its representation (cached).
_SECONDS_FIXED = 0.02
_SECONDS_PER_SAMPLE = 8e-4
_SECONDS_PER_SAMPLE_GATE = 1.6e-4


def two_qubit_noise_level(gate_error: float) -> float:
    """The per-qubit depolarizing ``noise_level`` matching a two-qubit gate's reported error."""
    return float(gate_error) / 1.6


class PECConfig(TypedDict):
    # Per-qubit depolarizing probability; 0.005 ~ a two-qubit error of 0.8%.
    noise_level: float
    num_samples: int
    seed: int
    # Which gates get a representation. Single-qubit errors on IBM devices are ~30x smaller than
    # two-qubit ones; one noise level for both would over-correct them.
    operations: str


@register("probabilistic_error_cancellation")
class PEC(MitigationTechnique[PECConfig]):
    """Probabilistic error cancellation (mitiq ``pec.construct_circuits`` / ``combine_results``)."""

    name: ClassVar[str] = "pec"
    kind: ClassVar[str] = EXPECTATION
    produces: ClassVar[str] = EXPECTATION
    control_flow_limitation: ClassVar[str | None] = (
        "mitiq samples the circuit in Cirq, converting it through OpenQASM 2, which has no "
        "if_else, switch or loops"
    )

    @classmethod
    def default_config(cls) -> PECConfig:
        return PECConfig(noise_level=0.005, num_samples=100, seed=0, operations="two_qubit")

    def validate_config(self, config: PECConfig) -> None:
        level = config["noise_level"]
        if not isinstance(level, (int, float)) or not 0 < level < 0.75:
            raise ValueError(f"pec: noise_level must be in (0, 0.75), got {level!r}")
        check_positive("pec: num_samples", config["num_samples"], integer=True)
        if config["operations"] not in OPERATIONS:
            raise ValueError(f"pec: operations must be one of {OPERATIONS}")

    def _representations(self, unitary: QuantumCircuit, cfg: Mapping[str, Any]) -> list[Any]:
        import cirq
        from mitiq.interface import convert_to_mitiq
        from mitiq.pec.representations import represent_operation_with_local_depolarizing_noise

        cirq_circuit, _ = convert_to_mitiq(unitary)
        operations = {
            op
            for op in cirq_circuit.all_operations()
            if not cirq.is_measurement(op) and (cfg["operations"] == "all" or len(op.qubits) == 2)
        }
        level = float(cfg["noise_level"])

        def represent(op: Any) -> Any:
            return _representations.get_or_make(
                (str(op), level),
                lambda: represent_operation_with_local_depolarizing_noise(cirq.Circuit(op), level),
            )

        # Sorted so that sampling is reproducible (set order of Cirq operations is not).
        return [represent(op) for op in sorted(operations, key=str)]

    def construct_circuits(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Constructed:
        from mitiq import pec

        cfg = self.resolve_config(config)
        unitary, measurements = split_terminal_measurements(circuit)
        representations = self._representations(unitary, cfg)
        with warnings.catch_warnings():
            # Gates left unrepresented on purpose (single-qubit ones) are sampled as themselves.
            warnings.filterwarnings("ignore", message="No representation found")
            sampled, signs, norm = pec.construct_circuits(
                unitary,
                representations,
                num_samples=int(cfg["num_samples"]),
                random_state=np.random.RandomState(int(cfg["seed"])),
                full_output=True,
            )
        circuits = [reattach_measurements(c, circuit, measurements) for c in sampled]
        num = len(circuits)
        return Constructed(
            circuits,
            context={"signs": [int(s) for s in signs], "norm": float(norm)},
            # gamma^2 times the job's shots spread over the samples.
            shots_ratio=float(norm) ** 2 / num,
        )

    def combine_results(
        self,
        results: Sequence[Any],
        config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> float:
        from mitiq import pec

        if not context or "signs" not in context or "norm" not in context:
            raise ValueError("pec: combine_results needs the context construct_circuits returned")
        signs = list(context["signs"])
        if len(results) != len(signs):
            raise ValueError(f"pec: {len(results)} results for {len(signs)} sampled circuits")
        return float(pec.combine_results([float(r) for r in results], context["norm"], signs))

    def one_norm(self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None) -> float:
        """gamma, the one-norm of the circuit's representation, in closed form (no mitiq).

        mitiq's local depolarizing representation inverts D(rho) = (1 - e) rho + e I/2 per qubit,
        e = 4/3 noise_level, with weights c+ = 1 - 3 c- on the gate and c- = -e / (4 (1 - e)) on
        each Pauli: one-norm 1 + 1.5 e / (1 - e) per qubit, a product over represented gates.
        """
        cfg = self.resolve_config(config)
        epsilon = 4.0 / 3.0 * float(cfg["noise_level"])
        per_qubit = 1.0 + 1.5 * epsilon / (1.0 - epsilon)
        qubits = sum(len(ci.qubits) for ci in _represented(circuit, cfg["operations"]))
        return per_qubit**qubits

    def overhead(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Overhead:
        cfg = self.resolve_config(config)
        gamma = self.one_norm(circuit, cfg)
        samples = int(cfg["num_samples"])
        gates = sum(1 for ci in circuit.data if ci.operation.name not in ("barrier", "measure"))
        seconds = _SECONDS_FIXED + samples * (
            _SECONDS_PER_SAMPLE + _SECONDS_PER_SAMPLE_GATE * gates
        )
        return Overhead(samples, gamma**2, seconds)


def _represented(circuit: QuantumCircuit, operations: str) -> list[Any]:
    """The instructions PEC represents: two-qubit gates, or every gate."""
    return [
        ci
        for ci in circuit.data
        if ci.operation.name not in ("barrier", "measure", "delay")
        and (operations == "all" or len(ci.qubits) == 2)
    ]
