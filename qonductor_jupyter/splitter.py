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
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

QUANTUM_PRIMITIVES: frozenset[str] = frozenset({"sample", "estimate"})
# Modules that export the primitives: ``import qonductor_jupyter as qj; qj.sample(qc)`` and
# ``from qonductor_jupyter import sample`` call the same thing as the names the magic provides.
PRIMITIVE_MODULES: frozenset[str] = frozenset({"qonductor_jupyter", "qonductor_jupyter.primitives"})

# IPython injects these into ``builtins`` while a kernel executes code; they are really user
# namespace entries, so they must stay ordinary inputs no matter where this module is imported.
_IPYTHON_INJECTED = frozenset({"get_ipython", "display", "__IPYTHON__"})
# Dunder names such as ``__name__`` resolve to the *user* namespace at top level, so only the
# public builtins plus the few dunders the compiler itself relies on are treated as builtins.
BUILTIN_NAMES: frozenset[str] = (
    frozenset(name for name in dir(builtins) if not name.startswith("_"))
    | frozenset({"__import__", "__build_class__", "__debug__"})
) - _IPYTHON_INJECTED

_NOT_INPUTS = BUILTIN_NAMES | QUANTUM_PRIMITIVES
_CELL_FILENAME = "<cell>"
_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSION_NODES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# ``try/except*`` only exists on Python 3.11+; the package still supports 3.10.
_TRY_NODES: tuple[type[ast.AST], ...] = tuple(
    node for node in (ast.Try, getattr(ast, "TryStar", None)) if node is not None
)


class StepKind(str, Enum):
    CLASSICAL = "classical"
    QUANTUM = "quantum"
    HYBRID = "hybrid"

    def __str__(self) -> str:  # plain value in messages, not "StepKind.QUANTUM"
        return self.value


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def _location(lineno: int | None, offset: int | None) -> str:
    if lineno is None:
        return ""
    if offset:
        return f" (line {lineno}, column {offset})"
    return f" (line {lineno})"


def _pretty(
    kind: str,
    msg: str,
    lineno: int | None,
    offset: int | None,
    text: str | None,
    end_lineno: int | None = None,
    end_offset: int | None = None,
) -> str:
    """Format an error the way the Python interpreter prints a SyntaxError."""
    out: list[str] = []
    if lineno is not None:
        out.append(f'  File "{_CELL_FILENAME}", line {lineno}')
    line = text.splitlines()[0] if text and text.splitlines() else ""
    if line.strip():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        stripped = stripped.rstrip()
        out.append("    " + stripped)
        if offset is not None and offset >= 1:
            column = min(max(offset - 1 - indent, 0), len(stripped))
            width = 1
            if end_lineno in (None, lineno) and end_offset and end_offset > offset:
                width = end_offset - offset
            width = max(1, min(width, len(stripped) - column))
            out.append("    " + " " * column + "^" * width)
    out.append(f"{kind}: {msg}")
    return "\n".join(out)


class CellSyntaxError(SyntaxError):
    """The cell is not valid Python; carries the location for a friendly notebook message."""

    def __init__(
        self,
        msg: str,
        lineno: int | None = None,
        offset: int | None = None,
        text: str | None = None,
        end_lineno: int | None = None,
        end_offset: int | None = None,
    ) -> None:
        super().__init__(msg, (_CELL_FILENAME, lineno, offset, text, end_lineno, end_offset))

    @classmethod
    def from_syntax_error(cls, err: SyntaxError) -> CellSyntaxError:
        end_offset = getattr(err, "end_offset", None)
        return cls(
            err.msg or "invalid syntax",
            err.lineno,
            err.offset,
            err.text,
            getattr(err, "end_lineno", None),
            end_offset if end_offset and end_offset > 0 else None,
        )

    def __str__(self) -> str:
        return f"{self.msg}{_location(self.lineno, self.offset)}"

    def __reduce__(self) -> tuple[object, ...]:
        # The default reduce would call __init__ with SyntaxError's (msg, details) signature;
        # errors may cross process boundaries, so keep them picklable.
        args = (self.msg, self.lineno, self.offset, self.text, self.end_lineno, self.end_offset)
        return (type(self), args)

    def pretty(self) -> str:
        return _pretty(
            "SyntaxError",
            self.msg,
            self.lineno,
            self.offset,
            self.text,
            self.end_lineno,
            self.end_offset,
        )


class UnsupportedCellError(ValueError):
    """Valid Python that cannot be split safely (currently: star imports)."""

    def __init__(
        self,
        msg: str,
        lineno: int | None = None,
        offset: int | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(msg)
        self.msg = msg
        self.lineno = lineno
        self.offset = offset
        self.text = text

    def __str__(self) -> str:
        return f"{self.msg}{_location(self.lineno, self.offset)}"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.msg, self.lineno, self.offset, self.text))

    def pretty(self) -> str:
        return _pretty("UnsupportedCellError", self.msg, self.lineno, self.offset, self.text)


