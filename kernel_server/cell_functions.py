"""Functions defined in a cell keep notebook semantics wherever they run.

In a notebook, a function defined in a cell looks its globals up when it is called. Sent to another
process by value (cloudpickle), it would keep a frozen copy of them instead. Functions defined in a
``%%qonductor`` cell carry ``CELL_MODULE`` as their ``__module__`` (not importable, so cloudpickle
sends them by value, and we can recognise them); rebinding gives them the namespace they are used in
as their globals: a later step's namespace in a worker, or the notebook's after the cell ran.
"""

from __future__ import annotations

import types
from typing import Any

CELL_MODULE = "__qonductor_cell__"


def rebind_cell_functions(values: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Replace each cell-defined function in ``values`` by one whose globals are ``namespace``."""
    for name, value in list(values.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == CELL_MODULE:
            fn = types.FunctionType(
                value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
            )
            fn.__kwdefaults__ = value.__kwdefaults__
            fn.__qualname__ = value.__qualname__
            fn.__doc__ = value.__doc__
            fn.__dict__.update(value.__dict__)
            values[name] = fn
