"""The IBM Quantum worker in local testing mode: fake backends through the runtime's Sampler.

No network: real backends are stood in for by a 5-qubit fake (fake_manila); the service and the
saved-account file are monkeypatched where an account is needed.
"""

from __future__ import annotations

import datetime as dt

import pytest
from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
from qiskit.transpiler import InstructionProperties, generate_preset_pass_manager
from qiskit_ibm_runtime.fake_provider import FakeLimaV2, FakeManilaV2
from qiskit_ibm_runtime.models import BackendStatus

from kernel_server.backends import account as account_module
from kernel_server.backends.ibm import (
    DeviceChange,
    IBMDevice,
    IBMDeviceManager,
    NoIBMAccountError,
    ibm_account,
    load_ibm_devices,
)

SHOTS = 200
TOKEN = "tok-SECRET-0123456789"


@pytest.fixture(scope="module")
def backend() -> FakeManilaV2:
    """Shared by the tests that only run circuits (read-only)."""
    return FakeManilaV2()


@pytest.fixture
def fresh_backend() -> FakeManilaV2:
    """For tests that change the target or the status in place."""
    return FakeManilaV2()


@pytest.fixture(scope="module")
def isa(backend):
    """Bell (measure_all), two registers, and measure_all next to an existing register."""
    bell = QuantumCircuit(2)
    bell.h(0)
    bell.cx(0, 1)
    bell.measure_all()

    a, c = ClassicalRegister(1, "a"), ClassicalRegister(2, "c")
    two = QuantumCircuit(QuantumRegister(3), a, c)
    two.x(0)
    two.measure(0, a[0])
    two.measure(1, c[0])
    two.x(2)
    two.measure(2, c[1])

    mixed = QuantumCircuit(2, 1)
    mixed.x(1)
    mixed.measure(1, 0)
    mixed.measure_all()  # adds "meas" (2 bits) after "c" (1 bit)

    pm = generate_preset_pass_manager(optimization_level=1, backend=backend)
    return pm.run([bell, two, mixed])


@pytest.fixture
def no_env_account(monkeypatch):
    for name in ("QISKIT_IBM_TOKEN", "QISKIT_IBM_CHANNEL", "QISKIT_IBM_INSTANCE"):
        monkeypatch.delenv(name, raising=False)


def set_status(backend, operational: bool = True, pending_jobs: int = 0) -> None:
    msg = "active" if operational else "maintenance"
    backend.status = lambda: BackendStatus(backend.name, "", operational, pending_jobs, msg)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


# --- submission and result conversion ------------------------------------------------------------


def assert_bell(counts: dict[str, int]) -> None:
    assert sum(counts.values()) == SHOTS
    assert counts.get("00", 0) + counts.get("11", 0) >= 0.8 * SHOTS, counts
    assert list(counts) == sorted(counts)


def test_job_mode_counts_per_circuit(backend, isa):
    bell, two, mixed = IBMDevice(backend).execute(isa, SHOTS)
    assert_bell(bell)
    # Registers as Aer (and the simulated QPUs) give them: "c" (q2=1, q1=0) left of "a" (q0=1).
    assert {len(k) for k in two} == {4} and sum(two.values()) == SHOTS
    assert max(two, key=two.get) == "10 1"
    # measure_all's "meas" (q1=1, q0=0 -> "10") left of "c" (q1=1 -> "1").
    assert {len(k) for k in mixed} == {4}
    assert max(mixed, key=mixed.get) == "10 1"


def test_batch_mode_runs_locally(backend, isa):
    device = IBMDevice(backend, execution_mode="batch")
    job = device.submit(isa[:1], SHOTS)  # the batch is closed by now; the job still completes
    assert_bell(device.counts(job)[0])


def test_cancel_is_best_effort(backend, isa):
    device = IBMDevice(backend)
    job = device.submit(isa[:1], SHOTS)
    cancelled = device.cancel(job)
    # Local testing mode may have run the job already: then cancel says False; True only where
    # the job really ends cancelled.
    assert cancelled is False or "CANCEL" in str(job.status()).upper()

    class Refusing:  # the service refuses (the job finished meanwhile)
        def cancel(self) -> None:
            raise RuntimeError("job already done")

    class Accepting:  # RuntimeJobV2.cancel returns None when it went through
        def cancel(self) -> None:
            return None

    assert device.cancel(Refusing()) is False
    assert device.cancel(Accepting()) is True


def test_info_describes_the_device(backend):
    info = IBMDevice(backend).info()
    assert info.kind == "ibm" and info.local_testing is True
    assert info.name == "fake_manila" and info.num_qubits == 5
    assert info.calibration_id.startswith("fake_manila@") and not info.billed


