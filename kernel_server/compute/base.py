"""What the orchestrator asks of a compute backend, and which backend it gets.

Two kinds of work leave the orchestrator's event loop: classical and hybrid workflow steps, and the
noisy simulation of QPU jobs on simulated devices. The embedded default (``local.py``) runs both on
local process pools; with a Dask scheduler address (``dask.py``) both go to its workers instead,
while estimates and resource plans stay on the local QPU pool. Either way the classical scheduler's
filter-then-score picks the node a step runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kernel_server.compute.dask import DaskCompute
from kernel_server.compute.local import LocalCompute
from kernel_server.core.status import ComputeStatus
from kernel_server.scheduler.classical_nodes import ClassicalNode, ClassicalRequest
from kernel_server.tasks.step import StepSpec


class Compute(Protocol):
    """Where steps, plans and simulations run (the orchestrator's ``compute``)."""

    async def start(self, router_endpoint: str, home: Path | None = None) -> None: ...

    async def place(self, request: ClassicalRequest, kind: str) -> tuple[ClassicalNode, bool]: ...

    def release(
        self, node: ClassicalNode, request: ClassicalRequest, reserved: bool, kind: str
    ) -> None: ...

    async def run_step(self, spec: StepSpec, node: ClassicalNode) -> Any: ...

    async def plan(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def simulate(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def warm_up(self, devices: list[str]) -> None: ...

    def describe(self) -> ComputeStatus: ...

    async def close(self) -> None: ...


COMPUTE_BACKENDS: dict[str, type[LocalCompute]] = {"local": LocalCompute, "dask": DaskCompute}


def make_compute(cluster: str | None, step_workers: int, qpu_workers: int) -> Compute:
    """The embedded pools, or Dask when ``cluster`` names a scheduler (tcp://HOST:8786)."""
    if not cluster or cluster == "local":
        return LocalCompute(step_workers, qpu_workers)
    return DaskCompute(cluster, step_workers, qpu_workers)
