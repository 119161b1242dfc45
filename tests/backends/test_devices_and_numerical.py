"""Device catalogue and the numerical baseline estimator (small circuits, Falcon devices mostly)."""

from __future__ import annotations

import msgspec
import pytest
from qiskit import QuantumCircuit
from qiskit.circuit.library import QFTGate
from qiskit.providers.fake_provider import GenericBackendV2
from qiskit_ibm_runtime.fake_provider import FakeKolkataV2

from kernel_server.backends.compile import (
    BROKEN_ERROR,
    CircuitTooWideError,
    broken_entries,
    healthy_target,
    transpile_for,
)
from kernel_server.backends.devices import (
    DEFAULT_FLEET,
    SMALL_FLEET,
    UNUSABLE,
    calibration_id,
    device_info,
    family_of,
    forget_calibration,
    load_backend,
)
from kernel_server.core.status import DeviceInfo
from kernel_server.estimator.numerical import NumericalEstimator, numerical_estimate


def ghz(num_qubits: int, extra_cx_pairs: int = 0) -> QuantumCircuit:
    circuit = QuantumCircuit(num_qubits)
    circuit.h(0)
    for q in range(num_qubits - 1):
        circuit.cx(q, q + 1)
    for _ in range(extra_cx_pairs):  # identity overall, but twice the two-qubit gates each
        circuit.cx(0, 1)
        circuit.barrier()
        circuit.cx(0, 1)
    circuit.measure_all()
    return circuit


def qft(num_qubits: int) -> QuantumCircuit:
    circuit = QuantumCircuit(num_qubits)
    circuit.h(range(num_qubits))
    circuit.append(QFTGate(num_qubits), range(num_qubits))
    circuit.measure_all()
    return circuit


def used_entries(transpiled: QuantumCircuit) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (ci.operation.name, tuple(transpiled.find_bit(q).index for q in ci.qubits))
        for ci in transpiled.data
        if ci.operation.name not in ("barrier", "delay")
    ]


# -- devices ----------------------------------------------------------------------------------


def test_unknown_backend_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown backend 'fake_nowhere'") as info:
        load_backend("fake_nowhere")
    assert "fake_kolkata" in str(info.value) and "fake_sherbrooke" in str(info.value)


def test_name_forms_share_one_cached_instance() -> None:
    backend = load_backend("fake_kolkata")
    assert load_backend("FakeKolkataV2") is backend
    assert load_backend("kolkata") is backend
    assert backend.name == "fake_kolkata"


def test_fleets_are_loadable_and_span_families() -> None:
    assert len(DEFAULT_FLEET) == 8 and len(set(DEFAULT_FLEET)) == 8
    assert len(SMALL_FLEET) == 3
    assert not set(UNUSABLE) & (set(DEFAULT_FLEET) | set(SMALL_FLEET))
    families = {family_of(load_backend(name)) for name in DEFAULT_FLEET}
    assert {"Falcon", "Eagle", "Heron"} <= families
    assert len({family_of(load_backend(name)) for name in SMALL_FLEET}) >= 2
    for name in DEFAULT_FLEET + SMALL_FLEET:
        assert load_backend(name).name == name


def test_family_detection_and_width_fallback() -> None:
    assert family_of(load_backend("fake_kolkata")) == "Falcon"
    assert family_of(load_backend("fake_sherbrooke")) == "Eagle"
    assert family_of(load_backend("fake_torino")) == "Heron"
    # Backends without an IBM configuration fall back on their width.
    assert family_of(GenericBackendV2(num_qubits=27, seed=1)) == "Falcon"
    assert family_of(GenericBackendV2(num_qubits=5, seed=1)) == "5q"


def test_calibration_id_is_stable_and_tracks_the_target() -> None:
    kolkata, auckland = load_backend("fake_kolkata"), load_backend("fake_auckland")
    assert calibration_id(kolkata) == calibration_id(kolkata)
    assert calibration_id(kolkata) != calibration_id(auckland)
    # A separate instance of the same snapshot has the same id.
    fresh = FakeKolkataV2()
    assert calibration_id(fresh) == calibration_id(kolkata)
    # A changed calibration gets a new id once the cached one is forgotten.
    props = fresh.target["cx"][(0, 1)]
    props.error = props.error * 2
    forget_calibration(fresh)
    assert calibration_id(fresh) != calibration_id(kolkata)


