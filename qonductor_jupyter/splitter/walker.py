"""The module-level def-use walker: a cell's top-level statements, in order, through control flow.

A step's ``reads`` are the names it uses before it has *definitely* bound them, and whether a
name is definitely bound after an ``if``, a loop, a ``try`` or a ``match`` depends on the paths
through it: a loop body may run zero times, a handler may run instead of the rest of its ``try``.
``_Walker`` follows those paths for the statements of one step, on top of the expression-level
state of ``expressions``, and says of each top-level statement whether it is classical, quantum
(a primitive called once, right there) or hybrid (primitives in a loop or behind a function).
Each statement type has its own handler, found in a table by the statement's type.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from kernel_server.core.graph import StepKind

from .errors import UnsupportedCellError
from .expressions import _DEFINITION, _NESTED, _ExpressionWalker
from .names import _FUNCTION_NODES, _TRY_NODES, _alias_binding, _factory_call, _primitive_import


class _Walker(_ExpressionWalker):
    """Walks top-level statements in order, tracking one step's reads/writes.

    ``run`` takes the next top-level statement and tells its kind; the state it updates, the
    cell's and the step's, is ``_ExpressionWalker``'s.
    """

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

    def _stmts(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self._stmt(stmt)

    def _stmt(self, node: ast.stmt, top: bool = False) -> None:
        if isinstance(node, (*_FUNCTION_NODES, ast.ClassDef)):
            # Primitive calls in the body of the def/class that *is* the top-level statement only
            # define code; in a def nested in a loop or branch they make the statement hybrid.
            self._definition(node, _DEFINITION if top else _NESTED)
        else:
            _STATEMENTS.get(type(node), _Walker._on_other)(self, node)

    # ---- definitions and assignments ------------------------------------------------------

    def _definition(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, body_ctx: str
    ) -> None:
        if isinstance(node, ast.ClassDef):
            for expr in (*node.decorator_list, *node.bases, *node.keywords):
                self._expr(expr)
        else:
            for decorator in node.decorator_list:
                self._expr(decorator)
            self._signature(node)
        self._define(node.name, self._nested_scope(node, body_ctx))

    def _on_assign(self, node: ast.Assign) -> None:
        target = node.targets[0]
        if isinstance(node.value, ast.Lambda) and len(node.targets) == 1:
            if isinstance(target, ast.Name):
                # ``f = lambda ...`` is a cell function just like ``def f``.
                self._define(target.id, self._lambda(node.value))
                return
        self._expr(node.value)
        for target in node.targets:
            self._target(target)
        if _factory_call(node.value, self.factories, self.modules):
            # ``sampler = Sampler(mode=...)``: its ``run`` is a quantum call from here on.
            self.modules.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def _on_aug_assign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._use(node.target.id, self._ctx())
        else:
            self._target_parts(node.target)
        self._expr(node.value)
        if isinstance(node.target, ast.Name):
            self._bind(node.target.id)

    def _on_ann_assign(self, node: ast.AnnAssign) -> None:
        self._expr(node.value)
        self._expr(node.annotation)  # module-level annotations are evaluated
        if node.value is not None:
            self._target(node.target)
        elif not isinstance(node.target, ast.Name):
            self._target_parts(node.target, assigns=False)  # bare ``x: int`` binds nothing

    def _on_delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._delete(target)

    def _on_import(self, node: ast.Import | ast.ImportFrom) -> None:
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
            elif kind == "factory":
                self.factories.add(name)
            elif kind is not None:
                self.active.add(name)  # ``from qonductor_jupyter import sample as run``

    # ---- control flow ---------------------------------------------------------------------

    def _on_if(self, node: ast.If) -> None:
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

    def _on_for(self, node: ast.For | ast.AsyncFor) -> None:
        self._expr(node.iter)  # evaluated once, not part of the loop body
        self._loop(node.body, node.orelse, target=node.target)

    def _on_while(self, node: ast.While) -> None:
        self._loop(node.body, node.orelse, test=node.test)

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

    def _on_try(self, node: ast.Try) -> None:  # ast.TryStar has the same fields
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

    def _on_with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self._expr(item.context_expr)
            if item.optional_vars is not None:
                self._target(item.optional_vars)
        self._stmts(node.body)

    def _on_match(self, node: ast.Match) -> None:
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

    # ---- everything else ------------------------------------------------------------------

    def _on_scope_declaration(self, node: ast.Global | ast.Nonlocal) -> None:
        pass  # no effect at module level

    def _on_other(self, node: ast.stmt) -> None:
        # Expr, Return, Raise, Assert, Pass, Break, Continue, ...: only their expressions matter.
        for child in ast.iter_child_nodes(node):
            self._expr(child)


# The handler of each statement type (definitions aside, see ``_Walker._stmt``); any other
# statement is ``_on_other``. Looked up by exact type: the ast node classes have no subclasses.
_STATEMENTS: dict[type[ast.AST], Callable[[_Walker, Any], None]] = {
    ast.Assign: _Walker._on_assign,
    ast.AugAssign: _Walker._on_aug_assign,
    ast.AnnAssign: _Walker._on_ann_assign,
    ast.Delete: _Walker._on_delete,
    ast.Import: _Walker._on_import,
    ast.ImportFrom: _Walker._on_import,
    ast.If: _Walker._on_if,
    ast.For: _Walker._on_for,
    ast.AsyncFor: _Walker._on_for,
    ast.While: _Walker._on_while,
    **dict.fromkeys(_TRY_NODES, _Walker._on_try),
    ast.With: _Walker._on_with,
    ast.AsyncWith: _Walker._on_with,
    ast.Match: _Walker._on_match,
    ast.Global: _Walker._on_scope_declaration,
    ast.Nonlocal: _Walker._on_scope_declaration,
}
