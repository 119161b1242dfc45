"""Template QPUs (mean calibration per processor model) and circuit features for the models."""

from __future__ import annotations

import math

import pytest
from qiskit import QuantumCircuit
from qiskit.transpiler import InstructionProperties
from qiskit_ibm_runtime.fake_provider import FakeAuckland, FakeKolkataV2

from kernel_server.backends.compile import (
    BROKEN_ERROR,
    broken_entries,
    healthy_target,
    transpile_for,
)
from kernel_server.backends.devices import (
    DEFAULT_FLEET,
    basis_gates_of,
    calibration_id,
    family_of,
    forget_calibration,
    load_backend,
)
from kernel_server.core.paths import SHARED_DATA_DIR
from kernel_server.estimator.features import (
    FEATURE_COLUMNS,
    LOG_FIDELITY_FLOOR,
    RUNTIME_COLUMNS,
    CircuitFeatures,
    circuit_features,
    runtime_frame,
    runtime_row,
)
from kernel_server.estimator.numerical import fidelity_and_duration, numerical_estimate
from kernel_server.estimator.templates import (
    TemplateNotExecutable,
    TemplateRegistry,
    build_templates,
)

FALCONS = ("fake_auckland", "fake_hanoi", "fake_kolkata")
EAGLES = ("fake_brisbane", "fake_kyiv", "fake_sherbrooke")
RUNTIME_CSV = SHARED_DATA_DIR / "ibm_runtime_train.csv"


def ghz(num_qubits: int) -> QuantumCircuit:
    circuit = QuantumCircuit(num_qubits)
    circuit.h(0)
    for q in range(num_qubits - 1):
        circuit.cx(q, q + 1)
    circuit.measure_all()
    return circuit


def undirected(target, gate: str) -> set[frozenset[int]]:
    return {frozenset(qargs) for qargs in target[gate] if qargs is not None}


@pytest.fixture(scope="module")
def templates():
    return build_templates(list(DEFAULT_FLEET))


# --- templates ----------------------------------------------------------------------------------


def test_one_template_per_processor_model_of_the_default_fleet(templates):
    # Heron r1 (133q) and r2 (156q) have different coupling maps: one template each.
    assert set(templates) == {"Falcon-27", "Eagle-127", "Heron-133", "Heron-156"}
    assert templates["Falcon-27"].members == FALCONS
    assert templates["Eagle-127"].members == EAGLES
    members = [m for t in templates.values() for m in t.members]
    assert sorted(members) == sorted(DEFAULT_FLEET)
    for template in templates.values():
        first = load_backend(template.members[0])
        assert template.family == family_of(first)
        assert template.num_qubits == first.num_qubits == template.target.num_qubits
        assert template.basis_gates == basis_gates_of(first)
        gate = next(g for g in template.basis_gates if g in ("cx", "ecr", "cz"))
        assert undirected(template.target, gate) == undirected(first.target, gate)
        assert template.summary()["members"] == list(template.members)


def test_template_entry_is_the_members_mean(templates):
    target = templates["Falcon-27"].target
    members = [load_backend(name).target for name in FALCONS]
    errors = [m["cx"][(0, 1)].error for m in members]
    assert max(errors) < BROKEN_ERROR and len(set(errors)) == 3
    assert target["cx"][(0, 1)].error == pytest.approx(sum(errors) / 3, rel=1e-12)
    durations = [m["sx"][(3,)].duration for m in members]
    assert target["sx"][(3,)].duration == pytest.approx(sum(durations) / 3, rel=1e-12)
    readout = [m["measure"][(5,)].error for m in members]
    assert target["measure"][(5,)].error == pytest.approx(sum(readout) / 3, rel=1e-12)
    t1 = [m.qubit_properties[2].t1 for m in members]
    assert target.qubit_properties[2].t1 == pytest.approx(sum(t1) / 3, rel=1e-12)


def test_coupler_direction_by_majority_with_every_member_in_the_mean(templates):
    target = templates["Eagle-127"].target
    members = [load_backend(name).target for name in EAGLES]
    have = [(1, 0) in m["ecr"] for m in members]
    assert have == [True, False, True]  # brisbane, kyiv, sherbrooke: kyiv has ecr(0, 1)
    assert (1, 0) in target["ecr"] and (0, 1) not in target["ecr"]
    errors = [m["ecr"].get((1, 0), m["ecr"].get((0, 1))).error for m in members]
    assert target["ecr"][(1, 0)].error == pytest.approx(sum(errors) / 3, rel=1e-12)


def test_broken_entry_is_left_out_of_the_mean(templates):
    sherbrooke, brisbane, kyiv = (load_backend(n).target for n in EAGLES[::-1])
    assert sherbrooke["ecr"][(6, 5)].error == 1.0
    healthy = [brisbane["ecr"][(6, 5)].error, kyiv["ecr"][(6, 5)].error]
    target = templates["Eagle-127"].target
    assert target["ecr"][(6, 5)].error == pytest.approx(sum(healthy) / 2, rel=1e-12)
    assert broken_entries(target) == (frozenset(), frozenset())


