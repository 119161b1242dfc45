"""IBM Quantum devices in the fleet: real ``IBMBackend``s, or fake backends in local testing mode.

Both run through qiskit-ibm-runtime's Sampler primitive. A fake backend as the primitive's mode is
the runtime's *local testing mode*: the same primitive code path, simulated on Aer with the
snapshot's noise. So the worker the tests exercise is the worker that talks to IBM.

Tokens never leave the account object: they are not logged, not in reprs, not in exception
messages. Importing this module is cheap; qiskit and qiskit-ibm-runtime load on first use.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kernel_server.backends.account import NO_ACCOUNT_MESSAGE, NoIBMAccountError, ibm_account
from kernel_server.core.circuits import require_shots
from kernel_server.core.status import DeviceInfo

if TYPE_CHECKING:
    from qiskit import QuantumCircuit
    from qiskit.providers import BackendV2

logger = logging.getLogger(__name__)


ExecutionMode = Literal["job", "batch"]
EXECUTION_MODES: tuple[str, ...] = ("job", "batch")


@dataclass(frozen=True)
class DeviceStatus:
    online: bool
    pending_jobs: int
    message: str


@dataclass(frozen=True)
class CalibrationUpdate:
    calibration_id: str
    calibrated_at: float | None
    changed: bool


def _sampler(mode: Any) -> Any:
    """A SamplerV2 on a backend (job mode) or a Batch.

    SamplerV2 is deprecated since qiskit-ibm-runtime 0.50 in favour of the client-side
    ``qiskit_ibm_runtime.executor_sampler.Sampler``, which takes the same modes (also a fake
    backend or a local Batch) and returns the same PrimitiveResult. SamplerV2 is still the
    server-side primitive in the pinned 0.51.*; moving over is this one function.
    """
    from qiskit_ibm_runtime import SamplerV2

    # The warning names this module as its caller, and the project's pytest settings turn
    # DeprecationWarnings from kernel_server.* into errors: silence exactly this one.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="The SamplerV2 class is deprecated", category=DeprecationWarning
        )
        return SamplerV2(mode=mode)


def _is_ibm_backend(backend: BackendV2) -> bool:
    from qiskit_ibm_runtime import IBMBackend

    return isinstance(backend, IBMBackend)


def _pub_counts(pub_result: Any) -> dict[str, int]:
    """Counts over all classical registers of one PUB in Aer's form, as the simulated QPUs give
    them: the last register leftmost and one space between registers ("10 1")."""
    if len(pub_result.data) == 0:  # a circuit without classical bits measured nothing
        return {}
    joined = pub_result.join_data().get_counts()
    widths = [pub_result.data[name].num_bits for name in pub_result.data][::-1]
    if len(widths) > 1:
        joined = {_spaced(key, widths): n for key, n in joined.items()}
    return dict(sorted(joined.items()))


def _spaced(key: str, widths: list[int]) -> str:
    parts, start = [], 0
    for width in widths:
        parts.append(key[start : start + width])
        start += width
    return " ".join(parts)


class IBMDevice:
    """One IBM backend as the orchestrator sees it.

    Built from an ``IBMBackend`` (this reads its target: the properties download, if the backend
    has not made it yet) or from a fake backend, which runs in local testing mode.
    """

    def __init__(self, backend: BackendV2, execution_mode: ExecutionMode = "job") -> None:
        if execution_mode not in EXECUTION_MODES:
            raise ValueError(
                f"execution_mode must be one of {', '.join(EXECUTION_MODES)}, "
                f"got {execution_mode!r}"
            )
        from kernel_server.backends.catalogue import calibrated_at, calibration_id

        self.backend = backend
        self.name: str = backend.name
        self.execution_mode: ExecutionMode = execution_mode
        self.local_testing = not _is_ibm_backend(backend)
        # The calibration the orchestrator was told about; it moves only in refresh_calibration(),
        # so a target changed in place shows up as a change there.
        self.calibration_id: str = calibration_id(backend)
        self.calibrated_at: float | None = calibrated_at(backend)

    def __repr__(self) -> str:
        where = "local testing" if self.local_testing else "IBM Quantum"
        return f"IBMDevice({self.name!r}, {self.execution_mode}, {where})"

    def info(self) -> DeviceInfo:
        from kernel_server.backends.catalogue import (  # noqa: I001
            basis_gates_of,
            family_of,
            fidelity_score,
        )

        info = DeviceInfo(
            name=self.name,
            num_qubits=int(self.backend.num_qubits),
            family=family_of(self.backend),
            calibration_id=self.calibration_id,
            basis_gates=basis_gates_of(self.backend),
            calibrated_at=self.calibrated_at,
            fidelity_score=fidelity_score(self.backend),
            kind="ibm",
            local_testing=self.local_testing,
        )
        return info

    def status(self) -> DeviceStatus:
        try:
            status = self.backend.status()
        except Exception as exc:  # unreachable counts as offline; the message may hold URLs
            return DeviceStatus(False, 0, f"status unavailable ({type(exc).__name__})")
        return DeviceStatus(
            bool(status.operational), int(status.pending_jobs), str(status.status_msg)
        )

    def latest_calibration_stamp(self) -> float | None:
        """When the backend's newest calibration was taken (epoch seconds), None if unknown.

        A network call for a real backend: its cached properties only move on refresh.
        """
        if self.local_testing:
            properties = self.backend.properties()
        else:
            properties = self.backend.properties(refresh=True)
        stamp = getattr(properties, "last_update_date", None)
        return stamp.timestamp() if stamp is not None else None

    def refresh_calibration(self) -> CalibrationUpdate:
        """Re-read the calibration; ``changed`` when its numbers differ from the last known."""
        from kernel_server.backends.catalogue import (
            calibrated_at,
            calibration_id,
            forget_calibration,
        )

        previous = self.calibration_id
        # Before a refresh: a refreshed IBMBackend gets a new Target, and the cache entry would
        # otherwise keep the old one alive. A fake backend keeps its Target, possibly changed in
        # place, so its id must be recomputed.
        forget_calibration(self.backend)
        if not self.local_testing:
            self.backend.refresh()  # configuration + properties(refresh=True) + a new Target
        # A fake backend has no newer snapshot to fetch: FakeBackendV2.refresh(service) downloads
        # the real device's files and overwrites the installed package's, not what is wanted here.
        self.calibration_id = calibration_id(self.backend)
        self.calibrated_at = calibrated_at(self.backend)
        return CalibrationUpdate(
            self.calibration_id, self.calibrated_at, self.calibration_id != previous
        )

    def submit(self, circuits: Sequence[QuantumCircuit], shots: int) -> Any:
        """Submit circuits already transpiled to the device's ISA: one job, one PUB per circuit."""
        if not circuits:
            raise ValueError("no circuits to submit")
        require_shots(shots)
        pubs = [(circuit,) for circuit in circuits]
        if self.execution_mode == "batch":
            # Batch works in local testing mode too (it runs on QiskitRuntimeLocalService), so
            # fake and real devices take the same path. One batch per submission, closed once the
            # job is in: closing only stops new jobs, and no batch outlives its max_time unseen.
            from qiskit_ibm_runtime import Batch

            with Batch(backend=self.backend) as batch:
                return _sampler(batch).run(pubs, shots=shots)
        return _sampler(self.backend).run(pubs, shots=shots)

    def counts(self, job: Any) -> list[dict[str, int]]:
        """One counts dict per circuit, sorted by key, as ``execute_on_device`` returns them."""
        return [_pub_counts(pub_result) for pub_result in job.result()]

    def execute(self, circuits: Sequence[QuantumCircuit], shots: int) -> list[dict[str, int]]:
        return self.counts(self.submit(circuits, shots))

    def cancel(self, job: Any) -> bool:
        """Best effort: False when the job could not be cancelled (a local job already running)."""
        try:
            outcome = job.cancel()
        except Exception as exc:  # finished, or the service refused
            logger.info("cancel on %s failed (%s)", self.name, type(exc).__name__)
            return False
        return True if outcome is None else bool(outcome)  # RuntimeJobV2.cancel returns None