# --------------------------------------------------------------------------------------------
# Public data model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    id: int
    kind: StepKind
    source: str
    lineno: int
    end_lineno: int
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    # Dicts are unhashable; leaving them out of the hash keeps frozen Steps usable in sets.
    producers: dict[str, int | None] = field(hash=False)
    quantum_calls: int = 0
    # Names the step may ``del``: where one is gone at its end, it is gone from the notebook too.
    deletes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "source": self.source,
            "lineno": self.lineno,
            "end_lineno": self.end_lineno,
            "reads": list(self.reads),
            "writes": list(self.writes),
            "producers": dict(self.producers),
            "quantum_calls": self.quantum_calls,
            "deletes": list(self.deletes),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        return cls(
            id=int(d["id"]),
            kind=StepKind(d["kind"]),
            source=str(d["source"]),
            lineno=int(d["lineno"]),
            end_lineno=int(d["end_lineno"]),
            reads=tuple(d["reads"]),
            writes=tuple(d["writes"]),
            producers={
                str(name): None if producer is None else int(producer)
                for name, producer in d["producers"].items()
            },
            quantum_calls=int(d.get("quantum_calls", 0)),
            deletes=tuple(d.get("deletes", ())),
        )


@dataclass(frozen=True)
class WorkflowGraph:
    steps: tuple[Step, ...]
    edges: tuple[tuple[int, int], ...]
    inputs: tuple[str, ...]
    outputs: dict[str, int] = field(hash=False)
    # Outputs the cell only changes in place (``results.append(x)``) and never rebinds: the
    # notebook's own object should change, not be replaced by the copy that comes back.
    mutated_only: tuple[str, ...] = ()

    @property
    def has_quantum(self) -> bool:
        return any(step.kind is not StepKind.CLASSICAL for step in self.steps)

    def predecessors(self, step_id: int) -> tuple[int, ...]:
        """Ids of the steps that must finish before ``step_id`` may start."""
        return tuple(sorted(src for src, dst in self.edges if dst == step_id))

    def to_dict(self) -> dict:
        return {
            "steps": [step.to_dict() for step in self.steps],
            "edges": [[src, dst] for src, dst in self.edges],
            "inputs": list(self.inputs),
            "outputs": dict(self.outputs),
            "mutated_only": list(self.mutated_only),
        }

    @classmethod
    def from_dict(cls, d: dict) -> WorkflowGraph:
        return cls(
            steps=tuple(Step.from_dict(step) for step in d["steps"]),
            edges=tuple((int(src), int(dst)) for src, dst in d["edges"]),
            inputs=tuple(d["inputs"]),
            outputs={str(name): int(step_id) for name, step_id in d["outputs"].items()},
            mutated_only=tuple(d.get("mutated_only", ())),
        )

    def describe(self) -> str:
        """Human-readable plan, as shown by ``%%qonductor --dry-run``."""
        if not self.steps:
            return "Qonductor workflow: empty cell (no steps)"
        counts = {kind: sum(step.kind is kind for step in self.steps) for kind in StepKind}
        lines = [
            f"Qonductor workflow: {len(self.steps)} step(s) "
            f"({counts[StepKind.CLASSICAL]} classical, {counts[StepKind.QUANTUM]} quantum, "
            f"{counts[StepKind.HYBRID]} hybrid), {len(self.edges)} edge(s)"
        ]
        width = max(len(kind.value) for kind in StepKind)
        for step in self.steps:
            first = next((line.strip() for line in step.source.splitlines() if line.strip()), "")
            if len(first) > 60:
                first = first[:57] + "..."
            lines.append(
                f"  step {step.id}: {step.kind.value:<{width}}  "
                f"lines {step.lineno}-{step.end_lineno}  "
                f"reads: {_names(_user_names(step))}  writes: {_names(step.writes)}  "
                f"quantum calls: {step.quantum_calls}  | {first}"
            )
        edges = ", ".join(f"{src} -> {dst}" for src, dst in self.edges)
        lines.append(f"edges: {edges or '-'}")
        lines.append(f"inputs: {_names(self.inputs)}")
        outputs = ", ".join(
            f"{name} (step {step_id})" for name, step_id in sorted(self.outputs.items())
        )
        lines.append(f"outputs: {outputs or '-'}")
        return "\n".join(lines)


def _user_names(step: Step) -> tuple[str, ...]:
    """A step's reads without builtins and primitives (they come from no step): less noise."""
    return tuple(n for n in step.reads if step.producers.get(n) is not None or n not in _NOT_INPUTS)


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "-"


# --------------------------------------------------------------------------------------------
# Nested scopes (function bodies, lambdas, classes, comprehensions)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionInfo:
    """What calling a cell-level function (or instantiating a class) touches at module level."""

    free_globals: frozenset[str]
    global_writes: frozenset[str]
    direct_quantum: bool
    # Module-level names whose objects the body mutates in place (``results.append(x)``).
    global_mutations: frozenset[str] = frozenset()

    def merged(self, other: FunctionInfo) -> FunctionInfo:
        return FunctionInfo(
            self.free_globals | other.free_globals,
            self.global_writes | other.global_writes,
            self.direct_quantum or other.direct_quantum,
            self.global_mutations | other.global_mutations,
        )


