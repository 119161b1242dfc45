"""The simulated fleet's device catalogue.

Every simulated QPU is a fake backend from ``qiskit_ibm_runtime.fake_provider``: its target carries
the coupling map, the basis gates, per-gate errors and durations and per-qubit T1/T2 of one real
calibration snapshot. This module names the fleet, loads backends once per process and gives each
calibration snapshot a short id that caches (noise models, transpilers, estimates) key on.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from qiskit.circuit import (
    CONTROL_FLOW_OP_NAMES,
    ForLoopOp,
    IfElseOp,
    SwitchCaseOp,
    WhileLoopOp,
)
from qiskit.providers import BackendV2
from qiskit_ibm_runtime import fake_provider
from qiskit_ibm_runtime.fake_provider.fake_backend import FakeBackendV2

from kernel_server.backends.catalogue import (
    basis_gates_of,
    calibrated_at,
    calibration_id,
    family_of,
    fidelity_score,
    forget_calibration,
)
from kernel_server.core.status import DeviceInfo  # noqa: F401 (re-exported)

__all__ = [
    "DEFAULT_FLEET",
    "DeviceInfo",
    "SMALL_FLEET",
    "available_backends",
    "basis_gates_of",
    "calibration_id",
    "device_info",
    "family_of",
    "forget_calibration",
    "load_backend",
]

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

_lock = threading.Lock()
_classes: dict[str, type[FakeBackendV2]] | None = None
_backends: dict[str, BackendV2] = {}


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
    from kernel_server.backends.account import ibm_account

    account = ibm_account()
    return None if account is None else account.service().backend(name)


def device_info(name: str) -> DeviceInfo:
    """Describe the device called ``name`` (any form :func:`load_backend` accepts)."""
    backend = load_backend(name)
    return DeviceInfo(
        name=backend.name,
        num_qubits=int(backend.num_qubits),
        family=family_of(backend),
        calibration_id=calibration_id(backend),
        basis_gates=basis_gates_of(backend),
        calibrated_at=calibrated_at(backend),
        fidelity_score=fidelity_score(backend),
    )
