"""A QPU's queue: first in, first out, and a job's place in it."""

from __future__ import annotations

import asyncio

import pytest

from kernel_server.core.jobs import JobRecord, JobState
from kernel_server.fleet.queues import QueuedJob, SimulatedQPU

pytestmark = pytest.mark.unit


def queued(job_id: str) -> QueuedJob:
    job = JobRecord(id=job_id, workflow_id="wf", kind="qpu", state=JobState.QUEUED)
    return QueuedJob(job, b"", 10, None, asyncio.get_running_loop().create_future())


def test_jobs_leave_in_order_a_getter_waits_and_positions_skip_cancelled_jobs() -> None:
    async def scenario() -> None:
        qpu = SimulatedQPU("fake_a", {"num_qubits": 5, "family": "Falcon"})
        getter = asyncio.ensure_future(qpu.queue.get())
        await asyncio.sleep(0)
        assert not getter.done()  # nothing queued yet: it waits
        first, second, third = queued("a"), queued("b"), queued("c")
        await qpu.queue.put(first)
        assert await asyncio.wait_for(getter, 1) is first
        for item in (second, third):
            qpu.queue.put_nowait(item)
        second.job.state = JobState.CANCELLED
        assert qpu.position_of("c") == (0, 0.0) and qpu.position_of("b") is None
        assert qpu.queue_length() == 2
        assert [await qpu.queue.get(), qpu.queue.get_nowait()] == [second, third]
        with pytest.raises(asyncio.QueueEmpty):
            qpu.queue.get_nowait()

    asyncio.run(scenario())