@dataclass(frozen=True)
class NotebookContext:
    """What names of the notebook mean to a cell (``qonductor_jupyter.notebook_names`` reads them
    off the kernel's namespace): functions defined elsewhere in the notebook that reach a
    primitive or read notebook globals, names bound to the primitives, names bound to a module
    that exports them. A name the cell rebinds loses its notebook meaning from there on."""

    functions: Mapping[str, FunctionInfo] = field(default_factory=dict)
    primitives: frozenset[str] = frozenset()
    modules: frozenset[str] = frozenset()


_NO_NOTEBOOK = NotebookContext()


class _Scope:
    """One nested Python scope; ``parent is None`` means the enclosing scope is the module."""

    def __init__(self, kind: str, parent: _Scope | None) -> None:
        self.kind = kind  # "function" | "class" | "comprehension"
        self.parent = parent
        self.bound: set[str] = set()
        self.global_decl: set[str] = set()
        self.nonlocal_decl: set[str] = set()
        self.loads: list[str] = []
        self.stores: list[str] = []
        self.calls: list[str] = []
        self.mutations: list[str] = []  # receivers of method calls / attribute-subscript targets
        # ``qj.sample`` references: (root name, called right there?)
        self.primitive_refs: list[tuple[str, bool]] = []
        # Names this scope binds by importing a primitive (``from qonductor_jupyter import sample``)
        self.local_primitives: set[str] = set()
        self.children: list[_Scope] = []
        if parent is not None:
            parent.children.append(self)

    def is_global(self, name: str) -> bool:
        """Resolve a load the way the compiler does (class scopes are skipped by inner scopes)."""
        if name in self.global_decl:
            return True
        if name in self.nonlocal_decl or name in self.bound:
            return False
        scope = self.parent
        while scope is not None:
            if scope.kind != "class":
                if name in scope.global_decl:
                    return True
                if name in scope.bound or name in scope.nonlocal_decl:
                    return False
            scope = scope.parent
        return True


def _receiver_root(node: ast.AST) -> str | None:
    """``x`` for ``x``, ``x.a``, ``x[i]``, ``x.a[i].b``; ``None`` when the chain has a call etc.

    Calls end the chain on purpose: in ``d.setdefault(k, []).append(v)`` the inner ``d.setdefault``
    call is counted on its own, and ``make().append(v)`` mutates a fresh object, not ``make``.
    """
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutated_name(node: ast.AST) -> str | None:
    """The name a method call or an attribute/subscript target mutates in place, if any."""
    if isinstance(node, ast.Call):
        func = node.func
        return _receiver_root(func.value) if isinstance(func, ast.Attribute) else None
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _receiver_root(node.value)
    return None


def _alias_binding(alias: ast.alias) -> str:
    # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c``.
    return alias.asname or alias.name.split(".")[0]


