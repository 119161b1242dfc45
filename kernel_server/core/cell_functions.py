"""Functions defined in the notebook keep notebook semantics wherever they run.

In a notebook, a function defined in a cell looks its globals up when it is called. Sent to another
process by value (cloudpickle), it would keep a frozen copy of them instead. Functions defined in a
``%%qonductor`` cell carry ``CELL_MODULE`` as their ``__module__`` (not importable, so cloudpickle
sends them by value, and we can recognise them); functions of plain notebook cells carry
``__main__``. Rebinding gives either kind the namespace it is used in as its globals: a later
step's namespace in a worker, or the notebook's after the cell ran. The splitter sends a step the
globals such functions read (``qonductor_jupyter.notebook_names``), so that they are there.
"""

from __future__ import annotations

import linecache
import types
from typing import Any, TypeGuard

CELL_MODULE = "__qonductor_cell__"
NOTEBOOK_MODULES = frozenset({CELL_MODULE, "__main__"})
# cloudpickle sends code by value under the file name "<dynamic-code>", so a function of a cell
# would lose its source lines (in tracebacks, in inspect.getsource) wherever it lands. It carries
# its own (file name, cell source) in this attribute, and gets both back when it is rebound.
ORIGIN = "__qonductor_origin__"


def mark_origin(value: Any) -> None:
    """Let a notebook function carry the source of the cell it was defined in."""
    if not is_notebook_function(value) or ORIGIN in value.__dict__:
        return
    filename = value.__code__.co_filename
    lines = linecache.getlines(filename)
    if lines:
        value.__dict__[ORIGIN] = (filename, "".join(lines))


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(
        _with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


def _restored_code(fn: types.FunctionType) -> types.CodeType:
    origin = fn.__dict__.get(ORIGIN)
    if not origin or fn.__code__.co_filename == origin[0]:
        return fn.__code__
    filename, source = origin
    if filename not in linecache.cache:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return _with_filename(fn.__code__, filename)


def is_notebook_function(value: object) -> TypeGuard[types.FunctionType]:
    return isinstance(value, types.FunctionType) and value.__module__ in NOTEBOOK_MODULES


def _rebound(fn: types.FunctionType, namespace: dict[str, object]) -> types.FunctionType:
    code = _restored_code(fn)
    new = types.FunctionType(code, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__module__ = fn.__module__
    new.__dict__.update(fn.__dict__)
    return new


def rebind_cell_functions(
    values: dict[str, object], namespace: dict[str, object], fill: bool = False
) -> None:
    """Replace each notebook function in ``values`` by one whose globals are ``namespace``.

    ``fill``: names the function's own (sent) globals hold and ``namespace`` lacks are copied in,
    so that a function whose globals the splitter could not see still finds them.
    """
    for name, value in list(values.items()):
        if is_notebook_function(value) and value.__globals__ is not namespace:
            if fill:
                for key, global_value in value.__globals__.items():
                    if not key.startswith("__"):
                        namespace.setdefault(key, global_value)
            values[name] = _rebound(value, namespace)


CELL_FILENAME = "<qonductor cell>"


def cell_filename(workflow_id: str) -> str:
    """The file name a workflow's cell code runs under: its own, so that the source lines of
    two workflows' steps running in one process never mix (linecache is per process)."""
    return f"{CELL_FILENAME[:-1]} {workflow_id}>"


def is_cell_file(filename: str) -> bool:
    return filename.startswith(CELL_FILENAME[:-1])
