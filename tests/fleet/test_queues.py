"""A QPU's queue: first in, first out, and a job's place in it."""

from __future__ import annotations

import asyncio

import pytest

from kernel_server.core.jobs import JobRecord, JobState
from kernel_server.core.status import DeviceInfo
from kernel_server.fleet.queues import JobQueue, QueuedJob, SimulatedQPU

pytestmark = pytest.mark.unit


def queued(job_id: str) -> QueuedJob:
    job = JobRecord(id=job_id, workflow_id="wf", kind="qpu", state=JobState.QUEUED)
    return QueuedJob(job, b"", 10, None, asyncio.get_running_loop().create_future())


def test_jobs_leave_in_order_a_getter_waits_and_positions_skip_cancelled_jobs() -> None:
    async def scenario() -> None:
        qpu = SimulatedQPU(
            "fake_a", DeviceInfo(name="fake_a", num_qubits=5, family="Falcon", calibration_id="c0")
        )
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


def session_job(job_id: str, session: str = "") -> QueuedJob:
    item = queued(job_id)
    item.session = session
    return item


def test_a_sessions_jobs_go_ahead_within_the_streak_then_the_others_get_their_turn() -> None:
    async def scenario() -> None:
        queue = JobQueue(streak=2, hold_s=0.0)
        first = session_job("s1", "alice:s")
        queue.put_nowait(first)
        assert await queue.get() is first  # the session now holds the QPU
        queue.job_ended(first)
        other = session_job("o1")
        queue.put_nowait(other)
        mine = [session_job(f"s{i}", "alice:s") for i in (2, 3, 4)]
        for item in mine:
            queue.put_nowait(item)
        order = [(await queue.get()).job.id for _ in range(4)]
        # Two of the session's jobs in a row while another waited, then the other, then its own.
        assert order == ["s2", "s3", "o1", "s4"]

    asyncio.run(scenario())


def test_the_qpu_holds_briefly_for_the_sessions_next_job_and_no_longer() -> None:
    async def scenario() -> None:
        queue = JobQueue(streak=10, hold_s=0.3)
        first = session_job("s1", "alice:s")
        queue.put_nowait(first)
        await queue.get()
        queue.job_ended(first)
        queue.put_nowait(session_job("o1"))
        getter = asyncio.ensure_future(queue.get())
        await asyncio.sleep(0.1)
        assert not getter.done()  # held for the session's next job
        queue.put_nowait(session_job("s2", "alice:s"))
        assert (await asyncio.wait_for(getter, 1)).job.id == "s2"
        queue.job_ended(session_job("s2", "alice:s"))
        loop = asyncio.get_running_loop()
        start = loop.time()
        # No next job from the session: the other job starts when the hold runs out.
        assert (await asyncio.wait_for(queue.get(), 2)).job.id == "o1"
        assert 0.2 < loop.time() - start < 1.0

    asyncio.run(scenario())


def test_without_sessions_the_queue_is_first_in_first_out() -> None:
    async def scenario() -> None:
        queue = JobQueue()
        items = [session_job(str(i)) for i in range(5)]
        for item in items:
            queue.put_nowait(item)
        assert [await queue.get() for _ in items] == items

    asyncio.run(scenario())


def test_waits_add_up_the_queued_jobs_predictions_in_the_qpus_measured_seconds() -> None:
    async def scenario() -> None:
        qpu = SimulatedQPU(
            "fake_a", DeviceInfo(name="fake_a", num_qubits=5, family="Falcon", calibration_id="c0")
        )
        qpu.ema_run_s = 5.0
        short, long, unknown = queued("s"), queued("l"), queued("u")
        short.predicted_s, long.predicted_s = 1.0, 10.0
        for item in (short, long, unknown):
            qpu.queue.put_nowait(item)
        # Predicted jobs count their prediction, the one without its QPU's mean job.
        assert qpu.expected_wait_s() == pytest.approx(1.0 + 10.0 + 5.0)
        assert qpu.position_of("u") == (2, pytest.approx(11.0))
        # This QPU runs jobs twice as long as predicted: predictions are read in its seconds.
        qpu.record_run(4.0, predicted_s=2.0)
        assert qpu.ema_ratio == pytest.approx(2.0) and qpu.job_seconds(3.0) == pytest.approx(6.0)
        assert qpu.expected_wait_s() == pytest.approx(2.0 + 20.0 + qpu.ema_run_s)
        # A run that stalled (or a prediction of ~0) moves the ratio by a bounded step.
        qpu.record_run(1e6, predicted_s=1e-9)
        assert qpu.ema_ratio == pytest.approx(0.7 * 2.0 + 0.3 * 100.0)
        # Runs without a prediction leave the ratio alone.
        qpu.record_run(1.0)
        assert qpu.ema_ratio == pytest.approx(0.7 * 2.0 + 0.3 * 100.0)

    asyncio.run(scenario())
