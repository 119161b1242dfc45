"""The cell splitter under generated input: a graph that makes sense, or a clear error; and a
cell that runs, run as split steps, leaves what Python leaves."""

import ast

import pytest
from differential import FILENAME, check
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


def _runs(snippet: str) -> bool:
    """Whether the snippet is a cell Python would start running (split or not)."""
    try:
        split_cell(snippet)
        compile(snippet, FILENAME, "exec")
    except (SyntaxError, UnsupportedCellError):  # CellSyntaxError is a SyntaxError
        return False
    return True


# The oracle's cells: the snippets Python runs (it refuses a whole cell with ``return`` or
# ``yield`` at top level before running any of it, while the steps before one would run).
RUNNABLE = [snippet for snippet in SNIPPETS if _runs(snippet)]


class Circuit:
    """A notebook's circuit, standing in for a QuantumCircuit: gates change it in place (which
    the splitter must hand back), and it compares by value, so that a circuit that travelled
    between steps by pickle equals the one that stayed."""

    def __init__(self, width: int = 2) -> None:
        self.width = width
        self.gates: list[tuple] = []

    def h(self, qubit: int) -> None:
        self.gates.append(("h", qubit))

    def cx(self, control: int, target: int) -> None:
        self.gates.append(("cx", control, target))

    def measure_all(self) -> None:
        self.gates.append(("measure",))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Circuit) and vars(self) == vars(other)

    def __repr__(self) -> str:  # what the stand-in primitives measure
        return f"Circuit({self.width}, {self.gates})"


# Notebooks without and with the names the snippets read before binding them (``undefined_n``
# stays undefined: a NameError half-way must leave what it leaves in Python).
NOTEBOOKS = st.sampled_from(
    [
        {},
        {"QuantumCircuit": Circuit, "qc": Circuit(), "x": 0},
        {"qc": Circuit(1), "circuits": [Circuit(), Circuit(3)], "counts": {"00": 5}, "x": 2},
    ]
)


# The differential oracle: executing the steps in cell order, each in a fresh namespace fed only
# its reads (from the notebook or the steps before it), leaves the names and values, and raises
# the error, that exec of the whole cell does; ``sample``/``estimate`` are deterministic stubs.
# Derandomized like test_splitter_python, so that CI runs the same cells every time.
@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from(RUNNABLE), min_size=1, max_size=8), NOTEBOOKS)
def test_generated_cells_run_split_as_python_runs_them(statements, notebook):
    check("\n".join(statements) + "\n", notebook)