def test_device_info_serializes() -> None:
    info = device_info("FakeKolkataV2")
    data = msgspec.json.decode(msgspec.json.encode(info), type=DeviceInfo)
    assert data == info and data.name == "fake_kolkata"
    assert data.num_qubits == 27
    assert data.family == "Falcon"
    assert data.calibration_id == calibration_id(load_backend("kolkata"))
    assert set(data.basis_gates) == {"cx", "id", "rz", "sx", "x"}


# -- numerical estimator ----------------------------------------------------------------------


def test_numerical_estimate_fields() -> None:
    backend = load_backend("fake_kolkata")
    estimate = numerical_estimate(ghz(3), backend, seed=0)
    assert 0.0 < estimate.fidelity <= 1.0
    assert estimate.duration_s > 0.0
    assert estimate.backend == "fake_kolkata"
    assert estimate.num_qubits == 3
    assert estimate.two_qubit_gates == 2
    assert estimate.depth >= 3
    assert len(estimate.layout) == 3 and len(set(estimate.layout)) == 3
    assert all(0 <= q < backend.num_qubits for q in estimate.layout)
    assert estimate.transpiled.num_qubits == backend.num_qubits
    assert "transpiled" not in estimate.to_dict()


def test_deeper_circuit_has_lower_fidelity_and_longer_duration() -> None:
    backend = load_backend("fake_kolkata")
    shallow = numerical_estimate(ghz(4), backend)
    deep = numerical_estimate(ghz(4, extra_cx_pairs=4), backend)
    assert deep.two_qubit_gates > shallow.two_qubit_gates
    assert deep.fidelity < shallow.fidelity
    assert deep.duration_s > shallow.duration_s


def test_too_wide_circuit() -> None:
    backend = load_backend("fake_kolkata")
    with pytest.raises(CircuitTooWideError, match="30 qubits.*fake_kolkata has only 27"):
        numerical_estimate(ghz(30), backend)
    assert issubclass(CircuitTooWideError, ValueError)


def test_transpile_is_deterministic_for_a_seed() -> None:
    backend = load_backend("fake_hanoi")
    assert transpile_for(qft(4), backend, seed=3) == transpile_for(qft(4), backend, seed=3)


def test_healthy_target_drops_broken_entries() -> None:
    target = load_backend("fake_hanoi").target
    dead_qubits, dead_couplers = broken_entries(target)
    assert ("cx", (5, 8)) in dead_couplers and not dead_qubits
    healthy = healthy_target(target)
    assert (5, 8) not in healthy["cx"] and (8, 5) in healthy["cx"]
    assert len(healthy["cx"]) == len(target["cx"]) - len(dead_couplers)


@pytest.mark.parametrize(
    ("device", "circuit"),
    [
        ("fake_hanoi", qft(5)),  # needs routing: SabreLayout, which does not read errors
        ("fake_hanoi", ghz(8)),
        ("fake_sherbrooke", ghz(8)),  # level 1's trivial layout lands on ecr(6,5), error 1.0
        ("fake_sherbrooke", ghz(12)),
    ],
)
@pytest.mark.parametrize("level", [1, 2])
def test_transpile_avoids_broken_instructions(
    device: str, circuit: QuantumCircuit, level: int
) -> None:
    backend = load_backend(device)
    target = backend.target
    for seed in range(2):
        transpiled = transpile_for(circuit, backend, seed=seed, optimization_level=level)
        for name, qargs in used_entries(transpiled):
            props = target[name].get(qargs)
            assert props is None or (props.error or 0.0) < BROKEN_ERROR, (name, qargs)


def test_sherbrooke_ghz12_estimate_is_not_ruined_by_a_dead_coupler() -> None:
    # With a plain level-1 transpile this estimate is 0.0 (STACK.md: Hellinger 0.02).
    estimate = numerical_estimate(ghz(12), load_backend("fake_sherbrooke"))
    assert estimate.fidelity > 0.7


def test_numerical_estimator_is_a_named_plugin() -> None:
    estimator = NumericalEstimator(seed=0)
    assert NumericalEstimator.name == "numerical"
    backend = load_backend("fake_kolkata")
    assert estimator(ghz(3), backend).fidelity == numerical_estimate(ghz(3), backend).fidelity
