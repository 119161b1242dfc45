"""What a primitive's ``mode`` pins: nothing, a device, a template, a Session or a Batch.

* ``None``: the fleet; the orchestrator estimates, plans and places each PUB.
* a device or template name (``"fake_kolkata"``, ``"Falcon-27"``) or a backend from
  :func:`qonductor_jupyter.backend`: its QPU, or any QPU of its template.
* :class:`Session`: an iterative loop keeps the QPU (and plan) its first job was placed on, and
  its jobs go ahead of other jobs on that QPU within the queue's fairness rule.
* :class:`Batch`: independent jobs; each is placed on its own, so they spread over the fleet.
"""

from __future__ import annotations

import uuid
from typing import Any

from .pin import Pin


class _Mode:
    """A Session or Batch: a context manager whose ``close()`` ends it."""

    kind = "batch"

    def __init__(self, backend: Any = None, max_time: Any = None) -> None:
        self.session_id = f"{self.kind}-{uuid.uuid4().hex[:12]}"
        self.backend = _backend_view(backend) if backend is not None else None
        self.max_time = max_time  # accepted as Qiskit Runtime does; jobs are not cut off by it
        self.closed = False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Submit no more jobs in this mode (jobs already submitted go on)."""
        self.closed = True

    def pin(self) -> Pin:
        if self.closed:
            raise RuntimeError(f"the {type(self).__name__} {self.session_id} is closed")
        qpus = tuple(self.backend.members) if self.backend is not None else ()
        return Pin(qpus, self.session_id if self.kind == "session" else "", self.backend)

    def __repr__(self) -> str:
        where = f" on {self.backend.name}" if self.backend is not None else ""
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {self.session_id}{where} ({state})>"


class Session(_Mode):
    """Jobs of an iterative loop on one QPU: the one its first job is placed on (with that job's
    plan), booked so that other users' jobs do not run between its jobs beyond the fairness rule
    of the QPU's queue (a few jobs in a row, a short hold between them)."""

    kind = "session"


class Batch(_Mode):
    """Independent jobs: each is estimated, planned and placed on its own."""

    kind = "batch"


def _backend_view(backend: Any) -> Any:
    from .backend import FleetBackend
    from .backend import backend as make_backend

    if isinstance(backend, FleetBackend):
        return backend
    if isinstance(backend, str):
        return make_backend(backend)
    raise TypeError(
        f"mode backend must be a device or template name or qonductor_jupyter.backend(name), "
        f"not {type(backend).__name__}"
    )


def resolve_mode(mode: Any) -> Any:
    """A primitive's mode as given, checked: None, a backend view, a Session or a Batch (a name
    becomes the backend view of that device or template)."""
    if mode is None or isinstance(mode, _Mode):
        return mode
    return _backend_view(mode)


def pin_of(mode: Any) -> Pin:
    if mode is None:
        return Pin()
    if isinstance(mode, _Mode):
        return mode.pin()
    return Pin(tuple(mode.members), "", mode)
