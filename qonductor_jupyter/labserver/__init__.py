"""The jupyter_server extension behind the Qonductor sidebar."""

from __future__ import annotations

from typing import Any

from .manager import QonductorManager


def load(server_app: Any) -> None:
    from .handlers import handlers

    manager = QonductorManager()
    web_app = server_app.web_app
    web_app.add_handlers(".*$", handlers(web_app.settings["base_url"], manager))
    web_app.settings["qonductor_manager"] = manager
    server_app.log.info("Qonductor sidebar API at %sqonductor/api/", web_app.settings["base_url"])
