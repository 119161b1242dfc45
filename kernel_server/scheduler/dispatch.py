"""The orchestrator's quantum scheduling: notebook QPU jobs placed by the online scheduler.

A QPU job whose estimates are ready asks ``OnlineDispatcher.place`` and gets the QPU it is to be
queued on. The decision is ``scheduler.online``'s, the code the cloud simulator measures: jobs that
arrive within ``GATHER_S`` share one decision (a cell's parallel steps), or it runs at once when no
other QPU job is being estimated (a lone job does not wait for company that cannot come). A job is
bound to a QPU only when that QPU's queue clears within ``COMMIT_AHEAD_S``; until then it stays in
the dispatcher and is re-planned whenever the fleet changes (``kick``: a QPU finished a job) and,
as a safety net for waits that only shrink with time, every ``POLL_S`` while jobs wait. Jobs of
different preferences (a workflow's ``--priority``) have their own pending sets over the same fleet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kernel_server.scheduler.cycle import QPUView
from kernel_server.scheduler.online import OnlineScheduler

# A QPU a job may not use (its configuration excludes it) gets these estimates: it never wins.
_EXCLUDED_RUNTIME = 1e7
GATHER_S = 0.25
# Notebook jobs on the simulated fleet take well under a minute; a QPU whose queue clears within
# this gets the job in its queue now (the orchestrator's queues are its own, nothing overtakes).
COMMIT_AHEAD_S = 60.0
POLL_S = 1.0


class OnlineDispatcher:
    def __init__(
        self,
        fleet: Callable[[], Sequence[QPUView]],
        seed: int = 0,
        balance: float | str | None = None,  # OnlineScheduler.balance
        estimating: Callable[[], int] | None = None,
        gather_s: float = GATHER_S,
        commit_ahead_s: float = COMMIT_AHEAD_S,
    ) -> None:
        # How many QPU jobs are still being estimated: those may join the next decision.
        self.estimating = estimating or (lambda: 1)
        self.fleet = fleet
        self.seed = seed
        self.balance = balance
        self.gather_s = gather_s
        self.commit_ahead_s = commit_ahead_s
        self.schedulers: dict[str, OnlineScheduler] = {}
        self.futures: dict[str, asyncio.Future] = {}
        self.cycles = 0  # decisions taken
        self._timer: asyncio.TimerHandle | None = None
        self._lock = asyncio.Lock()
        self._t0 = time.monotonic()

    async def place(
        self,
        job_id: str,
        num_qubits: int,
        estimates: dict[str, tuple[float, float]],
        preference: Any,
    ) -> str:
        """The QPU this job is to be queued on, once the online scheduler binds it."""
        views = list(self.fleet())
        fidelity = np.zeros(len(views))
        runtime = np.full(len(views), _EXCLUDED_RUNTIME)
        for k, view in enumerate(views):
            if view.name in estimates:
                fidelity[k], runtime[k] = estimates[view.name]
        widest = max((v.num_qubits for v in views), default=0)
        if num_qubits > widest:
            raise RuntimeError(
                f"job {job_id} needs {num_qubits} qubits but the largest QPU of the fleet has "
                f"{widest}; reduce the circuit's width or cut it"
            )
        key = repr(preference)
        if key not in self.schedulers:
            self.schedulers[key] = OnlineScheduler(
                preference=preference,
                commit_ahead_s=self.commit_ahead_s,
                balance=self.balance,
                seed=self.seed,
            )
        scheduler = self.schedulers[key]
        scheduler.add(job_id, num_qubits, fidelity, runtime, self._now())
        future = asyncio.get_running_loop().create_future()
        self.futures[job_id] = future
        if self.estimating() == 0:
            self.kick()
        else:
            self._later(self.gather_s)
        try:
            return await future
        finally:  # cancelled or failed while it waited: it leaves the pending set
            self.futures.pop(job_id, None)
            scheduler.pending.pop(job_id, None)

    def kick(self) -> None:
        """Something changed (a job arrived alone, a QPU freed): decide now."""
        self._later(0.0)

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _later(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self._timer is not None and self._timer.when() <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(due, lambda: loop.create_task(self._decide()))

    async def _decide(self) -> None:
        self._timer = None
        async with self._lock:  # one decision at a time
            for scheduler in self.schedulers.values():
                if not scheduler.pending:
                    continue
                # In the event loop that owns the queues and the pending sets: a decision takes
                # a millisecond or two (tens of ms where 8 or more jobs wait and NSGA-II runs),
                # and a thread would race ``place`` over the pending set.
                views = list(self.fleet())
                try:
                    starts = scheduler.step(views, self._now())
                except Exception as exc:  # a failed decision fails its jobs, not the orchestrator
                    for job_id in list(scheduler.pending):
                        future = self.futures.get(job_id)
                        if future is not None and not future.done():
                            future.set_exception(exc)
                    continue
                self.cycles += 1
                for job_id, column in starts:
                    future = self.futures.get(job_id)
                    if future is not None and not future.done():
                        future.set_result(views[column].name)
        if any(s.pending for s in self.schedulers.values()):
            self._later(POLL_S)