def _primitive_import(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str | None:
    """``"module"`` when the import binds a module that exports the primitives, the primitive's
    name when it binds a primitive itself, else None."""
    if isinstance(node, ast.Import):
        return "module" if alias.name in PRIMITIVE_MODULES else None
    if node.level or node.module not in PRIMITIVE_MODULES:
        return None
    if alias.name in QUANTUM_PRIMITIVES:
        return alias.name
    if node.module == "qonductor_jupyter" and alias.name == "primitives":
        return "module"
    return None


def _primitive_attribute_root(node: ast.AST) -> str | None:
    """``qj`` for ``qj.sample`` and ``qj.primitives.estimate``: a primitive reached through a
    module name (whether ``qj`` is such a module is the caller's business)."""
    if not (isinstance(node, ast.Attribute) and node.attr in QUANTUM_PRIMITIVES):
        return None
    value = node.value
    if isinstance(value, ast.Attribute) and value.attr == "primitives":
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


class _ScopeBuilder:
    """Collect bindings, loads and bare-name calls for a nested construct and its children."""

    def __init__(self) -> None:
        # Walrus targets inside module-level comprehensions bind in the module (PEP 572).
        self.module_walrus: list[str] = []
        self._called_attributes: set[int] = set()  # ``qj.sample`` nodes that are called

    def function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, parent: _Scope | None
    ) -> _Scope:
        scope = _Scope("function", parent)
        args = node.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                scope.bound.add(arg.arg)
        body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
        for child in body:
            self.visit(child, scope)
        return scope

    def klass(self, node: ast.ClassDef, parent: _Scope | None) -> _Scope:
        scope = _Scope("class", parent)
        for child in node.body:
            self.visit(child, scope)
        return scope

    def comprehension(self, node: ast.expr, parent: _Scope | None) -> _Scope:
        """The first iterable is evaluated in the enclosing scope; the caller visits it."""
        assert isinstance(node, _COMPREHENSION_NODES)
        scope = _Scope("comprehension", parent)
        for index, generator in enumerate(node.generators):
            if index:
                self.visit(generator.iter, scope)
            self.visit(generator.target, scope)
            for condition in generator.ifs:
                self.visit(condition, scope)
        if isinstance(node, ast.DictComp):
            self.visit(node.key, scope)
            self.visit(node.value, scope)
        else:
            self.visit(node.elt, scope)
        return scope

    @staticmethod
    def _bind(name: str, scope: _Scope) -> None:
        scope.bound.add(name)
        scope.stores.append(name)

    def _signature(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: _Scope
    ) -> None:
        # Defaults and annotations are evaluated in the enclosing scope at definition time.
        args = node.args
        for default in (*args.defaults, *args.kw_defaults):
            if default is not None:
                self.visit(default, scope)
        if isinstance(node, ast.Lambda):
            return
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation, scope)
        if node.returns is not None:
            self.visit(node.returns, scope)

    def visit(self, node: ast.AST, scope: _Scope) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                scope.loads.append(node.id)
            else:
                self._bind(node.id, scope)
            return
        if isinstance(node, _FUNCTION_NODES):
            for decorator in node.decorator_list:
                self.visit(decorator, scope)
            self._signature(node, scope)
            self._bind(node.name, scope)
            self.function(node, scope)
            return
        if isinstance(node, ast.Lambda):
            self._signature(node, scope)
            self.function(node, scope)
            return
        if isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *node.keywords):
                self.visit(expr, scope)
            self._bind(node.name, scope)
            self.klass(node, scope)
            return
        if isinstance(node, _COMPREHENSION_NODES):
            self.visit(node.generators[0].iter, scope)
            self.comprehension(node, scope)
            return
        if isinstance(node, ast.NamedExpr):
            self.visit(node.value, scope)
            target: _Scope | None = scope
            while target is not None and target.kind == "comprehension":
                target = target.parent
            if target is None:
                self.module_walrus.append(node.target.id)
            else:
                self._bind(node.target.id, target)
            return
        if isinstance(node, ast.Global):
            scope.global_decl.update(node.names)
            return
        if isinstance(node, ast.Nonlocal):
            scope.nonlocal_decl.update(node.names)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":  # only legal at module level; compile() reports it
                    self._bind(_alias_binding(alias), scope)
                    if _primitive_import(node, alias) in QUANTUM_PRIMITIVES:
                        scope.local_primitives.add(_alias_binding(alias))
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            scope.loads.append(node.target.id)  # ``x += 1`` reads x before rebinding it
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            scope.calls.append(node.func.id)
        if isinstance(node, ast.Call) and (root := _primitive_attribute_root(node.func)):
            scope.primitive_refs.append((root, True))
            self._called_attributes.add(id(node.func))
        elif (
            isinstance(node, ast.Attribute)
            and id(node) not in self._called_attributes
            and (root := _primitive_attribute_root(node))
        ):
            scope.primitive_refs.append((root, False))
        if isinstance(node, ast.Call) or (
            isinstance(node, (ast.Attribute, ast.Subscript))
            and isinstance(node.ctx, (ast.Store, ast.Del))
        ):
            mutated = _mutated_name(node)
            if mutated is not None:
                scope.mutations.append(mutated)
        if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            self._bind(node.name, scope)
        if isinstance(node, ast.MatchMapping) and node.rest:
            self._bind(node.rest, scope)
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope)


@dataclass
class _Summary:
    loads: list[tuple[str, bool]]  # (module-level name, evaluated immediately?)
    global_writes: set[str]
    primitive_calls: list[bool]  # one entry per call site: evaluated immediately?
    mutations: list[tuple[str, bool]]  # (module-level name mutated in place, immediately?)


def _summarize(
    root: _Scope,
    immediate: bool,
    primitives: set[str] | frozenset[str],
    modules: set[str] | frozenset[str] = frozenset(),
) -> _Summary:
    """What running ``root`` touches at module level. ``primitives`` are the module-level names
    bound to quantum primitives, ``modules`` those bound to a module exporting them."""
    summary = _Summary([], set(), [], [])

    def visit(scope: _Scope, now: bool) -> None:
        summary.loads.extend((name, now) for name in scope.loads if scope.is_global(name))
        summary.mutations.extend((name, now) for name in scope.mutations if scope.is_global(name))
        summary.global_writes.update(name for name in scope.stores if name in scope.global_decl)
        summary.primitive_calls.extend(
            now
            for name in scope.calls
            if (name in primitives and scope.is_global(name)) or name in scope.local_primitives
        )
        summary.primitive_calls.extend(
            now and called
            for name, called in scope.primitive_refs
            if name in modules and scope.is_global(name)
        )
        # A primitive handed on as a value (``optimizer(sample)``) may be called any number of
        # times by the callee: a use inside a loop, whatever the call site.
        for name in primitives:
            if scope.is_global(name) and scope.loads.count(name) > scope.calls.count(name):
                summary.primitive_calls.append(False)
        for child in scope.children:
            # Function bodies run when called; class bodies and comprehensions run right away.
            visit(child, now and child.kind != "function")

    visit(root, immediate)
    return summary


