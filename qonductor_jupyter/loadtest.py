"""Drive an orchestrator with workflows from several concurrent clients (load test, benchmark).

Each client is a thread with its own ZeroMQ client, as separate notebook kernels would be. They
submit (invoke) one small deployed workflow at an open-loop rate - the arrival rate of a busy
cloud (e.g. 4500 workflows per hour) compressed by a factor, so minutes of it fit in a test -
timing each request's round trip. Then every submitted workflow is waited for, and the store's
listing is checked for lost and duplicated ones. The orchestrator's resident memory is sampled
throughout.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_server.core.jobs import FINAL_WORKFLOW_STATES
from kernel_server.wire.messages import (
    GetResults,
    Invoke,
    ListWorkflows,
    WorkflowList,
    WorkflowReply,
)

from .client import Client, read_connection

CELL = (
    "from qiskit import QuantumCircuit\nq = QuantumCircuit(2)\nq.h(0)\nq.cx(0, 1)\n"
    "q.measure_all()\nc = sample(q, shots=100)\n"
)


@dataclass
class LoadReport:
    submitted: int
    final: dict[str, int]
    lost: int
    duplicated: int
    seconds: float
    latencies_ms: list[float] = field(repr=False)
    rss_mb: list[float] = field(repr=False)
    errors: list[str] = field(default_factory=list)

    @property
    def submissions_per_s(self) -> float:
        return self.submitted / self.seconds if self.seconds else 0.0

    def latency_ms(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> str:
        return (
            f"{self.submitted} workflows in {self.seconds:.1f} s "
            f"({self.submissions_per_s:.1f}/s) from the clients; final states {self.final}; "
            f"lost {self.lost}, duplicated {self.duplicated}; request latency p50 "
            f"{self.latency_ms(0.5):.1f} ms, p99 {self.latency_ms(0.99):.1f} ms; orchestrator "
            f"memory {min(self.rss_mb, default=0):.0f} -> peak {max(self.rss_mb, default=0):.0f} MB"
        )


def rss_mb(pid: int) -> float:
    """Resident memory of a process (Linux /proc), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_load(
    clients: int = 4,
    workflows_per_hour: float = 4500.0,
    compression: float = 10.0,
    duration_s: float = 30.0,
    wait_s: float = 600.0,
    cell: str = CELL,
) -> LoadReport:
    """Submit at ``workflows_per_hour * compression`` per hour of wall time for ``duration_s``."""
    from . import api

    image_id = api.deploy(api.create_workflow(cell, name="load-test"))
    info = read_connection()
    assert info is not None
    interval = clients * 3600.0 / (workflows_per_hour * compression)  # per client
    rss: list[float] = [rss_mb(info.pid)]
    stop_sampling = threading.Event()
    sampler = threading.Thread(
        target=_sample_memory, args=(info.pid, rss, stop_sampling), daemon=True
    )
    sampler.start()
    load, submitted_for = _submit(info, image_id, clients, interval, duration_s)
    waiter = Client(autostart=False, info=info)
    try:
        final = _wait_all(waiter, load.ids, wait_s)
        listing = waiter.request(ListWorkflows(limit=len(load.ids) + 1000), timeout=60)
    finally:
        waiter.close()
        stop_sampling.set()
    if not isinstance(listing, WorkflowList):
        raise RuntimeError(f"list_workflows answered {listing.op!r}")
    listed = [w.id for w in listing.workflows]
    ids = set(load.ids)
    mine = [w for w in listed if w in ids]
    return LoadReport(
        submitted=len(load.ids),
        final=final,
        lost=len(ids - set(mine)),
        duplicated=len(mine) - len(set(mine)),
        seconds=submitted_for,
        latencies_ms=load.latencies,
        rss_mb=rss,
        errors=load.errors,
    )


@dataclass
class _Load:
    """What the clients did, gathered from their threads."""

    ids: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _sample_memory(pid: int, rss: list[float], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        try:
            rss.append(rss_mb(pid))
        except OSError:
            return


def _submit(
    info: Any, image_id: str, clients: int, interval: float, duration_s: float
) -> tuple[_Load, float]:
    """Run the clients until ``duration_s`` is over; what they did, and how long it took."""
    load = _Load()
    t0 = time.monotonic()
    threads = [
        threading.Thread(
            target=_client_loop,
            # Each client's phase is shifted by its share of the interval: spread, not bursts.
            args=(info, image_id, index * interval / clients, interval, t0 + duration_s, load),
        )
        for index in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return load, time.monotonic() - t0


def _client_loop(
    info: Any, image_id: str, phase: float, interval: float, end: float, load: _Load
) -> None:
    """One client: an Invoke every ``interval`` s until ``end``, each round trip timed."""
    client = Client(autostart=False, info=info)
    start = time.monotonic() + phase
    k = 0
    try:
        while (due := start + k * interval) < end:
            time.sleep(max(0.0, due - time.monotonic()))
            workflow_id = "wf-" + uuid.uuid4().hex[:12]
            sent = time.perf_counter()
            try:
                client.request(Invoke(image_id=image_id, workflow_id=workflow_id), timeout=30)
            except Exception as exc:  # counted and reported, the load goes on
                with load.lock:
                    load.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                with load.lock:
                    load.latencies.append((time.perf_counter() - sent) * 1000)
                    load.ids.append(workflow_id)
            k += 1
    finally:
        client.close()


def _wait_all(waiter: Client, ids: list[str], wait_s: float) -> dict[str, int]:
    """Wait for every workflow (until ``wait_s`` is over); how many ended in each state."""
    final: dict[str, int] = {}
    deadline = time.monotonic() + wait_s
    for workflow_id in ids:
        state = _results(waiter, workflow_id, min(30.0, max(1.0, deadline - time.monotonic())))
        while state not in FINAL_WORKFLOW_STATES and time.monotonic() < deadline:
            state = _results(waiter, workflow_id, 30.0)
        final[state] = final.get(state, 0) + 1
    return final


def _results(client: Client, workflow_id: str, wait_s: float) -> str:
    """One long poll for a workflow's results; the state it is in."""
    reply = client.request(GetResults(workflow_id=workflow_id, wait_s=wait_s), timeout=60)
    if not isinstance(reply, WorkflowReply):
        raise RuntimeError(f"results of {workflow_id} answered {reply.op!r}")
    return reply.state


def describe(report: LoadReport) -> dict[str, Any]:
    return {
        "submitted": report.submitted,
        "final": report.final,
        "lost": report.lost,
        "duplicated": report.duplicated,
        "p50_ms": round(report.latency_ms(0.5), 2),
        "p99_ms": round(report.latency_ms(0.99), 2),
        "mean_ms": round(statistics.fmean(report.latencies_ms), 2) if report.latencies_ms else None,
        "rss_start_mb": round(report.rss_mb[0], 1) if report.rss_mb else None,
        "rss_peak_mb": round(max(report.rss_mb), 1) if report.rss_mb else None,
    }
