"""The Python API (the paper's programming model): create, deploy and invoke workflow images.

The ``%%qonductor`` magic is a thin layer over ``run_cell`` here, so plain Python gets the same.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable
from typing import Any

import cloudpickle

from kernel_server import protocol as P
from kernel_server.cell_functions import rebind_cell_functions

from .client import get_client
from .errors import (
    InputError,
    QonductorError,
    WorkflowCancelled,
    WorkflowFailed,
    from_remote,
)
from .splitter import WorkflowGraph, split_cell

# Names that only make sense inside the IPython process; shipping them would drag the shell along.
KERNEL_ONLY_NAMES = frozenset({"get_ipython", "exit", "quit", "In", "Out", "_ih", "_oh", "_dh"})


def _request(message: P.Message, timeout: float = 60.0, client: Any = None) -> P.Message:
    try:
        return (client or get_client()).request(message, timeout=timeout)
    except P.RemoteError as exc:
        raise from_remote(exc) from None
    except P.RequestTooLarge as exc:
        raise InputError(str(exc)) from None


# -------------------------------------------------------------------- images
def _function_list_source(steps: list[Any]) -> tuple[str, dict[str, bytes]]:
    """Turn ``[pre_process, circuit, post_process]`` into cell source plus bound objects.

    Each callable receives the previous step's value; a circuit (or the word "sample" after a
    callable returning one) is sampled. The first callable's required parameters become the
    workflow's inputs.
    """
    from qiskit import QuantumCircuit

    lines: list[str] = []
    bound: dict[str, bytes] = {}
    have_value = False
    for i, step in enumerate(steps):
        name = f"_qstep_{i}"
        if isinstance(step, QuantumCircuit):
            bound[name] = cloudpickle.dumps(step)
            lines.append(f"result = sample({name})")
        elif step == "sample" or getattr(step, "__name__", None) == "sample":
            if not have_value:
                raise QonductorError("'sample' needs a previous step that returns a circuit")
            lines.append("result = sample(result)")
        elif callable(step):
            bound[name] = cloudpickle.dumps(step)
            if have_value:
                lines.append(f"result = {name}(result)")
            else:
                params = [
                    p.name
                    for p in inspect.signature(step).parameters.values()
                    if p.default is inspect.Parameter.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                ]
                args = ", ".join(f"{p}={p}" for p in params)
                lines.append(f"result = {name}({args})")
        else:
            raise QonductorError(
                f"step {i} is a {type(step).__name__}; a workflow step must be "
                "a callable, a QuantumCircuit or 'sample'"
            )
        have_value = True
    return "\n".join(lines) + "\n", bound


def _graph_dict(source: str) -> dict[str, Any]:
    graph = split_cell(source)
    data = graph.to_dict()
    data["source"] = source
    return data


def create_workflow(
    code: str | list[Any], config: dict[str, Any] | str | None = None, name: str | None = None
) -> str:
    """Package code (cell source, or a list of step functions/circuits) and config as an image."""
    from kernel_server.config import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise QonductorError(str(exc)) from None
    if isinstance(code, str):
        source, bound = code, {}
    elif isinstance(code, (list, tuple)) and code:
        source, bound = _function_list_source(list(code))
    else:
        raise QonductorError("code must be cell source (str) or a non-empty list of steps")
    graph = _graph_dict(source)
    reply = _request(
        P.CreateWorkflow(source=source, graph=graph, config=cfg, name=name, bound=bound)
    )
    return reply.data["image_id"]  # type: ignore[attr-defined]


def deploy(image_id: str, config: dict[str, Any] | str | None = None) -> str:
    """Deploy an image (optionally overriding its configuration); returns the image id."""
    from kernel_server.config import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise QonductorError(str(exc)) from None
    reply = _request(P.Deploy(image_id=image_id, config=cfg))
    return reply.data["image_id"]  # type: ignore[attr-defined]


def pickle_inputs(inputs: dict[str, Any]) -> dict[str, bytes]:
    blobs: dict[str, bytes] = {}
    problems = []
    for name, value in inputs.items():
        try:
            blobs[name] = cloudpickle.dumps(value)
        except Exception as exc:  # pickling raises many exception types
            problems.append(f"  {name} ({type(value).__name__}): {exc}")
    if problems:
        raise InputError(
            "these inputs cannot be sent to the orchestrator:\n"
            + "\n".join(problems)
            + "\nCreate them inside the cell, or pass something picklable."
        )
    return blobs


def invoke(image_id: str, inputs: dict[str, Any] | None = None, **options: Any) -> str:
    """Start a run of a deployed image; returns the workflow id at once."""
    return _invoke(image_id, pickle_inputs(inputs or {}), options)


def _invoke(image_id: str, blobs: dict[str, bytes], options: dict[str, Any]) -> str:
    # The client picks the id, so a request resent to a restarted orchestrator is not a new run.
    workflow_id = "wf-" + uuid.uuid4().hex[:12]
    options = {k: v for k, v in options.items() if v is not None}
    _request(P.Invoke(image_id=image_id, workflow_id=workflow_id, inputs=blobs, options=options))
    return workflow_id


def workflow_status(workflow_id: str) -> str:
    reply = _request(P.GetStatus(workflow_id=workflow_id))
    return reply.state  # type: ignore[attr-defined]


def workflow_info(workflow_id: str) -> P.WorkflowReply:
    return _request(P.GetStatus(workflow_id=workflow_id))  # type: ignore[return-value]


def wait(
    workflow_id: str,
    timeout: float | None = None,
    on_poll: Callable[[P.WorkflowReply], None] | None = None,
    client: Any = None,
) -> P.WorkflowReply:
    """Block until the workflow is final (long-polling); raises TimeoutError after ``timeout``.

    A background waiter passes its own ``client``: a long poll holds its client's socket, and on
    the shared one it would stall every other request of the kernel until the workflow ends.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"workflow {workflow_id} did not finish within {timeout} s")
        reply: P.WorkflowReply = _request(
            P.GetResults(workflow_id=workflow_id, wait_s=left), timeout=left + 30.0, client=client
        )  # type: ignore[assignment]
        if on_poll is not None:
            on_poll(reply)
        if reply.state in ("done", "failed", "cancelled"):
            return reply


