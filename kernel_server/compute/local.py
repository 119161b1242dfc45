"""Where the orchestrator's CPU work runs: the embedded process pools, or a Dask cluster.

Two kinds of work leave the orchestrator's event loop: classical and hybrid workflow steps, and the
noisy simulation of QPU jobs on simulated devices. The embedded default runs both on local process
pools. With a Dask scheduler address both go to its workers instead (LocalCluster on a laptop, SSH,
Kubernetes, or SLURM/PBS through dask-jobqueue), while estimates and resource plans stay on the
local QPU pool, whose caches (transpilers, noise models) they share.

Either way the classical scheduler's filter-then-score picks the node a step runs on; the nodes
come from the backend (this machine, or the Dask workers with their threads, memory and declared
resources such as GPUs).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from kernel_server.core.lifeline import start_lifeline
from kernel_server.scheduler.classical import ClassicalCluster, NoFeasibleNode, schedule_classical
from kernel_server.scheduler.classical_nodes import (
    ClassicalNode,
    ClassicalRequest,
    NodeUsage,
    local_node,
)
from kernel_server.security.sandbox import Sandbox
from kernel_server.tasks import step as classical

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
            initializer=classical.init_worker,
            initargs=(self._router, os.getpid(), self._sandbox(user) if user else None),
        )

    def _sandbox(self, user: str) -> Sandbox:
        from kernel_server.wire.protocol import connection_file_path, runtime_dir

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

    async def run_step(self, spec: classical.StepSpec, node: ClassicalNode) -> Any:
        # Each user's steps in processes of their own: never one that ran someone else's code.
        which = f"step:{spec.owner}" if spec.owner else "step"
        return await self._in_pool(which, classical.run_step, spec)

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
            self.loop.run_in_executor(self.step_pool, classical.warm_up)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "nodes": self.cluster.snapshot()}

    async def close(self) -> None:
        for pool in list(self.pools.values()):
            # A step may be stuck in user code; do not wait for it, end the workers.
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()


def _orchestrator_link_plugin(router_endpoint: str) -> Any:
    """A Dask worker plugin that points every worker's ``sample()`` calls at this orchestrator
    (also workers that join or restart later). It carries no key: each task brings the
    capability of its own workflow (StepSpec.capability)."""
    from distributed import WorkerPlugin

    class OrchestratorLink(WorkerPlugin):
        name = "qonductor-orchestrator-link"

        def setup(self, worker: Any) -> None:
            classical.configure_link(router_endpoint)

    return OrchestratorLink()


def dask_nodes(workers: dict[str, dict[str, Any]]) -> list[ClassicalNode]:
    """Classical nodes from a Dask scheduler's worker table (``scheduler_info()["workers"]``)."""
    nodes = []
    for address, w in sorted(workers.items()):
        resources = {k.lower(): int(v) for k, v in (w.get("resources") or {}).items()}
        nodes.append(
            ClassicalNode(
                name=address,
                cores=max(1, int(w.get("nthreads") or 1)),
                memory_gb=max(0.1, (w.get("memory_limit") or 2**30) / 2**30),
                accelerators=resources,
                labels={
                    "kind": "dask",
                    "host": str(w.get("host", "")),
                    "dask-name": str(w.get("name", "")),
                },
                address=address,
            )
        )
    return nodes


