"""The orchestrator's quantum scheduling: notebook QPU jobs placed in cycles of the real scheduler.

A QPU job whose estimates are ready asks ``CycleDispatcher.place``. The dispatcher gathers the jobs
that arrive within ``INTERACTIVE_TRIGGERS.gather_s`` (a cell's parallel steps share one cycle),
but no longer than some job may still join: when no other QPU job is being estimated, the cycle
runs at once, so a lone job does not wait for company that cannot come. The cycle is
``cycle.run_cycle`` with the ``qonductor`` policy, in a thread (NSGA-II must not block the event
loop); it answers each job with its QPU. Jobs of different preferences (a workflow's
``--priority``) are placed in separate cycles, one after another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel_server.scheduler.cycle import INTERACTIVE_TRIGGERS, QPUView, Triggers, run_cycle
from kernel_server.scheduler.policies import PolicyState

# A QPU a job may not use (its configuration excludes it) gets these estimates: every schedule
# that uses it is dominated by the same schedule without it, so it never reaches the front.
_EXCLUDED_RUNTIME = 1e7


@dataclass
class PlacementRequest:
    job_id: str
    num_qubits: int
    estimates: dict[str, tuple[float, float]]  # QPU name -> (fidelity, seconds)
    preference: Any
    future: asyncio.Future


class CycleDispatcher:
    def __init__(
        self,
        fleet: Callable[[], Sequence[QPUView]],
        triggers: Triggers = INTERACTIVE_TRIGGERS,
        seed: int = 0,
        balance: float | None = None,
        estimating: Callable[[], int] | None = None,
    ) -> None:
        # How many QPU jobs are still being estimated: those may join the next cycle.
        self.estimating = estimating or (lambda: 1)
        self.fleet = fleet
        self.triggers = triggers
        self.seed = seed
        self.pending: list[PlacementRequest] = []
        self.state = PolicyState(extra={"balance": balance})
        self.cycles = 0
        self._timer: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    async def place(
        self,
        job_id: str,
        num_qubits: int,
        estimates: dict[str, tuple[float, float]],
        preference: Any,
    ) -> str:
        """The QPU chosen for this job by the next cycle."""
        future = asyncio.get_running_loop().create_future()
        self.pending.append(PlacementRequest(job_id, num_qubits, estimates, preference, future))
        self._schedule()
        return await future

    def _schedule(self) -> None:
        """A cycle for the pending jobs: at once when the queue is full or nobody else can join,
        else after the gathering window."""
        if self._timer is None or self._timer.done():
            self._wake = asyncio.Event()
            self._timer = asyncio.get_running_loop().create_task(
                self._cycle_after(self.triggers.gather_s or 0.0)
            )
        if len(self.pending) >= self.triggers.queue_size or self.estimating() == 0:
            self._wake.set()

    async def _cycle_after(self, delay: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.TimeoutError:
            pass
        try:
            await self._cycle()
        finally:
            if self.pending:  # arrived while this cycle ran: they get the next one
                asyncio.get_running_loop().call_soon(self._schedule)

    async def _cycle(self) -> None:
        async with self._lock:
            batch, self.pending = self.pending, []
            groups: dict[str, list[PlacementRequest]] = {}
            for request in batch:
                groups.setdefault(repr(request.preference), []).append(request)
            for requests in groups.values():
                # The fleet is read here, in the event loop that owns the queues; only the
                # optimisation runs in the thread.
                views = list(self.fleet())
                try:
                    placed = await asyncio.to_thread(self._run, requests, views)
                except Exception as exc:  # a failed cycle fails its jobs, not the orchestrator
                    for r in requests:
                        if not r.future.done():
                            r.future.set_exception(exc)
                    continue
                for r in requests:
                    if r.future.done():
                        continue
                    if r.job_id in placed:
                        r.future.set_result(placed[r.job_id])
                    else:
                        r.future.set_exception(RuntimeError(f"no QPU can run job {r.job_id} now"))

    def _run(self, requests: list[PlacementRequest], views: list[QPUView]) -> dict[str, str]:
        names = [v.name for v in views]
        runtime = np.full((len(requests), len(views)), _EXCLUDED_RUNTIME)
        fidelity = np.zeros((len(requests), len(views)))
        for i, r in enumerate(requests):
            for j, name in enumerate(names):
                if name in r.estimates:
                    fidelity[i, j], runtime[i, j] = r.estimates[name]
        outcome = run_cycle(
            [r.job_id for r in requests],
            [r.num_qubits for r in requests],
            runtime,
            fidelity,
            views,
            policy="qonductor",
            state=self.state,
            preference=requests[0].preference,
            seed=self.seed + self.cycles,
        )
        self.cycles += 1
        return outcome.placed