def test_entry_broken_on_every_member_stays_broken():
    kolkata, auckland = FakeKolkataV2(), FakeAuckland()  # private copies, safe to change
    for backend in (kolkata, auckland):
        backend.target.update_instruction_properties(
            "cx", (0, 1), InstructionProperties(duration=5e-7, error=1.0)
        )
    auckland.target.update_instruction_properties(
        "cx", (1, 2), InstructionProperties(duration=5e-7, error=1.0)
    )
    (template,) = build_templates([kolkata, auckland]).values()
    assert template.target["cx"][(0, 1)].error >= BROKEN_ERROR
    assert template.target["cx"][(1, 2)].error == kolkata.target["cx"][(1, 2)].error
    _, dead_couplers = broken_entries(template.target)
    assert dead_couplers == {("cx", (0, 1))}
    assert (0, 1) not in healthy_target(template.target)["cx"]
    assert (1, 0) in healthy_target(template.target)["cx"]


def test_registry_rebuilds_only_the_model_whose_calibration_changed():
    kolkata = FakeKolkataV2()
    fleet = [kolkata, "fake_auckland", "fake_prague"]
    registry = TemplateRegistry(fleet)
    assert sorted(registry) == ["Egret-33", "Falcon-27"]
    falcon, egret = registry["Falcon-27"], registry["Egret-33"]
    assert registry.refresh(fleet) == []
    assert registry["Falcon-27"] is falcon

    kolkata.target.update_instruction_properties(
        "cx", (0, 1), InstructionProperties(duration=5e-7, error=0.2)
    )
    # The calibration id is cached per target object: an in-place change needs forgetting.
    assert registry.refresh(fleet) == []
    forget_calibration(kolkata)
    assert registry.refresh(fleet) == ["Falcon-27"]
    rebuilt = registry["Falcon-27"]
    assert rebuilt.calibration_key != falcon.calibration_key
    assert calibration_id(kolkata) in rebuilt.member_calibrations
    auckland_error = load_backend("fake_auckland").target["cx"][(0, 1)].error
    assert rebuilt.target["cx"][(0, 1)].error == pytest.approx((0.2 + auckland_error) / 2)
    assert registry["Egret-33"] is egret
    assert registry.template_of("fake_kolkata") is rebuilt

    # A member leaving the fleet changes the model's mean too.
    assert registry.refresh(["fake_auckland", "fake_prague"]) == ["Falcon-27"]
    assert registry["Falcon-27"].members == ("fake_auckland",)
    assert registry.template_of("fake_kolkata") is None


def test_numerical_estimate_on_a_template(templates):
    template = templates["Falcon-27"]
    backend = template.as_backend()
    assert backend is template.as_backend()
    assert backend.name == "template_falcon_27"
    assert family_of(backend) == "Falcon"
    with pytest.raises(TemplateNotExecutable):
        backend.run(ghz(3))

    estimate = numerical_estimate(ghz(5), backend)
    assert 0.5 < estimate.fidelity < 1.0
    assert estimate.two_qubit_gates >= 4

    # On the same physical qubits, the template's fidelity lies within its members' spread. (With
    # each member on its own best qubits it can fall below all of them: averaging flattens the
    # good spots that each member's noise-aware layout finds. Falcon GHZ-5: 0.927 vs 0.932-0.946.)
    same_qubits = [
        fidelity_and_duration(estimate.transpiled, load_backend(m).target)[0] for m in FALCONS
    ]
    assert min(same_qubits) <= estimate.fidelity <= max(same_qubits)
    best_each = [numerical_estimate(ghz(5), load_backend(m)).fidelity for m in FALCONS]
    assert estimate.fidelity <= max(best_each)


def test_template_with_broken_couplers_compiles_around_them(templates):
    template = templates["Heron-156"]  # fez alone: its dead couplers stay dead in the template
    assert broken_entries(template.target)[1]
    estimate = numerical_estimate(ghz(12), template.as_backend())
    assert estimate.fidelity > 0.5


# --- features -----------------------------------------------------------------------------------


def hand_built_circuit() -> QuantumCircuit:
    """A circuit already in kolkata's basis and on its couplers (0-1, 1-2)."""
    circuit = QuantumCircuit(27, 3)
    circuit.sx(0)
    circuit.rz(0.3, 0)
    circuit.x(1)
    circuit.cx(0, 1)
    circuit.cx(1, 2)
    circuit.cx(0, 1)
    circuit.barrier(0, 1, 2)
    circuit.delay(160, 5, unit="dt")  # idle qubit: not active
    circuit.delay(200, 2, unit="ns")
    circuit.measure([0, 1, 2], [0, 1, 2])
    return circuit


