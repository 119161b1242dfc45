"""What the splitter knows before it reads a cell, and how an AST node names an object.

Builtins and the quantum primitives are not taken from the notebook; modules that export the
primitives make ``qj.sample`` a quantum call. The helpers below find the name an import binds, the
module-level name a method call or an attribute/subscript target changes in place, and the module a
primitive is reached through. The nested-scope analysis (``scopes``) and the module-level walker
(``walker``) both rely on them, so they sit below both.
"""

from __future__ import annotations

import ast
import builtins

QUANTUM_PRIMITIVES: frozenset[str] = frozenset({"sample", "estimate"})
# Qiskit's primitives on the fleet: an object a factory returns (``Sampler(...)``,
# ``Estimator(...)``, ``backend(...)``) is an executor, and calling its ``run`` is a quantum call,
# as ``qj.sample`` is one through a module.
EXECUTOR_FACTORIES: frozenset[str] = frozenset(
    {"Sampler", "Estimator", "SamplerV2", "EstimatorV2", "backend"}
)
PRIMITIVE_ATTRIBUTES: frozenset[str] = QUANTUM_PRIMITIVES | frozenset({"run"})
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

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSION_NODES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# ``try/except*`` only exists on Python 3.11+; the package still supports 3.10.
_TRY_NODES: tuple[type[ast.AST], ...] = tuple(
    node for node in (ast.Try, getattr(ast, "TryStar", None)) if node is not None
)


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
    if node.module == "qonductor_jupyter" and alias.name in EXECUTOR_FACTORIES:
        return "factory"
    if node.module == "qonductor_jupyter" and alias.name == "primitives":
        return "module"
    return None


def _primitive_attribute_root(node: ast.AST) -> str | None:
    """``qj`` for ``qj.sample`` and ``qj.primitives.estimate``, ``sampler`` for ``sampler.run``: a
    primitive reached through a module or executor name (whether ``qj`` or ``sampler`` is one is
    the caller's business)."""
    if not (isinstance(node, ast.Attribute) and node.attr in PRIMITIVE_ATTRIBUTES):
        return None
    value = node.value
    if isinstance(value, ast.Attribute) and value.attr == "primitives":
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


def _factory_call(node: ast.AST, factories: set[str] | frozenset[str], modules: set[str]) -> bool:
    """``Sampler(...)`` with ``Sampler`` a factory name, or ``qj.Estimator(...)`` through a module
    that exports the primitives: the value is an executor."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in factories
    return (
        isinstance(func, ast.Attribute)
        and func.attr in EXECUTOR_FACTORIES
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )
