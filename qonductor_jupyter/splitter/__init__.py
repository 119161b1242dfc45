"""Split one ``%%qonductor`` cell into classical, quantum and hybrid steps.

The orchestrator runs every step in its own worker namespace, so each step must declare exactly
which names it needs (``reads``) and which it produces (``writes``).  Everything here is a static,
conservative analysis of the cell's AST: when in doubt a name is treated as read or written, because
a superfluous input only costs a little serialisation while a missing one breaks the run.

Conservative choices worth knowing about (the orchestrator must tolerate them):

* ``writes`` are *may*-writes: a name bound in a branch or loop body may be absent after the
  step ran (and ``del x`` writes ``x`` by removing it).  Outputs missing from a worker namespace
  should be skipped, not treated as errors.
* ``reads`` include every name not *definitely* bound earlier in the step, so a name only bound in a
  loop body and read after the loop is a read too.  ``WorkflowGraph.inputs`` may therefore contain
  names that the user namespace does not have; capture them leniently.
* ``reads`` also contain builtins and quantum primitives (their producer is ``None``); they are
  excluded from ``WorkflowGraph.inputs`` because they are not taken from the user namespace.
* In-place mutation counts as a may-write of the mutated object's name, because a step's changes
  to an object only reach later steps and the notebook if the step hands the object back.  A name
  ``x`` is *mutated* when a step executes ``x.m(...)`` / ``x.a.b(...)`` / ``x[i].m(...)`` (any
  method call whose receiver chain of attributes and subscripts starts at ``x``), or uses
  ``x.a`` / ``x[i]`` / ``x.a[i].b`` as an assignment, augmented-assignment, ``for``/``with`` or
  ``del`` target.  The name stays a read as well (the step needs the old object).  This covers
  top-level code (loop, branch, ``with`` and ``try`` bodies included), comprehensions and class
  bodies, and the bodies of cell functions the step uses (tracked like their free globals).
  Not counted: calls that merely pass ``x`` as an argument (``sample(x)``, ``len(x)``; the
  callee may mutate it, but that cannot be seen statically), names bound by an ``import`` in the
  cell (``np.zeros(3)`` does not mutate ``np``), and builtins or primitives the cell does not
  rebind (they are not taken from the user namespace either).  Any other method call counts, even
  a read-only one such as ``counts.items()``: the only cost is a value sent back and an ordering
  edge, while a missed mutation silently loses data.

The package, bottom up: ``names`` (builtins, the primitives, what an AST node names), ``errors``,
``scopes`` (what nested functions, classes and comprehensions touch at module level),
``expressions`` (one step's def-use state), ``walker`` (top-level statements through control flow)
and ``source`` (parsing and each step's slice of the cell's text); this module groups statements
into steps and links them. The graph itself (``Step``, ``WorkflowGraph``) is
``kernel_server.core.graph``, shared with the orchestrator, and re-exported here.
"""

from __future__ import annotations

import ast
import dataclasses

from kernel_server.core.graph import Step, StepKind, WorkflowGraph

from .errors import CellSyntaxError, UnsupportedCellError
from .names import (
    BUILTIN_NAMES,
    EXECUTOR_FACTORIES,
    PRIMITIVE_ATTRIBUTES,
    PRIMITIVE_MODULES,
    QUANTUM_PRIMITIVES,
)
from .scopes import _NO_NOTEBOOK, FunctionInfo, NotebookContext

# notebook_names builds the FunctionInfo of notebook functions with the splitter's own builder.
from .scopes import _ScopeBuilder as _ScopeBuilder
from .scopes import _summarize as _summarize
from .source import _parse, _split_lines, _step_source, parse_cell
from .walker import _Walker

__all__ = [
    "BUILTIN_NAMES",
    "EXECUTOR_FACTORIES",
    "PRIMITIVE_ATTRIBUTES",
    "PRIMITIVE_MODULES",
    "QUANTUM_PRIMITIVES",
    "CellSyntaxError",
    "FunctionInfo",
    "NotebookContext",
    "Step",
    "StepKind",
    "UnsupportedCellError",
    "WorkflowGraph",
    "parse_cell",
    "quantum_functions",
    "split_cell",
]

# functions, primitives, modules, factories
_CellState = tuple[dict[str, FunctionInfo], set[str], set[str], set[str]]


def _first_walker(notebook: NotebookContext) -> _Walker:
    return _Walker(
        notebook.functions,
        QUANTUM_PRIMITIVES | notebook.primitives,
        notebook.modules,
        notebook.factories,
    )


def _classify(
    body: list[ast.stmt], notebook: NotebookContext
) -> tuple[list[StepKind], list[_CellState], frozenset[str], frozenset[str]]:
    """Kind of every top-level statement, the cell state just before it, unmutable names and
    the names the cell only mutates.

    Kinds depend only on cell-wide state (cell functions, active primitives), not on how the
    statements are grouped, so one pass with a throwaway step state is enough.  The same pass
    yields the names whose method calls / item assignments are *not* treated as mutations.
    """
    walker = _first_walker(notebook)
    kinds: list[StepKind] = []
    states: list[_CellState] = []
    for stmt in body:
        states.append(
            (dict(walker.functions), set(walker.active), set(walker.modules), set(walker.factories))
        )
        kinds.append(walker.run(stmt))
    # Imported names are modules/library objects, not cell state (``np.zeros(3)``); builtins and
    # primitives the cell never rebinds are never passed in from the notebook either.
    cell_bound = walker.writes  # real bindings only: mutations are kept in ``walker.mutated``
    unmutable = walker.imported | ((BUILTIN_NAMES | QUANTUM_PRIMITIVES) - cell_bound)
    mutated_only = walker.mutated - unmutable - cell_bound
    return kinds, states, frozenset(unmutable), frozenset(mutated_only)