# --- the fleet's IBM devices ---------------------------------------------------------------------

ChangeKind = Literal["calibration", "queue", "offline", "online", "retired"]


@dataclass(frozen=True)
class DeviceChange:
    name: str
    kind: ChangeKind
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Watch:
    """What the manager last saw of one device."""

    next_refresh: float
    next_stamp_check: float
    online: bool = True  # a device joins the fleet as usable
    pending_jobs: int | None = None  # unknown until the first poll


class IBMDeviceManager:
    """Keeps the fleet's IBM devices current; the orchestrator calls :meth:`poll` periodically.

    Each poll reads every device's status (queue, online). Calibrations are re-read every
    ``calibration_interval_s``, sooner when the backend's calibration stamp moved (checked every
    ``stamp_interval_s``: a properties download on a real backend) or when a device comes back
    online (maintenance usually ends with a recalibration). Synchronous, no threads.
    """

    def __init__(
        self,
        devices: Sequence[IBMDevice],
        list_backends: Callable[[], list[str]] | None = None,
        *,
        calibration_interval_s: float = 3600.0,
        stamp_interval_s: float = 300.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate device names: {names}")
        self._devices: list[IBMDevice] = list(devices)
        self._list_backends = list_backends
        self.calibration_interval_s = calibration_interval_s
        self.stamp_interval_s = stamp_interval_s
        self._now = now
        start = now()
        self._watch = {
            name: _Watch(start + calibration_interval_s, start + stamp_interval_s) for name in names
        }

    @property
    def devices(self) -> list[IBMDevice]:
        # A copy: poll() replaces the list (never mutates it) when a device retires.
        return list(self._devices)

    def poll(self) -> list[DeviceChange]:
        now = self._now()
        changes = self._retire()
        for device in self._devices:
            watch = self._watch[device.name]
            status = device.status()
            if status.online != watch.online:
                watch.online = status.online
                detail = {"message": status.message, "pending_jobs": status.pending_jobs}
                changes.append(
                    DeviceChange(device.name, "online" if status.online else "offline", detail)
                )
                if status.online:
                    watch.next_refresh = now
            if not status.online:
                continue  # an offline device's queue and calibration wait until it is back
            if status.pending_jobs != watch.pending_jobs:
                detail = {"pending_jobs": status.pending_jobs, "previous": watch.pending_jobs}
                changes.append(DeviceChange(device.name, "queue", detail))
                watch.pending_jobs = status.pending_jobs
            change = self._calibration(device, watch, now)
            if change is not None:
                changes.append(change)
        return changes

    def _retire(self) -> list[DeviceChange]:
        if self._list_backends is None:
            return []
        try:
            visible = set(self._list_backends())
        except Exception as exc:  # an unreachable service must not retire the whole fleet
            logger.warning("listing IBM backends failed (%s)", type(exc).__name__)
            return []
        gone = [d for d in self._devices if d.name not in visible]
        if gone:
            self._devices = [d for d in self._devices if d.name in visible]
            for device in gone:
                del self._watch[device.name]
        return [DeviceChange(d.name, "retired", {}) for d in gone]

    def _calibration(self, device: IBMDevice, watch: _Watch, now: float) -> DeviceChange | None:
        due = now >= watch.next_refresh
        if not due and now >= watch.next_stamp_check:
            watch.next_stamp_check = now + self.stamp_interval_s
            try:
                stamp = device.latest_calibration_stamp()
            except Exception as exc:
                logger.info(
                    "calibration stamp of %s unavailable (%s)", device.name, type(exc).__name__
                )
                stamp = None
            due = stamp is not None and stamp != device.calibrated_at
        if not due:
            return None
        previous = device.calibration_id
        try:
            update = device.refresh_calibration()
        except Exception as exc:
            logger.warning("calibration refresh of %s failed (%s)", device.name, type(exc).__name__)
            # A failed download is retried after a stamp interval, not a full calibration interval.
            watch.next_refresh = now + self.stamp_interval_s
            return None
        watch.next_refresh = now + self.calibration_interval_s
        watch.next_stamp_check = now + self.stamp_interval_s
        if not update.changed:
            return None
        detail = {
            "calibration_id": update.calibration_id,
            "previous": previous,
            "calibrated_at": update.calibrated_at,
        }
        return DeviceChange(device.name, "calibration", detail)


def load_ibm_devices(
    names: Sequence[str],
    local_testing: bool,
    execution_mode: ExecutionMode = "job",
    service: Any = None,
) -> list[IBMDevice]:
    """The named IBM devices: fake backends in local testing mode, else the backends of
    ``service`` (default: the configured account's QiskitRuntimeService)."""
    if execution_mode not in EXECUTION_MODES:
        raise ValueError(
            f"execution_mode must be one of {', '.join(EXECUTION_MODES)}, got {execution_mode!r}"
        )
    if local_testing:
        from kernel_server.backends.devices import load_backend

        return [IBMDevice(load_backend(name), execution_mode) for name in names]
    if service is None:
        account = ibm_account()
        if account is None:
            raise NoIBMAccountError(NO_ACCOUNT_MESSAGE)
        service = account.service()
    return [IBMDevice(service.backend(name), execution_mode) for name in names]
