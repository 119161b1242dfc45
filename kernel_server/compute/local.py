"""The embedded compute: process pools on this machine, one for workflow steps, one for QPU work.

Classical and hybrid steps run on the step pool (a shared orchestrator's users each on a pool of
their own, confined: security/sandbox.py); transpilation, estimates, resource plans and the noisy
simulation of QPU jobs on simulated devices run on the QPU pool. A pool whose process died is
replaced and the task run once more. The classical scheduler's filter-then-score picks the node a
step runs on; here that is this machine (``dask.py`` adds the workers of a Dask cluster).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from kernel_server.core.lifeline import start_lifeline
from kernel_server.core.status import ComputeStatus
from kernel_server.scheduler.classical import ClassicalCluster, NoFeasibleNode, schedule_classical
from kernel_server.scheduler.classical_nodes import (
    ClassicalNode,
    ClassicalRequest,
    NodeUsage,
    local_node,
)
from kernel_server.security.sandbox import Sandbox
from kernel_server.tasks import bootstrap
from kernel_server.tasks.step import StepSpec, run_step

log = logging.getLogger("kernel_server.compute.local")


class LocalCompute:
    """Process pools on this machine: one for steps, one for QPU work."""

    name = "local"

    def __init__(self, step_workers: int, qpu_workers: int):
        self.step_workers = step_workers
        self.qpu_workers = qpu_workers
        self.cluster = ClassicalCluster([])

    async def start(self, router_endpoint: str, home: Path | None = None) -> None:
        """Start the pools. ``home``: the orchestrator's folder, which a shared orchestrator's
        users' step processes must not reach (their scratch folders are made under it)."""
        self.loop = asyncio.get_running_loop()
        self._router = router_endpoint
        self._home = Path(home) if home is not None else None
        # "qpu", "step" (the owner's steps) and "step:<user>" (a shared orchestrator's user's
        # steps, confined: security/sandbox.py), each made on first use and after a crash.
        self.pools: dict[str, ProcessPoolExecutor] = {}
        for which in ("step", "qpu"):  # started now, so that warm_up and the first step find them
            self._pool(which)
        self.cluster = ClassicalCluster([local_node()])
        self.pool_rebuilds = 0

    @property
    def step_pool(self) -> ProcessPoolExecutor:
        return self._pool("step")

    @property
    def qpu_pool(self) -> ProcessPoolExecutor:
        return self._pool("qpu")

    def _pool(self, which: str) -> ProcessPoolExecutor:
        pool = self.pools.get(which)
        if pool is None:
            pool = self.pools[which] = self._new_pool(which)
        return pool

    # Every pool's workers get this process's pid for their lifeline: read in the worker, after
    # its slow imports, the parent may already be init (core/lifeline.py).
    def _new_pool(self, which: str) -> ProcessPoolExecutor:
        spawn = multiprocessing.get_context("spawn")  # never fork a process holding zmq sockets
        if which == "qpu":
            return ProcessPoolExecutor(
                self.qpu_workers,
                mp_context=spawn,
                initializer=start_lifeline,
                initargs=(os.getpid(),),
            )
        user = which.partition(":")[2]
        return ProcessPoolExecutor(
            self.step_workers,
            mp_context=spawn,
            initializer=bootstrap.init_worker,
            initargs=(self._router, os.getpid(), self._sandbox(user) if user else None),
        )

    def _sandbox(self, user: str) -> Sandbox:
        from kernel_server.core.paths import runtime_dir
        from kernel_server.wire.connection import connection_file_path

        if self._home is None:
            raise RuntimeError("a user's steps need the orchestrator's home to be confined")
        forbidden = [self._home, runtime_dir(), connection_file_path().parent]
        return Sandbox.for_user(user, self._home / "scratch" / user, forbidden)

    async def _in_pool(self, which: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run on a pool; if one of its processes died (killed, out of memory), every task it
        held fails with BrokenProcessPool: start a fresh pool and run the task once more."""
        pool = self._pool(which)
        try:
            return await self.loop.run_in_executor(pool, fn, *args)
        except BrokenProcessPool:
            if self.pools.get(which) is pool:  # the first task to notice replaces the pool
                log.warning("a %s process died; starting a fresh pool", which)
                pool.shutdown(wait=False, cancel_futures=True)
                del self.pools[which]
                self.pool_rebuilds += 1
            return await self.loop.run_in_executor(self._pool(which), fn, *args)

    def nodes(self) -> list[ClassicalNode]:
        return self.cluster.nodes

    def cluster_for(self, kind: str) -> ClassicalCluster:
        return self.cluster

    async def place(self, request: ClassicalRequest, kind: str) -> tuple[ClassicalNode, bool]:
        """A node for a step of this kind, and whether its share was reserved there.

        NoFeasibleNode only when no node could ever run it (too many cores, no such
        accelerator). When the nodes are merely busy the step still goes to the node that suits
        it best on capacity alone, unreserved: the pool or Dask queues it, and the manager's
        step slots already bound how much runs at once.
        """
        cluster = self.cluster_for(kind)
        try:
            return cluster.place(request).node, True
        except NoFeasibleNode:
            idle = {node.name: NodeUsage() for node in cluster.nodes}
            placement = schedule_classical(request, cluster.nodes, idle, cluster.scoring)
            return placement.node, False

    def release(
        self, node: ClassicalNode, request: ClassicalRequest, reserved: bool, kind: str
    ) -> None:
        if not reserved:
            return
        try:
            self.cluster_for(kind).release(node.name, request)
        except ValueError:  # the node left meanwhile (a Dask worker went away)
            pass

    async def run_step(self, spec: StepSpec, node: ClassicalNode) -> Any:
        # Each user's steps in processes of their own: never one that ran someone else's code.
        which = f"step:{spec.owner}" if spec.owner else "step"
        return await self._in_pool(which, run_step, spec)

    async def plan(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Estimates, plans, the device catalogue: always local (they share its caches)."""
        return await self._in_pool("qpu", fn, *args)

    async def simulate(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A QPU job's noisy execution on a simulated device."""
        return await self._in_pool("qpu", fn, *args)

    def warm_up(self, devices: list[str]) -> None:
        from kernel_server.tasks import qpu

        for _ in range(self.qpu_workers):
            self.loop.run_in_executor(self.qpu_pool, qpu.warm_up, devices)
        for _ in range(self.step_workers):
            self.loop.run_in_executor(self.step_pool, bootstrap.warm_up)

    def describe(self) -> ComputeStatus:
        return ComputeStatus(backend=self.name, nodes=self.cluster.snapshot())

    async def close(self) -> None:
        for pool in list(self.pools.values()):
            # A step may be stuck in user code; do not wait for it, end the workers.
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()
