"""What the notebook's names mean to a ``%%qonductor`` cell (the splitter's ``NotebookContext``).

A cell may call a function defined in another cell (``def run_circ(qc): return sample(qc)``, in a
``%%qonductor`` cell or a plain one), a primitive imported under another name, or an object whose
methods sample. The splitter reads only the cell's text; this module reads the values behind its
names in the kernel's namespace:

* a notebook function (defined in a cell: module ``__main__`` or the ``%%qonductor`` cell module)
  is summarised like a function defined in the cell itself, from its source where the kernel
  keeps it (IPython caches every cell's source) and from its bytecode otherwise: the notebook
  globals it reads (a step sends them along), those it assigns or changes in place, and whether it
  reaches ``sample``/``estimate``, directly or through other notebook functions;
* a notebook class, or an instance of one, is quantum when one of its methods is (methods keep
  the globals sent with them; the worker's builtins give them the step's primitives); a bound
  method or a ``functools.partial`` is what it calls;
* a function of the user's own modules (outside the installed libraries) counts as quantum when
  its code reaches the primitives through its module's globals.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import sys
import sysconfig
import textwrap
import types
from collections.abc import Iterator
from typing import Any

from kernel_server.core.cell_functions import NOTEBOOK_MODULES

from .splitter import (
    EXECUTOR_FACTORIES,
    PRIMITIVE_ATTRIBUTES,
    PRIMITIVE_MODULES,
    QUANTUM_PRIMITIVES,
    FunctionInfo,
    NotebookContext,
    _ScopeBuilder,
    _summarize,
)

# The importable primitives (``from qonductor_jupyter import sample``), known by where they are
# defined: importing them here would make the module that runs them import this one back.
_PRIMITIVES_MODULE = "qonductor_jupyter.primitives"
_PRIMITIVE_NAMES = frozenset({"sample", "estimate"})
_FACTORY_PACKAGE = "qonductor_jupyter.qiskit_primitives"
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)
_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
# Types whose objects cannot change in place: a function reading one does not mutate it.
_IMMUTABLE = (int, float, complex, str, bytes, bool, tuple, frozenset, range, type(None))
_MAX_FUNCTIONS = 200  # a bound on the walk through other modules' code


def _is_primitive(value: Any) -> bool:
    return (
        callable(value)
        and getattr(value, "__module__", None) == _PRIMITIVES_MODULE
        and getattr(value, "__qualname__", None) in _PRIMITIVE_NAMES
    )


def _is_primitive_module(value: Any) -> bool:
    """A module exporting the primitives, or an executor of them (a Sampler, an Estimator, a
    fleet backend, or qiskit's BackendSamplerV2/BackendEstimatorV2 over one): its ``run`` and
    ``sample``/``estimate`` are quantum calls."""
    if isinstance(value, types.ModuleType):
        return value.__name__ in PRIMITIVE_MODULES
    if getattr(type(value), "_qonductor_executor", False):
        return True
    wrapped = getattr(value, "backend", None) if not isinstance(value, type) else None
    return getattr(type(wrapped), "_qonductor_executor", False) is True


def _is_factory(value: Any) -> bool:
    """``Sampler``, ``Estimator``, ``backend``: what makes executors."""
    return (
        callable(value)
        and str(getattr(value, "__module__", "")).startswith(_FACTORY_PACKAGE)
        and getattr(value, "__name__", None) in EXECUTOR_FACTORIES
    )


def _is_notebook_code(value: Any) -> bool:
    return getattr(value, "__module__", None) in NOTEBOOK_MODULES


def _is_library(fn: Any) -> bool:
    """Installed libraries (and the standard library) never call our primitives: not read."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None) or ""
    return not path or path.startswith(_LIBRARY_DIRS)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _bytecode_globals(code: types.CodeType) -> tuple[set[str], set[str], set[str]]:
    """(globals loaded, globals stored, attribute names used) by a code object and its nested
    code (inner functions, lambdas, comprehensions)."""
    loads: set[str] = set()
    stores: set[str] = set()
    attributes: set[str] = set()
    for inner in _code_objects(code):
        local = set(inner.co_varnames) | set(inner.co_cellvars) | set(inner.co_freevars)
        for instruction in dis.get_instructions(inner):
            name = instruction.argval
            if instruction.opname in _GLOBAL_LOADS and isinstance(name, str):
                if instruction.opname == "LOAD_GLOBAL" or name not in local:
                    loads.add(name)
            elif instruction.opname in _GLOBAL_STORES and isinstance(name, str):
                stores.add(name)
            elif instruction.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(name, str):
                attributes.add(name)
    return loads, stores, attributes


def _function_node(fn: types.FunctionType) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The def of ``fn`` from the source the kernel keeps, or None (lambdas, lost sources)."""
    if fn.__name__ == "<lambda>":
        return None
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            return node
    return None


class _Reader:
    """Summaries of the namespace's values, cached per value for one cell."""

    def __init__(self, namespace: dict[str, object]):
        self.namespace = namespace
        # Inside notebook code these names are primitives, as in a cell: a step gives the code
        # it runs its own ``sample``/``estimate``; and any aliases the notebook has.
        self.primitives = set(QUANTUM_PRIMITIVES) | {
            name for name, value in namespace.items() if _is_primitive(value)
        }
        self.modules = {name for name, value in namespace.items() if _is_primitive_module(value)}
        self._seen: dict[int, FunctionInfo | None] = {}
        self._budget = _MAX_FUNCTIONS

    # ---------------------------------------------------------------- values
    def info(self, value: Any) -> FunctionInfo | None:
        key = id(value)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = None  # recursion guard (a function calling itself)
        info = self._info(value)
        self._seen[key] = info
        return info

    def _info(self, value: Any) -> FunctionInfo | None:
        if isinstance(value, functools.partial):
            return self.info(value.func)
        if isinstance(value, types.MethodType):
            return self.info(value.__func__)
        if isinstance(value, (staticmethod, classmethod)):
            return self.info(value.__func__)
        if isinstance(value, property):
            parts = [self.info(f) for f in (value.fget, value.fset, value.fdel) if f is not None]
            return _union(parts)
        if isinstance(value, types.FunctionType):
            if _is_notebook_code(value):
                return self._notebook_function(value)
            return self._module_function(value)
        if isinstance(value, type):
            if not _is_notebook_code(value) and _is_library(value):
                return None
            methods = _union([self.info(member) for member in vars(value).values()])
            if methods is None or not methods.direct_quantum:
                return None
            # Methods are not rebound in a step (they keep the globals sent with them), so only
            # their reaching a primitive matters to the cell.
            return FunctionInfo(frozenset(), frozenset(), True)
        if _is_notebook_code(type(value)) and not isinstance(value, types.ModuleType):
            return self.info(type(value))  # an instance of a notebook class: its methods run
        return None

    def _notebook_function(self, fn: types.FunctionType) -> FunctionInfo:
        node = _function_node(fn)
        if node is not None:
            root = _ScopeBuilder().function(node, None)
            summary = _summarize(root, False, self.primitives, self.modules)
            loads = {name for name, _ in summary.loads}
            info = FunctionInfo(
                free_globals=frozenset(loads),
                global_writes=frozenset(summary.global_writes),
                direct_quantum=bool(summary.primitive_calls),
                global_mutations=frozenset(name for name, _ in summary.mutations),
            )
        else:
            loads, stores, attributes = _bytecode_globals(fn.__code__)
            quantum = bool(loads & self.primitives) or bool(
                loads & self.modules and attributes & PRIMITIVE_ATTRIBUTES
            )
            # Without the source, any mutable notebook value the function reads may be changed
            # by it: sending it back costs little, missing a change loses data.
            mutated = {
                name
                for name in loads
                if name in self.namespace and _may_change(self.namespace[name])
            }
            info = FunctionInfo(
                free_globals=frozenset(loads),
                global_writes=frozenset(stores),
                direct_quantum=quantum,
                global_mutations=frozenset(mutated),
            )
        # Closures over other notebook functions (a decorator's wrapper, a factory's product).
        for cell in fn.__closure__ or ():
            try:
                inner = self.info(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
            if inner is not None and inner.direct_quantum:
                info = info.merged(FunctionInfo(frozenset(), frozenset(), True))
        return info

    def _module_function(self, fn: types.FunctionType) -> FunctionInfo | None:
        """A function of another module: quantum if its code reaches a primitive through its
        module's globals (directly or through that module's other functions)."""
        if _is_library(fn) or self._budget <= 0:
            return None
        self._budget -= 1
        loads, _, attributes = _bytecode_globals(fn.__code__)
        found = False
        for name in loads:
            value = fn.__globals__.get(name)
            if _is_primitive(value):
                found = True
            elif _is_primitive_module(value) and attributes & PRIMITIVE_ATTRIBUTES:
                found = True
            elif isinstance(value, (types.FunctionType, type)):
                inner = self.info(value)
                found = found or bool(inner and inner.direct_quantum)
            if found:
                break
        # Module code travels by reference with its own globals: nothing to send along.
        return FunctionInfo(frozenset(), frozenset(), found) if found else None


def _union(infos: list[FunctionInfo | None]) -> FunctionInfo | None:
    present = [info for info in infos if info is not None]
    if not present:
        return None
    return functools.reduce(FunctionInfo.merged, present)


def _may_change(value: Any) -> bool:
    return not isinstance(
        value, (*_IMMUTABLE, types.ModuleType, types.FunctionType, type, types.BuiltinFunctionType)
    )


def _cell_names(tree: ast.Module) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def notebook_context(source: str | ast.Module, namespace: dict[str, object]) -> NotebookContext:
    """The NotebookContext of a cell: its names, and those the notebook functions it uses read,
    as the kernel's namespace has them now."""
    tree = ast.parse(source) if isinstance(source, str) else source
    reader = _Reader(namespace)
    functions: dict[str, FunctionInfo] = {}
    primitives: set[str] = set()
    modules: set[str] = set()
    factories: set[str] = set()
    pending = sorted(_cell_names(tree))
    visited: set[str] = set()
    while pending:
        name = pending.pop()
        if name in visited or name not in namespace:
            continue
        visited.add(name)
        value = namespace[name]
        if _is_primitive(value):
            if name not in QUANTUM_PRIMITIVES:
                primitives.add(name)
            continue
        if _is_primitive_module(value):
            modules.add(name)
            continue
        if _is_factory(value):
            factories.add(name)
            continue
        info = reader.info(value)
        if info is None:
            continue
        functions[name] = info
        pending.extend(info.free_globals)  # the walker follows them through ``functions``
    return NotebookContext(
        functions=functions,
        primitives=frozenset(primitives),
        modules=frozenset(modules),
        factories=frozenset(factories),
    )
