"""Bring a workflow's values back into the notebook the way Python would have left them.

The cell ran elsewhere on copies. Setting every name to the copy that came back would break what
plain Python keeps: an input the cell did not change would become a copy (another name bound to
the same object would no longer see it), and ``all_counts.append(counts)`` would rebind
``all_counts`` to a new list instead of growing the notebook's. So, per name:

* a value that comes back exactly as it was sent (same pickle) is not touched;
* a name the cell only changes in place (the splitter's ``mutated_only``) gets the new contents
  in the notebook's own object: containers through their own methods, other objects through
  their pickle state (``__reduce_ex__``, the protocol that made the copy); where neither works
  the name is replaced and the report says so; where the copy is not even the same type (a file
  travels as a ``StringIO`` of its contents) the notebook keeps its object and the report says so;
* everything else is set, functions defined in the cell rebound to the notebook's globals.
"""

from __future__ import annotations

import collections
import linecache
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from kernel_server.core.cell_functions import cell_filename, rebind_cell_functions
from kernel_server.core.dataflow import DELETED


@dataclass
class Applied:
    """What bringing a workflow's values back did."""

    values: dict[str, object] = field(default_factory=dict)  # every name the cell left, by value
    in_place: list[str] = field(default_factory=list)  # changed inside the notebook's object
    replaced: list[str] = field(default_factory=list)  # could not change in place: rebound
    kept: dict[str, str] = field(default_factory=dict)  # name -> why the notebook's stays
    deleted: list[str] = field(default_factory=list)  # the cell ran ``del name``

    @property
    def names(self) -> list[str]:
        return sorted(self.values)

    def __bool__(self) -> bool:
        return bool(self.values)

    def notes(self) -> list[str]:
        lines = []
        if self.deleted:
            lines.append("deleted: " + ", ".join(sorted(self.deleted)))
        if self.in_place:
            lines.append("changed in place: " + ", ".join(sorted(self.in_place)))
        if self.replaced:
            lines.append(
                "replaced by the changed copy (it cannot be changed in place): "
                + ", ".join(sorted(self.replaced))
            )
        for name, why in sorted(self.kept.items()):
            lines.append(f"{name} not updated: {why}")
        return lines


def update_in_place(target: Any, new: Any) -> bool:
    """Give ``target`` the contents of ``new`` (same type); False where that is not possible."""
    if type(target) is not type(new) or target is new:
        return False
    if isinstance(target, (list, bytearray)):
        target[:] = new
        return True
    if isinstance(target, (dict, set)):
        if isinstance(target, collections.defaultdict):
            target.default_factory = new.default_factory
        target.clear()
        target.update(new)
        return True
    ndarray = _numpy_array_type()
    if ndarray is not None and isinstance(target, ndarray):
        if target.shape != new.shape or target.dtype != new.dtype or not target.flags.writeable:
            return False
        target[...] = new
        return True
    return _set_pickle_state(target, new)


def _numpy_array_type() -> Any:
    import sys

    numpy = sys.modules.get("numpy")
    return None if numpy is None else numpy.ndarray


def _set_pickle_state(target: Any, new: Any) -> bool:
    """Copy the state pickle would restore an object from (its ``__reduce_ex__`` state)."""
    try:
        reduced = new.__reduce_ex__(4)
    except Exception:  # objects that refuse pickling protocols here
        return False
    if not isinstance(reduced, tuple) or len(reduced) < 3 or reduced[2] is None:
        return False
    if any(len(reduced) > i and reduced[i] is not None for i in (3, 4)):
        return False  # list/dict items of a subclass: not a plain state to copy
    state = reduced[2]
    setstate = getattr(target, "__setstate__", None)
    try:
        if setstate is not None and getattr(type(target), "__setstate__", None) is not getattr(
            object, "__setstate__", None
        ):
            setstate(state)
            return True
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            if not hasattr(target, "__dict__"):
                return False
            target.__dict__.clear()
            target.__dict__.update(state)
        for key, value in (slots or {}).items():
            setattr(target, key, value)
        return True
    except Exception:  # a half-applied state would be worse than a replaced object
        return False


def _why_kept(target: Any, new: Any) -> str:
    return (
        f"the cell changed a copy of it, which came back as {type(new).__name__} "
        f"(a {type(target).__name__} cannot travel as itself); the notebook keeps its own"
    )


def apply_outputs(
    workflow_id: str,
    blobs: dict[str, bytes],
    namespace: dict[str, object],
    sent: dict[str, bytes] | None = None,
    mutated_only: tuple[str, ...] | list[str] = (),
    source: str | None = None,
) -> Applied:
    """Set the workflow's values in ``namespace`` (see the module docstring)."""
    sent = sent or {}
    applied = Applied()
    if source is not None:
        # Functions the cell defined point at this file name: their source (inspect.getsource,
        # tracebacks in later cells) is the cell's.
        filename = cell_filename(workflow_id)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    values: dict[str, object] = {}
    for name, blob in blobs.items():
        if blob == DELETED:
            namespace.pop(name, None)  # the cell ran ``del name``
            applied.deleted.append(name)
            continue
        if name in namespace and sent.get(name) == blob:
            applied.values[name] = namespace[name]  # came back unchanged: keep the object
            continue
        values[name] = cloudpickle.loads(blob)
    rebind_cell_functions(values, namespace)
    for name, value in values.items():
        if name in mutated_only and name in namespace:
            target = namespace[name]
            if update_in_place(target, value):
                applied.in_place.append(name)
                applied.values[name] = target
                continue
            if type(target) is not type(value):
                applied.kept[name] = _why_kept(target, value)
                applied.values[name] = target
                continue
            applied.replaced.append(name)
        namespace[name] = value
        applied.values[name] = value
    return applied