class DaskCompute(LocalCompute):
    """Classical steps and simulated-QPU executions on a Dask cluster.

    Quantum and hybrid steps (the ones that call ``sample()``) stay on the local step pool: they
    spend their time waiting for QPU jobs, and on Dask such a wait would hold a worker thread the
    QPU job itself may need (a deadlock once every thread waits). Estimates and plans stay local
    too, next to their caches. A task whose worker is lost is run again on another worker by the
    Dask scheduler (up to its ``allowed-failures``); ``retries`` covers a task that fails outright.
    """

    name = "dask"
    RETRIES = 2

    def __init__(self, address: str, step_workers: int, qpu_workers: int):
        super().__init__(step_workers, qpu_workers)
        self.address = address
        self._known_workers: tuple[str, ...] = ()

    async def start(self, router_endpoint: str, home: Path | None = None) -> None:
        from distributed import Client

        await super().start(router_endpoint, home)
        self.local = self.cluster
        try:
            self.client = await Client(self.address, asynchronous=True, timeout="20s")
        except (OSError, asyncio.TimeoutError) as exc:
            await super().close()
            raise RuntimeError(
                f"cannot reach the Dask scheduler at {self.address}: {exc}; start one with "
                "`dask scheduler` (and workers with `dask worker ADDRESS --nthreads 1`), or drop "
                "--cluster to use the local pools"
            ) from exc
        await self.client.register_plugin(_orchestrator_link_plugin(router_endpoint))
        self.cluster = ClassicalCluster([])
        await self._sync_nodes()
        log.info("classical and simulation work goes to the Dask cluster at %s", self.address)

    def cluster_for(self, kind: str) -> ClassicalCluster:
        return self.cluster if kind == "classical" else self.local

    async def _sync_nodes(self) -> None:
        """Rebuild the node list when Dask workers came or went."""
        identity = await self.client.scheduler.identity(n_workers=-1)
        workers = identity.get("workers", {})
        if tuple(sorted(workers)) == self._known_workers:
            return
        self._known_workers = tuple(sorted(workers))
        old = self.cluster
        self.cluster = ClassicalCluster(dask_nodes(workers), old.scoring)
        log.info("Dask workers: %s", ", ".join(self._known_workers) or "none")

    def nodes(self) -> list[ClassicalNode]:
        return self.cluster.nodes + self.local.nodes

    async def place(self, request: ClassicalRequest, kind: str) -> tuple[ClassicalNode, bool]:
        if kind == "classical":
            await self._sync_nodes()
            if not self.cluster.nodes:
                raise NoFeasibleNode(
                    f"the Dask cluster at {self.address} has no workers", request, {}
                )
        return await super().place(request, kind)

    async def run_step(self, spec: classical.StepSpec, node: ClassicalNode) -> Any:
        if spec.kind != "classical":
            return await super().run_step(spec, node)
        future = self.client.submit(
            classical.run_step,
            spec,
            pure=False,
            workers=[node.address] if node.address else None,
            allow_other_workers=True,  # a lost worker's step may finish elsewhere
            retries=self.RETRIES,
            key=f"step-{spec.workflow_id}-{spec.step_id}-{uuid.uuid4().hex[:8]}",
        )
        return await future

    async def simulate(self, fn: Callable[..., Any], *args: Any) -> Any:
        future = self.client.submit(fn, *args, pure=False, retries=self.RETRIES)
        return await future

    def warm_up(self, devices: list[str]) -> None:
        from kernel_server.tasks import qpu

        super().warm_up(devices)
        # Every Dask worker loads the devices once now, not on its first job.
        asyncio.ensure_future(self._warm_workers(qpu.warm_up, devices))

    async def _warm_workers(self, fn: Callable[..., Any], devices: list[str]) -> None:
        try:
            await self.client.run(fn, devices)
        except Exception:  # a worker that cannot warm up shows its error on its first job
            log.warning("warming the Dask workers failed", exc_info=True)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "address": self.address,
            "nodes": self.cluster.snapshot() + self.local.snapshot(),
        }

    async def close(self) -> None:
        try:
            await self.client.close()
        except Exception:  # the scheduler may be gone already
            pass
        await super().close()


COMPUTE_BACKENDS: dict[str, type[LocalCompute]] = {"local": LocalCompute, "dask": DaskCompute}


def make_compute(cluster: str | None, step_workers: int, qpu_workers: int) -> LocalCompute:
    """The embedded pools, or Dask when ``cluster`` names a scheduler (tcp://HOST:8786)."""
    if not cluster or cluster == "local":
        return LocalCompute(step_workers, qpu_workers)
    return DaskCompute(cluster, step_workers, qpu_workers)
