"""The simulated QPUs: one FIFO queue each, shared by our jobs and other users' (background) jobs,
and the windows a QPU is reserved for, in which it starts nothing. ``QPUState.view`` is what the
scheduler sees of a QPU: the estimated wait of its queue, its recent load, whether it is online.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernel_server.scheduler.cycle import BALANCE_WINDOW_S, QPUView


@dataclass(frozen=True)
class Reservation:
    qpu: str
    start_s: float
    end_s: float


@dataclass
class Entry:
    """One job in a QPU's queue."""

    job: int  # our job index, or -1 for background
    duration: float  # real seconds
    estimate: float  # what the scheduler thinks it takes
    enqueued: float
    start: float = 0.0
    end: float = 0.0


@dataclass
class QPUState:
    name: str
    num_qubits: int
    entries: list[Entry] = field(default_factory=list)
    free_at: float = 0.0
    reservations: list[tuple[float, float]] = field(default_factory=list)

    def _start_after(self, t: float) -> float:
        for a, b in sorted(self.reservations):
            if a <= t < b:
                t = b
        return t

    def enqueue(self, entry: Entry, now: float) -> None:
        entry.enqueued = now
        entry.start = self._start_after(max(now, self.free_at))
        entry.end = entry.start + entry.duration
        self.free_at = entry.end
        self.entries.append(entry)

    def withdraw_waiting(self, now: float) -> list[Entry]:
        """Take out every entry not started by ``now``; the rest of the queue closes up."""
        started = [e for e in self.entries if e.start <= now]
        waiting = [e for e in self.entries if e.start > now]
        self.entries = started
        self.free_at = max([e.end for e in started], default=0.0)
        ours = [e for e in waiting if e.job >= 0]
        for e in waiting:
            if e.job < 0:
                self.enqueue(e, e.enqueued)  # background jobs keep their place in line
        return ours

    def reserved_at(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.reservations)

    def view(self, now: float, window_s: float = BALANCE_WINDOW_S) -> QPUView:
        # Estimated wait: estimated durations of what is queued, the running job's remainder.
        wait = 0.0
        pending = 0
        busy = 0.0  # work run in [now - window, now]
        others = 0.0  # other users' part of busy + wait
        for e in self.entries:
            ran = max(min(e.end, now) - max(e.start, now - window_s), 0.0)
            left = 0.0
            if e.end > now:
                pending += 1
                left = max(e.estimate - (now - e.start), 0.0) if e.start <= now else e.estimate
            busy += ran
            wait += left
            if e.job < 0:
                others += ran + left
        for a, b in self.reservations:
            if a <= now + wait and b > now:
                wait = max(wait, b - now) if a <= now else wait + (b - a)
        online = not self.reserved_at(now)
        return QPUView(self.name, self.num_qubits, wait, pending, online, busy, others)
