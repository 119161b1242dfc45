"""The cloud simulator: the real scheduler over a hand-made workload, and the simulate command."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import three_qpu_workload

from kernel_server.scheduler.cycle import Triggers
from kernel_server.simulation.background import background_jobs, synthetic_rates
from kernel_server.simulation.cloud import Reservation, simulate
from kernel_server.simulation.workload import Workload


def workload(n: int = 120, seed: int = 0) -> Workload:
    """n jobs in 10 minutes on 3 QPUs; QPU 0 is the best and everyone's favourite."""
    return three_qpu_workload(n, seed, (0.92, 0.85, 0.83), 0.01, runtime_s=(8, 12))


FAST = Triggers(queue_size=20, interval_s=30.0)
QUICK = {"population": 40, "max_generations": 20}  # small NSGA-II runs keep these tests fast


@pytest.mark.slow
def test_simulation_is_deterministic_and_completes_every_job_once() -> None:
    w = workload()
    a = simulate(w, "qonductor-paper", seed=3, triggers=FAST, nsga2_options=QUICK)
    b = simulate(w, "qonductor-paper", seed=3, triggers=FAST, nsga2_options=QUICK)
    assert np.array_equal(a.jct_s, b.jct_s) and a.qpu_of_job == b.qpu_of_job
    m = a.metrics()
    assert m["completed"] == w.num_jobs and m["dropped"] == 0
    assert all(np.isfinite(a.jct_s)) and (a.jct_s > 0).all()
    # No QPU runs two jobs at once.
    for spans in a.busy_intervals.values():
        spans = sorted(spans)
        assert all(s2[0] >= s1[1] - 1e-9 for s1, s2 in zip(spans, spans[1:], strict=False))


def test_fcfs_piles_on_the_best_qpu_and_qonductor_trades_a_little_fidelity_for_jct() -> None:
    w = workload()
    fcfs = simulate(w, "fcfs", seed=1, triggers=FAST, nsga2_options=QUICK).metrics()
    qon = simulate(w, "qonductor-paper", seed=1, triggers=FAST, nsga2_options=QUICK).metrics()
    assert fcfs["our_load_s"]["good"] == 0 and fcfs["our_load_s"]["ok"] == 0
    assert qon["mean_jct_s"] < 0.5 * fcfs["mean_jct_s"]
    assert qon["mean_fidelity"] >= 0.95 * fcfs["mean_fidelity"]
    assert qon["mean_utilization"] > fcfs["mean_utilization"]


@pytest.mark.slow
def test_load_balancing_evens_the_hour_out() -> None:
    w = workload()
    free = simulate(w, "qonductor-paper", seed=1, triggers=FAST, nsga2_options=QUICK, balance=None)
    even = simulate(w, "qonductor-paper", seed=1, triggers=FAST, nsga2_options=QUICK, balance=0.05)
    # Unbalanced, the favourite QPU carries most of the work; balanced, every QPU within ~15%
    # (5% per cycle, give or take a job, and real run times off their estimates).
    assert free.metrics()["max_load_difference"] > 0.5
    assert even.metrics()["max_load_difference"] < 0.2
    assert even.metrics()["completed"] == w.num_jobs


def test_reserved_qpu_starts_nothing_in_its_window() -> None:
    w = workload()
    window = Reservation("best", 100.0, 400.0)
    for policy in ("qonductor-paper", "qonductor", "fcfs"):
        run = simulate(w, policy, seed=1, triggers=FAST, nsga2_options=QUICK, reservations=[window])
        for lo, _ in run.busy_intervals["best"]:
            assert not 100.0 <= lo < 400.0


@pytest.mark.slow
def test_calibration_crossover_moves_waiting_jobs() -> None:
    w = workload(n=150)
    # QPU 0 recalibrates at 5 min and loses a lot: jobs waiting on it are placed again. Without
    # load balancing, so that jobs queue up on the favourite QPU.
    run = simulate(
        w,
        "qonductor-paper",
        seed=1,
        triggers=FAST,
        nsga2_options=QUICK,
        calibrations=[(300.0, 0)],
        drift_sigma=0.0,
        balance=None,
    )
    assert run.metrics()["completed"] == w.num_jobs
    worse = simulate(
        w,
        "qonductor-paper",
        seed=1,
        triggers=FAST,
        nsga2_options=QUICK,
        calibrations=[(300.0, 0)],
        drift_sigma=2.0,
        balance=None,
    )
    assert worse.metrics()["completed"] == w.num_jobs
    assert worse.crossover_moves > 0


def test_background_load_matches_its_utilisation() -> None:
    rates = synthetic_rates(4, 0.3, seed=2)
    assert rates.mean() == pytest.approx(0.3, rel=1e-6)
    jobs = background_jobs(rates, hours=2.0, seed=2)
    busy = sum(d for _, _, d in jobs) / (4 * 7200)
    assert busy == pytest.approx(0.3, rel=0.15)
    assert [t for t, _, _ in jobs] == sorted(t for t, _, _ in jobs)


@pytest.mark.slow
def test_simulate_command_writes_results_and_plots(tmp_path, monkeypatch, capsys) -> None:
    from kernel_server.simulation.cli import build_parser, main

    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path / "home"))
    out = tmp_path / "results.json"
    code = main(
        [
            "--jobs-per-hour", "300", "--qpus", "2", "--hours", "0.1", "--seed", "1",
            "--policies", "qonductor,fcfs,least-busy,round-robin",
            "--out", str(out), "--plots", str(tmp_path / "plots"),
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text())
    for policy in ("qonductor", "fcfs", "least-busy", "round-robin"):
        for key in ("mean_jct_s", "p95_jct_s", "mean_fidelity", "mean_utilization"):
            assert np.isfinite(results[policy][key])
        assert 0.0 <= results[policy]["max_load_difference"] <= 1.0
    assert results["wall_seconds"] > 0
    table = capsys.readouterr().out
    assert "qonductor" in table and "round-robin" in table
    assert len(list((tmp_path / "plots").glob("*.png"))) == 3
    assert main(["--policies", "sjf", "--qpus", "2"]) == 2
    assert "unknown policy 'sjf'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--balance", "lots"])
    assert "a tolerance >= 0 such as 0.1, or 'off'" in capsys.readouterr().err
    assert build_parser().parse_args(["--balance", "off"]).balance is None


def test_simulate_command_prints_the_time_indexed_bound_on_request(
    tmp_path, monkeypatch, capsys
) -> None:
    from kernel_server.simulation.cli import main

    monkeypatch.setenv("QONDUCTOR_HOME", str(tmp_path / "home"))
    out = tmp_path / "results.json"
    argv = ["--jobs-per-hour", "1200", "--qpus", "2", "--hours", "0.05", "--plots", ""]
    argv += ["--policies", "least-busy,earliest-completion", "--out", str(out)]
    assert main([*argv, "--time-indexed-bound"]) == 0
    results = json.loads(out.read_text())
    tight = results["time_indexed_bound_jct_s"]
    for policy in ("least-busy", "earliest-completion"):
        assert results[policy]["lower_bound_jct_s"] <= tight <= results[policy]["mean_jct_s"]
    assert f"tighter, the time-indexed LP: {tight:.2f} s" in capsys.readouterr().out
    assert main(argv) == 0  # minutes on a big cloud: only on request
    assert "time_indexed_bound_jct_s" not in json.loads(out.read_text())
