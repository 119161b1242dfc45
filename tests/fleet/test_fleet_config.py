"""The fleet file: parsing, clear errors, background load on a simulated QPU."""

import asyncio

import pytest

from kernel_server.core.status import DeviceInfo
from kernel_server.fleet.queues import SimulatedQPU, background_arrivals, qpu_runner
from kernel_server.fleet.spec import FleetConfigError, fleet_spec_from_dict, load_fleet_spec

FLEET_YAML = """\
simulated: [fake_kolkata, fake_prague]
ibm:
  backends: [fake_manila]
  execution_mode: batch
  local_testing: true
  queue_refresh_s: 5
background:
  jobs_per_hour: 30
  mean_runtime_s: 12
prices:
  qpu_dollars_per_hour: 6000
cluster: tcp://127.0.0.1:8786
scheduler:
  balance: 0.05
  runtime_quantile: 0.9
"""


def test_a_fleet_file_with_every_section(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET_YAML)
    spec = load_fleet_spec(str(path))
    assert spec.simulated == ("fake_kolkata", "fake_prague")
    assert spec.ibm is not None and spec.ibm.backends == ("fake_manila",)
    assert spec.ibm.execution_mode == "batch" and spec.ibm.local_testing
    assert spec.ibm.queue_refresh_s == 5 and spec.ibm.calibration_refresh_s == 3600
    assert spec.background is not None and spec.background.jobs_per_hour == 30
    assert spec.prices == {"qpu_dollars_per_hour": 6000}
    assert spec.cluster == "tcp://127.0.0.1:8786"
    assert spec.balance == 0.05 and spec.runtime_quantile == 0.9
    assert spec.names == ["fake_kolkata", "fake_prague", "fake_manila"]


def test_short_forms_still_work():
    assert load_fleet_spec("small").runtime_quantile == 0.5  # the central estimate
    assert load_fleet_spec("small").balance is None  # each preset's own
    off = fleet_spec_from_dict({"simulated": "small", "scheduler": {"balance": False}})
    assert off.balance == "off"  # YAML's bare off
    assert load_fleet_spec("small").simulated == ("fake_kolkata", "fake_auckland", "fake_prague")
    assert load_fleet_spec("fake_kolkata, fake_hanoi").names == ["fake_kolkata", "fake_hanoi"]


@pytest.mark.parametrize(
    "data, message",
    [
        ({"simulated": "small", "qpus": []}, "unknown key qpus in fleet; known: background, "),
        ({"ibm": {"backends": ["x"], "mode": "job"}}, "unknown key mode in fleet.ibm"),
        ({"ibm": {"backends": ["x"], "execution_mode": "session"}}, "must be one of job, batch"),
        ({"simulated": "small", "background": {"jobs_per_hour": -1}}, "positive number"),
        ({"simulated": "small", "cluster": "localhost"}, "Dask scheduler address"),
        ({"simulated": "small", "prices": {"qpu": 1}}, "unknown price table keys"),
        ({"simulated": []}, "has no QPUs"),
        ({"simulated": ["fake_manila"], "ibm": {"backends": ["fake_manila"]}}, "twice"),
        ({"simulated": "small", "scheduler": {"balance": 1.5}}, "above 0 and below 1"),
        ({"simulated": "small", "scheduler": {"balance": "even"}}, "such as 0.1 .* or off"),
        ({"simulated": "small", "scheduler": {"balance": 0}}, "above 0 and below 1"),
        ({"simulated": "small", "scheduler": {"policy": "fcfs"}}, "unknown key policy"),
        ({"simulated": "small", "scheduler": {"runtime_quantile": 0.3}}, "from 0.5 .* such as 0.9"),
    ],
)
def test_bad_fleet_files_say_what_is_wrong(data, message):
    with pytest.raises(FleetConfigError, match=message):
        fleet_spec_from_dict(data)


def test_a_missing_or_broken_file(tmp_path):
    with pytest.raises(FleetConfigError, match="does not exist"):
        load_fleet_spec(str(tmp_path / "nope.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("simulated: [a, b\n")
    with pytest.raises(FleetConfigError, match="not valid YAML"):
        load_fleet_spec(str(broken))


def test_background_jobs_occupy_a_simulated_qpu_in_fifo_order():
    async def scenario():
        qpu = SimulatedQPU(
            "fake_kolkata",
            DeviceInfo(name="fake_kolkata", num_qubits=27, family="Falcon", calibration_id="c0"),
        )

        async def execute(*args):  # only other users' jobs are queued: none of ours runs
            raise AssertionError("no job of ours was queued")

        runner = asyncio.ensure_future(qpu_runner(qpu, execute, lambda job: None))
        arrivals = asyncio.ensure_future(background_arrivals(qpu, 36000.0, 0.02, seed=3))
        await asyncio.sleep(1.0)
        arrivals.cancel()
        runner.cancel()
        return qpu

    qpu = asyncio.run(scenario())
    # About 10 arrivals per second of about 20 ms each kept the QPU busy.
    assert qpu.jobs_done >= 3 and 0.02 < qpu.busy_s < 1.0
    # What load balancing reads: the last hour's busy time, which here is all of it.
    assert qpu.recent_busy_s() == pytest.approx(qpu.busy_s, abs=0.05)


def test_recent_busy_time_forgets_runs_older_than_its_window():
    import time

    qpu = SimulatedQPU(
        "fake_kolkata",
        DeviceInfo(name="fake_kolkata", num_qubits=27, family="Falcon", calibration_id="c0"),
    )
    now = time.time()
    qpu.recent_runs.extend([(now - 7200.0, 50.0), (now - 30.0, 40.0), (now - 5.0, 8.0)])
    # The 2-hour-old run is gone; of a run that straddles the window's start, only its part in it:
    # the 40 s run from 70 to 30 s ago gives 30 s to the last minute.
    assert qpu.recent_busy_s(window_s=3600.0) == pytest.approx(48.0, abs=0.1)
    assert len(qpu.recent_runs) == 2
    assert qpu.recent_busy_s(window_s=60.0) == pytest.approx(30.0 + 8.0, abs=0.1)
    assert qpu.recent_busy_s(window_s=10.0) == pytest.approx(5.0, abs=0.1)  # 13 s to 5 s ago


def test_the_orchestrator_schedules_with_the_fleet_files_balance(tmp_path):
    from kernel_server.control.app import Orchestrator
    from kernel_server.fleet.spec import FleetSpec

    async def scenario():
        orch = Orchestrator(tmp_path, FleetSpec(("fake_kolkata",), balance=0.05))
        qpu = orch.qpus["fake_kolkata"] = SimulatedQPU(
            "fake_kolkata",
            DeviceInfo(name="fake_kolkata", num_qubits=27, family="Falcon", calibration_id="c0"),
        )
        qpu.record_run(12.0)
        views = orch.manager._qpu_views()
        orch.store.close()
        return orch.manager.dispatcher.balance, views

    balance, (view,) = asyncio.run(scenario())
    assert balance == 0.05
    assert view.recent_busy_s == pytest.approx(12.0)