def quantum_functions(tree: ast.Module, notebook: NotebookContext = _NO_NOTEBOOK) -> frozenset[str]:
    """Names the cell leaves bound to functions/classes that (transitively) call a primitive."""
    walker = _first_walker(notebook)
    for stmt in tree.body:
        walker.run(stmt)
    return frozenset(name for name in walker.functions if walker.is_quantum_function(name))


def _pass_notebook_values_on(steps: list[Step], maybe_only: list[set[str]]) -> list[Step]:
    """A notebook value that a step only may rebind, and that a later step reads from it, must
    go through that step: where the binding does not happen the later step sees the notebook's
    value, as in Python (``if a: a = 1 else: rows = []`` then ``rows.extend(...)``)."""
    needed: dict[int, set[str]] = {}
    for later in steps:
        for name, producer in later.producers.items():
            if producer is not None and name in maybe_only[producer]:
                if name not in steps[producer].reads:
                    needed.setdefault(producer, set()).add(name)
    for step_id, names in needed.items():
        step = steps[step_id]
        steps[step_id] = dataclasses.replace(
            step,
            reads=tuple(sorted({*step.reads, *names})),
            producers={**step.producers, **dict.fromkeys(names)},
        )
    return steps


def _group(kinds: list[StepKind]) -> list[list[int]]:
    """Statement indices per step: maximal runs of classical statements form one step, and
    every quantum or hybrid statement is a step of its own."""
    groups: list[list[int]] = []
    for index, kind in enumerate(kinds):
        extend = (
            groups and kind is StepKind.CLASSICAL and kinds[groups[-1][-1]] is StepKind.CLASSICAL
        )
        if extend:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def _step_names(
    walker: _Walker, unmutable: frozenset[str], last_writer: dict[str, int]
) -> tuple[tuple[str, ...], tuple[str, ...], set[str]]:
    """A walked step's reads, its writes and the names it may write but might not bind."""
    writes = walker.writes | (walker.mutated - unmutable)
    maybe_only = writes - walker.bound
    # A name the step only *may* bind (branch, loop, del) keeps its incoming value when the
    # binding does not happen, so the step must receive that value to hand it on: later
    # steps look the name up in this step's results.  Only values produced earlier in the
    # cell are passed through; user-namespace values stay where they are.
    # In-place mutations are such may-writes too (the object is handed back, changed or not).
    passthrough = {name for name in maybe_only if name in last_writer}
    # A name the step may ``del`` comes in too, so that the worker can tell "deleted" (there
    # at the start, gone at the end) from "never reached" (the step failed first): only the
    # former removes the notebook's value, as in Python.
    reads = walker.step_reads() | passthrough | walker.deleted
    return tuple(sorted(reads)), tuple(sorted(writes)), maybe_only


def _edges(steps: list[Step]) -> tuple[tuple[int, int], ...]:
    edges: set[tuple[int, int]] = set()
    for later in steps:
        # Flow dependence: the producer of every value the step reads.
        edges.update((p, later.id) for p in later.producers.values() if p is not None)
        later_writes = set(later.writes)
        for earlier in steps[: later.id]:
            # Output dependence (keep the final value ordered) and anti dependence (an earlier
            # reader must see the old value before a later step replaces it).
            if later_writes & (set(earlier.writes) | set(earlier.reads)):
                edges.add((earlier.id, later.id))
    return tuple(sorted(edges))


def _notebook_inputs(steps: list[Step]) -> tuple[str, ...]:
    """What the steps read from the notebook: builtins and primitives are not taken from it."""
    excluded = BUILTIN_NAMES | QUANTUM_PRIMITIVES
    inputs = {
        name
        for step in steps
        for name, producer in step.producers.items()
        if producer is None and name not in excluded
    }
    return tuple(sorted(inputs))


def split_cell(source: str, notebook: NotebookContext = _NO_NOTEBOOK) -> WorkflowGraph:
    """Split a cell into steps and the dependency DAG between them.

    ``notebook`` says what the notebook's names mean (functions defined in earlier cells that
    call ``sample``, aliases of the primitives); without it the cell is read on its own.
    """
    tree = _parse(source)
    body = tree.body
    lines = _split_lines(source)
    try:
        kinds, states, unmutable, mutated_only = _classify(body, notebook)
    except UnsupportedCellError as err:
        if err.lineno is not None and err.text is None and err.lineno <= len(lines):
            err.text = lines[err.lineno - 1]
        raise

    steps: list[Step] = []
    last_writer: dict[str, int] = {}  # name -> the last step that may write it
    maybe_only: list[set[str]] = []  # per step: names it may write but might not bind
    for step_id, group in enumerate(_group(kinds)):
        walker = _Walker(*states[group[0]])
        for index in group:
            walker.run(body[index])
        reads, writes, maybe = _step_names(walker, unmutable, last_writer)
        maybe_only.append(maybe)
        text, lineno, end_lineno = _step_source(lines, body[group[0]], body[group[-1]])
        steps.append(
            Step(
                id=step_id,
                kind=kinds[group[0]],
                source=text,
                lineno=lineno,
                end_lineno=end_lineno,
                reads=reads,
                writes=writes,
                producers={name: last_writer.get(name) for name in reads},
                quantum_calls=walker.quantum_calls,
                deletes=tuple(sorted(walker.deleted)),
            )
        )
        for name in writes:
            last_writer[name] = step_id

    steps = _pass_notebook_values_on(steps, maybe_only)
    return WorkflowGraph(
        steps=tuple(steps),
        edges=_edges(steps),
        inputs=_notebook_inputs(steps),
        outputs=dict(sorted(last_writer.items())),
        mutated_only=tuple(sorted(mutated_only)),
    )
