"""Fidelity model, estimate() and resource_plans(): contracts, Pareto property, bad input.

Training is exercised on tiny data (three 3-qubit circuits, three stacks); the shipped model file
is what estimate() and resource_plans() use.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from qiskit import QuantumCircuit
from qiskit.circuit import Parameter
from qiskit.quantum_info import hellinger_fidelity

from kernel_server.backends.aer_sim import ideal_probabilities
from kernel_server.backends.compile import CircuitTooWideError
from kernel_server.backends.devices import SMALL_FLEET, load_backend
from kernel_server.core.mcdm import dominates
from kernel_server.estimator import estimate, resource_plans
from kernel_server.estimator.features import circuit_features
from kernel_server.estimator.fidelity import (
    DERIVED_COLUMNS,
    FidelityModel,
    ModelFileError,
    model_features,
    stack_features,
)
from kernel_server.estimator.fidelity_data import (
    Task,
    generate,
    load_rows,
    refresh_feature_columns,
)
from kernel_server.estimator.fidelity_training import (
    cross_validate,
    evaluate,
    family_folds,
    train_fidelity,
)
from kernel_server.estimator.ideal import ideal_summary
from kernel_server.estimator.mitigation import UnknownMitigation, parse_stack
from kernel_server.estimator.mitigation.run import run_mitigated_detailed
from kernel_server.estimator.plans import (
    PLAN_STACKS,
    CircuitNotEstimable,
    rank_plans,
    templates_for,
)


def ghz(n: int = 4) -> QuantumCircuit:
    qc = QuantumCircuit(n)
    qc.h(0)
    for i in range(n - 1):
        qc.cx(i, i + 1)
    qc.measure_all()
    return qc


# --------------------------------------------------------------------------------------------
# Ideal summary and per-outcome combination (the ground truth of mitigated rows)
# --------------------------------------------------------------------------------------------


def test_ideal_summary_matches_the_labelled_distribution():
    qc = QuantumCircuit(3)
    qc.h(0)
    qc.cx(0, 1)
    qc.ry(0.7, 2)
    qc.measure_all()
    summary = ideal_summary(qc)
    labelled = ideal_probabilities(qc)
    nonzero = summary.probabilities[summary.probabilities > 0]
    assert len(summary.probabilities) == 8
    assert sorted(nonzero) == pytest.approx(sorted(labelled.values()))
    assert summary.measured_bits == 3
    # GHZ-like: one bit of entropy from the Bell pair plus H2(p) of the rotated qubit.
    p = math.sin(0.35) ** 2
    assert summary.entropy_bits == pytest.approx(1 - p * math.log2(p) - (1 - p) * math.log2(1 - p))
    # Depolarized Hellinger: 1 at f=1, and for uniform noise it is the overlap with uniform.
    assert summary.depolarized_hellinger(1.0) == pytest.approx(1.0)
    uniform = {format(i, "03b"): 1 / 8 for i in range(8)}
    assert summary.depolarized_hellinger(0.0) == pytest.approx(
        hellinger_fidelity(uniform, labelled)
    )
    wide = QuantumCircuit(20)
    wide.measure_all()
    assert ideal_summary(wide, max_qubits=16) is None


@pytest.mark.slow
def test_per_outcome_combination_of_an_expectation_technique():
    # ZNE extrapolates each outcome's probability: with a linear fit over factors (1, 3) the
    # zero-noise value of p is p1 - (p3 - p1) / 2, outcome by outcome; negative estimates are
    # dropped and the rest renormalised. 00 and 11: 0.45 + 0.0625; 01: 0.1 - 0.125 < 0.
    stack = parse_stack([("zne", {"noise_factors": (1, 3), "extrapolation": "linear"})])
    plan = stack.construct(ghz(2), per_outcome=True)
    assert len(plan.circuits) == 2
    p1 = {"00": 0.45, "11": 0.45, "01": 0.1}
    p3 = {"00": 0.325, "11": 0.325, "01": 0.35}
    combined = stack.combine_distribution([p1, p3], plan)
    assert combined == pytest.approx({"00": 0.5, "11": 0.5})
    with pytest.raises(ValueError, match="no observable"):
        stack.construct(ghz(2), "ZZ", per_outcome=True)
    with pytest.raises(ValueError, match="mid-circuit"):
        parse_stack("cutting").construct(ghz(2), per_outcome=True)


def test_per_outcome_zne_moves_a_noisy_ghz_toward_the_ideal():
    kolkata = load_backend("fake_kolkata")
    qc = ghz(4)
    ideal = ideal_probabilities(qc)

    def fid(stack):
        run = run_mitigated_detailed(qc, kolkata, stack, 4000, seed=3, per_outcome=True)
        return hellinger_fidelity(run.value, ideal)

    assert fid("zne+rem") > fid(None) + 0.02


# --------------------------------------------------------------------------------------------
# Features and training on tiny data
# --------------------------------------------------------------------------------------------


def test_stack_features():
    qc = ghz(3)
    none = stack_features(None, qc)
    assert set(none.values()) == {0.0}
    zne = stack_features("zne+rem", qc)
    assert (zne["techniques"], zne["rem"], zne["zne_factors"], zne["zne_max_factor"]) == (
        2.0,
        1.0,
        3.0,
        5.0,
    )
    pec = stack_features("pec", qc)
    assert pec["pec_samples"] == 100 and pec["pec_log_gamma"] > 0
    with pytest.raises(ValueError, match="no training data"):
        stack_features("cutting", qc)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("fid") / "runs.csv.gz"
    todo = [
        Task(family, 3, 0, stacks=("none", "rem"), backends=SMALL_FLEET, devices=2)
        for family in ("ghz", "bv", "dj")
    ]
    generate(path, todo, workers=1, log=lambda *_: None)
    return path


def test_generated_runs_are_complete_and_resumable(tiny_runs):
    rows = load_rows(tiny_runs)
    # Per circuit: none + rem on the first device, none on the second.
    assert len(rows) == 9
    assert {r["family"] for r in rows} == {"ghz", "bv", "dj"}
    assert {r["stack"] for r in rows} == {"none", "rem"}
    for row in rows:
        assert 0.0 < row["hellinger_fidelity"] <= 1.0
        # Every model input is stored, except the columns derived from the others.
        assert set(model_features()) - set(DERIVED_COLUMNS) <= set(row)
    # Resuming with the same tasks adds nothing.
    todo = [
        Task(f, 3, 0, stacks=("none", "rem"), backends=SMALL_FLEET, devices=2)
        for f in ("ghz", "bv", "dj")
    ]
    generate(tiny_runs, todo, workers=1, resume=True, log=lambda *_: None)
    assert len(load_rows(tiny_runs)) == 9


def test_refreshing_features_rebuilds_what_the_runs_saw(tiny_runs, tmp_path):
    # Circuits, compilation and layout are deterministic, so recomputing the feature columns
    # of stored runs reproduces them (what makes a changed feature definition cheap to apply).
    refreshed = load_rows(refresh_feature_columns(tiny_runs, tmp_path / "again.csv.gz"))
    for before, after in zip(load_rows(tiny_runs), refreshed, strict=True):
        for column in (
            "depth",
            "two_qubit_gates",
            "log_fidelity",
            "state_fidelity",
            "approximate_hellinger",
        ):
            assert after[column] == pytest.approx(before[column], rel=1e-9), column


@pytest.mark.slow
def test_training_scores_held_out_families_and_writes_a_loadable_model(tiny_runs, tmp_path):
    rows = load_rows(tiny_runs)
    folds = family_folds(rows, n_splits=3)
    for train, test in folds:  # a family is never on both sides
        assert not {rows[i]["family"] for i in train} & {rows[i]["family"] for i in test}
    cv = cross_validate(rows, n_splits=3)
    assert np.isfinite(cv["predictions"]).all()
    report = train_fidelity(tiny_runs, tmp_path / "model.json")
    assert report["cv"]["ideal_known"]["rows"] == 9
    model = FidelityModel.load(tmp_path / "model.json")
    predicted = model.predict(rows)
    assert ((predicted >= 0) & (predicted <= 1)).all()
    # In-sample, boosting fits these few rows far better than the constant mean would.
    truth = np.asarray([r["hellinger_fidelity"] for r in rows])
    assert np.abs(predicted - truth).mean() < np.abs(truth - truth.mean()).mean()


def test_evaluate_compares_with_the_numerical_baseline():
    rows = [
        {"hellinger_fidelity": 0.9, "numerical_fidelity": 0.8, "stack": "none"},
        {"hellinger_fidelity": 0.9, "numerical_fidelity": 0.7, "stack": "zne"},
        {"hellinger_fidelity": 0.8, "numerical_fidelity": 0.7, "stack": "rem"},
    ]
    e = evaluate(rows, np.asarray([0.88, 0.85, 0.8]))
    assert e["unmitigated_within"] == 1.0 and e["baseline_unmitigated_within"] == 0.0
    assert e["mitigated_mae"] == pytest.approx(0.025)
    assert e["baseline_mitigated_mae"] == pytest.approx(0.15)
    assert e["mitigated_mae_reduction"] == pytest.approx(1 - 0.025 / 0.15)


def test_missing_or_damaged_model_file(tmp_path):
    with pytest.raises(ModelFileError, match="qonductor train fidelity"):
        FidelityModel.load(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ModelFileError, match="unreadable"):
        FidelityModel.load(bad)
    with pytest.raises(ModelFileError):
        estimate(ghz(3), "fake_kolkata", fidelity_model=FidelityModel.load(bad))


# --------------------------------------------------------------------------------------------
# estimate()
# --------------------------------------------------------------------------------------------


def test_estimate_contract():
    kolkata = load_backend("fake_kolkata")
    plain = estimate(ghz(4), kolkata)
    assert plain.backend == "fake_kolkata" and plain.mitigation == ()
    assert 0 < plain.fidelity <= 1 and plain.quantum_seconds > 0
    assert plain.classical_seconds == 0 and plain.cost > 0
    # ``transpiled`` is the circuit the fidelity was predicted for: its features are the ones used.
    f = circuit_features(plain.transpiled, kolkata.target, 4000)
    assert f == plain.features
    assert plain.numerical_fidelity == pytest.approx(f.fidelity)

    zne = estimate(ghz(4), "fake_kolkata", mitigation="zne", shots=4000)
    assert zne.num_circuits == 3 and zne.total_shots == 12000
    assert zne.quantum_seconds > plain.quantum_seconds  # three times the shots
    assert zne.classical_seconds > 0 and zne.cost > plain.cost
    listed = estimate(ghz(4), "fake_kolkata", mitigation=["twirl", "rem"])
    # 10 twirled variants, each with REM's two calibration circuits beside it.
    assert listed.mitigation == ("twirl", "rem") and listed.num_circuits == 30
    fast = estimate(ghz(4), "fake_kolkata", "zne", accelerator="high-end-vm")
    assert fast.classical_seconds < zne.classical_seconds
    template = estimate(ghz(4), "Falcon-27")
    assert template.backend == "Falcon-27" and 0 < template.fidelity <= 1


def test_estimate_bad_input_names_the_problem():
    unmeasured = QuantumCircuit(2)
    unmeasured.h(0)
    with pytest.raises(CircuitNotEstimable, match="measure_all"):
        estimate(unmeasured, "fake_kolkata")
    theta = Parameter("theta")
    unbound = QuantumCircuit(1)
    unbound.rx(theta, 0)
    unbound.measure_all()
    with pytest.raises(CircuitNotEstimable, match="assign_parameters"):
        estimate(unbound, "fake_kolkata")
    with pytest.raises(CircuitTooWideError, match="30"):
        estimate(ghz(30), "fake_kolkata")
    with pytest.raises(UnknownMitigation, match="valid names"):
        estimate(ghz(3), "fake_kolkata", mitigation="zen")
    with pytest.raises(ValueError, match="unknown backend"):
        estimate(ghz(3), "fake_nowhere")
    with pytest.raises(ValueError, match="unknown accelerator"):
        estimate(ghz(3), "fake_kolkata", "zne", accelerator="tpu")
    with pytest.raises(ValueError, match="shots"):
        estimate(ghz(3), "fake_kolkata", shots=0)


# --------------------------------------------------------------------------------------------
# resource_plans()
# --------------------------------------------------------------------------------------------


def _objectives(plan):
    return np.asarray([-plan.fidelity, plan.seconds, plan.cost])


def test_plans_are_pareto_ranked_over_every_combination():
    templates = templates_for(SMALL_FLEET)
    plans = resource_plans(ghz(4), k=None, backends=templates.values())
    assert len(PLAN_STACKS) >= 6
    # Every (template, stack) appears; stacks with classical work once per accelerator.
    combos = {(p.backend, p.stack_name) for p in plans}
    assert combos == {(t, s) for t in templates for s in PLAN_STACKS}
    accelerators = {p.accelerator for p in plans if p.stack_name == "zne"}
    assert accelerators == {"standard-vm", "high-end-vm"}
    assert {p.accelerator for p in plans if p.stack_name == "none"} == {"none"}
    ranks = [p.rank for p in plans]
    assert ranks == sorted(ranks) and ranks[0] == 0
    for p in plans:
        objectives = _objectives(p)
        dominated_by = [q for q in plans if dominates(_objectives(q), objectives)]
        if p.rank == 0:
            assert not dominated_by  # the front: nothing beats it everywhere
        else:  # some plan one rank better dominates it
            assert any(q.rank == p.rank - 1 for q in dominated_by)
    best3 = resource_plans(ghz(4), backends=templates.values())
    assert len(best3) == 3 and all(p.rank == 0 for p in best3[: len(best3)])
    assert [p.to_plan() for p in best3] == [p.to_plan() for p in plans[:3]]


def test_rank_plans_puts_the_extremes_of_the_front_first():
    plans = resource_plans(ghz(3), k=None, backends=templates_for(SMALL_FLEET).values())
    front = [p for p in plans if p.rank == 0]
    if len(front) >= 3:
        first = front[:3]
        assert max(front, key=lambda p: p.fidelity).fidelity in {p.fidelity for p in first}
    assert rank_plans([]) == []


def test_plans_bad_input():
    with pytest.raises(CircuitTooWideError):
        resource_plans(ghz(40), backends=templates_for(SMALL_FLEET).values())
    with pytest.raises(UnknownMitigation):
        resource_plans(ghz(3), stacks=["none", "magic"], backends=[load_backend("fake_kolkata")])
    with pytest.raises(ValueError, match="k must be"):
        resource_plans(ghz(3), k=0)
    # Narrow templates are skipped, not an error, when a wider one fits.
    plans = resource_plans(
        ghz(30), k=None, stacks=["none"], backends=templates_for(SMALL_FLEET).values()
    )
    assert {p.backend for p in plans} == {"Egret-33"}


def test_plans_for_a_circuit_with_mid_circuit_measurement():
    qc = QuantumCircuit(2, 3)
    qc.x(0)
    qc.measure(0, 0)
    qc.reset(0)
    qc.cx(1, 0)
    qc.measure([0, 1], [1, 2])
    plans = resource_plans(qc, k=None, backends=templates_for(SMALL_FLEET).values())
    # No ideal distribution to summarise (the model's "ideal unknown" side answers), and only
    # stacks that can run mid-circuit measurements are offered.
    assert {p.stack_name for p in plans} == {"none", "rem"}
    assert all(0 < p.fidelity <= 1 for p in plans)
