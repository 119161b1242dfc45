"""Nested scopes: what a function, lambda, class body or comprehension touches at module level.

The walker (``walker``) follows top-level statements itself, but a nested construct has scopes of
its own, where a name may be local, global or a closure variable, and the body of a ``def`` runs
only when it is called. ``_ScopeBuilder`` records a construct's scopes (bindings, loads, calls,
in-place changes, primitive references); ``_summarize`` resolves each load the way the compiler
does and reports the module-level names read, written (``global``) and mutated and the primitive
calls, each marked with whether it runs right away (class bodies, comprehensions) or only when a
function is called. ``FunctionInfo`` keeps that summary for a cell function so that its later uses
can be followed, and ``NotebookContext`` carries the same for functions of earlier cells
(``qonductor_jupyter.notebook_names`` builds it with this module's builder).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from .names import (
    _COMPREHENSION_NODES,
    _FUNCTION_NODES,
    QUANTUM_PRIMITIVES,
    _alias_binding,
    _mutated_name,
    _primitive_attribute_root,
    _primitive_import,
)


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
    # Names bound to what makes executors (``Sampler``, ``Estimator``, ``backend``); the
    # executors themselves (a notebook's ``sampler``) are among ``modules``.
    factories: frozenset[str] = frozenset()


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
        elif isinstance(node, (*_FUNCTION_NODES, ast.Lambda, ast.ClassDef, *_COMPREHENSION_NODES)):
            self._nested(node, scope)
        elif isinstance(
            node, (ast.NamedExpr, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)
        ):
            self._declaration(node, scope)
        else:
            self._record(node, scope)
            for child in ast.iter_child_nodes(node):
                self.visit(child, scope)

    def _nested(self, node: ast.AST, scope: _Scope) -> None:
        """A construct with a scope of its own; what it evaluates right away stays in ``scope``."""
        if isinstance(node, _FUNCTION_NODES):
            for decorator in node.decorator_list:
                self.visit(decorator, scope)
            self._signature(node, scope)
            self._bind(node.name, scope)
            self.function(node, scope)
        elif isinstance(node, ast.Lambda):
            self._signature(node, scope)
            self.function(node, scope)
        elif isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *node.keywords):
                self.visit(expr, scope)
            self._bind(node.name, scope)
            self.klass(node, scope)
        elif isinstance(node, _COMPREHENSION_NODES):
            self.visit(node.generators[0].iter, scope)
            self.comprehension(node, scope)

    def _declaration(self, node: ast.AST, scope: _Scope) -> None:
        """A walrus, ``global``, ``nonlocal`` or import: it binds or declares names, and may
        bind them in another scope than the one it sits in."""
        if isinstance(node, ast.NamedExpr):
            self.visit(node.value, scope)
            target: _Scope | None = scope
            while target is not None and target.kind == "comprehension":
                target = target.parent
            if target is None:
                self.module_walrus.append(node.target.id)
            else:
                self._bind(node.target.id, target)
        elif isinstance(node, ast.Global):
            scope.global_decl.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocal_decl.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":  # only legal at module level; compile() reports it
                    self._bind(_alias_binding(alias), scope)
                    if _primitive_import(node, alias) in QUANTUM_PRIMITIVES:
                        scope.local_primitives.add(_alias_binding(alias))

    def _record(self, node: ast.AST, scope: _Scope) -> None:
        """What any other node adds to its scope before its children are visited."""
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