def _raise_for(reply: P.WorkflowReply) -> None:
    if reply.state == "failed":
        raise WorkflowFailed(reply)
    if reply.state == "cancelled":
        raise WorkflowCancelled(f"workflow {reply.workflow_id} was cancelled; it has no results")


def workflow_results(workflow_id: str, timeout: float | None = None) -> dict[str, Any]:
    """Wait for the workflow and return the values its code assigned, by name."""
    reply = wait(workflow_id, timeout)
    _raise_for(reply)
    return {name: cloudpickle.loads(blob) for name, blob in (reply.outputs or {}).items()}


def cancel(workflow_id: str) -> dict[str, Any]:
    return _request(P.Cancel(workflow_id=workflow_id)).data  # type: ignore[attr-defined]


def choose_plan(workflow_id: str, step_id: int, plan: int | str) -> Any:
    """Answer a ``--plan ask`` step: run it with plan number ``plan`` (or "off")."""
    return _request(P.ChoosePlan(workflow_id=workflow_id, step_id=int(step_id), plan=plan)).data[
        "plan"
    ]  # type: ignore[attr-defined]


def list_images() -> list[dict[str, Any]]:
    return _request(P.ListImages()).data["images"]  # type: ignore[attr-defined]


def list_workflows(limit: int = 100) -> list[dict[str, Any]]:
    return _request(P.ListWorkflows(limit=limit)).data["workflows"]  # type: ignore[attr-defined]


def fleet() -> list[dict[str, Any]]:
    return _request(P.GetFleet()).data["devices"]  # type: ignore[attr-defined]


# -------------------------------------------------------------------- the cell path
def capture_inputs(graph: WorkflowGraph, namespace: dict[str, Any]) -> dict[str, Any]:
    """The values of the cell's free names, checked before anything is queued."""
    kernel_only = sorted(n for n in graph.inputs if n in KERNEL_ONLY_NAMES)
    if kernel_only:
        raise InputError(
            f"{', '.join(kernel_only)} only exist in the notebook kernel and cannot "
            "be used inside a %%qonductor cell (IPython magics included)"
        )
    # The splitter's reads are conservative: a name bound only inside a loop and read after it
    # counts as read. Such a name is fine when the cell binds it; only names the cell never binds
    # and the notebook does not have are an error (the NameError Python would raise, but early).
    written = set(graph.outputs)
    missing = [n for n in graph.inputs if n not in namespace and n not in written]
    if missing:
        raise InputError(
            f"name{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not defined: neither in the "
            "notebook nor assigned earlier in the cell"
        )
    return {n: namespace[n] for n in graph.inputs if n in namespace}


def check_circuit_widths(values: dict[str, Any]) -> None:
    """Refuse input circuits wider than every QPU before anything is queued."""
    widths = {
        n: v.num_qubits
        for n, v in values.items()
        if type(v).__name__ == "QuantumCircuit" and hasattr(v, "num_qubits")
    }
    if not widths:
        return
    devices = fleet()
    largest = max((d["num_qubits"] for d in devices), default=0)
    too_wide = {n: w for n, w in widths.items() if w > largest}
    if too_wide:
        listing = ", ".join(f"{n} has {w} qubits" for n, w in too_wide.items())
        raise InputError(
            f"circuit too wide for every QPU: {listing}; the largest QPU in the "
            f"fleet has {largest} qubits. Reduce the width (or cut the circuit)."
        )


def submit_cell(
    source: str,
    namespace: dict[str, Any],
    config: dict[str, Any] | None = None,
    name: str | None = None,
    **options: Any,
) -> tuple[str, WorkflowGraph]:
    """Split, register, deploy and invoke a cell; returns (workflow id, graph)."""
    graph = split_cell(source)
    values = capture_inputs(graph, namespace)
    blobs = pickle_inputs(values)  # fails before anything is registered
    check_circuit_widths(values)
    image_id = create_workflow(source, config, name)
    deploy(image_id)
    return _invoke(image_id, blobs, options), graph


def collect(
    workflow_id: str, namespace: dict[str, Any], timeout: float | None = None
) -> tuple[P.WorkflowReply, dict[str, Any]]:
    """Wait for a submitted cell, push its outputs into the namespace; return (reply, outputs)."""
    reply = wait(workflow_id, timeout)
    _raise_for(reply)
    outputs = {n: cloudpickle.loads(b) for n, b in (reply.outputs or {}).items()}
    rebind_cell_functions(outputs, namespace)
    namespace.update(outputs)
    return reply, outputs
