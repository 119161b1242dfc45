"""The simulated fleet's device catalogue.

Every simulated QPU is a fake backend from ``qiskit_ibm_runtime.fake_provider``: its target carries
the coupling map, the basis gates, per-gate errors and durations and per-qubit T1/T2 of one real
calibration snapshot. This module names the fleet, loads backends once per process and gives each
calibration snapshot a short id that caches (noise models, transpilers, estimates) key on.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from dataclasses import asdict, dataclass
from typing import Any

from qiskit.circuit import (
    CONTROL_FLOW_OP_NAMES,
    ForLoopOp,
    Gate,
    IfElseOp,
    SwitchCaseOp,
    WhileLoopOp,
)
from qiskit.providers import BackendV2
from qiskit_ibm_runtime import fake_provider
from qiskit_ibm_runtime.fake_provider.fake_backend import FakeBackendV2

# Three processor families, so that template QPUs (one per family) have members to average over.
# Left out on purpose: fake_cairo cannot be transpiled at any level (a cx direction error) and
# fake_kyoto has every one of its 144 ecr couplers at error 1.0 (nothing entangling works there).
DEFAULT_FLEET: tuple[str, ...] = (
    "fake_kolkata",  # Falcon r5.11, 27q
    "fake_auckland",  # Falcon r5.11, 27q
    "fake_hanoi",  # Falcon r5.11, 27q (two dead cx couplers: exercises layout avoidance)
    "fake_sherbrooke",  # Eagle r3, 127q
    "fake_brisbane",  # Eagle r3, 127q
    "fake_kyiv",  # Eagle r3, 127q
    "fake_torino",  # Heron r1, 133q
    "fake_fez",  # Heron r2, 156q
)

# For tests: small devices whose from_backend build stays well under a second, from two families
# (Falcon 27q and Egret 33q, a Heron-generation cz device).
SMALL_FLEET: tuple[str, ...] = ("fake_kolkata", "fake_auckland", "fake_prague")

# Devices that load but must not join a fleet.
UNUSABLE: dict[str, str] = {
    "fake_cairo": "cannot be transpiled at any optimization level (cx direction error)",
    "fake_kyoto": "every ecr coupler has error 1.0",
}

# Qiskit's control-flow constructs, as a target names them. Real Falcon, Eagle and Heron devices
# run feed-forward (dynamic circuits), but the snapshots' supported_instructions disagree: of the
# 68 in qiskit-ibm-runtime 0.51, 21 list if_else, for_loop and switch_case, 7 if_else alone, one
# if_else and while_loop, and 39 (fake_kolkata and fake_prague among them) none. Every simulated
# device gets all four: Aer simulates each of them with the device's noise.
CONTROL_FLOW: dict[str, type] = {
    "if_else": IfElseOp,
    "while_loop": WhileLoopOp,
    "for_loop": ForLoopOp,
    "switch_case": SwitchCaseOp,
}

# Fallback when a backend carries no processor_type: the qubit counts of IBM's processor families.
_FAMILY_BY_WIDTH: dict[int, str] = {27: "Falcon", 127: "Eagle", 133: "Heron", 156: "Heron"}

_lock = threading.Lock()
_classes: dict[str, type[FakeBackendV2]] | None = None
_backends: dict[str, BackendV2] = {}
# id(target) -> (target, calibration id). The target is held so that its id cannot be reused by
# another object while the entry lives.
_calibration_ids: dict[int, tuple[Any, str]] = {}


def _normalize(name: str) -> str:
    """Reduce "fake_kolkata", "FakeKolkataV2", "kolkata" and "FakeFractionalBackend" to one key."""
    key = name.strip().lower().replace("_", "").replace("-", "")
    key = key.removeprefix("fake")
    for suffix in ("v2", "backend"):
        key = key.removesuffix(suffix)
    return key


def _fake_classes() -> dict[str, type[FakeBackendV2]]:
    """Index every fake backend class by its normalized name, without instantiating any."""
    global _classes
    if _classes is None:
        found: dict[str, type[FakeBackendV2]] = {}
        for attr in dir(fake_provider):
            obj = getattr(fake_provider, attr)
            if inspect.isclass(obj) and issubclass(obj, FakeBackendV2) and attr.startswith("Fake"):
                found[_normalize(attr)] = obj
        _classes = found
    return _classes


def available_backends() -> tuple[str, ...]:
    """Every loadable device, in the ``backend.name`` form ("fake_kolkata")."""
    return tuple(sorted(f"fake_{key}" for key in _fake_classes()))


def load_backend(name: str) -> BackendV2:
    """Return the fake backend called ``name``, built once per process.

    Accepts the backend name ("fake_kolkata"), the class name ("FakeKolkataV2") or the bare device
    name ("kolkata"). The instance is shared: treat it as read-only.
    """
    key = _normalize(name)
    with _lock:
        backend = _backends.get(key)
        if backend is not None:
            return backend
        cls = _fake_classes().get(key)
        if cls is None and name.startswith("ibm_"):
            backend = _ibm_backend(name)
            if backend is not None:
                _backends[key] = backend
                return backend
        if cls is None:
            raise ValueError(
                f"unknown backend {name!r}; valid names: {', '.join(available_backends())}"
            )
        backend = cls()
        # Build the target now (0.02-0.25 s) so the first job on this device does not pay for it.
        add_control_flow(backend.target)
        _backends[key] = backend
        return backend


def add_control_flow(target: Any) -> None:
    """Declare every construct of :data:`CONTROL_FLOW` on ``target`` (in place).

    Control-flow entries carry no calibration, so the calibration id does not change; caches of
    compiled circuits key on :func:`compile_key`, which does tell the two targets apart.
    """
    for name, operation in CONTROL_FLOW.items():
        if name not in target.operation_names:
            target.add_instruction(operation, name=name)


def control_flow_of(target: Any) -> tuple[str, ...]:
    """The control-flow constructs ``target`` accepts, sorted."""
    return tuple(sorted(CONTROL_FLOW_OP_NAMES.intersection(target.operation_names)))


def compile_key(backend: BackendV2) -> tuple[str, tuple[str, ...]]:
    """What a circuit compiled for ``backend`` depends on: its calibration and control flow.

    Two targets of one snapshot share a calibration id whether or not they declare control flow
    (a fresh fake backend does not get it, a loaded one does), but a pass manager built for one
    rejects or accepts dynamic circuits for good: compiler caches key on this instead.
    """
    return calibration_id(backend), control_flow_of(backend.target)


def _ibm_backend(name: str) -> BackendV2 | None:
    """A real IBM backend, for a fleet with IBM QPUs (estimates transpile against its target)."""
    from kernel_server.backends.ibm import ibm_account

    account = ibm_account()
    return None if account is None else account.service().backend(name)


def family_of(backend: BackendV2) -> str:
    """The processor family ("Falcon", "Eagle", "Heron", ...) of a backend.

    IBM's configuration says it (``processor_type["family"]``); backends without one fall back to
    the family that has their qubit count, else to a width label such as "20q".
    """
    configuration = getattr(backend, "configuration", None)
    if callable(configuration):
        try:
            processor_type = getattr(configuration(), "processor_type", None)
        except Exception:  # noqa: BLE001 - a backend without configuration: use the fallback
            processor_type = None
        if isinstance(processor_type, dict) and processor_type.get("family"):
            return str(processor_type["family"])
    width = int(backend.num_qubits)
    return _FAMILY_BY_WIDTH.get(width, f"{width}q")


def _target_digest(target: Any) -> str:
    """Hash every number the noise depends on: gate/measure errors and durations, T1, T2."""
    digest = hashlib.sha1(usedforsecurity=False)
    for op_name in sorted(target.operation_names):
        props = target[op_name]
        if props is None:  # global (control-flow) operations carry no calibration
            continue
        for qargs, prop in sorted(props.items(), key=lambda kv: kv[0] or ()):
            if prop is not None:
                digest.update(repr((op_name, qargs, prop.error, prop.duration)).encode())
    for qprops in target.qubit_properties or ():
        values = None if qprops is None else (qprops.t1, qprops.t2, qprops.frequency)
        digest.update(repr(values).encode())
    return digest.hexdigest()


def calibration_id(backend: BackendV2) -> str:
    """A short stable id of the backend's calibration snapshot, e.g. "fake_sherbrooke@3f9c2a1b0d4e".

    Derived from the target's numbers rather than a timestamp: many fake backends share one
    last_update_date, and two different snapshots must never share a cache entry. Cached per
    target object (2-3 ms to hash a 156-qubit device); after mutating a target in place, call
    :func:`forget_calibration`.
    """
    target = backend.target
    with _lock:
        cached = _calibration_ids.get(id(target))
        if cached is not None and cached[0] is target:
            return cached[1]
    value = f"{backend.name}@{_target_digest(target)[:12]}"
    with _lock:
        _calibration_ids[id(target)] = (target, value)
    return value


def forget_calibration(backend: BackendV2) -> None:
    """Drop the cached calibration id of a backend whose target was changed in place."""
    with _lock:
        _calibration_ids.pop(id(backend.target), None)


def basis_gates_of(backend: BackendV2) -> tuple[str, ...]:
    """The gates of the target (no measure, reset, delay or control flow), sorted."""
    target = backend.target
    return tuple(
        sorted(
            name
            for name in target.operation_names
            if isinstance(target.operation_from_name(name), Gate)
        )
    )


@dataclass(frozen=True)
class DeviceInfo:
    """What the orchestrator needs to know about a device, without holding the backend."""

    name: str
    num_qubits: int
    family: str
    calibration_id: str
    basis_gates: tuple[str, ...]
    calibrated_at: float | None = None  # epoch seconds of the calibration snapshot, if known
    # Error product of a 5-qubit GHZ (4 two-qubit gates, 5 readouts) on the median coupler and
    # readout: one number to compare QPUs at a glance, not an estimate for any job.
    fidelity_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["basis_gates"] = list(self.basis_gates)  # msgpack/JSON have no tuples
        return data


def device_info(name: str) -> DeviceInfo:
    """Describe the device called ``name`` (any form :func:`load_backend` accepts)."""
    backend = load_backend(name)
    return DeviceInfo(
        name=backend.name,
        num_qubits=int(backend.num_qubits),
        family=family_of(backend),
        calibration_id=calibration_id(backend),
        basis_gates=basis_gates_of(backend),
        calibrated_at=_calibrated_at(backend),
        fidelity_score=_fidelity_score(backend),
    )


def _calibrated_at(backend: BackendV2) -> float | None:
    try:
        props = backend.properties()
    except Exception:  # backends without BackendProperties
        return None
    stamp = getattr(props, "last_update_date", None)
    return stamp.timestamp() if stamp is not None else None


def _fidelity_score(backend: BackendV2) -> float | None:
    import numpy as np

    target = backend.target
    two, readout = [], []
    for name in target.operation_names:
        props = target[name]
        for qargs, prop in (props or {}).items():
            if prop is None or prop.error is None or qargs is None:
                continue
            if name == "measure":
                readout.append(prop.error)
            elif len(qargs) == 2:
                two.append(prop.error)
    if not two or not readout:
        return None
    return float((1 - np.median(two)) ** 4 * (1 - np.median(readout)) ** 5)
