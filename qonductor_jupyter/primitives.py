"""``sample`` and ``estimate`` as functions to import: ``from qonductor_jupyter import sample``.

Inside a ``%%qonductor`` cell (and in any function it calls) they are the running step's own
quantum calls, exactly the names the magic provides: the splitter sees the import, and in the
worker the call goes to the step. Anywhere else (a plain cell, a script) each call is a workflow of
one quantum step on the orchestrator, so the same code runs with or without the magic.

Kept free of heavy imports: ``%load_ext`` and ``import qonductor_jupyter`` stay fast.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel_server.tasks.primitives import StepPrimitives


def _step_primitives() -> StepPrimitives | None:
    step = sys.modules.get("kernel_server.tasks.primitives")
    if step is None:
        return None
    primitives = step.current_primitives()
    link = sys.modules.get("kernel_server.tasks.link")
    if primitives is None and link is not None and link.in_worker():
        # A worker process, but not from a step's thread: there is no step to run it for, and
        # starting a workflow from inside a workflow would go round in circles.
        raise RuntimeError(
            "sample()/estimate() was called from a thread of a step while other steps run in "
            "the same worker; call it from the step's own code"
        )
    return primitives


def sample(circuits: Any, shots: int | None = None) -> Any:
    """Run a QuantumCircuit (or a list of them) on a QPU the orchestrator picks; return counts
    (a dict from bitstrings to shots, or a list of them)."""
    step = _step_primitives()
    if step is not None:
        return step.sample(circuits, shots=shots)
    from .api import run_primitive

    return run_primitive("sample", circuits, shots=shots)


def estimate(circuit: Any, observables: Any, shots: int | None = None) -> Any:
    """The expectation value of an observable (a SparsePauliOp, a Pauli label such as "ZZ", or
    a list of them) on the circuit's state, measured on a QPU the orchestrator picks."""
    step = _step_primitives()
    if step is not None:
        return step.estimate(circuit, observables, shots=shots)
    from .api import run_primitive

    return run_primitive("estimate", circuit, observables, shots=shots)
