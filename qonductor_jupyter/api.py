"""The Python API (the paper's programming model): create, deploy and invoke workflow images.

The ``%%qonductor`` magic is a thin layer over ``run_cell`` here, so plain Python gets the same.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle

from kernel_server.core.deployment import ConfigError, ConfigSource, DeploymentConfig, load_config
from kernel_server.core.graph import StepKind
from kernel_server.wire.messages import (
    CreateWorkflow,
    Deploy,
    Invoke,
    WorkflowReply,
)

from .errors import (
    ConfigurationError,
    QonductorError,
)
from .inputs import capture_inputs, check_circuit_widths, function_list_source, pickle_inputs
from .namespace_update import Applied
from .splitter import NotebookContext, WorkflowGraph, split_cell
from .workflows import (  # the workflow calls are part of this module's API too
    Submission,
    _ask,
    _raise_for,
    _submissions,
    _submissions_lock,
    bring_back,
    cancel,
    choose_plan,
    final_within,
    fleet,
    list_images,
    list_workflows,
    raise_final,
    wait,
    workflow_info,
    workflow_results,
    workflow_status,
)

if TYPE_CHECKING:
    from .handle import WorkflowHandle


__all__ = [
    "create_workflow",
    "deploy",
    "invoke",
    "workflow_status",
    "workflow_info",
    "wait",
    "final_within",
    "workflow_results",
    "cancel",
    "choose_plan",
    "list_images",
    "list_workflows",
    "fleet",
    "raise_final",
    "bring_back",
    "Submission",
    "CellSplit",
    "CellRun",
    "split_in_notebook",
    "submit_cell",
    "run_cell",
    "collect",
    "run_primitive",
]


def _with_cell(
    source: str, graph: WorkflowGraph, required: list[str] | None = None
) -> WorkflowGraph:
    """The graph as an image carries it: with the cell's source and the inputs ``invoke``
    requires (an image's parameters; a cell run by the magic has none)."""
    return dataclasses.replace(graph, source=source, required_inputs=tuple(required or ()))


def _parameters(graph: WorkflowGraph) -> list[str]:
    """A cell image's parameters: the names it reads and never assigns itself."""
    return [name for name in graph.inputs if name not in graph.outputs]


def _load_config(config: ConfigSource) -> DeploymentConfig:
    """A user's config (a dict or a YAML file), checked here: the wire carries it typed."""
    try:
        return load_config(config)
    except ConfigError as exc:
        raise ConfigurationError(str(exc)) from None


def create_workflow(
    code: str | list[Any],
    config: ConfigSource = None,
    name: str | None = None,
    graph: WorkflowGraph | None = None,
) -> str:
    """Package code (cell source, or a list of step functions/circuits) and config as an image.

    ``graph``: cell source already split (``split_cell``); it is not split again.
    """
    cfg = _load_config(config)
    bound: dict[str, bytes] = {}
    if isinstance(code, str):
        source = code
        graph = graph or split_cell(source)
        required = _parameters(graph)
    elif isinstance(code, (list, tuple)) and code:
        source, bound, required = function_list_source(list(code))
        graph = split_cell(source)
    else:
        raise QonductorError("code must be cell source (str) or a non-empty list of steps")
    return _create_image(_with_cell(source, graph, required), cfg, name, bound)


def _create_image(
    graph: WorkflowGraph,
    cfg: DeploymentConfig,
    name: str | None,
    bound: dict[str, bytes] | None = None,
) -> str:
    created = _ask(CreateWorkflow(graph=graph, config=cfg, name=name, bound=bound or {}))
    return created.image_id


def deploy(image_id: str, config: ConfigSource = None) -> str:
    """Deploy an image (optionally overriding its configuration); returns the image id."""
    return _ask(Deploy(image_id=image_id, config=_load_config(config))).image_id


def invoke(image_id: str, inputs: Mapping[str, object] | None = None, **options: Any) -> str:
    """Start a run of a deployed image; returns the workflow id at once."""
    return _invoke(image_id, pickle_inputs(inputs or {}), options)


def _invoke(image_id: str, blobs: dict[str, bytes], options: dict[str, object]) -> str:
    # The client picks the id, so a request resent to a restarted orchestrator is not a new run.
    workflow_id = "wf-" + uuid.uuid4().hex[:12]
    layer = _load_config({k: v for k, v in options.items() if v is not None})
    _ask(Invoke(image_id=image_id, workflow_id=workflow_id, inputs=blobs, options=layer))
    return workflow_id


# -------------------------------------------------------------------- the cell path
@dataclass
class CellSplit:
    """A cell split once, as it reads in this notebook: its tree, what the notebook's names mean
    to it (functions of other cells that call sample(), aliases of the primitives: see
    notebook_names) and its steps. Everything after the split reads these instead of parsing
    the cell again."""

    source: str
    tree: ast.Module
    context: NotebookContext
    graph: WorkflowGraph


def split_in_notebook(source: str, namespace: dict[str, object]) -> CellSplit:
    """Split a cell as it reads in this notebook; a QonductorError says where it is not Python
    (or uses what the splitter does not support)."""
    from .notebook_names import notebook_context
    from .splitter import CellSyntaxError, parse_cell

    try:
        tree = parse_cell(source)
        context = notebook_context(tree, namespace)
        return CellSplit(source, tree, context, split_cell(source, context))
    except CellSyntaxError as exc:
        raise QonductorError("the cell is not valid Python:\n" + exc.pretty()) from None
    except ValueError as exc:  # unsupported constructs (star imports)
        raise QonductorError(str(exc)) from None


def submit_cell(
    source: str,
    namespace: dict[str, object],
    config: ConfigSource = None,
    name: str | None = None,
    **options: Any,
) -> tuple[str, WorkflowGraph]:
    """Split, register, deploy and invoke a cell; returns (workflow id, graph)."""
    cell = split_in_notebook(source, namespace)
    return _submit(cell, namespace, config, name, options), cell.graph


def _submit(
    cell: CellSplit,
    namespace: dict[str, object],
    config: ConfigSource,
    name: str | None,
    options: dict[str, object],
) -> str:
    """Register, deploy and invoke a split cell with the notebook's values; the workflow id."""
    from .preflight import check_static_widths

    values = capture_inputs(cell.graph, namespace)
    blobs = pickle_inputs(values)  # fails before anything is registered
    check_circuit_widths(values, fleet)
    check_static_widths(cell.source, values, fleet)
    cfg = _load_config(config)
    graph = _with_calls(_with_cell(cell.source, cell.graph), cell, values)
    image_id = _create_image(graph, cfg, name)
    deploy(image_id)
    workflow_id = _invoke(image_id, blobs, options)
    with _submissions_lock:
        _submissions[workflow_id] = Submission(cell.source, cell.graph, blobs)
    return workflow_id


def _with_calls(graph: WorkflowGraph, cell: CellSplit, values: dict[str, object]) -> WorkflowGraph:
    """The graph with each hybrid step's number of QPU calls as its text shows it (the
    orchestrator weighs its plan over all of them: core.plans)."""
    if not any(step.kind is StepKind.HYBRID for step in graph.steps):
        return graph
    from .preflight import expected_calls
    from .splitter import QUANTUM_PRIMITIVES, quantum_functions

    context = cell.context
    names = QUANTUM_PRIMITIVES | context.primitives | quantum_functions(cell.tree, context)
    steps = tuple(
        dataclasses.replace(step, expected_calls=expected_calls(step.source, values, names))
        if step.kind is StepKind.HYBRID
        else step
        for step in graph.steps
    )
    return dataclasses.replace(graph, steps=steps)


@dataclass
class CellRun:
    """What ``run_cell`` did with a cell. Nothing was submitted (``workflow_id`` None) for a dry
    run or a cell without quantum calls (plain Python: the caller runs it). Detached, ``handle``
    follows the workflow; waited for, ``reply`` is its final state and ``applied`` the names it
    set in the namespace (``raise_final(run.reply, run.applied)`` raises for a failed one)."""

    cell: CellSplit
    workflow_id: str | None = None
    handle: WorkflowHandle | None = None
    reply: WorkflowReply | None = None
    applied: Applied | None = None


# A cell still running after this long is slow: the magic shows its live job-status widget then.
SLOW_AFTER_S = 0.5


def run_cell(
    source: str,
    namespace: dict[str, object],
    *,
    config: ConfigSource = None,
    name: str | None = None,
    dry_run: bool = False,
    detach: bool = False,
    timeout: float | None = None,
    on_slow: Callable[[str], None] | None = None,
    **options: Any,
) -> CellRun:
    """Run a cell as a hybrid workflow, as ``%%qonductor`` does (without the display): split it
    once, submit it, wait, print what it printed and set the names it assigned in ``namespace``.

    ``detach`` returns at once with a WorkflowHandle. ``on_slow(workflow_id)`` is called once if
    the workflow is still running after SLOW_AFTER_S. Interrupted (or past ``timeout``), the
    wait raises a QonductorError saying how to get at the workflow, which goes on running.
    ``options`` are the run's (shots, priority, seed, placement, plan).
    """
    cell = split_in_notebook(source, namespace)
    run = CellRun(cell)
    if dry_run or not cell.graph.has_quantum:
        return run
    run.workflow_id = workflow_id = _submit(cell, namespace, config, name, options)
    if detach:
        from .handle import WorkflowHandle

        run.handle = WorkflowHandle(workflow_id, namespace=namespace)
        return run
    run.reply = _wait_for_cell(workflow_id, timeout, on_slow)
    if run.reply.stdout:
        sys.stdout.write(run.reply.stdout)
    run.applied = bring_back(workflow_id, run.reply, namespace)
    return run


def _wait_for_cell(
    workflow_id: str, timeout: float | None, on_slow: Callable[[str], None] | None
) -> WorkflowReply:
    try:
        if on_slow is not None:
            # A cell done within SLOW_AFTER_S has no use for the live widget (building it would
            # cost more than the cell); a longer one gets it from then on.
            reply = final_within(workflow_id, min(SLOW_AFTER_S, timeout or SLOW_AFTER_S))
            if reply is not None:
                return reply
            on_slow(workflow_id)
        return wait(workflow_id, timeout)
    except (KeyboardInterrupt, TimeoutError) as exc:
        # The workflow is safe on the orchestrator; tell the user how to get at it.
        why = "Interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        raise QonductorError(
            f"{why}. Workflow {workflow_id} goes on running on the orchestrator: get its "
            f"values with qonductor_jupyter.workflow_results({workflow_id!r}) or stop it "
            f"with %qonductor cancel {workflow_id}"
        ) from None


def collect(
    workflow_id: str,
    namespace: dict[str, object],
    timeout: float | None = None,
    reply: WorkflowReply | None = None,
) -> tuple[WorkflowReply, dict[str, Any]]:
    """Wait for a submitted cell (or take its final ``reply``), bring its names into the
    namespace; return (reply, outputs). On failure the names assigned before the error are set
    and WorkflowFailed says which."""
    if reply is None:
        reply = wait(workflow_id, timeout)
    applied = bring_back(workflow_id, reply, namespace)
    raise_final(reply, applied)
    return reply, applied.values


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
    image_id = _create_image(_with_cell(source, graph), DeploymentConfig(), kind)
    deploy(image_id)
    inputs = pickle_inputs(dict(zip(names, args, strict=True)))
    workflow_id = _invoke(image_id, inputs, {"shots": shots})
    reply = wait(workflow_id)
    _raise_for(reply)
    return cloudpickle.loads((reply.outputs or {})["value"])
