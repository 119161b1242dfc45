"""What the JupyterLab sidebar asks of the orchestrator, over the kernel's signed ZeroMQ protocol.

The REST handlers only translate HTTP; this manager does the work. The ZeroMQ client blocks, so
every request runs on one worker thread (the client serialises requests anyway) and Jupyter
server's event loop never waits on a socket. A request for the fleet or the workflows starts the
orchestrator when none is running, exactly as the first ``%%qonductor`` cell would; the events long
poll never does, so merely opening JupyterLab (whose status bar polls) starts nothing.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from kernel_server.core.status import (
    CancelView,
    EventsView,
    FleetView,
    WorkflowDetail,
    WorkflowsView,
)
from kernel_server.wire.errors import RemoteError
from kernel_server.wire.messages import (
    Cancel,
    Event,
    GetFleet,
    GetStatus,
    ListWorkflows,
    Message,
    R,
    Request,
    reply_type,
)

from ..client import Client, OrchestratorUnavailable, Subscription, pid_alive, read_connection


class ManagerError(Exception):
    """A request the manager cannot serve; ``status`` is the HTTP status it maps to."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _http_error(exc: Exception) -> ManagerError:
    if isinstance(exc, OrchestratorUnavailable):
        return ManagerError(503, f"Qonductor orchestrator unavailable: {exc}")
    if isinstance(exc, RemoteError):
        if exc.type_name == "UnknownWorkflow":
            return ManagerError(404, exc.message)
        if exc.type_name in ("UserError", "ValueError", "ConfigError"):
            return ManagerError(400, exc.message)
        return ManagerError(500, f"{exc.type_name}: {exc.message}")
    return ManagerError(500, f"{type(exc).__name__}: {exc}")


class QonductorManager:
    """Fleet, workflows, cancellation and an event counter for the sidebar's long poll."""

    def __init__(self, client: Client | None = None, request_timeout: float = 30.0):
        self.client = client or Client(autostart=True)
        self.request_timeout = request_timeout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qonductor-lab")
        # Events seen since this manager started; the sidebar long-polls on it.
        self.seq = 0
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscription: Subscription | None = None
        self._subscribed_to: str | None = None

    # ---------------------------------------------------------------- plumbing
    async def _request(self, message: Message) -> Message:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._pool, lambda: self.client.request(message, timeout=self.request_timeout)
            )
        except Exception as exc:
            raise _http_error(exc) from exc

    async def _ask(self, message: Request[R]) -> R:
        """The orchestrator's reply to ``message``, of the type the request promises."""
        reply = await self._request(message)
        if not isinstance(reply, reply_type(message)):
            raise ManagerError(500, f"{message.op}: the orchestrator answered {reply.op!r}")
        return reply  # type: ignore[return-value]  # the isinstance above is R's

    def _follow_orchestrator(self) -> bool:
        """Subscribe to the running orchestrator's events, if one runs; never start one.

        An orchestrator appearing, restarting (new endpoints) or going away counts as an event.
        """
        info = read_connection()
        if info is not None and pid_alive(info.pid):
            if self._subscribed_to != info.pub:
                if self._subscription is not None:
                    self._subscription.close()
                self._subscription = Subscription(info, self._on_event)
                self._subscribed_to = info.pub
                self._on_event(None)
            return True
        if self._subscription is not None:
            self._subscription.close()
            self._subscription, self._subscribed_to = None, None
            self._on_event(None)
        return False

    def _on_event(self, event: Event | None) -> None:  # on the subscription's thread
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        self.seq += 1
        if self._changed is not None:
            self._changed.set()

    # ---------------------------------------------------------------- queries
    async def fleet(self) -> FleetView:
        fleet = await self._ask(GetFleet())
        return FleetView(devices=fleet.devices, updated_at=time.time())

    async def workflows(self, limit: int = 50) -> WorkflowsView:
        if not 1 <= limit <= 1000:
            raise ManagerError(400, f"limit must be between 1 and 1000, not {limit}")
        rows = (await self._ask(ListWorkflows(limit=limit))).workflows
        return WorkflowsView(
            workflows=rows,
            running_jobs=sum(w.jobs_running for w in rows),
            queued_jobs=sum(w.jobs_queued for w in rows),
        )

    async def workflow(self, workflow_id: str) -> WorkflowDetail:
        reply = await self._ask(GetStatus(workflow_id=workflow_id))
        # Not the outputs: pickled values mean nothing to a browser.
        return WorkflowDetail(
            workflow_id=reply.workflow_id,
            state=reply.state,
            error=reply.error,
            steps=reply.steps,
            info=reply.info,
        )

    async def cancel(self, workflow_id: str) -> CancelView:
        reply = await self._ask(Cancel(workflow_id=workflow_id))
        return CancelView(workflow_id=workflow_id, state=reply.state, cancelled=reply.cancelled)

    async def wait_for_event(self, after: int, timeout: float) -> EventsView:
        """Return as soon as something newer than event number ``after`` happened, else at
        ``timeout`` s, with whether an orchestrator is running."""
        self._loop = loop = asyncio.get_running_loop()
        if self._changed is None:
            self._changed = asyncio.Event()
        deadline = loop.time() + max(0.0, min(timeout, 60.0))
        while True:
            self._changed.clear()
            running = await loop.run_in_executor(None, self._follow_orchestrator)
            left = deadline - loop.time()
            if self.seq > after or left <= 0:
                return EventsView(seq=self.seq, orchestrator=running)
            # Look again for an orchestrator that starts (or dies) meanwhile.
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5 if not running else 5))
            except asyncio.TimeoutError:
                pass

    def close(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None
        self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