def test_features_of_a_hand_built_circuit():
    target = load_backend("fake_kolkata").target
    circuit = hand_built_circuit()
    features = circuit_features(circuit, target, shots=1000, num_circuits=3)
    assert features.num_qubits == 3
    assert features.two_qubit_gates == 3
    assert features.one_qubit_gates == 3
    assert features.measurements == 3
    assert features.depth == 6  # sx, rz, cx, cx, cx, measure on the longest path
    assert features.shots == 1000 and features.num_circuits == 3

    cx01, cx12 = target["cx"][(0, 1)].error, target["cx"][(1, 2)].error
    assert features.mean_two_qubit_error == pytest.approx((cx01 + cx12) / 2)  # distinct couplers
    assert features.max_two_qubit_error == max(cx01, cx12)
    one_qubit = [max(target[g][(q,)].error for g in ("sx", "x", "id", "rz")) for q in (0, 1, 2)]
    assert features.mean_one_qubit_error == pytest.approx(sum(one_qubit) / 3)
    readout = [target["measure"][(q,)].error for q in (0, 1, 2)]
    assert features.mean_readout_error == pytest.approx(sum(readout) / 3)
    t1 = [target.qubit_properties[q].t1 for q in (0, 1, 2)]
    assert features.mean_t1_s == pytest.approx(sum(t1) / 3)

    fidelity, duration = fidelity_and_duration(circuit, target)
    assert features.fidelity == pytest.approx(fidelity, rel=1e-12)
    assert features.duration_s == pytest.approx(duration, rel=1e-12)
    assert features.depth == circuit.depth(lambda ci: ci.operation.name not in {"barrier", "delay"})

    assert FEATURE_COLUMNS[:3] == ("num_qubits", "depth", "two_qubit_gates")
    assert list(features.to_dict()) == list(FEATURE_COLUMNS)
    assert features.as_row() == tuple(float(v) for v in features.to_dict().values())


@pytest.mark.parametrize("backend_name", ["fake_hanoi", "fake_sherbrooke"])
def test_features_agree_with_the_numerical_baseline(backend_name):
    backend = load_backend(backend_name)
    estimate = numerical_estimate(ghz(8), backend)
    features = circuit_features(estimate.transpiled, backend.target)
    assert features.num_qubits == 8
    assert features.two_qubit_gates == estimate.two_qubit_gates
    assert features.depth == estimate.depth
    assert features.fidelity == pytest.approx(estimate.fidelity, rel=1e-12)
    assert features.duration_s == pytest.approx(estimate.duration_s, rel=1e-12)


def test_broken_entry_gives_a_finite_floor():
    kolkata = FakeKolkataV2()
    kolkata.target.update_instruction_properties(
        "cx", (0, 1), InstructionProperties(duration=5e-7, error=1.0)
    )
    circuit = QuantumCircuit(27)
    circuit.cx(0, 1)
    features = circuit_features(circuit, kolkata.target)
    assert features.log_fidelity == LOG_FIDELITY_FLOOR
    assert features.max_two_qubit_error == 1.0


def test_features_on_a_template_target(templates):
    template = templates["Eagle-127"]
    transpiled = transpile_for(ghz(6), template.as_backend())
    features = circuit_features(transpiled, template.target)
    assert features.num_qubits == 6 and features.two_qubit_gates >= 5
    assert 0 < features.mean_two_qubit_error < BROKEN_ERROR


def features_like(**values) -> CircuitFeatures:
    base = dict.fromkeys(FEATURE_COLUMNS, 0)
    base.update(shots=4000, num_circuits=1)
    base.update(values)
    return CircuitFeatures(**base)


def test_runtime_frame_sums_structure_over_the_job():
    variant = features_like(two_qubit_gates=10, depth=30, num_qubits=5, num_circuits=20)
    a = features_like(two_qubit_gates=4, depth=12, num_qubits=3)
    b = features_like(two_qubit_gates=7, depth=20, num_qubits=6, num_circuits=2)
    frame = runtime_frame([variant, [a, b]])
    assert tuple(frame.columns) == RUNTIME_COLUMNS
    if RUNTIME_CSV.exists():  # the data's header, when the shared data is present
        assert RUNTIME_COLUMNS == tuple(RUNTIME_CSV.open().readline().strip().split(",")[:5])
    assert frame.iloc[0].tolist() == [200, 600, 100, 4000, 20]
    assert frame.iloc[1].tolist() == [4 + 14, 12 + 40, 3 + 12, 4000, 3]
    assert str(frame.dtypes.iloc[0]) == "int64"
    with pytest.raises(ValueError, match="different shots"):
        runtime_row([a, features_like(shots=100)])


def test_runtime_row_of_one_plain_circuit():
    row = runtime_row(features_like(two_qubit_gates=3, depth=9, num_qubits=2, shots=100))
    assert row == {
        "two_qubit_gates": 3,
        "depth": 9,
        "num_qubits": 2,
        "shots": 100,
        "num_circuits": 1,
    }
    assert math.isclose(features_like(log_fidelity=-1.0).fidelity, math.exp(-1.0))
