"""The JCT lower bound: exact where SRPT is optimal, below every policy's schedule elsewhere."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import three_qpu_workload

from kernel_server.scheduler.cycle import Triggers
from kernel_server.simulation.bounds import (
    fidelity_ceiling,
    jct_lower_bound,
    others_hold_s,
    srpt_flow_times,
    time_indexed_flow_s,
    time_indexed_jct_bound,
)
from kernel_server.simulation.cloud import simulate, time_indexed_bound


@pytest.mark.unit
def test_srpt_preempts_at_an_arrival_and_finishes_the_shortest_first() -> None:
    # A long job starts alone; a short one arrives and runs at once; the long one resumes.
    flows = srpt_flow_times(np.array([0.0, 1.0, 1.5]), np.array([10.0, 2.0, 1.0]))
    # t=1: short (2) preempts long (9 left); t=1.5: the 1 s job (shorter than 1.5 left) runs
    # to 2.5; the 2 s job to 4.0; the long one to 13.
    assert flows.tolist() == [13.0, 3.0, 1.0]


@pytest.mark.unit
@pytest.mark.parametrize("seed", range(5))
def test_on_one_machine_with_everything_at_once_the_bound_is_the_optimum(seed: int) -> None:
    # One QPU, all jobs at time 0: SRPT is shortest-first, the optimum of every order (and
    # preemption cannot help when nothing arrives later).
    work = np.random.default_rng(seed).uniform(1, 10, 6)
    best = min(np.cumsum(work[list(order)]).mean() for order in itertools.permutations(range(6)))
    assert jct_lower_bound(np.zeros(6), work, np.zeros(6), machines=1) == pytest.approx(best)


@pytest.mark.unit
def test_the_bound_is_never_below_the_jobs_own_run_times() -> None:
    # Eight QPUs and jobs far apart: no queueing anywhere, so each job's own time is the bound.
    arrival = np.arange(5) * 100.0
    work = np.array([3.0, 5.0, 2.0, 8.0, 1.0])
    bound = jct_lower_bound(arrival, work, np.full(5, 0.5), machines=8)
    assert bound == pytest.approx(work.mean() + 0.5)


FAST = Triggers(queue_size=20, interval_s=30.0)
QUICK = {"population": 40, "max_generations": 20}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_policy_schedules_above_the_bound_and_shares_it(seed: int) -> None:
    # A loaded small cloud (60 jobs of 8-12 s over 10 minutes on 3 QPUs, spread run times).
    w = three_qpu_workload(60, seed, (0.92, 0.85, 0.83), 0.01, (8, 12), runtime_spread=0.3)
    bounds, means = set(), []
    for policy in ("fcfs", "least-busy", "qonductor", "qonductor-paper"):
        m = simulate(w, policy, seed=seed, triggers=FAST, nsga2_options=QUICK).metrics()
        assert m["completed"] == w.num_jobs
        assert m["lower_bound_jct_s"] <= m["mean_jct_s"] + 1e-9, policy
        assert m["jct_over_bound"] >= 1.0
        bounds.add(round(m["lower_bound_jct_s"], 9))
        means.append(m["mean_jct_s"])
    assert len(bounds) == 1  # the same jobs and realised times: the same bound for all
    tighter = time_indexed_bound(w, seed=seed, pairs_per_lp=60)  # two LPs of 20 jobs each
    assert bounds.pop() <= tighter <= min(means) + 1e-9


@pytest.mark.unit
def test_a_runs_error_is_the_executions_the_same_on_every_qpu() -> None:
    # Independent errors per QPU would hand the bound a faster QPU no scheduler can know of
    # (the fastest of eight draws, ~15% under their mean at sigma 0.15): the bound is then the
    # estimated fastest run times the one error of each job.
    from kernel_server.simulation.cloud import CloudSimulation

    w = three_qpu_workload(40, 3, (0.92, 0.85, 0.83), 0.01, (8, 12), runtime_spread=0.3)
    sim = CloudSimulation(w, "least-busy", seed=3)
    factor = sim.actual_factor
    assert factor.shape == w.quantum_s.shape
    assert np.ptp(factor, axis=1).max() == 0.0
    assert np.ptp(factor[:, 0]) > 0.0  # but it differs from job to job
    fastest = np.where(np.isfinite(w.fidelity), w.quantum_s, np.inf).min(axis=1) * factor[:, 0]
    expected = jct_lower_bound(w.arrival_s, fastest, w.classical_s, len(w.qpus))
    assert sim._lower_bound(np.ones(w.num_jobs, dtype=bool)) == pytest.approx(expected)


@pytest.mark.unit
def test_other_users_earlier_jobs_hold_a_qpu_in_their_arrival_order() -> None:
    # QPU 0 runs other users' jobs of 10 s at 0, 5 s at 1 and 2 s at 20: alone they end at 10,
    # 15 and 22. QPU 1 has none.
    background = [(0.0, 0, 10.0), (1.0, 0, 5.0), (20.0, 0, 2.0)]
    hold = others_hold_s(np.array([0.5, 12.0, 20.0, 30.0]), background, qpus=2)
    # A job arriving with the one at 20 may go before it (ties in arrival): not counted.
    assert hold[:, 0].tolist() == [9.5, 3.0, 0.0, 0.0]
    assert hold[:, 1].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.unit
def test_behind_another_users_job_on_one_qpu_the_bound_is_exact() -> None:
    # One QPU; another user's 10 s job came first: ours (4 s, arriving at 2 s) can only wait.
    hold = others_hold_s(np.array([2.0]), [(0.0, 0, 10.0)], qpus=1)
    bound = jct_lower_bound(np.array([2.0]), np.array([[4.0]]), np.zeros(1), 1, hold)
    assert bound == pytest.approx(8.0 + 4.0)
    # On two QPUs the other one is free: the job's own run.
    hold = others_hold_s(np.array([2.0]), [(0.0, 0, 10.0)], qpus=2)
    bound = jct_lower_bound(np.array([2.0]), np.array([[4.0, 5.0]]), np.zeros(1), 2, hold)
    assert bound == pytest.approx(5.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_with_other_users_load_every_policy_stays_above_the_tighter_bound(seed: int) -> None:
    # The favourite QPU busy with other users' jobs most of the time, the others now and then.
    w = three_qpu_workload(60, seed, (0.92, 0.85, 0.83), 0.01, (8, 12), runtime_spread=0.3)
    rng = np.random.default_rng(seed + 7)
    times = np.sort(rng.uniform(0, 600, 80))
    background = [(float(t), int(rng.choice(3, p=[0.6, 0.2, 0.2])), 9.0) for t in times]
    alone = simulate(w, "least-busy", seed=seed).metrics()["lower_bound_jct_s"]
    bounds, means = set(), []
    for policy in ("fcfs", "least-busy", "earliest-completion", "qonductor"):
        m = simulate(w, policy, seed=seed, background=background, nsga2_options=QUICK).metrics()
        assert m["completed"] == w.num_jobs
        assert m["lower_bound_jct_s"] <= m["mean_jct_s"] + 1e-9, policy
        bounds.add(round(m["lower_bound_jct_s"], 9))
        means.append(m["mean_jct_s"])
    assert len(bounds) == 1
    assert bounds.pop() > alone  # other users' work counted: tighter than without it
    assert time_indexed_bound(w, background, seed=seed, pairs_per_lp=60) <= min(means) + 1e-9


def _optimum(arrival: np.ndarray, run: np.ndarray, held: np.ndarray) -> float:
    """The least total flow of any non-preemptive schedule, by enumeration: every assignment,
    every order on each QPU, each job started as soon as its QPU and its hold allow."""
    n, q = run.shape
    best = np.inf
    for qpu_of in itertools.product(range(q), repeat=n):
        total = 0.0
        for k in range(q):
            mine = [j for j in range(n) if qpu_of[j] == k]
            least = np.inf
            for order in itertools.permutations(mine):
                free, flow = 0.0, 0.0
                for j in order:
                    free = max(free, arrival[j] + held[j, k]) + run[j, k]
                    flow += free - arrival[j]
                least = min(least, flow)
            total += least if mine else 0.0
        best = min(best, total)
    return float(best)


@pytest.mark.unit
def test_two_jobs_that_want_one_qpu_queue_in_the_time_indexed_bound() -> None:
    # Both arrive at 0 and run 1 s on QPU 0, 3 s on QPU 1: one waits or runs slowly, so the best
    # mean JCT is 1.5 s. The SRPT machine splits them over both QPUs (each job's own 1 s).
    run = np.array([[1.0, 3.0], [1.0, 3.0]])
    assert jct_lower_bound(np.zeros(2), run, np.zeros(2), 2) == pytest.approx(1.0)
    assert time_indexed_jct_bound(np.zeros(2), run, np.zeros(2), 2) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="every job needs a QPU"):
        time_indexed_flow_s(
            np.zeros(2), np.array([[1.0, np.inf], [np.inf, np.inf]]), np.zeros((2, 2))
        )


@pytest.mark.unit
def test_the_time_indexed_bound_is_below_the_optimum_and_close_to_it() -> None:
    # Five jobs on two QPUs (one 30% slower), some held by other users' jobs: the LP is within 5%
    # of the optimum found by enumeration, where the SRPT machine's bound is 11-32% under it.
    for seed in range(12):
        rng = np.random.default_rng(seed)
        arrival = np.sort(rng.uniform(0, 4, 5))
        run = rng.uniform(1, 4, (5, 2)) * np.array([1.0, 1.3])
        held = np.where(rng.random((5, 2)) < 0.3, rng.uniform(0, 3, (5, 2)), 0.0)
        best = _optimum(arrival, run, held)
        flow = time_indexed_flow_s(arrival, run, held, slot_s=0.05, horizon_s=15.0)
        assert flow <= best + 1e-6, seed
        simple = jct_lower_bound(arrival, run, np.zeros(5), 2, held)
        bound = time_indexed_jct_bound(arrival, run, np.zeros(5), 2, held, slot_s=0.05)
        assert simple + 0.2 < bound <= best / 5 + 1e-6, seed
        assert bound >= 0.95 * best / 5, seed


@pytest.mark.unit
def test_the_fidelity_ceiling_takes_each_jobs_best_qpu_before_or_after_a_calibration() -> None:
    # QPU 1 recalibrates at 100 s from 0.80 to 0.95 for job 0 and 0.95 to 0.70 for job 1; QPU 0
    # stays at 0.90 (job 1 may not run there).
    fidelity = np.array([[0.90, 0.80], [np.nan, 0.95]])
    changes = [(100.0, 1, np.array([0.95, 0.70]))]
    # Job 0 may wait for the better calibration; job 1, arriving after it, gets only its 0.70.
    arrival = np.array([10.0, 150.0])
    assert fidelity_ceiling(arrival, fidelity, changes) == pytest.approx((0.95 + 0.70) / 2)
    # Arriving before it, job 1 may still run on the old calibration.
    arrival = np.array([10.0, 50.0])
    assert fidelity_ceiling(arrival, fidelity, changes) == pytest.approx((0.95 + 0.95) / 2)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_policy_beats_the_fidelity_ceiling_and_all_share_it(seed: int) -> None:
    # Calibrations mid-run with a wide drift: fidelities move both ways while jobs wait.
    w = three_qpu_workload(40, seed, (0.92, 0.85, 0.83), 0.01, (8, 12), runtime_spread=0.3)
    calibrations = [(420.0, 0), (120.0, 0), (200.0, 1), (300.0, 2)]  # not in time order
    ceilings = set()
    for policy in ("least-busy", "greedy-tolerance", "qonductor", "qonductor-paper"):
        m = simulate(
            w, policy, seed=seed, calibrations=calibrations, drift_sigma=0.5, triggers=FAST,
            nsga2_options=QUICK,
        ).metrics()  # fmt: skip
        assert m["mean_fidelity"] <= m["fidelity_ceiling"] + 1e-12, policy
        ceilings.add(round(m["fidelity_ceiling"], 12))
    assert len(ceilings) == 1
    # By its definition: each job's best fidelity over its QPUs at its arrival and at every
    # calibration after it, as the simulation computes what a job got.
    from kernel_server.simulation.cloud import CloudSimulation, _fidelity_at

    sim = CloudSimulation(w, "least-busy", seed=seed, calibrations=calibrations, drift_sigma=0.5)
    times = sorted(t for t, _ in calibrations)
    best = [
        max(
            _fidelity_at(w, calibrations, sim.drift, j, q, t)
            for q in range(len(w.qpus))
            if np.isfinite(w.fidelity[j, q])
            for t in [w.arrival_s[j], *(t for t in times if t >= w.arrival_s[j])]
        )
        for j in range(w.num_jobs)
    ]
    assert ceilings.pop() == pytest.approx(np.mean(best))
