"""The Python API (the paper's programming model): create, deploy and invoke workflow images.

The ``%%qonductor`` magic is a thin layer over ``run_cell`` here, so plain Python gets the same.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from kernel_server.core.dataflow import DELETED
from kernel_server.wire import protocol as P

from .client import get_client
from .errors import (
    InputError,
    QonductorError,
    WorkflowCancelled,
    WorkflowFailed,
    from_remote,
)
from .namespace_update import Applied, apply_outputs
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
    required: list[str] = []
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
                required = params
        else:
            raise QonductorError(
                f"step {i} is a {type(step).__name__}; a workflow step must be "
                "a callable, a QuantumCircuit or 'sample'"
            )
        have_value = True
    return "\n".join(lines) + "\n", bound, required


def _graph_dict(
    source: str, graph: WorkflowGraph | None = None, required: list[str] | None = None
) -> dict[str, Any]:
    data = (graph or split_cell(source)).to_dict()
    data["source"] = source
    # Inputs ``invoke`` refuses to start without: the image's parameters. A cell run by the
    # magic has none: as in Python, a name it reads and nobody defined is a NameError where it
    # is read, after the lines before it ran.
    data["required_inputs"] = list(required or [])
    return data


def _parameters(graph: WorkflowGraph) -> list[str]:
    """A cell image's parameters: the names it reads and never assigns itself."""
    return [name for name in graph.inputs if name not in graph.outputs]


def create_workflow(
    code: str | list[Any], config: dict[str, Any] | str | None = None, name: str | None = None
) -> str:
    """Package code (cell source, or a list of step functions/circuits) and config as an image."""
    from kernel_server.core.deployment import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise QonductorError(str(exc)) from None
    if isinstance(code, str):
        source, bound = code, {}
        graph = split_cell(source)
        required = _parameters(graph)
    elif isinstance(code, (list, tuple)) and code:
        source, bound, required = _function_list_source(list(code))
        graph = split_cell(source)
    else:
        raise QonductorError("code must be cell source (str) or a non-empty list of steps")
    return _create_image(source, _graph_dict(source, graph, required), cfg, name, bound)


def _create_image(
    source: str,
    graph: dict[str, Any],
    cfg: dict[str, Any],
    name: str | None,
    bound: dict[str, bytes] | None = None,
) -> str:
    reply = _request(
        P.CreateWorkflow(source=source, graph=graph, config=cfg, name=name, bound=bound or {})
    )
    return reply.data["image_id"]  # type: ignore[attr-defined]


def deploy(image_id: str, config: dict[str, Any] | str | None = None) -> str:
    """Deploy an image (optionally overriding its configuration); returns the image id."""
    from kernel_server.core.deployment import ConfigError, load_config

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise QonductorError(str(exc)) from None
    reply = _request(P.Deploy(image_id=image_id, config=cfg))
    return reply.data["image_id"]  # type: ignore[attr-defined]


def pickle_inputs(inputs: dict[str, Any]) -> dict[str, bytes]:
    from kernel_server.core.cell_functions import mark_origin

    if "qiskit" in sys.modules:  # circuits among the inputs: switch default cases survive
        from kernel_server.wire.circuits import register_reducers

        register_reducers()
    blobs: dict[str, bytes] = {}
    problems = []
    for name, value in inputs.items():
        mark_origin(value)  # a notebook function keeps its cell's source where it runs
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


def final_within(workflow_id: str, seconds: float) -> P.WorkflowReply | None:
    """One long poll of at most ``seconds``: the final reply (with values), or None."""
    reply: P.WorkflowReply = _request(
        P.GetResults(workflow_id=workflow_id, wait_s=seconds), timeout=seconds + 30.0
    )  # type: ignore[assignment]
    return reply if reply.state in ("done", "failed", "cancelled") else None


def _raise_for(reply: P.WorkflowReply) -> None:
    if reply.state == "failed":
        raise WorkflowFailed(reply)
    if reply.state == "cancelled":
        raise WorkflowCancelled(f"workflow {reply.workflow_id} was cancelled; it has no results")


