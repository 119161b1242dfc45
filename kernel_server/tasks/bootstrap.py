"""How a worker process that runs workflow steps starts: its lifeline, the orchestrator's address,
the builtin ``sample``/``estimate``, its sandbox, and the heavy imports done ahead of time.

These functions are handed to process pools and Dask workers by reference (module path and name),
so they stay module-level functions of this module.
"""

from __future__ import annotations

import os
from typing import Any

from kernel_server.tasks.link import connect_to
from kernel_server.tasks.primitives import install_builtin_primitives


def init_worker(
    router_endpoint: str, orchestrator_pid: int | None = None, sandbox: Any = None
) -> None:
    """Process-pool initializer: remember where the orchestrator is; connect lazily. Exit with
    the orchestrator (``orchestrator_pid``: its pid, from the orchestrator itself). A shared
    orchestrator's user's pool passes ``sandbox`` (security.sandbox.Sandbox): the process confines
    itself before it runs any of their code."""
    from kernel_server.core.lifeline import start_lifeline

    start_lifeline(orchestrator_pid)
    configure_link(router_endpoint)
    if sandbox is not None:
        sandbox.enter()


def configure_link(router_endpoint: str) -> None:
    """Point this process's quantum calls at an orchestrator (also used on Dask workers, which
    outlive any one orchestrator and so get no lifeline). No key: each step's calls are signed
    with the capability that step brings (StepSpec.capability)."""
    connect_to(router_endpoint)
    install_builtin_primitives()


def warm_up() -> int:
    """Import the heavy modules once, so the first real step does not pay for them."""
    import qiskit  # noqa: F401

    return os.getpid()
