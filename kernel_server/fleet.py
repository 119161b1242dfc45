"""The simulated QPU fleet as the orchestrator sees it: one FIFO queue and one runner per QPU.

A QPU runs one job at a time, like the real thing; the job itself executes on Aer with the device's
noise in a QPU worker process. Queue and run times are measured wall-clock times of this process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .jobs import JobRecord


@dataclass
class QueuedJob:
    job: JobRecord
    transpiled: bytes
    shots: int
    seed: int | None
    done: asyncio.Future
    mitigation: str | None = None  # the chosen plan's stack; None runs the transpiled circuits
    circuits: bytes | None = None  # the step's own circuits, which a mitigation stack rebuilds


@dataclass
class SimulatedQPU:
    name: str
    info: dict[str, Any]
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    running: QueuedJob | None = None
    running_since: float | None = None
    # Exponential moving average of job run time: what the next queued job is expected to take.
    ema_run_s: float = 1.0
    jobs_done: int = 0
    busy_s: float = 0.0
    online: bool = True

    @property
    def num_qubits(self) -> int:
        return int(self.info["num_qubits"])

    @property
    def family(self) -> str:
        return str(self.info["family"])

    def queue_length(self) -> int:
        return self.queue.qsize() + (1 if self.running else 0)

    def expected_wait_s(self) -> float:
        wait = self.queue.qsize() * self.ema_run_s
        if self.running and self.running_since is not None:
            wait += max(0.0, self.ema_run_s - (time.time() - self.running_since))
        return wait

    def position_of(self, job_id: str) -> tuple[int, float] | None:
        """(jobs ahead, estimated seconds until it starts) of a job waiting in this queue."""
        # asyncio.Queue has no public way to look inside; its deque is read, never changed.
        waiting = [item.job.id for item in self.queue._queue if not item.job.state.final]  # type: ignore[attr-defined]
        if job_id not in waiting:
            return None
        ahead = waiting.index(job_id)
        start = ahead * self.ema_run_s
        if self.running and self.running_since is not None:
            start += max(0.0, self.ema_run_s - (time.time() - self.running_since))
        return ahead, start

    def record_run(self, seconds: float) -> None:
        self.jobs_done += 1
        self.busy_s += seconds
        self.ema_run_s = seconds if self.jobs_done == 1 else 0.7 * self.ema_run_s + 0.3 * seconds

    def status(self) -> dict[str, Any]:
        return {
            **self.info,
            "online": self.online,
            "queue_length": self.queue_length(),
            "expected_wait_s": round(self.expected_wait_s(), 3),
            "jobs_done": self.jobs_done,
            "busy_s": round(self.busy_s, 3),
            "running": self.running.job.id if self.running else None,
        }


# (QPU, transpiled circuits, shots, seed, mitigation stack or None, original circuits or None)
Executor = Callable[[str, bytes, int, int | None, str | None, bytes | None], Awaitable[Any]]
OnStart = Callable[[JobRecord], None]


async def qpu_runner(qpu: SimulatedQPU, execute: Executor, on_start: OnStart) -> None:
    """Take jobs from the QPU's queue in order and run them one at a time, forever."""
    while True:
        item: QueuedJob = await qpu.queue.get()
        if item.job.state.final or item.done.done():
            continue  # cancelled while it waited
        qpu.running, qpu.running_since = item, time.time()
        try:
            on_start(item.job)
            t0 = time.perf_counter()
            result = await execute(
                qpu.name, item.transpiled, item.shots, item.seed, item.mitigation, item.circuits
            )
            qpu.record_run(time.perf_counter() - t0)
            if not item.done.done():
                item.done.set_result(result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the job fails, the QPU goes on
            if not item.done.done():
                item.done.set_exception(exc)
        finally:
            qpu.running, qpu.running_since = None, None
