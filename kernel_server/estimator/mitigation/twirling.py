"""Pauli twirling of the two-qubit gates with mitiq, averaged over the variants.

Each CNOT/CZ is dressed with random Paulis before and after that leave it logically unchanged
(mitiq ``generate_pauli_twirl_variants``); averaging over variants turns the gates' noise into a
Pauli channel. That removes coherent errors' coherent build-up (an over-rotation repeated n times
costs ~n^2 theta^2 coherently, ~n theta^2 twirled) and makes noise predictable for ZNE/PEC. It does
not reduce incoherent noise: on the simulated devices, whose gate noise is depolarizing plus
thermal relaxation, twirling alone gives no gain (it adds single-qubit gates; see the report in
tests/estimator/test_mitigation.py). The job's shots are split over the variants (no shot overhead).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar, TypedDict

from qiskit import QuantumCircuit

from kernel_server.estimator.mitigation.base import (
    DISTRIBUTION,
    AveragingTechnique,
    Constructed,
    Overhead,
    check_positive,
    reattach_measurements,
    register,
    split_terminal_measurements,
)

# classical_seconds model: two Qiskit -> Cirq -> Qiskit round trips per variant (mitiq twirls
# CNOTs, then CZs). Measured on this 2-core machine, 10 variants of 3-5 qubit circuits with 4, 12
# and 32 CX: 24, 48 and 93 ms per variant; 15 ms + 2.3 ms per two-qubit gate.
_SECONDS_PER_VARIANT = 0.015
_SECONDS_PER_VARIANT_GATE = 2.3e-3


def _drop_identities(circuit: QuantumCircuit) -> QuantumCircuit:
    # mitiq pads with identity gates; on IBM devices "id" is a real pulse slot (error, duration).
    out = circuit.copy_empty_like()
    for instruction in circuit.data:
        if instruction.operation.name != "id":
            out.append(instruction)
    return out


class TwirlConfig(TypedDict):
    num_variants: int
    seed: int


@register("twirling", "pauli_twirling", "pt")
class Twirling(AveragingTechnique[TwirlConfig]):
    """Pauli twirling (mitiq ``generate_pauli_twirl_variants``)."""

    name: ClassVar[str] = "twirl"
    kind: ClassVar[str] = DISTRIBUTION
    produces: ClassVar[str] = DISTRIBUTION
    control_flow_limitation: ClassVar[str | None] = (
        "mitiq twirls the circuit in Cirq, converting it through OpenQASM 2, which has no "
        "if_else, switch or loops"
    )

    @classmethod
    def default_config(cls) -> TwirlConfig:
        return TwirlConfig(num_variants=10, seed=0)

    def validate_config(self, config: TwirlConfig) -> None:
        check_positive("twirl: num_variants", config["num_variants"], integer=True)

    def construct_circuits(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Constructed:
        from mitiq.pt import generate_pauli_twirl_variants

        cfg = self.resolve_config(config)
        unitary, measurements = split_terminal_measurements(circuit)
        num = int(cfg["num_variants"])
        # mitiq draws the Paulis from the global `random` module: seed it for reproducibility
        # and give the caller's random state back afterwards.
        state = random.getstate()
        try:
            random.seed(cfg["seed"])
            variants = generate_pauli_twirl_variants(unitary, num_circuits=num)
        finally:
            random.setstate(state)
        circuits = [
            reattach_measurements(_drop_identities(v), circuit, measurements) for v in variants
        ]
        return Constructed(circuits, shots_ratio=1.0 / num)

    def overhead(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Overhead:
        cfg = self.resolve_config(config)
        num = int(cfg["num_variants"])
        two_qubit = sum(
            1 for ci in circuit.data if len(ci.qubits) == 2 and ci.operation.name != "barrier"
        )
        seconds = num * (_SECONDS_PER_VARIANT + _SECONDS_PER_VARIANT_GATE * two_qubit)
        return Overhead(num, 1.0, seconds)
