"""What identifies a device and its calibration: family, calibration id, basis gates, a summary.

Shared by the fake fleet (``devices``) and the IBM devices (``ibm``), which both describe their
backends the same way; it imports neither, so the two need not import each other.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from qiskit.circuit import Gate
from qiskit.providers import BackendV2

# Fallback when a backend carries no processor_type: the qubit counts of IBM's processor families.
_FAMILY_BY_WIDTH: dict[int, str] = {27: "Falcon", 127: "Eagle", 133: "Heron", 156: "Heron"}

_lock = threading.Lock()
# id(target) -> (target, calibration id). The target is held so that its id cannot be reused by
# another object while the entry lives.
_calibration_ids: dict[int, tuple[Any, str]] = {}


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


def calibrated_at(backend: BackendV2) -> float | None:
    try:
        props = backend.properties()
    except Exception:  # backends without BackendProperties
        return None
    stamp = getattr(props, "last_update_date", None)
    return stamp.timestamp() if stamp is not None else None


def fidelity_score(backend: BackendV2) -> float | None:
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
