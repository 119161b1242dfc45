"""The budget on noisy runs: a method that overruns is stopped and the next one's distribution is
right, a method that would not fit is not tried, and the cost model remembers a miss."""

from __future__ import annotations

import json
import time

import pytest
from qiskit import QuantumCircuit
from qiskit.quantum_info import hellinger_fidelity

from kernel_server.backends import aer_sim, cost_model
from kernel_server.backends.compile import transpile_for
from kernel_server.backends.devices import load_backend
from kernel_server.backends.guard import (
    GUARD_ENV,
    Alternative,
    Budget,
    BudgetExceeded,
    GuardSettings,
    settings,
    still_fitting,
)
from kernel_server.backends.methods import NoisyRunPlan

SHOTS = 4000


@pytest.fixture(scope="module")
def kolkata():
    return load_backend("fake_kolkata")


@pytest.fixture
def own_misses(tmp_path, monkeypatch):
    """A cost-model file of this test's own for the misses (the rates stay the session's)."""
    cost_model.machine_rates()  # measured or read before the file is switched
    path = tmp_path / "cost_model.json"
    monkeypatch.setenv(cost_model.COST_MODEL_ENV, str(path))
    monkeypatch.setattr(cost_model, "_misses", None)
    yield path
    monkeypatch.setattr(cost_model, "_misses", None)


def circuit(seed: int) -> QuantumCircuit:
    """A 4-qubit circuit of this test alone (its digest is not another test's)."""
    qc = QuantumCircuit(4)
    qc.h(0)
    for q in range(3):
        qc.cx(q, q + 1)
    qc.rx(0.1 + seed / 1000, 2)
    qc.measure_all()
    return qc


def guard_settings(**values: float) -> GuardSettings:
    base = {
        "time_factor": 5.0,
        "min_seconds": 5.0,
        "max_seconds": 120.0,
        "memory_share": 0.25,
        "max_memory_gb": 4.0,
    }
    return GuardSettings(**{**base, **values})


def test_an_overrunning_method_is_stopped_and_the_next_ones_distribution_is_right(
    kolkata, own_misses, monkeypatch
):
    transpiled = transpile_for(circuit(1), kolkata)
    plan = aer_sim.plan_noisy_run(transpiled, SHOTS, backend=kolkata)
    first = plan.method
    # No time at all before a method counts as late: the first one (and any that has a next one
    # predicted faster than its own remaining time) is stopped at its first check.
    monkeypatch.setenv(GUARD_ENV, "time_factor=1e-9,min_seconds=1e-9")
    run = aer_sim.run_noisy_detailed(kolkata, transpiled, SHOTS, seed=3)
    assert run.method != first
    assert any(reason.startswith(first) and "stopped" in reason for reason in run.fallbacks)
    exact = aer_sim.noisy_probabilities(kolkata, transpiled)
    assert sum(run.counts.values()) == SHOTS
    assert hellinger_fidelity(run.counts, exact) > 0.98
    # The miss is in the cost model: in memory and in its file.
    assert first in cost_model.miss_factors(aer_sim.compact_circuit(transpiled).circuit)
    assert json.loads(own_misses.read_text())["misses"]


def test_a_recorded_miss_prices_the_method_up_the_next_time(kolkata, own_misses):
    transpiled = transpile_for(circuit(2), kolkata)
    before = aer_sim.plan_noisy_run(transpiled, SHOTS, backend=kolkata)
    compact = aer_sim.compact_circuit(transpiled).circuit
    cost_model.record_miss(compact, before.method, 1e6)
    cost_model._misses = None  # as a fresh process reads it: from the file
    after = aer_sim.plan_noisy_run(transpiled, SHOTS, backend=kolkata)
    assert after.missed == (before.method,)
    assert after.estimated_seconds[before.method] == pytest.approx(
        before.estimated_seconds[before.method] * 1e6, rel=1e-6
    )
    assert after.method != before.method


def test_methods_that_do_not_fit_are_not_tried_and_the_run_says_why(
    kolkata, own_misses, monkeypatch
):
    transpiled = transpile_for(circuit(3), kolkata)
    monkeypatch.setenv(GUARD_ENV, "max_memory_gb=0.000000001")
    with pytest.raises(aer_sim.NoisyRunTooCostly, match="not tried: needs ~"):
        aer_sim.run_noisy_detailed(kolkata, transpiled, SHOTS, seed=1)
    monkeypatch.setenv(GUARD_ENV, "max_seconds=0.0000001")
    with pytest.raises(aer_sim.NoisyRunTooCostly, match="over the 0 s ceiling"):
        aer_sim.run_noisy_detailed(kolkata, transpiled, SHOTS, seed=1)


