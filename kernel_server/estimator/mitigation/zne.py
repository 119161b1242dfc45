"""Zero-noise extrapolation with mitiq: unitary folding, then Linear or Richardson extrapolation.

The unitary part of the virtual circuit is folded (G -> G G^dagger G for randomly chosen gates, or
the whole circuit folded globally) to scale the gate noise by each noise factor; the expectation
values measured at those factors are extrapolated to factor 0. Readout error is not scaled by
folding, so ZNE leaves it in place: stack REM inside ZNE ("zne+rem") to remove it too.

Folding must happen on the virtual circuit and the folded circuits be transpiled at
``optimization_level=0`` (any higher level cancels G G^dagger), with the layout chosen for the
original circuit (see ``run.run_mitigated``).

Prefer odd integer factors with ``fold_gates_at_random``: a factor like 2 folds a random subset of
gates, and whether the subset holds CX (errors ~1%) or single-qubit gates (~0.03%) changes the
real noise scale from draw to draw (measured: Richardson over (1, 2, 3) spread +-0.058 across fold
seeds, over (1, 3, 5) +-0.017, the latter shot noise only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypedDict

from qiskit import QuantumCircuit

from kernel_server.estimator.mitigation.base import (
    EXPECTATION,
    Constructed,
    MitigationTechnique,
    Overhead,
    reattach_measurements,
    register,
    split_terminal_measurements,
)

SCALINGS = ("random", "global")
EXTRAPOLATIONS = ("richardson", "linear")

# classical_seconds model: folding costs a mitiq round trip (Qiskit -> QASM -> Cirq -> Qiskit)
# per noise factor other than 1, growing with the folded gate count; mitiq's extrapolation ~1 ms.
# Measured on this 2-core machine over 3-5 qubit circuits of 11-58 gates, factors (1, 3, 5) and
# (1, 2, 3): construction 27-58 ms and 29-43 ms, fit by 10 ms per folded circuit plus 0.07 ms per
# (gate x factor). The first call in a process pays ~1 s more of Cirq warm-up (left out, like
# the import).
_SECONDS_FIXED = 1e-3
_SECONDS_PER_CIRCUIT = 0.01
_SECONDS_PER_FOLDED_GATE = 7e-5


class ZNEConfig(TypedDict):
    noise_factors: tuple[float, ...]
    scaling: str  # "random": fold_gates_at_random, "global": fold_global
    extrapolation: str  # "richardson" or "linear"
    seed: int  # gate choice of fold_gates_at_random


@register("zero_noise_extrapolation")
class ZNE(MitigationTechnique[ZNEConfig]):
    """Zero-noise extrapolation (mitiq ``fold_gates_at_random`` / ``fold_global`` + factories)."""

    name: ClassVar[str] = "zne"
    kind: ClassVar[str] = EXPECTATION
    produces: ClassVar[str] = EXPECTATION
    control_flow_limitation: ClassVar[str | None] = (
        "folding (G -> G G^dagger G) needs a static unitary, and mitiq converts circuits through "
        "OpenQASM 2, which has no if_else, switch or loops"
    )

    @classmethod
    def default_config(cls) -> ZNEConfig:
        return ZNEConfig(
            noise_factors=(1, 3, 5), scaling="random", extrapolation="richardson", seed=0
        )

    def validate_config(self, config: ZNEConfig) -> None:
        factors = tuple(float(f) for f in config["noise_factors"])
        if len(factors) < 2 or len(set(factors)) != len(factors) or min(factors) < 1.0:
            raise ValueError(
                f"zne: noise_factors must be at least two distinct numbers >= 1, got {factors}"
            )
        if config["scaling"] not in SCALINGS:
            raise ValueError(f"zne: scaling must be one of {SCALINGS}, got {config['scaling']!r}")
        if config["extrapolation"] not in EXTRAPOLATIONS:
            raise ValueError(
                f"zne: extrapolation must be one of {EXTRAPOLATIONS}, "
                f"got {config['extrapolation']!r}"
            )

    def construct_circuits(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Constructed:
        from mitiq.zne.scaling import fold_gates_at_random, fold_global

        cfg = self.resolve_config(config)
        unitary, measurements = split_terminal_measurements(circuit)
        circuits = []
        for index, factor in enumerate(cfg["noise_factors"]):
            if float(factor) == 1.0:
                folded = unitary  # no round trip through Cirq for the unscaled circuit
            elif cfg["scaling"] == "global":
                folded = fold_global(unitary, float(factor))
            else:
                # One seed per factor: the same seed would fold the same gates first each time.
                folded = fold_gates_at_random(unitary, float(factor), seed=cfg["seed"] + index)
            circuits.append(reattach_measurements(folded, circuit, measurements))
        return Constructed(circuits, shots_ratio=1.0)

    def combine_results(
        self,
        results: Sequence[Any],
        config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> float:
        from mitiq.zne.inference import LinearFactory, RichardsonFactory

        cfg = self.resolve_config(config)
        factors = [float(f) for f in cfg["noise_factors"]]
        if len(results) != len(factors):
            raise ValueError(f"zne: {len(results)} results for {len(factors)} noise factors")
        factory = RichardsonFactory if cfg["extrapolation"] == "richardson" else LinearFactory
        # mitiq returns a complex number when the values came through an Observable: keep the
        # real part on purpose (the imaginary part of a Hermitian expectation is noise).
        value = factory.extrapolate(factors, [float(r) for r in results])
        return float(complex(value).real)

    def overhead(
        self, circuit: QuantumCircuit, config: Mapping[str, Any] | None = None
    ) -> Overhead:
        cfg = self.resolve_config(config)
        factors = [float(f) for f in cfg["noise_factors"]]
        gates = sum(1 for ci in circuit.data if ci.operation.name not in ("barrier", "measure"))
        seconds = _SECONDS_FIXED + sum(
            _SECONDS_PER_CIRCUIT + _SECONDS_PER_FOLDED_GATE * gates * f for f in factors if f != 1
        )
        return Overhead(len(factors), float(len(factors)), seconds)
