"""One step's def-use state, and how expressions, assignment targets and patterns change it.

The orchestrator runs each step in a namespace of its own, so the splitter must know which names a
step reads before binding them, which it may bind, change in place or delete, and how many
quantum calls it makes, where. ``_ExpressionWalker`` keeps that state for the step being built,
next to the cell-wide state that evolves statement by statement (the cell functions known so far,
the names still bound to a primitive or to a module exporting them), and walks expressions,
assignment targets and match patterns. What is *definitely* bound after a branch, loop or ``try``
is control flow, the statement walker's business (``walker``), which builds on this class. An
expression holds statements only inside nested scopes (lambdas, comprehensions), which ``scopes``
summarises, so this layer never needs the statement walker.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from .names import _COMPREHENSION_NODES, _FUNCTION_NODES, _mutated_name, _primitive_attribute_root
from .scopes import FunctionInfo, _ScopeBuilder, _summarize

# Where a quantum call or a use of a quantum function sits inside a top-level statement.
_IMMEDIATE = "immediate"  # runs once, directly in the statement -> QUANTUM
_NESTED = "nested"  # loop body, comprehension, lambda, class body, nested def -> HYBRID
_DEFINITION = "definition"  # body of the def/class that *is* the statement -> only defines code


class _ExpressionWalker:
    """One step's reads, writes, mutations and quantum calls, and the cell state they depend on.

    Cell-wide state (known cell functions, still-active primitives) evolves statement by statement;
    step state (``bound``/``reads``/``writes``/``deferred``) belongs to the step being built.
    """

    def __init__(
        self,
        functions: Mapping[str, FunctionInfo],
        active: set[str] | frozenset[str],
        modules: set[str] | frozenset[str] = frozenset(),
        factories: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.functions = dict(functions)
        self.active = set(active)
        # Names bound to a module exporting the primitives, or to an executor (a Sampler...).
        self.modules = set(modules)
        self.factories = set(factories)  # names bound to what makes executors (``Sampler``)
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
