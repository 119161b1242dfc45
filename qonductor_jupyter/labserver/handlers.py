"""REST handlers under ``<base_url>/qonductor/api/``: HTTP in, JSON out; a manager does the work."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from .manager import ManagerError, QonductorManager

WORKFLOW_ID = r"(?P<workflow_id>[A-Za-z0-9_.:-]{1,128})"


class QonductorHandler(APIHandler):
    manager: QonductorManager

    def initialize(self, manager: QonductorManager) -> None:
        self.manager = manager

    async def _reply(self, work: Callable[[], Awaitable[msgspec.Struct]]) -> None:
        """The work's reply as JSON (the shapes of ``core.status``, which the lab extension's
        generated types describe), or ``{"message": ...}`` with the error's HTTP status."""
        try:
            body = msgspec.json.encode(await work())
        except ManagerError as exc:
            self.set_status(exc.status)
            body = json.dumps({"message": exc.message}).encode()
        self.set_header("Content-Type", "application/json")
        self.finish(body)

    def _int_argument(self, name: str, default: int) -> int:
        raw = self.get_argument(name, str(default))
        try:
            return int(raw)
        except ValueError:
            raise tornado.web.HTTPError(400, f"{name} must be an integer, not {raw!r}") from None


class FleetHandler(QonductorHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        await self._reply(self.manager.fleet)


class WorkflowsHandler(QonductorHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        limit = self._int_argument("limit", 50)
        await self._reply(lambda: self.manager.workflows(limit))


class WorkflowHandler(QonductorHandler):
    @tornado.web.authenticated
    async def get(self, workflow_id: str) -> None:
        await self._reply(lambda: self.manager.workflow(workflow_id))


class CancelHandler(QonductorHandler):
    @tornado.web.authenticated
    async def post(self, workflow_id: str) -> None:
        await self._reply(lambda: self.manager.cancel(workflow_id))


class EventsHandler(QonductorHandler):
    """Long poll: answers when the orchestrator published something new, or at the timeout."""

    @tornado.web.authenticated
    async def get(self) -> None:
        after = self._int_argument("after", -1)
        timeout = float(self._int_argument("timeout", 25))
        await self._reply(lambda: self.manager.wait_for_event(after, timeout))


def handlers(base_url: str, manager: QonductorManager) -> list[tuple[str, type, dict[str, Any]]]:
    api = url_path_join(base_url, "qonductor", "api")
    kwargs = {"manager": manager}
    return [
        (url_path_join(api, "fleet"), FleetHandler, kwargs),
        (url_path_join(api, "workflows"), WorkflowsHandler, kwargs),
        (url_path_join(api, "workflows", WORKFLOW_ID), WorkflowHandler, kwargs),
        (url_path_join(api, "workflows", WORKFLOW_ID, "cancel"), CancelHandler, kwargs),
        (url_path_join(api, "events"), EventsHandler, kwargs),
    ]
