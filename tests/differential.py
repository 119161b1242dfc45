"""A cell run two ways, as plain Python and split into steps the way the orchestrator runs it.

Once in one namespace; once split into steps, each step in a namespace of its own that holds
only what its reads name (from the notebook or from the step that produced them, ``core.dataflow``),
in cell order, values travelling by pickle as they do between workers, the names a step may write
handed on, and on an error the names up to the failing step kept as the orchestrator keeps them.
``check`` requires both runs to leave the same names with the same values and to raise the same
error at the same line. ``sample``/``estimate`` are pure, deterministic stand-ins here: the point is
the splitter's reads and writes, not the QPU. Shared by the differential test
(``test_splitter_python``) and the fuzz test (``test_splitter_fuzz``).
"""

import builtins
import copy
import linecache
import traceback

import cloudpickle

from kernel_server.core.cell_functions import CELL_MODULE, mark_origin, rebind_cell_functions
from kernel_server.core.dataflow import DELETED, cell_outputs, step_inputs
from kernel_server.core.graph import WorkflowGraph
from qonductor_jupyter.splitter import split_cell

FILENAME = "<differential cell>"


def fake_sample(circuit, shots=None):
    return {"0": len(str(circuit)), "1": shots or 0}


def fake_estimate(circuit, observable=None, shots=None):
    return float(len(str(circuit)))


PRIMITIVES = {"sample": fake_sample, "estimate": fake_estimate}


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
    data = WorkflowGraph.from_dict(graph.to_dict())  # what the orchestrator reads off the wire
    blobs = {name: cloudpickle.dumps(notebook[name]) for name in graph.inputs if name in notebook}
    results: dict[int, dict[str, bytes]] = {}
    failed = None
    for step in data.steps:  # cell order: a valid order of the DAG
        ns = {"__name__": CELL_MODULE, "__builtins__": builtins}
        ns.update({n: cloudpickle.loads(b) for n, b in step_inputs(step, blobs, results).items()})
        rebind_cell_functions(ns, ns, fill=True)
        ns.update(PRIMITIVES)
        code = "\n" * (step.lineno - 1) + step.source
        try:
            exec(compile(code, FILENAME, "exec"), ns)
        except Exception as exc:
            failed = exc
        for name in step.writes:
            mark_origin(ns.get(name))
        results[step.id] = {
            name: cloudpickle.dumps(ns[name]) if name in ns else DELETED
            for name in step.writes
            if name in ns or name in step.deletes
        }
        if failed is not None:
            upto = step.id
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