def test_submit_checks_its_arguments(backend, isa):
    with pytest.raises(ValueError):
        IBMDevice(backend, execution_mode="session")
    with pytest.raises(ValueError):
        IBMDevice(backend).submit([], SHOTS)
    with pytest.raises(ValueError):
        IBMDevice(backend).submit(isa[:1], 0)


# --- calibration ---------------------------------------------------------------------------------


def raise_sx_error(backend, qubit: int = 0, error: float = 0.2) -> None:
    old = backend.target["sx"][(qubit,)]
    backend.target.update_instruction_properties(
        "sx", (qubit,), InstructionProperties(duration=old.duration, error=error)
    )


def test_refresh_calibration_sees_a_target_changed_in_place(fresh_backend):
    device = IBMDevice(fresh_backend)
    before = device.calibration_id
    assert device.refresh_calibration().changed is False

    raise_sx_error(fresh_backend)
    update = device.refresh_calibration()
    assert update.changed is True
    assert update.calibration_id != before and device.calibration_id == update.calibration_id
    assert device.info().calibration_id == update.calibration_id
    assert device.refresh_calibration().changed is False


def test_manager_refreshes_calibration_when_due(fresh_backend):
    clock = Clock()
    device = IBMDevice(fresh_backend)
    manager = IBMDeviceManager([device], calibration_interval_s=3600, now=clock)
    before = device.calibration_id
    raise_sx_error(fresh_backend)

    clock.t += 60
    assert all(c.kind != "calibration" for c in manager.poll())  # not due yet

    clock.t += 3600
    (change,) = [c for c in manager.poll() if c.kind == "calibration"]
    assert change.detail["previous"] == before
    assert change.detail["calibration_id"] == device.calibration_id != before
    clock.t += 3600
    assert manager.poll() == []  # due again, but nothing changed


def test_manager_refreshes_early_when_the_stamp_moves(fresh_backend, monkeypatch):
    clock = Clock()
    device = IBMDevice(fresh_backend)
    manager = IBMDeviceManager(
        [device], calibration_interval_s=3600, stamp_interval_s=300, now=clock
    )
    manager.poll()
    raise_sx_error(fresh_backend)
    properties = fresh_backend.properties()
    properties.last_update_date += dt.timedelta(hours=1)
    monkeypatch.setattr(fresh_backend, "properties", lambda refresh=False: properties)

    clock.t += 301  # past a stamp check, well before the calibration interval
    (change,) = manager.poll()
    assert change.kind == "calibration"
    assert device.calibrated_at == properties.last_update_date.timestamp()
    clock.t += 301
    assert manager.poll() == []  # same stamp: no refresh


# --- status and the fleet ------------------------------------------------------------------------


def test_offline_online_and_queue_changes(fresh_backend):
    clock = Clock()
    manager = IBMDeviceManager([IBMDevice(fresh_backend)], now=clock)
    set_status(fresh_backend, pending_jobs=0)
    assert manager.poll() == [
        DeviceChange("fake_manila", "queue", {"pending_jobs": 0, "previous": None})
    ]
    assert manager.poll() == []  # nothing moved

    set_status(fresh_backend, operational=False, pending_jobs=3)
    (offline,) = manager.poll()
    assert (offline.kind, offline.detail["message"]) == ("offline", "maintenance")
    assert manager.poll() == []  # still offline: no repeat, no queue news

    set_status(fresh_backend, operational=True, pending_jobs=0)
    assert [c.kind for c in manager.poll()] == ["online"]  # recalibrated, unchanged: no event

    set_status(fresh_backend, pending_jobs=7)
    (queue,) = manager.poll()
    assert queue == DeviceChange("fake_manila", "queue", {"pending_jobs": 7, "previous": 0})


def test_status_error_counts_as_offline_without_its_message(fresh_backend):
    def unreachable():
        raise ConnectionError("https://example.invalid/?apikey=" + TOKEN)

    fresh_backend.status = unreachable
    status = IBMDevice(fresh_backend).status()
    assert status.online is False and "ConnectionError" in status.message
    assert TOKEN not in status.message

    (change,) = IBMDeviceManager([IBMDevice(fresh_backend)]).poll()
    assert change.kind == "offline"


