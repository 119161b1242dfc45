"""Wide circuits: the twirled noise, the circuits' known ideal outcomes, the exact block runs and
the wide fidelity correction.

The twirl tests compare with Qiskit's own Pauli transfer matrices and Aer's own stabilizer
method, not with the module's arithmetic; the model test fits on the shipped wide runs without
one family and scores that family.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from qiskit import QuantumCircuit
from qiskit.quantum_info import PTM, hellinger_fidelity
from qiskit_aer import AerSimulator

from kernel_server.backends.aer_sim import compact_circuit, noisy_probabilities
from kernel_server.backends.compile import choose_layout, transpile_mitigated
from kernel_server.backends.devices import load_backend
from kernel_server.backends.noise import build_compact_noise, thermal_relaxation_superop
from kernel_server.backends.twirl import (
    idle_windows,
    run_twirled_stabilizer,
    sample_twirled,
    twirled_channel,
    twirled_error,
)
from kernel_server.estimator.fidelity import FidelityModel, as_matrix, complete, model_features
from kernel_server.estimator.fidelity_data import load_rows
from kernel_server.estimator.fidelity_training import (
    DEFAULT_WIDE_DATA_PATH,
    evaluate_wide,
    fit_wide_correction,
    predict_wide,
)
from kernel_server.estimator.wide_circuits import FAMILIES, wide_circuit
from kernel_server.estimator.wide_data import block_success_probability, connected_groups


def compiled(circuit: QuantumCircuit, backend_name: str):
    backend = load_backend(backend_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # qiskit's dt-rounding notes when scheduling
        return backend, transpile_mitigated(circuit, backend, choose_layout(circuit, backend))


def success(counts: dict[str, int], outcome: str) -> float:
    return counts.get(outcome, 0) / sum(counts.values())


# --------------------------------------------------------------------------------------------
# The twirl
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend_name", ["fake_sherbrooke", "fake_torino"])
def test_twirl_keeps_the_pauli_transfer_diagonal(backend_name):
    noise = build_compact_noise(load_backend(backend_name), (0, 1, 2, 3, 4, 5))
    specs = [spec for spec in noise.errors.values() if spec.duration]
    assert {spec.num_qubits for spec in specs} == {1, 2}
    for spec in specs[:12]:
        exact = PTM(spec.quantum_error().to_quantumchannel()).data
        twirled = PTM(twirled_error(spec).to_quantumchannel()).data
        assert np.real(np.diag(twirled)) == pytest.approx(np.real(np.diag(exact)), abs=1e-12)
        # A Pauli channel's transfer matrix is diagonal; the channel's own is not (relaxation).
        assert np.abs(twirled - np.diag(np.diag(twirled))).max() < 1e-12
    assert np.abs(exact - np.diag(np.diag(exact))).max() > 1e-6


def test_twirl_of_relaxation_with_t2_above_t1():
    # T2 > T1 (allowed up to 2 T1) is no mixture of Paulis; its twirl still has its diagonal.
    superop = thermal_relaxation_superop(100e-6, 170e-6, 3e-6)
    error = twirled_channel(superop, 1)
    diagonal = np.real(np.diag(PTM(error.to_quantumchannel()).data))
    expected = [1.0, np.exp(-3 / 170), np.exp(-3 / 170), np.exp(-3 / 100)]
    assert diagonal == pytest.approx(expected, abs=1e-12)


def test_waiting_in_zero_before_the_first_gate_costs_nothing():
    # Relaxation leaves a qubit idle in |0> alone; its twirl would flip it (here ~3% over the
    # 18 us the second qubit waits, ALAP, for its only gate), so such delays are not twirled.
    qc = QuantumCircuit(2)
    for _ in range(300):
        qc.sx(0)  # sx^300 is the identity
    qc.x(1)
    qc.measure_all()
    backend, transpiled = compiled(qc, "fake_sherbrooke")
    compact = compact_circuit(transpiled)
    windows = idle_windows(compact.circuit, build_compact_noise(backend, compact.physical_qubits))
    assert not windows.twirled  # no qubit waits between two of its gates
    exact = noisy_probabilities(backend, transpiled)["10"]
    twirled = success(sample_twirled(backend, transpiled, 40_000, seed=1), "10")
    assert twirled == pytest.approx(exact, abs=0.006)  # 4 standard errors at 40000 shots
    assert exact < 0.99


def test_pauli_frames_sample_what_aer_stabilizer_samples():
    wide = wide_circuit("mirror_line_cx", 6, 3)
    backend, transpiled = compiled(wide.circuit, "fake_sherbrooke")
    (outcome,) = wide.ideal
    frames = success(sample_twirled(backend, transpiled, 20_000, seed=2), outcome)
    aer = success(run_twirled_stabilizer(backend, transpiled, 4_000, seed=2), outcome)
    standard_error = np.sqrt(frames * (1 - frames) * (1 / 20_000 + 1 / 4_000))
    assert abs(frames - aer) < 4 * standard_error
    assert frames < 0.99  # the noise is there at all


@pytest.mark.parametrize(
    ("family", "backend_name"),
    [("mirror_brick_cz", "fake_sherbrooke"), ("ghz_ladder", "fake_torino"), ("bv", "fake_kyiv")],
)
def test_twirled_fidelity_is_close_to_the_exact_one(family, backend_name):
    # Tolerance 0.03: the twirl check at 8-12 qubits (benchmarks/data/twirl_check.csv) found
    # at most ~0.02 between the two; 40000 shots add a standard error of <= 0.0025.
    wide = wide_circuit(family, 9, 0)
    backend, transpiled = compiled(wide.circuit, backend_name)
    exact = hellinger_fidelity(noisy_probabilities(backend, transpiled), wide.ideal)
    twirled = hellinger_fidelity(sample_twirled(backend, transpiled, 40_000, seed=3), wide.ideal)
    assert twirled == pytest.approx(exact, abs=0.03)
    assert exact < 0.97  # a case where noise matters


# --------------------------------------------------------------------------------------------
# The circuits
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ideal_outcomes_are_what_the_generator_says(family):
    for width, seed in ((17, 0), (23, 5)):
        wide = wide_circuit(family, width, seed)
        method = "stabilizer" if wide.kind == "clifford" else "matrix_product_state"
        circuit = wide.circuit
        if wide.kind != "clifford":
            from qiskit import transpile

            circuit = transpile(circuit, AerSimulator(method=method), optimization_level=0)
        counts = AerSimulator(method=method).run(circuit, shots=400, seed_simulator=seed)
        counts = counts.result().get_counts()
        assert set(counts) <= set(wide.ideal), family
        for outcome, p in wide.ideal.items():
            assert counts.get(outcome, 0) / 400 == pytest.approx(p, abs=0.12)
        measured = sum(1 for ci in wide.circuit.data if ci.operation.name == "measure")
        assert measured == width


def test_mirror_outcomes_differ_between_seeds():
    outcomes = {next(iter(wide_circuit("mirror_line_cx", 20, seed).ideal)) for seed in range(6)}
    assert len(outcomes) == 6 and all(len(o) == 20 for o in outcomes)


def test_block_runs_are_the_product_of_exact_blocks():
    wide = wide_circuit("blocks_rotations", 9, 1)
    backend, transpiled = compiled(wide.circuit, "fake_torino")
    groups = connected_groups(transpiled)
    assert len(groups) >= 2
    (outcome,) = wide.ideal
    whole = noisy_probabilities(backend, transpiled).get(outcome, 0.0)
    assert block_success_probability(backend, transpiled, outcome) == pytest.approx(whole, 1e-9)
    assert whole < 0.95


# --------------------------------------------------------------------------------------------
# The wide correction
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide_rows():
    if not DEFAULT_WIDE_DATA_PATH.is_file():
        pytest.skip(f"{DEFAULT_WIDE_DATA_PATH} not found")
    return [r for r in load_rows(DEFAULT_WIDE_DATA_PATH) if r["stack"] == "none"]


@pytest.mark.parametrize("held_out", ["ghz_ladder", "mirror_line_cx"])
def test_wide_correction_beats_the_numerical_baseline_on_a_held_out_family(wide_rows, held_out):
    train = [r for r in wide_rows if r["family"] != held_out]
    test = [r for r in wide_rows if r["family"] == held_out]
    assert train and test
    predicted = predict_wide(fit_wide_correction(train), test)
    e = evaluate_wide(test, predicted)["groups"]["all"]
    assert e["mae"] < e["baseline_mae"]
    assert e["within"] > e["baseline_within"]
    assert e["within"] >= 0.8


def test_the_shipped_model_uses_the_wide_correction_for_wide_circuits(wide_rows):
    model = FidelityModel.load()
    assert model.wide is not None
    rows = wide_rows[:40]
    assert np.allclose(model.predict(rows), predict_wide(model.wide, rows), atol=1e-6)
    without = FidelityModel(model.known, model.unknown, model.features)
    truth = np.asarray([r["hellinger_fidelity"] for r in rows])
    assert np.abs(model.predict(rows) - truth).mean() < np.abs(without.predict(rows) - truth).mean()
    # A mitigated wide run: the unmitigated prediction plus the stack's gain as the
    # ideal-unknown correction sees it.
    rem = [{**r, "stack": "rem", "techniques": 1.0, "rem": 1.0} for r in rows]
    features = model_features()
    gain = model.unknown(as_matrix(complete(rem), features)) - model.unknown(
        as_matrix(complete(rows), features)
    )
    expected = np.clip(predict_wide(model.wide, rows) + gain, 0, 1)
    assert np.allclose(model.predict(rem), expected, atol=1e-5)
    assert not np.allclose(gain, 0)


def test_model_file_round_trips_the_wide_correction(wide_rows, tmp_path):
    model = FidelityModel.load()
    path = model.save(tmp_path / "model.json")
    again = FidelityModel.load(path)
    assert again.wide is not None
    assert np.allclose(again.predict(wide_rows[:10]), model.predict(wide_rows[:10]))
