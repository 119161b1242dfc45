"""The simulated QPU fleet as the orchestrator sees it: one FIFO queue and one runner per QPU.

A QPU runs one job at a time, like the real thing; the job itself executes on Aer with the device's
noise in a QPU worker process. Queue and run times are measured wall-clock times of this process.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kernel_server.core.jobs import JobRecord
from kernel_server.core.status import DeviceInfo, DeviceStatus
from kernel_server.scheduler.cycle import BALANCE_WINDOW_S


@dataclass
class QueuedJob:
    job: JobRecord
    transpiled: bytes
    shots: int
    seed: int | None
    done: asyncio.Future
    mitigation: str | None = None  # the chosen plan's stack; None runs the transpiled circuits
    circuits: bytes | None = None  # the step's own circuits, which a mitigation stack rebuilds
    parameter_values: bytes = b""  # rows bound into every circuit (wire.circuits), "" none
    # A Session's job: it goes ahead of the jobs that are not (see JobQueue.get's fairness rule).
    session: str = ""
    # Another user's job (background load): it only occupies the QPU for this many seconds.
    background_s: float | None = None
    # Seconds it was predicted to hold the QPU (tasks.qpu.job_run_seconds); None: unknown.
    predicted_s: float | None = None


# A Session's jobs go ahead of others, but at most this many in a row while others wait; and
# after one of its jobs the QPU waits at most SESSION_HOLD_S for its next one before it serves
# the others (the interactive loop's classical step between two jobs is usually much shorter).
SESSION_STREAK = 10
SESSION_HOLD_S = 1.0


class JobQueue:
    """A QPU's queue of waiting jobs, first in first out except for Sessions.

    A Session books the QPU it was placed on: its next job goes ahead of the others, and for
    ``hold_s`` after one of its jobs ends the QPU waits for its next one rather than start another
    user's. The fairness rule bounds both: after ``streak`` of its jobs in a row while others
    waited, the oldest other job runs, and a hold never lasts longer than ``hold_s``.
    """

    def __init__(self, streak: int = SESSION_STREAK, hold_s: float = SESSION_HOLD_S) -> None:
        self._items: deque[QueuedJob] = deque()
        self._nonempty = asyncio.Event()  # set while a job may be waiting
        self.streak_limit, self.hold_s = streak, hold_s
        self.session = ""  # the Session of the last job taken ("" none)
        self.streak = 0  # its jobs taken in a row while others waited
        self.session_ended_at = 0.0  # loop time its last job ended (QpuRunner says)

    def put_nowait(self, item: QueuedJob) -> None:
        self._items.append(item)
        self._nonempty.set()

    async def put(self, item: QueuedJob) -> None:
        self.put_nowait(item)

    def _next(self) -> QueuedJob | None:
        """The job to run now, or None while the QPU holds for its Session's next job."""
        mine = [i for i in self._items if self.session and i.session == self.session]
        others = len(self._items) - len(mine)
        if mine and (self.streak < self.streak_limit or not others):
            item = mine[0]
            self.streak = self.streak + 1 if others else 0
        elif self.session and others and self.streak < self.streak_limit and self._holding():
            return None
        else:
            item = self._items[0]
            self.session, self.streak = item.session, 0
        self._items.remove(item)
        return item

    def _holding(self) -> bool:
        loop = asyncio.get_running_loop()
        return loop.time() < self.session_ended_at + self.hold_s

    def job_ended(self, item: QueuedJob) -> None:
        """The runner finished ``item``: a Session's hold starts now."""
        if item.session and item.session == self.session:
            self.session_ended_at = asyncio.get_running_loop().time()

    async def get(self) -> QueuedJob:
        while True:
            item = self._next() if self._items else None
            if item is not None:
                return item
            self._nonempty.clear()
            if not self._items:
                await self._nonempty.wait()
                continue
            remaining = self.session_ended_at + self.hold_s - asyncio.get_running_loop().time()
            try:  # holding for the Session: wake at its next job or when the hold runs out
                await asyncio.wait_for(self._nonempty.wait(), max(remaining, 0.0))
            except asyncio.TimeoutError:
                self.session = ""

    def get_nowait(self) -> QueuedJob:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def waiting(self) -> list[QueuedJob]:
        """The jobs in the queue, first to run first (a Session's ahead of the others)."""
        mine = [i for i in self._items if self.session and i.session == self.session]
        return mine + [i for i in self._items if not (self.session and i.session == self.session)]


