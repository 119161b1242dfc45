"""Where a primitive's PUBs run: in the running step, or in a workflow of one quantum step.

Inside a ``%%qonductor`` step (or a workflow this module started) every PUB is one QPU job of
the step, all sent at once through the step's link (``kernel_server.tasks.primitives``); the
orchestrator estimates, plans and places each like a ``sample()`` call. Anywhere else ``run``
starts a workflow whose one step is ``primitive.run(pubs).result()``: the same code, run where
the step's quantum calls go, and the job follows that workflow.
"""

from __future__ import annotations

import threading
from typing import Any

from qiskit.primitives import PrimitiveResult

from kernel_server.core.deployment import DeploymentConfig

from .job import QonductorJob
from .pin import Pin

# The one-step workflow a primitive's run outside a cell is (created once per orchestrator).
_SOURCE = "value = primitive.run(pubs).result()\n"
_images: dict[str, str] = {}
_images_lock = threading.Lock()


class PrimitiveJobError(RuntimeError):
    """A PUB's QPU job failed (or was refused by the orchestrator); ``results`` holds the PUB
    results that did finish (None where one failed), so that nothing done is lost."""

    def __init__(self, message: str, results: list[Any]) -> None:
        super().__init__(message)
        self.results = results


def step_executor() -> Any:
    """The running step's ``execute`` (a list of QuantumCalls -> results), or None outside one."""
    from ..primitives import _step_primitives

    primitives = _step_primitives()
    return None if primitives is None else primitives.execute


def run_in_step(execute: Any, calls: list[Any]) -> tuple[list[Any], str]:
    """Each call one QPU job of the running step; (results, workflow id). Raises
    PrimitiveJobError when one fails, with the others' results kept."""
    results = execute(calls)
    workflow_id = next((r.workflow_id for r in results if hasattr(r, "workflow_id")), "")
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
    if failed:
        index, error = failed[0]
        done = [None if isinstance(r, Exception) else r for r in results]
        raise PrimitiveJobError(f"PUB {index} failed: {error}", done)
    return results, workflow_id


def submit_workflow(
    primitive: Any, pubs: list[Any], run_options: dict[str, object]
) -> QonductorJob:
    """Start the one-step workflow of ``primitive.run(pubs)``; its job, at once."""
    from .. import api
    from ..inputs import pickle_inputs

    inputs = pickle_inputs({"primitive": primitive, "pubs": pubs})
    options = {k: v for k, v in run_options.items() if v is not None}
    workflow_id = api._invoke(_image(), inputs, options)
    return QonductorJob(workflow_id)


def _image() -> str:
    """The deployed image of ``_SOURCE`` on the current orchestrator (made once)."""
    from .. import api
    from ..client import get_client
    from ..splitter import NotebookContext, split_cell

    key = repr(get_client().info)
    with _images_lock:
        image_id = _images.get(key)
    if image_id is None:
        graph = split_cell(_SOURCE, NotebookContext(modules=frozenset({"primitive"})))
        cell = api._with_cell(_SOURCE, graph)
        image_id = api._create_image(cell, DeploymentConfig(), "primitive")
        api.deploy(image_id)
        with _images_lock:
            _images[key] = image_id
    return image_id


def report_metadata(result: Any, pin: Pin) -> dict[str, Any]:
    """What a PUB result says of its QPU job: where it ran, with which plan, and how long."""
    report = result.report
    if report is None:
        return {"qpu": None}
    return {
        "qpu": report.qpu,
        "mitigation": report.mitigation,
        "estimated_fidelity": report.est_fidelity,
        "qpu_job_id": report.job_id,
        "workflow_id": result.workflow_id,
        "method": report.method,
        "num_circuits": report.num_circuits,
        "queue_s": report.queue_s,
        "run_s": report.run_s,
        "mode": pin.label,
        **({"session_id": pin.session} if pin.session else {}),
    }


def primitive_result(pub_results: list[Any]) -> PrimitiveResult:
    return PrimitiveResult(pub_results, metadata={"version": 2})