def test_a_backend_the_account_no_longer_lists_retires(fresh_backend):
    visible = {"fake_manila", "fake_lima"}
    manager = IBMDeviceManager(
        [IBMDevice(fresh_backend), IBMDevice(FakeLimaV2())],
        list_backends=lambda: sorted(visible),
        now=Clock(),
    )
    assert {c.kind for c in manager.poll()} == {"queue"}

    visible.discard("fake_lima")
    assert manager.poll() == [DeviceChange("fake_lima", "retired", {})]
    assert [d.name for d in manager.devices] == ["fake_manila"]
    assert manager.poll() == []


def test_a_failing_backend_listing_retires_nothing(fresh_backend):
    def failing() -> list[str]:
        raise TimeoutError

    manager = IBMDeviceManager([IBMDevice(fresh_backend)], list_backends=failing, now=Clock())
    assert all(c.kind != "retired" for c in manager.poll())
    assert len(manager.devices) == 1


# --- accounts ------------------------------------------------------------------------------------


def test_env_account_keeps_its_token_out_of_sight(no_env_account, monkeypatch):
    monkeypatch.setenv("QISKIT_IBM_TOKEN", TOKEN)
    monkeypatch.setenv("QISKIT_IBM_INSTANCE", "crn:v1:my-instance")
    account = ibm_account()
    assert account is not None
    assert (account.source, account.channel) == ("env", "ibm_quantum_platform")
    assert account.instance == "crn:v1:my-instance" and account.token == TOKEN
    assert TOKEN not in repr(account) and TOKEN not in str(account)


def test_env_channel_is_checked(no_env_account, monkeypatch):
    monkeypatch.setenv("QISKIT_IBM_TOKEN", TOKEN)
    monkeypatch.setenv("QISKIT_IBM_CHANNEL", "ibm_cloud")
    assert ibm_account().channel == "ibm_cloud"
    monkeypatch.setenv("QISKIT_IBM_CHANNEL", "ibm_quantum")  # the retired legacy channel
    with pytest.raises(ValueError, match="ibm_quantum_platform") as info:
        ibm_account()
    assert TOKEN not in str(info.value)


def test_no_account_without_env_or_saved_accounts(no_env_account, monkeypatch, tmp_path):
    accounts = tmp_path / "qiskit-ibm.json"
    monkeypatch.setattr(account_module, "ACCOUNTS_FILE", accounts)
    assert ibm_account() is None
    assert not accounts.exists()  # saved_accounts() would have created it
    accounts.write_text("{}")
    assert ibm_account() is None


def test_saved_account_is_found_and_loaded_by_name(no_env_account, monkeypatch, tmp_path):
    from qiskit_ibm_runtime import QiskitRuntimeService

    accounts = tmp_path / "qiskit-ibm.json"
    monkeypatch.setattr(account_module, "ACCOUNTS_FILE", accounts)
    # A real account file, written by qiskit-ibm-runtime itself (no network).
    QiskitRuntimeService.save_account(
        token=TOKEN, channel="ibm_cloud", instance="crn:v1:work", name="work",
        filename=str(accounts),
    )  # fmt: skip
    account = ibm_account()
    assert (account.source, account.channel, account.instance) == (
        "saved:work",
        "ibm_cloud",
        "crn:v1:work",
    )
    assert account.token is None and TOKEN not in repr(account)
    # Loaded by name from that file: the token is read by qiskit-ibm-runtime, never by us.
    assert account.service_kwargs() == {"name": "work", "filename": str(accounts)}
    monkeypatch.setenv("QISKIT_IBM_TOKEN", TOKEN)
    assert ibm_account().service_kwargs() == {
        "channel": "ibm_quantum_platform",
        "token": TOKEN,
        "instance": None,
    }


# --- loading -------------------------------------------------------------------------------------


def test_load_in_local_testing_mode():
    (device,) = load_ibm_devices(["fake_manila"], local_testing=True, execution_mode="batch")
    assert (device.name, device.execution_mode, device.local_testing) == (
        "fake_manila",
        "batch",
        True,
    )


def test_load_real_devices_needs_an_account(no_env_account, monkeypatch, tmp_path):
    monkeypatch.setattr(account_module, "ACCOUNTS_FILE", tmp_path / "absent.json")
    with pytest.raises(NoIBMAccountError, match="QISKIT_IBM_TOKEN") as info:
        load_ibm_devices(["ibm_fez"], local_testing=False)
    assert "no IBM Quantum account" in str(info.value)


def test_load_real_devices_asks_the_service(fresh_backend):
    """The IBM cloud edge: a service standing in for QiskitRuntimeService hands out backends."""

    class Service:
        def backend(self, name: str):
            assert name == "fake_manila"
            return fresh_backend

    (device,) = load_ibm_devices(["fake_manila"], local_testing=False, service=Service())
    assert device.backend is fresh_backend