@dataclass
class SimulatedQPU:
    name: str
    info: DeviceInfo
    queue: JobQueue = field(default_factory=JobQueue)
    running: QueuedJob | None = None
    running_since: float | None = None
    # Exponential moving average of job run time: what a queued job without a prediction is
    # expected to take.
    ema_run_s: float = 1.0
    # ... and of measured over predicted run time: a prediction in this QPU's own seconds.
    ema_ratio: float = 1.0
    predicted_runs: int = 0
    jobs_done: int = 0
    busy_s: float = 0.0
    online: bool = True
    # Other users' jobs waiting on a real QPU (IBM's status().pending_jobs); we cannot see them
    # in our queue, but a job placed there waits for them.
    external_pending: int = 0
    # (end time, seconds) of the runs of the last hour, for load balancing (fleet.yaml scheduler:)
    recent_runs: deque = field(default_factory=deque)

    @property
    def num_qubits(self) -> int:
        return self.info.num_qubits

    @property
    def family(self) -> str:
        return self.info.family

    def queue_length(self) -> int:
        return self.queue.qsize() + (1 if self.running else 0) + self.external_pending

    def job_seconds(self, predicted_s: float | None) -> float:
        """What a job predicted to take ``predicted_s`` will hold this QPU: the prediction in
        its measured seconds (times the measured-over-predicted ratio), or its mean job."""
        if predicted_s is None:
            return self.ema_run_s
        return predicted_s * self.ema_ratio

    def _running_left_s(self) -> float:
        if self.running is None or self.running_since is None:
            return 0.0
        expected = self.job_seconds(self.running.predicted_s)
        return max(0.0, expected - (time.time() - self.running_since))

    def expected_wait_s(self) -> float:
        wait = sum(self.job_seconds(item.predicted_s) for item in self.queue.waiting())
        return wait + self.external_pending * self.ema_run_s + self._running_left_s()

    def position_of(self, job_id: str) -> tuple[int, float] | None:
        """(jobs ahead, estimated seconds until it starts) of a job waiting in this queue."""
        waiting = [item for item in self.queue.waiting() if not item.job.state.final]
        ids = [item.job.id for item in waiting]
        if job_id not in ids:
            return None
        ahead = ids.index(job_id)
        start = sum(self.job_seconds(item.predicted_s) for item in waiting[:ahead])
        return ahead, start + self._running_left_s()

    def fail_waiting(self, reason: str) -> None:
        """The QPU leaves the fleet: the job on it and every job in its queue fail with why."""
        items = [self.running] if self.running is not None else []
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        for item in items:
            if not item.done.done():
                item.done.set_exception(RuntimeError(reason))

    def record_run(self, seconds: float, predicted_s: float | None = None) -> None:
        self.jobs_done += 1
        self.busy_s += seconds
        self.recent_runs.append((time.time(), seconds))
        self.ema_run_s = seconds if self.jobs_done == 1 else 0.7 * self.ema_run_s + 0.3 * seconds
        if predicted_s is not None and predicted_s > 0:
            # Bounded: one run that stalled (or a prediction of ~0) must not ruin the rest.
            ratio = min(max(seconds / predicted_s, 0.01), 100.0)
            self.predicted_runs += 1
            first = self.predicted_runs == 1
            self.ema_ratio = ratio if first else 0.7 * self.ema_ratio + 0.3 * ratio

    def recent_busy_s(self, window_s: float = BALANCE_WINDOW_S) -> float:
        """Seconds this QPU was busy (our jobs and background ones) in the last ``window_s``, the
        running job included."""
        now = time.time()
        start = now - window_s
        while self.recent_runs and self.recent_runs[0][0] <= start:
            self.recent_runs.popleft()
        busy = sum(min(seconds, end - start) for end, seconds in self.recent_runs)
        if self.running is not None and self.running_since is not None:
            busy += now - max(self.running_since, start)
        return busy

    def status(self) -> DeviceStatus:
        return DeviceStatus(
            **msgspec.structs.asdict(self.info),
            online=self.online,
            queue_length=self.queue_length(),
            expected_wait_s=round(self.expected_wait_s(), 3),
            jobs_done=self.jobs_done,
            busy_s=round(self.busy_s, 3),
            running=self.running.job.id if self.running else None,
        )


# Runs a queued job on the named QPU.
Executor = Callable[[str, QueuedJob], Awaitable[Any]]
OnStart = Callable[[JobRecord], None]


async def qpu_runner(qpu: SimulatedQPU, execute: Executor, on_start: OnStart) -> None:
    """Take jobs from the QPU's queue in order and run them one at a time, forever."""
    while True:
        item: QueuedJob = await qpu.queue.get()
        if item.job.state.final or item.done.done():
            continue  # cancelled while it waited
        qpu.running, qpu.running_since = item, time.time()
        if item.background_s is not None:
            await asyncio.sleep(item.background_s)
            # Counted like any job: the wait estimate then reflects the shared QPU's real mix.
            qpu.record_run(item.background_s)
            qpu.running, qpu.running_since = None, None
            item.done.set_result(None)
            continue
        try:
            on_start(item.job)
            t0 = time.perf_counter()
            result = await execute(qpu.name, item)
            qpu.record_run(time.perf_counter() - t0, item.predicted_s)
            item.job.worker = getattr(result, "worker", None) or item.job.worker
            if not item.done.done():
                item.done.set_result(result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the job fails, the QPU goes on
            if not item.done.done():
                item.done.set_exception(exc)
        finally:
            qpu.running, qpu.running_since = None, None
            qpu.queue.job_ended(item)


async def background_arrivals(
    qpu: SimulatedQPU, jobs_per_hour: float, mean_runtime_s: float, seed: int = 0
) -> None:
    """Other users' jobs on a simulated QPU: Poisson arrivals, exponential run times, forever.

    They queue in FIFO order with ours, so our jobs see the waits a shared QPU has.
    """
    import random

    from kernel_server.core.jobs import new_id

    rng = random.Random(f"{seed}:{qpu.name}")
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(rng.expovariate(jobs_per_hour / 3600.0))
        job = JobRecord(new_id("bg"), workflow_id="", kind="background", qpu=qpu.name)
        qpu.queue.put_nowait(
            QueuedJob(
                job,
                b"",
                0,
                None,
                loop.create_future(),
                background_s=rng.expovariate(1.0 / mean_runtime_s),
            )
        )
