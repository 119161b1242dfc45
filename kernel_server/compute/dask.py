"""Classical steps and simulated-QPU executions on a Dask cluster (``--cluster tcp://HOST:8786``).

A LocalCluster on a laptop, SSH, Kubernetes, or SLURM/PBS through dask-jobqueue: the cluster's
workers become the classical scheduler's nodes (their threads, memory and declared resources such
as GPUs), while quantum and hybrid steps, estimates and resource plans stay on the local pools of
``local.py``, whose caches (transpilers, noise models) they share.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_server.compute.local import LocalCompute
from kernel_server.core.status import ComputeStatus
from kernel_server.scheduler.classical import ClassicalCluster, NoFeasibleNode
from kernel_server.scheduler.classical_nodes import ClassicalNode, ClassicalRequest
from kernel_server.tasks import bootstrap
from kernel_server.tasks.step import StepSpec, run_step

log = logging.getLogger("kernel_server.compute.dask")


def _orchestrator_link_plugin(router_endpoint: str) -> Any:
    """A Dask worker plugin that points every worker's ``sample()`` calls at this orchestrator
    (also workers that join or restart later). It carries no key: each task brings the
    capability of its own workflow (StepSpec.capability)."""
    from distributed import WorkerPlugin

    class OrchestratorLink(WorkerPlugin):
        name = "qonductor-orchestrator-link"

        def setup(self, worker: Any) -> None:
            bootstrap.configure_link(router_endpoint)

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

    async def run_step(self, spec: StepSpec, node: ClassicalNode) -> Any:
        if spec.kind != "classical":
            return await super().run_step(spec, node)
        future = self.client.submit(
            run_step,
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

    def describe(self) -> ComputeStatus:
        nodes = self.cluster.snapshot() + self.local.snapshot()
        return ComputeStatus(backend=self.name, address=self.address, nodes=nodes)

    async def close(self) -> None:
        try:
            await self.client.close()
        except Exception:  # the scheduler may be gone already
            pass
        await super().close()
