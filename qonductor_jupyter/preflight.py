"""Refuse before anything runs what the cell's text already shows cannot run.

A circuit built in the cell is only known once the cell's classical code has run; but a width
written in the cell (``QuantumCircuit(200)``, ``QuantumRegister(n)`` with ``n`` from the notebook)
is known at once, and waiting for the steps before it to fail the same way would only cost time.
"""

from __future__ import annotations

import ast
import numbers
from collections.abc import Callable, Sized

from kernel_server.core.status import DeviceStatus

from .errors import InputError

_WIDTH_CONSTRUCTORS = frozenset({"QuantumCircuit", "QuantumRegister"})


def _constructor(node: ast.Call) -> str | None:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name if name in _WIDTH_CONSTRUCTORS else None


def _int_value(node: ast.expr, values: dict[str, object]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return None if isinstance(node.value, bool) else node.value
    value = values.get(node.id) if isinstance(node, ast.Name) else None
    if isinstance(value, numbers.Integral):
        return int(value)
    return None


def _outside_functions(tree: ast.AST) -> list[ast.AST]:
    """The nodes that run when the cell does (not the bodies of functions it defines)."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                stack.append(child)
    return nodes


def static_widths(source: str, values: dict[str, object]) -> list[tuple[int, str]]:
    """(qubits, line) of every circuit or register whose width the cell states outright: an
    integer literal, or a name the cell never assigns whose notebook value is an integer."""
    tree = ast.parse(source)
    assigned = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
    }
    known = {name: value for name, value in values.items() if name not in assigned}
    lines = source.splitlines()
    found = []
    for node in _outside_functions(tree):
        if isinstance(node, ast.Call) and _constructor(node) and node.args:
            width = _int_value(node.args[0], known)
            if width is not None:
                found.append((width, lines[node.lineno - 1].strip()))
    return found


def check_static_widths(
    source: str, values: dict[str, object], fleet: Callable[[], list[DeviceStatus]]
) -> None:
    """InputError for a width no QPU of the fleet has, before anything is queued."""
    widths = static_widths(source, values)
    if not widths:
        return
    largest = max((d.num_qubits for d in fleet()), default=0)
    too_wide = [(w, line) for w, line in widths if w > largest]
    if too_wide:
        width, line = max(too_wide)
        raise InputError(
            f"`{line}` asks for {width} qubits, but the largest QPU in the fleet has {largest}. "
            "Nothing ran; reduce the width (or cut the circuit)."
        )


# ------------------------------------------------------------------ calls of a hybrid step
_OPTIMIZER_LIMITS = ("maxiter", "maxfev", "max_iterations", "maxiters")


def _iterations(node: ast.expr, values: dict[str, object]) -> int | None:
    """How many times ``for ... in node`` iterates, where the cell (or the notebook) says."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return len(node.elts)
    if isinstance(node, ast.Name):
        value = values.get(node.id)
        if not isinstance(value, Sized):
            return None
        try:
            return len(value)
        except TypeError:  # a __len__ that refuses
            return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name == "range" and 1 <= len(args) <= 3:
            bounds = [_int_value(a, values) for a in args]
            if None in bounds:
                return None
            return len(range(*bounds))  # type: ignore[arg-type]
        if name in ("enumerate", "reversed", "sorted", "list", "tuple") and args:
            return _iterations(args[0], values)
        if name == "zip" and args:
            counts = [_iterations(a, values) for a in args]
            return None if None in counts else min(counts)  # type: ignore[type-var]
    return None


def _optimizer_limit(node: ast.AST, values: dict[str, object]) -> int | None:
    """``maxiter=30`` or ``options={"maxiter": 30}`` of a call: an optimizer's own loop."""
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        for keyword in call.keywords:
            if keyword.arg in _OPTIMIZER_LIMITS:
                return _int_value(keyword.value, values)
            if keyword.arg == "options" and isinstance(keyword.value, ast.Dict):
                for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value in _OPTIMIZER_LIMITS:
                        return _int_value(value, values)
    return None


def _is_quantum_call(node: ast.AST, quantum_names: frozenset[str]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in quantum_names
    return isinstance(func, ast.Attribute) and func.attr in ("sample", "estimate")


def expected_calls(
    source: str, values: dict[str, object], quantum_names: frozenset[str]
) -> int | None:
    """How many QPU calls a hybrid step makes, where its text says: each call site counts the
    iterations of the loops around it; a call that hands a quantum function to an optimizer
    counts its ``maxiter``. None where some count is unknown (a while loop, an optimizer without
    a limit): the orchestrator then assumes a long loop."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    total = 0

    def visit(node: ast.AST, factor: int | None) -> None:
        nonlocal total
        if total is None:
            return
        if isinstance(node, (ast.For, ast.AsyncFor)):
            count = _iterations(node.iter, values)
            inner = None if factor is None or count is None else factor * count
            for child in node.body:
                visit(child, inner)
            for child in node.orelse:
                visit(child, factor)
            visit(node.iter, factor)
            return
        if isinstance(node, ast.While):
            for sub in ast.iter_child_nodes(node):
                visit(sub, None)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return  # runs when called; a call site elsewhere counts it
        if isinstance(node, ast.Call):
            handed_on = any(
                isinstance(arg, ast.Name) and arg.id in quantum_names
                for arg in [*node.args, *(k.value for k in node.keywords)]
            )
            if _is_quantum_call(node, quantum_names) or handed_on:
                limit = _optimizer_limit(node, values) if handed_on else 1
                if factor is None or limit is None:
                    total = None  # type: ignore[assignment]
                    return
                total += factor * limit
        for sub in ast.iter_child_nodes(node):
            visit(sub, factor)

    visit(tree, 1)
    return total or None
