"""The cell splitter under generated input: a graph that makes sense, or a clear error."""

import ast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qonductor_jupyter.splitter import CellSyntaxError, UnsupportedCellError, split_cell

# Statements a researcher writes, quantum calls included; combined in any order and nesting.
SNIPPETS = [
    "from qiskit import QuantumCircuit",
    "import numpy as np",
    "from os import *",
    "qc = QuantumCircuit(2)",
    "qc.h(0)",
    "qc.cx(0, 1)",
    "qc.measure_all()",
    "counts = sample(qc)",
    "counts = sample(qc, shots=100)",
    "value = estimate(qc, 'ZZ')",
    "x = 1",
    "x += counts.get('00', 0)",
    "y = [x for x in range(3)]",
    "del x",
    "print(counts)",
    "results = [sample(c) for c in circuits]",
    "def f(t):\n    return sample(t)",
    "def g(a, b=2):\n    return a + b",
    "for i in range(3):\n    counts = sample(qc)",
    "while x < 3:\n    x += 1",
    "if x:\n    y = sample(qc)\nelse:\n    y = None",
    "with open('f') as fh:\n    data = fh.read()",
    "try:\n    z = sample(qc)\nexcept Exception:\n    z = None",
    "class C:\n    pass",
    "lambda q: sample(q)",
    "global gx",
    "async def h():\n    await other()",
    "yield 1",
    "return 2",
    "%matplotlib inline",
    "x = (",
    "\x00",
    "qc = QuantumCircuit(undefined_n)",
]


def _check(source: str) -> None:
    try:
        graph = split_cell(source)
    except (CellSyntaxError, UnsupportedCellError) as err:
        assert str(err).strip(), "an error must say what is wrong"
        return
    lines = source.splitlines()
    steps = graph.to_dict()["steps"]
    ids = [s["id"] for s in steps]
    assert ids == list(range(len(steps)))
    for step in steps:
        assert 1 <= step["lineno"] <= step["end_lineno"] <= max(len(lines), 1)
        assert step["kind"] in ("classical", "quantum", "hybrid")
        ast.parse(step["source"])  # every step is runnable code on its own
        for producer in step["producers"].values():
            # Inputs come from the notebook (None) or from an earlier step: the DAG is acyclic.
            assert producer is None or int(producer) < step["id"]


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=8))
def test_generated_cells_split_or_fail_clearly(statements):
    _check("\n".join(statements) + "\n")


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_splits_or_fails_clearly(text):
    if text.strip():
        _check(text)
