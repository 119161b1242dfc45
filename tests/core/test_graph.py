"""The workflow graph model (``kernel_server.core.graph``): pure, shared by both sides of the wire,
and its dict form reads back as the graph the splitter made."""

import ast
import dataclasses
import sys
import textwrap
from pathlib import Path

import msgpack

from kernel_server.core import graph as core_graph
from kernel_server.core.graph import Step, StepKind, WorkflowGraph
from kernel_server.wire.messages import CreateWorkflow
from qonductor_jupyter import splitter
from qonductor_jupyter.splitter import split_cell

# Every kind of step, a deleted name and an in-place change of a notebook value.
CELL = textwrap.dedent(
    """\
    qc = QuantumCircuit(2)
    qc.h(0)
    counts = sample(qc, shots=100)
    probs = {k: v / 100 for k, v in counts.items()}
    results.append(probs)
    del probs
    for i in range(3):
        e = estimate(qc, 'ZZ')
    """
)


def test_the_module_needs_nothing_but_the_standard_library_and_core():
    tree = ast.parse(Path(core_graph.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    foreign = {
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith("kernel_server.core")
    }
    assert not foreign


def test_the_splitter_hands_out_the_core_model():
    assert splitter.Step is Step
    assert splitter.StepKind is StepKind
    assert splitter.WorkflowGraph is WorkflowGraph


def test_what_the_kernel_sends_reads_back_as_the_graph_the_splitter_made():
    graph = split_cell(CELL)
    assert {step.kind for step in graph.steps} == set(StepKind)
    assert graph.mutated_only == ("results",)
    # What the kernel sends (``api._with_cell``): the graph with the cell beside its steps, in
    # the wire's own encoding (msgpack, where tuples arrive as lists), decoded as the request
    # type does it.
    sent = dataclasses.replace(graph, source=CELL, required_inputs=("results",))
    wire = msgpack.unpackb(msgpack.packb(CreateWorkflow(graph=sent).to_dict()), raw=False)
    assert isinstance(wire["graph"]["edges"][0], list)
    restored = CreateWorkflow.from_dict(wire).graph
    assert restored == sent and restored.source == CELL
    assert WorkflowGraph.from_dict(restored.to_dict()) == sent
    assert restored.describe() == graph.describe()
    assert all(isinstance(step.kind, StepKind) for step in restored.steps)
    assert all(isinstance(edge, tuple) for edge in restored.edges)
    assert hash(restored.steps[0]) == hash(graph.steps[0])


def test_a_step_round_trips_on_its_own_and_stays_hashable():
    step = split_cell(CELL).steps[2]
    restored = Step.from_dict(step.to_dict())
    assert restored == step
    assert hash(restored) == hash(step)
    assert str(restored.kind) == step.kind.value


def test_the_optional_keys_may_be_missing():
    data = split_cell("x = 1\n").to_dict()
    del data["mutated_only"]
    for step in data["steps"]:
        del step["deletes"], step["quantum_calls"]
    graph = WorkflowGraph.from_dict(data)
    assert graph.mutated_only == ()
    assert graph.steps[0].deletes == () and graph.steps[0].quantum_calls == 0