# --------------------------------------------------------------------------------------------
# Module-level def-use walker
# --------------------------------------------------------------------------------------------

# Where a quantum call or a use of a quantum function sits inside a top-level statement.
_IMMEDIATE = "immediate"  # runs once, directly in the statement -> QUANTUM
_NESTED = "nested"  # loop body, comprehension, lambda, class body, nested def -> HYBRID
_DEFINITION = "definition"  # body of the def/class that *is* the statement -> only defines code


class _Walker:
    """Walks top-level statements in order, tracking one step's reads/writes.

    Cell-wide state (known cell functions, still-active primitives) evolves statement by statement;
    step state (``bound``/``reads``/``writes``/``deferred``) belongs to the step being built.
    """

    def __init__(
        self,
        functions: Mapping[str, FunctionInfo],
        active: set[str] | frozenset[str],
        modules: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.functions = dict(functions)
        self.active = set(active)
        self.modules = set(modules)  # names bound to a module exporting the primitives
        self.bound: set[str] = set()  # names definitely bound so far in this step
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        # Names whose objects the step may mutate in place; which of them become writes is
        # decided cell-wide by ``split_cell`` (imports and untouched builtins are skipped).
        self.mutated: set[str] = set()
        self.imported: set[str] = set()  # names bound by import statements
        # Free globals of functions defined here: needed when they run, i.e. maybe later.
        self.deferred: set[str] = set()
        self.quantum_calls = 0
        self.deleted: set[str] = set()  # names a ``del`` in the step may remove
        self._direct = 0
        self._nested = 0
        self._uses_quantum_function = False
        self._called: set[int] = set()  # Name nodes of primitive calls (not values handed on)
        self._loop_depth = 0
        self._branch_depth = 0
        self._conditional = 0

    # ---- entry points ---------------------------------------------------------------------

    def run(self, stmt: ast.stmt) -> StepKind:
        self._direct = self._nested = 0
        self._uses_quantum_function = False
        self._stmt(stmt, top=True)
        self.quantum_calls += self._direct + self._nested
        if self._nested or self._uses_quantum_function:
            return StepKind.HYBRID
        if self._direct:
            return StepKind.QUANTUM
        return StepKind.CLASSICAL

    def step_reads(self) -> set[str]:
        # A function defined in the step may be called later; whatever the step did not bind
        # itself must then come from outside.
        return self.reads | (self.deferred - self.bound)

    # ---- bookkeeping ----------------------------------------------------------------------

    def _ctx(self) -> str:
        return _NESTED if self._loop_depth else _IMMEDIATE

    def _count_primitive(self, ctx: str) -> None:
        if ctx == _IMMEDIATE:
            self._direct += 1
        elif ctx == _NESTED:
            self._nested += 1

    def _closure(self, name: str) -> tuple[set[str], set[str], bool, set[str]]:
        """Names, global writes, quantum-ness and global mutations of calling ``name``.

        Transitive, and resolved at use time so late binding (a function calling one defined
        after it) works.
        """
        names = {name}
        writes: set[str] = set()
        mutations: set[str] = set()
        quantum = False
        stack = [name]
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            info = self.functions.get(current)
            if info is None:
                continue
            quantum = quantum or info.direct_quantum
            writes |= info.global_writes
            mutations |= info.global_mutations
            names |= info.free_globals
            stack.extend(info.free_globals)
        return names, writes, quantum, mutations

    def is_quantum_function(self, name: str) -> bool:
        return name in self.functions and self._closure(name)[2]

    def _use(self, name: str, ctx: str, deferred: bool = False) -> None:
        names, writes, quantum, mutations = self._closure(name)
        if deferred:
            self.deferred |= names
        else:
            self.reads |= names - self.bound
            self.writes |= writes
            # Any top-level use may call the function (``minimize(cost, x0)`` does).
            self.mutated |= mutations
        if quantum and ctx != _DEFINITION:
            self._uses_quantum_function = True

    def _bind(self, name: str, definite: bool = True) -> None:
        self.writes.add(name)
        if definite:
            self.bound.add(name)
        # Rebinding a primitive makes it an ordinary name from here on.
        self.active.discard(name)
        self.modules.discard(name)
        # Inside a branch the old function may survive; keeping it is the conservative choice.
        if self._branch_depth == 0:
            self.functions.pop(name, None)

    def _define(self, name: str, info: FunctionInfo) -> None:
        previous = self.functions.get(name)
        self._bind(name)
        if self._branch_depth and previous is not None:
            info = previous.merged(info)
        self.functions[name] = info

    def _unbind(self, name: str) -> None:
        if name not in self.bound:
            self.reads.add(name)  # ``del x`` fails unless x exists, so x is an input
        self.writes.add(name)
        self.deleted.add(name)
        self.bound.discard(name)
        self.active.discard(name)
        self.modules.discard(name)
        if self._branch_depth == 0:
            self.functions.pop(name, None)

    # ---- nested constructs ----------------------------------------------------------------

    def _nested_scope(self, node: ast.AST, body_ctx: str) -> FunctionInfo:
        builder = _ScopeBuilder()
        if isinstance(node, (*_FUNCTION_NODES, ast.Lambda)):
            root = builder.function(node, None)  # type: ignore[arg-type]
            immediate = False
        elif isinstance(node, ast.ClassDef):
            root = builder.klass(node, None)
            immediate = True
        else:
            root = builder.comprehension(node, None)  # type: ignore[arg-type]
            immediate = True
        summary = _summarize(root, immediate, self.active, self.modules)
        for name, now in summary.loads:
            if now:
                self._use(name, _NESTED)
            else:
                self._use(name, body_ctx, deferred=True)
        for now in summary.primitive_calls:
            self._count_primitive(_NESTED if now else body_ctx)
        # ``global x`` in a function: the cell's x may be rebound when it runs.
        self.writes |= summary.global_writes
        self.active -= summary.global_writes
        # Comprehensions and class bodies mutate right away; function bodies when called.
        self.mutated.update(name for name, now in summary.mutations if now)
        for name in builder.module_walrus:
            self._bind(name, definite=False)  # the comprehension may not iterate at all
        return FunctionInfo(
            free_globals=frozenset(name for name, _ in summary.loads),
            global_writes=frozenset(summary.global_writes),
            direct_quantum=bool(summary.primitive_calls),
            global_mutations=frozenset(name for name, _ in summary.mutations),
        )

    def _lambda(self, node: ast.Lambda) -> FunctionInfo:
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self._expr(default)
        return self._nested_scope(node, _NESTED)

    def _signature(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        for default in (*args.defaults, *args.kw_defaults):
            if default is not None:
                self._expr(default)
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None and arg.annotation is not None:
                self._expr(arg.annotation)
        if node.returns is not None:
            self._expr(node.returns)

    # ---- expressions ----------------------------------------------------------------------

    def _expr(self, node: ast.AST | None) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id in self.active and id(node) not in self._called:
                    # The primitive handed on as a value (``VQE(...).run(sample)``): the callee
                    # may call it any number of times, so the statement is a hybrid step.
                    self._count_primitive(_NESTED)
                self._use(node.id, self._ctx())
            else:
                self._target(node)
        elif isinstance(node, ast.NamedExpr):
            self._expr(node.value)
            self._bind(node.target.id, definite=not self._conditional)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in self.active:
                self._count_primitive(self._ctx())
                self._called.add(id(node.func))
            elif self._module_primitive(node.func):
                self._count_primitive(self._ctx())
                self._called.add(id(node.func))
            self._mutate(node)  # ``x.append(v)``, ``qc.measure_all()``
            for child in ast.iter_child_nodes(node):
                self._expr(child)
        elif isinstance(node, ast.Attribute):
            if self._module_primitive(node) and id(node) not in self._called:
                self._count_primitive(_NESTED)  # ``optimizer(qj.sample)``: handed on
            for child in ast.iter_child_nodes(node):
                self._expr(child)
        elif isinstance(node, ast.BoolOp):
            # Only the first operand is certain to run (matters for walrus bindings).
            self._expr(node.values[0])
            self._conditional += 1
            for value in node.values[1:]:
                self._expr(value)
            self._conditional -= 1
        elif isinstance(node, ast.IfExp):
            self._expr(node.test)
            self._conditional += 1
            self._expr(node.body)
            self._expr(node.orelse)
            self._conditional -= 1
        elif isinstance(node, ast.Lambda):
            self._lambda(node)
        elif isinstance(node, _COMPREHENSION_NODES):
            self._expr(node.generators[0].iter)
            self._nested_scope(node, _NESTED)
        else:
            for child in ast.iter_child_nodes(node):
                self._expr(child)

    def _module_primitive(self, node: ast.AST) -> bool:
        return _primitive_attribute_root(node) in self.modules

    def _target(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self._bind(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self._target(element)
        elif isinstance(node, ast.Starred):
            self._target(node.value)
        else:
            self._target_parts(node)

    def _mutate(self, node: ast.AST) -> None:
        name = _mutated_name(node)
        if name is not None:
            self.mutated.add(name)

    def _target_parts(self, node: ast.AST, assigns: bool = True) -> None:
        # ``a.b = v`` / ``a[i] = v`` load ``a`` (and ``i``) and do not rebind ``a``, but they
        # change the object in place, so ``a`` is also a (may-)write.
        if assigns:
            self._mutate(node)
        if isinstance(node, ast.Attribute):
            self._expr(node.value)
        elif isinstance(node, ast.Subscript):
            self._expr(node.value)
            self._expr(node.slice)
        else:
            self._expr(node)

    def _delete(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self._unbind(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self._delete(element)
        else:
            self._target_parts(node)

    def _pattern(self, node: ast.pattern) -> None:
        if isinstance(node, ast.MatchValue):
            self._expr(node.value)
            return
        if isinstance(node, ast.MatchClass):
            self._expr(node.cls)
        if isinstance(node, ast.MatchMapping):
            for key in node.keys:
                self._expr(key)
            if node.rest:
                self._bind(node.rest)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.pattern):
                self._pattern(child)
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            self._bind(node.name)

    # ---- statements -----------------------------------------------------------------------

    def _stmts(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._stmt(stmt)

    def _stmt(self, node: ast.stmt, top: bool = False) -> None:
        body_ctx = _DEFINITION if top else _NESTED
        if isinstance(node, _FUNCTION_NODES):
            for decorator in node.decorator_list:
                self._expr(decorator)
            self._signature(node)
            self._define(node.name, self._nested_scope(node, body_ctx))
        elif isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *node.keywords):
                self._expr(expr)
            self._define(node.name, self._nested_scope(node, body_ctx))
        elif isinstance(node, ast.Assign):
            target = node.targets[0]
            if isinstance(node.value, ast.Lambda) and len(node.targets) == 1:
                if isinstance(target, ast.Name):
                    # ``f = lambda ...`` is a cell function just like ``def f``.
                    self._define(target.id, self._lambda(node.value))
                    return
            self._expr(node.value)
            for target in node.targets:
                self._target(target)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                self._use(node.target.id, self._ctx())
            else:
                self._target_parts(node.target)
            self._expr(node.value)
            if isinstance(node.target, ast.Name):
                self._bind(node.target.id)
        elif isinstance(node, ast.AnnAssign):
            self._expr(node.value)
            self._expr(node.annotation)  # module-level annotations are evaluated
            if node.value is not None:
                self._target(node.target)
            elif not isinstance(node.target, ast.Name):
                self._target_parts(node.target, assigns=False)  # bare ``x: int`` binds nothing
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._delete(target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    raise UnsupportedCellError(
                        "star imports cannot be split; import the names explicitly",
                        node.lineno,
                        node.col_offset + 1,
                    )
                name = _alias_binding(alias)
                self._bind(name)
                self.imported.add(name)
                kind = _primitive_import(node, alias)
                if kind == "module":
                    self.modules.add(name)
                elif kind is not None:
                    self.active.add(name)  # ``from qonductor_jupyter import sample as run``
        elif isinstance(node, ast.If):
            self._expr(node.test)
            before = self.bound
            self._branch_depth += 1
            self.bound = set(before)
            self._stmts(node.body)
            after_body = self.bound
            self.bound = set(before)
            self._stmts(node.orelse)
            self._branch_depth -= 1
            self.bound = after_body & self.bound
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._expr(node.iter)  # evaluated once, not part of the loop body
            self._loop(node.body, node.orelse, target=node.target)
        elif isinstance(node, ast.While):
            self._loop(node.body, node.orelse, test=node.test)
        elif isinstance(node, _TRY_NODES):
            self._try(node)  # type: ignore[arg-type]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self._expr(item.context_expr)
                if item.optional_vars is not None:
                    self._target(item.optional_vars)
            self._stmts(node.body)
        elif isinstance(node, ast.Match):
            self._expr(node.subject)
            before = self.bound
            self._branch_depth += 1
            for case in node.cases:
                self.bound = set(before)
                self._pattern(case.pattern)
                self._expr(case.guard)
                self._stmts(case.body)
            self._branch_depth -= 1
            self.bound = before
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            pass  # no effect at module level
        else:  # Expr, Return, Raise, Assert, Pass, Break, Continue, ...
            for child in ast.iter_child_nodes(node):
                self._expr(child)

    def _loop(
        self,
        body: list[ast.stmt],
        orelse: list[ast.stmt],
        target: ast.expr | None = None,
        test: ast.expr | None = None,
    ) -> None:
        # The body may run zero times, so nothing it binds is definitely bound afterwards.
        # A while test is re-evaluated every iteration, so it counts as loop body.
        before = self.bound
        self.bound = set(before)
        self._loop_depth += 1
        self._branch_depth += 1
        if target is not None:
            self._target(target)
        self._expr(test)
        self._stmts(body)
        self._loop_depth -= 1
        self.bound = set(before)
        self._stmts(orelse)
        self._branch_depth -= 1
        self.bound = before

    def _try(self, node: ast.Try) -> None:  # ast.TryStar has the same fields
        before = self.bound
        self._branch_depth += 1
        self.bound = set(before)
        self._stmts(node.body)
        self._stmts(node.orelse)
        outcomes = [self.bound]
        for handler in node.handlers:
            self.bound = set(before)
            self._expr(handler.type)
            if handler.name:
                self._bind(handler.name)
            self._stmts(handler.body)
            if handler.name:
                self.bound.discard(handler.name)  # Python deletes ``as e`` after the handler
            outcomes.append(self.bound)
        self._branch_depth -= 1
        merged = set.intersection(*outcomes)
        finalbody = node.finalbody
        if finalbody:
            self.bound = set(before)
            self._stmts(finalbody)
            merged = (merged | (self.bound - before)) - (before - self.bound)
        self.bound = merged


# --------------------------------------------------------------------------------------------
# Splitting
# --------------------------------------------------------------------------------------------


def parse_cell(source: str) -> ast.Module:
    """The cell's AST; CellSyntaxError (with the cell's line and a caret) where it is not Python."""
    return _parse(source)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source, filename=_CELL_FILENAME)
    except SyntaxError as err:
        raise CellSyntaxError.from_syntax_error(err) from None
    except ValueError as err:  # e.g. null bytes on Python < 3.12
        raise CellSyntaxError(str(err)) from None


def _split_lines(source: str) -> list[str]:
    """Split like the tokenizer (\\n, \\r\\n, \\r), keeping line endings."""
    lines: list[str] = []
    start = 0
    index = 0
    while index < len(source):
        char = source[index]
        if char == "\r" and source[index + 1 : index + 2] == "\n":
            index += 1
        if char in "\r\n":
            lines.append(source[start : index + 1])
            start = index + 1
        index += 1
    if start < len(source):
        lines.append(source[start:])
    return lines


def _start(stmt: ast.stmt) -> tuple[int, int]:
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        # Top-level decorators start in column 0 (a compound statement can't follow ``;``).
        return min(decorator.lineno for decorator in decorators), 0
    return stmt.lineno, stmt.col_offset


def _segment(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    # AST column offsets are UTF-8 byte offsets, hence the encode/decode.
    (lineno, col), (end_lineno, end_col) = start, end
    if lineno == end_lineno:
        return lines[lineno - 1].encode()[col:end_col].decode()
    first = lines[lineno - 1].encode()[col:].decode()
    middle = "".join(lines[lineno : end_lineno - 1])
    last = lines[end_lineno - 1].encode()[:end_col].decode()
    return first + middle + last


_CellState = tuple[dict[str, FunctionInfo], set[str], set[str]]  # functions, primitives, modules


def _first_walker(notebook: NotebookContext) -> _Walker:
    return _Walker(notebook.functions, QUANTUM_PRIMITIVES | notebook.primitives, notebook.modules)


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
        states.append((dict(walker.functions), set(walker.active), set(walker.modules)))
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

    # Maximal runs of classical statements form one step; others are a step each.
    groups: list[list[int]] = []
    for index, kind in enumerate(kinds):
        extend = (
            groups and kind is StepKind.CLASSICAL and kinds[groups[-1][-1]] is StepKind.CLASSICAL
        )
        if extend:
            groups[-1].append(index)
        else:
            groups.append([index])

    steps: list[Step] = []
    last_writer: dict[str, int] = {}
    maybe_only: list[set[str]] = []  # per step: names it may write but might not bind
    for step_id, group in enumerate(groups):
        walker = _Walker(*states[group[0]])
        for index in group:
            walker.run(body[index])
        writes_set = walker.writes | (walker.mutated - unmutable)
        # A name the step only *may* bind (branch, loop, del) keeps its incoming value when the
        # binding does not happen, so the step must receive that value to hand it on: later
        # steps look the name up in this step's results.  Only values produced earlier in the
        # cell are passed through; user-namespace values stay where they are.
        # In-place mutations are such may-writes too (the object is handed back, changed or not).
        passthrough = {name for name in writes_set - walker.bound if name in last_writer}
        maybe_only.append(writes_set - walker.bound)
        # A name the step may ``del`` comes in too, so that the worker can tell "deleted" (there
        # at the start, gone at the end) from "never reached" (the step failed first): only the
        # former removes the notebook's value, as in Python.
        reads = tuple(sorted(walker.step_reads() | passthrough | walker.deleted))
        writes = tuple(sorted(writes_set))
        first, last = body[group[0]], body[group[-1]]
        start = _start(first)
        end_lineno = last.end_lineno or last.lineno
        end = (end_lineno, last.end_col_offset or 0)
        steps.append(
            Step(
                id=step_id,
                kind=kinds[group[0]],
                source=_segment(lines, start, end),
                lineno=start[0],
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

    excluded = BUILTIN_NAMES | QUANTUM_PRIMITIVES
    inputs = {
        name
        for step in steps
        for name, producer in step.producers.items()
        if producer is None and name not in excluded
    }
    return WorkflowGraph(
        steps=tuple(steps),
        edges=tuple(sorted(edges)),
        inputs=tuple(sorted(inputs)),
        outputs=dict(sorted(last_writer.items())),
        mutated_only=tuple(sorted(mutated_only)),
    )