def workflow_results(
    workflow_id: str, timeout: float | None = None, partial: bool = False
) -> dict[str, Any]:
    """Wait for the workflow and return the values its code assigned, by name.

    A failed or cancelled workflow raises, unless ``partial``: then the values assigned before
    the error (or the cancel) come back, as a plain Python cell would have left them: the names
    of every step before the failing one, and what the failing step assigned before it raised.
    """
    reply = wait(workflow_id, timeout)
    if not partial:
        _raise_for(reply)
    return {
        name: cloudpickle.loads(blob)
        for name, blob in (reply.outputs or {}).items()
        if blob != DELETED  # ``del name`` ran in the cell: like Python, the name is gone
    }


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
    """The values of the cell's free names that the notebook has.

    A name the notebook lacks is left out, not refused: the splitter's reads are conservative (a
    name the cell may assign before reading it counts as read), and where the cell really reads
    an unassigned name, its step raises NameError at that line, as Python would.
    """
    kernel_only = sorted(n for n in graph.inputs if n in KERNEL_ONLY_NAMES)
    if kernel_only:
        raise InputError(
            f"{', '.join(kernel_only)} only exist in the notebook kernel and cannot "
            "be used inside a %%qonductor cell (IPython magics included)"
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


@dataclass
class Submission:
    """What the kernel sent for a cell: to bring its results back the way Python would leave
    them (unchanged inputs keep their identity, in-place changes land on the notebook's own
    objects, cell functions find their source)."""

    source: str
    graph: WorkflowGraph
    blobs: dict[str, bytes] = field(default_factory=dict)


_submissions: dict[str, Submission] = {}
_submissions_lock = threading.Lock()


def split_for(source: str, namespace: dict[str, Any]) -> WorkflowGraph:
    """Split a cell as it reads in this notebook: functions of other cells that call sample(),
    and aliases of the primitives, count (notebook_names)."""
    from .notebook_names import notebook_context
    from .splitter import parse_cell

    return split_cell(source, notebook_context(parse_cell(source), namespace))


def submit_cell(
    source: str,
    namespace: dict[str, Any],
    config: dict[str, Any] | str | None = None,
    name: str | None = None,
    graph: WorkflowGraph | None = None,
    **options: Any,
) -> tuple[str, WorkflowGraph]:
    """Split, register, deploy and invoke a cell; returns (workflow id, graph)."""
    from kernel_server.core.deployment import ConfigError, load_config

    from .preflight import check_static_widths

    graph = graph or split_for(source, namespace)
    values = capture_inputs(graph, namespace)
    blobs = pickle_inputs(values)  # fails before anything is registered
    check_circuit_widths(values)
    check_static_widths(source, values, fleet)
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise QonductorError(str(exc)) from None
    data = _graph_dict(source, graph)
    _count_calls(data, source, namespace, values)
    image_id = _create_image(source, data, cfg, name)
    deploy(image_id)
    workflow_id = _invoke(image_id, blobs, options)
    with _submissions_lock:
        _submissions[workflow_id] = Submission(source, graph, blobs)
    return workflow_id, graph


def _count_calls(
    data: dict[str, Any], source: str, namespace: dict[str, Any], values: dict[str, Any]
) -> None:
    """Give each hybrid step the number of QPU calls its text shows (the orchestrator weighs
    its plan over all of them: scheduler.plan_choice)."""
    hybrid = [step for step in data["steps"] if step["kind"] == "hybrid"]
    if not hybrid:
        return
    import ast

    from .notebook_names import notebook_context
    from .preflight import expected_calls
    from .splitter import QUANTUM_PRIMITIVES, quantum_functions

    tree = ast.parse(source)
    context = notebook_context(tree, namespace)
    names = QUANTUM_PRIMITIVES | context.primitives | quantum_functions(tree, context)
    for step in hybrid:
        step["expected_calls"] = expected_calls(step["source"], values, names)


def collect(
    workflow_id: str,
    namespace: dict[str, Any],
    timeout: float | None = None,
    reply: P.WorkflowReply | None = None,
) -> tuple[P.WorkflowReply, dict[str, Any]]:
    """Wait for a submitted cell (or take its final ``reply``), bring its names into the
    namespace; return (reply, outputs). On failure the names assigned before the error are set
    and WorkflowFailed says which."""
    if reply is None:
        reply = wait(workflow_id, timeout)
    applied = bring_back(workflow_id, reply, namespace)
    raise_final(reply, applied)
    return reply, applied.values


def raise_final(reply: P.WorkflowReply, applied: Applied | None = None) -> None:
    """WorkflowFailed or WorkflowCancelled for a workflow that did not finish, saying what the
    notebook kept (``applied``); nothing for a done one."""
    if reply.state == "failed":
        raise WorkflowFailed(reply, applied)
    if reply.state == "cancelled":
        kept = f"; names set before it stopped: {', '.join(applied.names)}" if applied else ""
        raise WorkflowCancelled(f"workflow {reply.workflow_id} was cancelled{kept}")


def bring_back(workflow_id: str, reply: P.WorkflowReply, namespace: dict[str, Any]) -> Applied:
    """Set the names a final workflow left behind in the namespace (main thread only: values
    are unpickled here, and qiskit objects must not be built beside the user's own code)."""
    with _submissions_lock:
        submission = _submissions.pop(workflow_id, None)
    return apply_outputs(
        workflow_id,
        reply.outputs or {},
        namespace,
        sent=submission.blobs if submission else {},
        mutated_only=submission.graph.mutated_only if submission else (),
        source=submission.source if submission else None,
    )


def run_primitive(kind: str, *args: Any, shots: int | None = None) -> Any:
    """``sample``/``estimate`` called outside a ``%%qonductor`` cell: a workflow of one quantum
    step, its value returned (or its error raised as itself)."""
    from kernel_server.core.circuits import check_circuits, check_shots, circuit_for_estimate

    check_shots(shots)
    if kind == "sample":
        check_circuits(args[0])
    else:
        circuit_for_estimate(args[0])
    names = ["circuit", "observables"][: len(args)]
    source = f"value = {kind}({', '.join(names)})\n"
    graph = split_cell(source)
    image_id = _create_image(source, _graph_dict(source, graph), {}, kind)
    deploy(image_id)
    inputs = pickle_inputs(dict(zip(names, args, strict=True)))
    workflow_id = _invoke(image_id, inputs, {"shots": shots})
    reply = wait(workflow_id)
    if reply.state == "failed":
        raise WorkflowFailed(reply)
    _raise_for(reply)
    return cloudpickle.loads((reply.outputs or {})["value"])
