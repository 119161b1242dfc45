"""How values flow between a workflow's steps (pure: no sockets, no processes).

A step receives each name it reads from the step the splitter named as its producer, or from the
cell's inputs (the notebook's values) where there is none. What the cell leaves behind is, for
every name, the value of the last step in cell order that produced it: after a failure only the
steps up to the failing one count, the failing step with what it had assigned before the error,
which is what plain Python leaves in the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel_server.core.graph import Step, WorkflowGraph

Values = Mapping[str, bytes]
# A step's result for a name it deleted (``del x``): no pickle is empty, so it cannot be a value.
DELETED = b""


def step_inputs(step: Step, cell_inputs: Values, results: Mapping[int, Values]) -> dict[str, bytes]:
    """The values a step starts from (names missing everywhere are left out: the step raises
    NameError where it reads one, as Python would)."""
    inputs: dict[str, bytes] = {}
    for name, producer in step.producers.items():
        source = cell_inputs if producer is None else results.get(producer, {})
        if name in source and source[name] != DELETED:
            inputs[name] = source[name]
    return inputs


def cell_outputs(
    graph: WorkflowGraph, results: Mapping[int, Values], upto: int | None = None
) -> dict[str, bytes]:
    """The names the cell assigned, by the last step (up to ``upto``, in cell order) that has
    each; steps without results (cancelled, not run) contribute nothing. A name whose last word
    is DELETED is to be removed from the notebook."""
    outputs: dict[str, bytes] = {}
    for step in sorted(graph.steps, key=lambda s: s.id):
        if upto is not None and step.id > upto:
            break
        values = results.get(step.id)
        if values:
            outputs.update({name: blob for name, blob in values.items() if name in step.writes})
    return outputs