def test_a_late_method_with_no_faster_alternative_goes_on_until_the_ceiling():
    late = Budget("statevector", 0.001, guard_settings(min_seconds=0.0, max_seconds=0.2))
    time.sleep(0.02)
    late.check(0.5)  # over its soft budget, but nothing else would do better: goes on
    switch = Budget(
        "mps_reuse",
        0.001,
        guard_settings(min_seconds=0.0),
        alternative=Alternative("statevector", 0.001),
    )
    time.sleep(0.02)
    with pytest.raises(BudgetExceeded, match="statevector is predicted to take"):
        switch.check(0.5)
    time.sleep(0.2)
    with pytest.raises(BudgetExceeded, match="past the ceiling"):
        late.check(0.9)


def test_a_reuse_pilot_that_shows_the_run_too_long_stops_it_at_once():
    # The pilot drew 8 trajectories in ~0.02 s; 1000 are needed: ~1.25 s more at half its pace.
    ceiling = Budget("mps_reuse", 0.001, guard_settings(max_seconds=1.0))
    time.sleep(0.02)
    ceiling.learn(1000, 1.25)
    with pytest.raises(BudgetExceeded, match="needs ~1000 trajectories.*past the ceiling"):
        ceiling.check(8 / 1000)
    # Another reuse method would need as many trajectories: no reason to switch to it.
    reuse = Alternative("statevector_reuse", 0.05, trajectories=8)
    same = Budget("mps_reuse", 0.001, guard_settings(), alternative=reuse)
    time.sleep(0.02)
    same.learn(800, 1.0)
    assert reuse.seconds_at(800) == pytest.approx(5.0)
    same.check(8 / 800)
    # A method whose price does not depend on trajectories, and is much faster: switch now,
    # long before the soft deadline (5 s).
    other = Budget(
        "mps_reuse", 0.001, guard_settings(), alternative=Alternative("lazy_density_matrix", 0.1)
    )
    time.sleep(0.02)
    other.learn(800, 1.0)
    with pytest.raises(BudgetExceeded, match="lazy_density_matrix is predicted to take 0.1 s"):
        other.check(8 / 800)


def test_what_a_pilot_learned_reprices_the_reuse_methods_not_yet_tried():
    plan = NoisyRunPlan(
        method="mps_reuse",
        physical_qubits=(0, 1, 2),
        estimated_seconds={
            "mps_reuse": 0.1,
            "statevector_reuse": 0.2,
            "statevector": 30.0,
            "lazy_density_matrix": 50.0,
        },
        lazy_unsupported=None,
        rates_measured=True,
        trajectories=8,
    )
    repriced = plan.repriced(4000)
    assert repriced.estimated_seconds["statevector_reuse"] == pytest.approx(100.0)
    assert repriced.estimated_seconds["statevector"] == 30.0
    why: list[str] = []
    left = still_fitting(repriced, guard_settings(max_seconds=60.0), ["statevector_reuse",
                         "lazy_density_matrix", "statevector"], why)  # fmt: skip
    assert left == ["statevector", "lazy_density_matrix"]
    assert why and why[0].startswith("statevector_reuse not tried: at the trajectories")
    # A method priced by its own misses on the circuit keeps that price.
    missed = NoisyRunPlan(
        "mps_reuse", (0,), {"statevector_reuse": 20.0}, None, True, missed=("statevector_reuse",),
        trajectories=8,
    )  # fmt: skip
    assert missed.repriced(4000).estimated_seconds["statevector_reuse"] == 20.0


def test_guard_settings_are_read_and_checked(monkeypatch):
    monkeypatch.setenv(GUARD_ENV, "time_factor=3, max_seconds=60")
    read = settings()
    assert read.time_factor == 3 and read.max_seconds == 60 and read.min_seconds == 5
    monkeypatch.setenv(GUARD_ENV, "speed=2")
    with pytest.raises(ValueError, match="valid keys: time_factor"):
        settings()
