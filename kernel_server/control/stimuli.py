"""Stimulus ids and, in debug mode, a log of every event the workflow machine handled.

Each event gets a stimulus id (its kind and a running number) as it enters the machine; the
instructions it produces are logged under it, so a job's story reads as "which stimulus did
what". With ``QONDUCTOR_STIMULUS_LOG`` set to a file, every event is also written there as the
machine got it (pickled before it is handled: the machine changes the runs it carries), with the
clock readings and ids the machine drew while handling it. :func:`replay` feeds such a log to a
new machine, which then draws the same times and ids: the same instructions follow, so a bug
seen in a session can be replayed under a debugger without the orchestrator around it.
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from kernel_server.control.events import Event, Instruction
from kernel_server.control.machine import UserError, WorkflowMachine
from kernel_server.core.jobs import new_id

__all__ = ["STIMULUS_LOG_ENV", "Entry", "StimulusLog", "read_log", "replay"]

STIMULUS_LOG_ENV = "QONDUCTOR_STIMULUS_LOG"


@dataclass
class Entry:
    """One handled event: its stimulus id, the event as it arrived, what the machine drew."""

    stimulus_id: str
    event: bytes  # pickled
    clock: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    raised: str = ""  # the UserError the event was refused with, if any
    instructions: list[str] = field(default_factory=list)  # their kinds, for reading


class StimulusLog:
    """Stamps events with stimulus ids; in debug mode (a ``path``) records them to replay.

    The machine's ``clock`` and ``ids`` are this log's, so that what it draws is recorded.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self._count = itertools.count(1)
        self._file: BinaryIO | None = open(path, "ab") if path else None  # noqa: SIM115
        self._entry: Entry | None = None

    @classmethod
    def from_env(cls) -> StimulusLog:
        return cls(os.environ.get(STIMULUS_LOG_ENV) or None)

    @property
    def recording(self) -> bool:
        return self._file is not None

    def clock(self) -> float:
        now = time.time()
        if self._entry is not None:
            self._entry.clock.append(now)
        return now

    def ids(self, prefix: str) -> str:
        value = new_id(prefix)
        if self._entry is not None:
            self._entry.ids.append(value)
        return value

    def handle(self, machine: WorkflowMachine, event: Event) -> list[Instruction]:
        """The machine handles ``event``, stamped with its stimulus id (and logged)."""
        event.stimulus_id = event.stimulus_id or f"{type(event).__name__}-{next(self._count)}"
        if self._file is None:
            return machine.handle(event)
        self._entry = Entry(event.stimulus_id, pickle.dumps(event))
        try:
            out = machine.handle(event)
        except UserError as exc:
            self._entry.raised = str(exc)
            raise
        else:
            self._entry.instructions = [type(i).__name__ for i in out]
            return out
        finally:
            pickle.dump(self._entry, self._file)
            self._file.flush()
            self._entry = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_log(path: str | Path) -> Iterator[Entry]:
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def replay(entries: Iterator[Entry] | list[Entry], **slots: Any) -> list[list[Instruction]]:
    """Feed logged events to a new machine that draws the logged times and ids; the
    instructions of each event (an event refused then is refused again: its list is empty)."""
    clock: list[float] = []
    ids: list[str] = []
    machine = WorkflowMachine(**slots, clock=lambda: clock.pop(0), ids=lambda _p: ids.pop(0))
    out: list[list[Instruction]] = []
    for entry in entries:
        clock[:], ids[:] = list(entry.clock), list(entry.ids)
        event = pickle.loads(entry.event)
        if entry.raised:
            try:
                machine.handle(event)
            except UserError:
                out.append([])
                continue
            raise AssertionError(f"{entry.stimulus_id} was refused then, not in the replay")
        out.append(machine.handle(event))
    return out
