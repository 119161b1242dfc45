"""Where a primitive's jobs may run, as its mode says and the orchestrator reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pin:
    """Where a primitive's jobs may run, as the orchestrator reads it."""

    qpus: tuple[str, ...] = ()  # empty: any QPU the workflow allows
    session: str = ""  # a Session's id
    backend: Any = None  # the backend view pinned to, for checks before anything is queued

    @property
    def label(self) -> str:
        if self.backend is not None:
            return str(self.backend.name)
        return "the fleet"
