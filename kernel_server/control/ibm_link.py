"""IBM Quantum QPUs in the orchestrator's fleet: loading them, running jobs, keeping them current.

The device code is in ``backends/ibm.py``; this module is the orchestrator's side of it. Everything
here blocks (network, or Aer in local testing mode), so the orchestrator calls it on threads.
"""

from __future__ import annotations

import logging
from typing import cast

import cloudpickle
import msgspec

from kernel_server.backends import ibm
from kernel_server.control.store import Store
from kernel_server.core.status import DeviceInfo
from kernel_server.fleet.queues import SimulatedQPU
from kernel_server.fleet.spec import IBMFleet
from kernel_server.tasks.qpu import Execution

log = logging.getLogger("kernel_server.ibm")


class IBMLink:
    """The fleet's IBM devices, by name, and the manager that polls them."""

    def __init__(self, spec: IBMFleet):
        self.spec = spec
        self.devices: dict[str, ibm.IBMDevice] = {}
        self.manager: ibm.IBMDeviceManager | None = None

    def load(self) -> list[DeviceInfo]:
        """Connect (or build the local-testing fakes) and describe each device for the fleet.

        Without an account, real IBM backends do not join; the rest of the fleet still runs.
        """
        try:
            # fleet.spec admits "job" and "batch" only.
            mode = cast(ibm.ExecutionMode, self.spec.execution_mode)
            devices = ibm.load_ibm_devices(list(self.spec.backends), self.spec.local_testing, mode)
        except ibm.NoIBMAccountError as exc:
            log.warning("IBM backends %s left out of the fleet: %s", self.spec.backends, exc)
            return []
        self.devices = {d.name: d for d in devices}
        list_backends = None
        if not self.spec.local_testing:
            account = ibm.ibm_account()
            service = account.service() if account else None
            if service is not None:
                list_backends = lambda: [b.name for b in service.backends()]  # noqa: E731
        self.manager = ibm.IBMDeviceManager(
            devices,
            list_backends,
            calibration_interval_s=self.spec.calibration_refresh_s,
        )
        return [self._describe(d) for d in devices]

    def _describe(self, device: ibm.IBMDevice) -> DeviceInfo:
        return msgspec.structs.replace(device.info(), billed=self.spec.is_billed)

    def execute(self, name: str, transpiled_blob: bytes, shots: int) -> Execution:
        """Run a QPU job's circuits (already laid out for this device) through the Sampler."""
        device = self.devices[name]
        counts = device.execute(cloudpickle.loads(transpiled_blob), shots)
        where = "local-testing" if device.local_testing else "ibm"
        return Execution(
            cloudpickle.dumps([dict(sorted(c.items())) for c in counts]),
            [f"{where}:sampler-{device.execution_mode}"] * len(counts),
            f"ibm:{name}",
        )

    def poll(self) -> list[ibm.DeviceChange]:
        if self.manager is None:
            return []
        changes = self.manager.poll()
        for change in changes:
            if change.kind == "retired":
                self.devices.pop(change.name, None)
        return changes

    def apply(
        self, change: ibm.DeviceChange, qpus: dict[str, SimulatedQPU], store: Store
    ) -> SimulatedQPU | None:
        """Apply one polled change to the fleet; returns the QPU if it was retired (and so
        removed from ``qpus``; its waiting jobs failed with the reason)."""
        q = qpus.get(change.name)
        if q is None:
            return None
        if change.kind == "queue":
            q.external_pending = int(change.detail.get("pending_jobs", 0))
        elif change.kind in ("offline", "online"):
            q.online = change.kind == "online"
            log.info("IBM QPU %s is %s (%s)", q.name, change.kind, change.detail.get("message"))
        elif change.kind == "calibration":
            info = self.info(q.name)
            if info is not None:
                q.info = info
                store.upsert_device(info)
            log.info("IBM QPU %s has a new calibration %s", q.name, q.info.calibration_id)
        elif change.kind == "retired":
            q.online = False
            del qpus[q.name]
            q.fail_waiting(
                f"QPU {q.name} was retired by IBM Quantum while the job waited; run it again"
            )
            log.warning("IBM QPU %s retired: it left the fleet", q.name)
            return q
        return None

    def info(self, name: str) -> DeviceInfo | None:
        device = self.devices.get(name)
        return None if device is None else self._describe(device)
