"""The splitter checked against Python itself, over generated cells.

Each cell runs twice: once as plain Python in one namespace, once split into steps, each step in a
namespace of its own that holds only what its reads name (from the notebook or from the step that
produced them, ``core.dataflow``), in cell order, values travelling by pickle as they do
between workers, the names a step may write handed on, and on an error the names up to the
failing step kept as the orchestrator keeps them. Both runs must leave the same names with the
same values and raise the same error at the same line. ``sample``/``estimate`` are pure
stand-ins here: the point is the splitter's reads and writes, not the QPU.
"""

import builtins
import copy
import linecache
import traceback

import cloudpickle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_server.core.cell_functions import CELL_MODULE, mark_origin, rebind_cell_functions
from kernel_server.core.dataflow import DELETED, cell_outputs, step_inputs
from qonductor_jupyter.splitter import split_cell

FILENAME = "<differential cell>"


def fake_sample(circuit, shots=None):
    return {"0": len(str(circuit)), "1": shots or 0}


def fake_estimate(circuit, observable=None, shots=None):
    return float(len(str(circuit)))


PRIMITIVES = {"sample": fake_sample, "estimate": fake_estimate}

# Statements over a few names: reads of names that may or may not be bound yet, bindings in
# branches, loops with continue/break, try/except, deletes, functions, in-place changes and
# lines that raise. Combined in any order.
SIMPLE = [
    "a = 1",
    "b = a + 1",
    "c = sample(a)",
    "rows.append(a)",
    "rows = []",
    "total = sum(rows)",
    "del a",
    "a += 2",
    "d = {'k': b}",
    "d['k'] = c",
    "e = d['missing']",
    "f = 1 / 0",
    "g = undefined_name",
    "h = [x * 2 for x in rows]",
    "i = (j := 3) + j",
    "value = estimate(b)",
    "def helper(n):\n    return n + a",
    "k = helper(1)",
    "def q(n):\n    return sample(n)",
    "m = q(b)",
    "n = len(rows) if rows else None",
    "a = a * 2",
    "lam = lambda y: y + b",
    "o = lam(2)",
    "class K:\n    size = 2\n    def grow(self):\n        return self.size + a",
    "p = K().grow()",
    "def setter():\n    global gset\n    gset = a",
    "setter()",
    "w = [u for u in range(a) if (last := u)]",
    "rows[0] = b",
    "rows.extend(sample(r) for r in range(2))",
    "s = {r: sample(r) for r in rows}",
    "for a in rows:\n    pass",
]
BLOCKS = [
    "if a > 1:\n    {0}",
    "if a:\n    {0}\nelse:\n    {1}",
    "for t in range(3):\n    {0}",
    "for t in ['1', 'x', '2']:\n    try:\n        value = int(t)\n"
    "    except ValueError:\n        continue\n    rows.append(value)",
    "for t in range(4):\n    {0}\n    if t == 1:\n        break",
    "while b < 4:\n    b += 1\n    {0}",
    "try:\n    {0}\nexcept Exception:\n    {1}",
    "try:\n    {0}\nfinally:\n    z = 9",
]


@st.composite
def statements(draw):
    if draw(st.booleans()):
        return draw(st.sampled_from(SIMPLE))
    block = draw(st.sampled_from(BLOCKS))
    inner = [draw(st.sampled_from(SIMPLE)).replace("\n", "\n    ") for _ in range(2)]
    return block.format(*inner)


def _outcome(error: BaseException | None) -> tuple[str, int] | None:
    if error is None:
        return None
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == FILENAME]
    return type(error).__name__, frames[-1].lineno if frames else -1


def run_plain(source: str, notebook: dict) -> tuple[dict, tuple | None]:
    ns = {"__name__": CELL_MODULE, "__builtins__": builtins, **PRIMITIVES, **notebook}
    error = None
    try:
        exec(compile(source, FILENAME, "exec"), ns)
    except Exception as exc:
        error = exc
    return ns, _outcome(error)


def run_split(source: str, notebook: dict) -> tuple[dict, tuple | None]:
    graph = split_cell(source)
    data = graph.to_dict()
    blobs = {name: cloudpickle.dumps(notebook[name]) for name in graph.inputs if name in notebook}
    results: dict[int, dict[str, bytes]] = {}
    failed = None
    for step in data["steps"]:  # cell order: a valid order of the DAG
        ns = {"__name__": CELL_MODULE, "__builtins__": builtins}
        ns.update({n: cloudpickle.loads(b) for n, b in step_inputs(step, blobs, results).items()})
        rebind_cell_functions(ns, ns, fill=True)
        ns.update(PRIMITIVES)
        code = "\n" * (step["lineno"] - 1) + step["source"]
        try:
            exec(compile(code, FILENAME, "exec"), ns)
        except Exception as exc:
            failed = exc
        for name in step["writes"]:
            mark_origin(ns.get(name))
        results[step["id"]] = {
            name: cloudpickle.dumps(ns[name]) if name in ns else DELETED
            for name in step["writes"]
            if name in ns or name in step["deletes"]
        }
        if failed is not None:
            upto = step["id"]
            break
    else:
        upto = None
    final = {**PRIMITIVES, **notebook}
    for name, blob in cell_outputs(data, results, upto).items():
        if blob == DELETED:
            final.pop(name, None)
        else:
            final[name] = cloudpickle.loads(blob)
    return final, _outcome(failed)


def comparable(ns: dict) -> dict:
    """The data a cell leaves (functions compared by name only: their identity differs)."""
    out = {}
    for name, value in ns.items():
        if name.startswith("__"):
            continue
        out[name] = f"<function {value.__name__}>" if callable(value) else value
    return out


def check(source: str, notebook: dict) -> None:
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    plain_ns, plain_error = run_plain(source, copy.deepcopy(notebook))
    split_ns, split_error = run_split(source, copy.deepcopy(notebook))
    assert split_error == plain_error, source
    assert comparable(split_ns) == comparable(plain_ns), source


NOTEBOOKS = st.sampled_from([{}, {"a": 5, "rows": [1]}, {"rows": [], "b": 0}])


# Derandomized: the same cells every run, so that CI stays reproducible. To search for new
# counterexamples, run it with derandomize=False and more examples.
@settings(
    max_examples=3000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@pytest.mark.slow
@given(st.lists(statements(), min_size=1, max_size=8), NOTEBOOKS)
def test_split_cells_leave_what_python_leaves(lines, notebook):
    check("\n".join(lines) + "\n", notebook)


def test_a_name_that_may_be_assigned_first_runs_like_python():
    source = (
        "import json\nrows = []\nfor text in ['1', 'x', '2']:\n    try:\n"
        "        value = json.loads(text)\n    except ValueError:\n        continue\n"
        "    rows.append(value)\nc = sample(rows)\n"
    )
    check(source, {})
    check("if False:\n    print(never_defined)\nx = 1\n", {})
    check("x = 1\ny = never_defined\nz = 2\n", {})
