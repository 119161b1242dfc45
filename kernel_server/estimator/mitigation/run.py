"""The reference executor of mitigation stacks: a job's circuits on a device's simulated noise.

:func:`run_mitigated` constructs the stack's circuits, compiles every one for the device and runs
it with the device's noise (``aer_sim.run_noisy``), then combines. It respects the traps of the
stack, each measured: mitigation acts on the small virtual circuit, and the constructed circuits
are compiled at ``optimization_level=0`` with the physical qubits chosen once for the circuit they
stem from (``backends.compile.choose_layout`` and ``transpile_mitigated``). Tests, benchmarks, the
fidelity model's training runs and the simulated QPUs' mitigated jobs run through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from qiskit import QuantumCircuit
from qiskit.providers import BackendV2

from kernel_server.backends.compile import choose_layout, transpile_mitigated
from kernel_server.estimator.mitigation.base import Observable
from kernel_server.estimator.mitigation.rem import CALIBRATION_TAG
from kernel_server.estimator.mitigation.stack import MitigationPlan, StackSpec, parse_stack
from kernel_server.wire.circuits import fingerprint

# ``aer_sim`` (qiskit_aer: 1-3 s) is imported inside the functions that run circuits, so that
# importing the mitigation package stays cheap.

__all__ = ["MitigatedRun", "run_mitigated", "run_mitigated_detailed"]


@dataclass
class MitigatedRun:
    """One mitigated execution: the result and what it took."""

    value: Any  # float (expectation) or dict[str, float] (distribution)
    plan: MitigationPlan
    counts: list[Mapping[str, float]]  # counts, or exact probabilities (exact=True)
    shots: list[int]

    @property
    def total_shots(self) -> int:
        return sum(self.shots)


def _leaf_seed(seed: int | None, index: int) -> int | None:
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), index]).generate_state(1)[0])


def run_mitigated_detailed(
    circuit: QuantumCircuit,
    backend: BackendV2,
    stack: StackSpec,
    shots: int,
    seed: int | None = 0,
    observable: Observable | None = None,
    *,
    schedule: bool = True,
    transpile_seed: int = 0,
    exact: bool = False,
    per_outcome: bool = False,
    layout: Sequence[int] | None = None,
    shared: dict[Any, Any] | None = None,
) -> MitigatedRun:
    """:func:`run_mitigated`, also returning the plan, the raw counts and the shots.

    ``per_outcome`` returns the mitigated outcome distribution of any stack without cutting
    (:meth:`MitigationStack.combine_distribution`) instead of an expectation value. ``layout``
    fixes the physical qubits of the job's circuit (default: :func:`choose_layout`'s).
    ``shared``, a dict kept across the circuits of one QPU job, makes calibration circuits
    (REM's) that come out the same run once per job, as a device calibrates once per job."""
    from kernel_server.backends.aer_sim import noisy_probabilities, run_noisy

    mitigation = parse_stack(stack)
    plan = mitigation.construct(circuit, observable, per_outcome=per_outcome)
    layouts = [
        tuple(layout)
        if index == 0 and layout is not None
        else choose_layout(anchor, backend, transpile_seed)
        for index, anchor in enumerate(plan.anchors)
    ]
    shots_each = plan.shots_for(shots)
    counts: list[Any] = []
    for index, (constructed, anchor) in enumerate(zip(plan.circuits, plan.anchor_of, strict=True)):
        transpiled = transpile_mitigated(
            constructed, backend, layouts[anchor], schedule=schedule, seed=transpile_seed
        )
        if exact:
            counts.append(noisy_probabilities(backend, transpiled))
            continue
        key = None
        if shared is not None and (constructed.metadata or {}).get(CALIBRATION_TAG):
            key = (fingerprint([transpiled]), shots_each[index])
            if key[0] and key in shared:
                counts.append(shared[key])
                continue
        result = run_noisy(backend, transpiled, shots_each[index], _leaf_seed(seed, index))
        if key is not None and key[0]:
            shared[key] = result  # type: ignore[index]
        counts.append(result)
    combine = mitigation.combine_distribution if per_outcome else mitigation.combine
    return MitigatedRun(combine(counts, plan), plan, counts, shots_each)


def run_mitigated(
    circuit: QuantumCircuit,
    backend: BackendV2,
    stack: StackSpec,
    shots: int,
    seed: int | None = 0,
    observable: Observable | None = None,
    *,
    schedule: bool = True,
    transpile_seed: int = 0,
    exact: bool = False,
) -> Any:
    """Run ``circuit`` (virtual, measured) on ``backend``'s simulated noise with ``stack``.

    Constructs the stack's circuits, lays each family out once (:func:`choose_layout` of the job's
    circuit, or of each cutting subexperiment), transpiles each circuit at level 0 on that layout
    (scheduled, so idle windows decohere), runs it with ``run_noisy`` and combines. ``stack`` is
    anything :func:`parse_stack` takes; None gives the unmitigated run through the same path, the
    fair baseline. Returns a float when an observable is given or the stack ends in an
    expectation value, else a distribution.

    ``exact`` replaces sampling by each circuit's exact noisy distribution
    (``aer_sim.noisy_probabilities``): the mitigation's bias without shot noise, for benchmarks.
    It cannot take mid-circuit measurements (cutting's subexperiments).
    """
    return run_mitigated_detailed(
        circuit,
        backend,
        stack,
        shots,
        seed,
        observable,
        schedule=schedule,
        transpile_seed=transpile_seed,
        exact=exact,
    ).value
