"""The online scheduler's load balance: a price on each QPU's load, not a per-decision floor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from kernel_server.scheduler.online import (
    BALANCE_MIN_LEVEL_S,
    BALANCE_OFF,
    BALANCE_OUT_OF_REACH,
    BALANCE_PRICE,
    OnlineScheduler,
    load_price,
    reachable_difference,
)
from kernel_server.simulation.cloud import simulate

pytestmark = pytest.mark.unit


@dataclass
class View:
    name: str
    num_qubits: int
    wait_s: float
    recent_busy_s: float = 0.0
    online: bool = True
    others_s: float = 0.0


def test_the_price_charges_a_qpu_over_the_even_level_and_credits_one_under() -> None:
    price = load_price(np.array([1100.0, 1000.0, 900.0]), tolerance=0.1)
    # One tolerance (10%) over the level: BALANCE_PRICE; as much under: the same credit.
    assert price == pytest.approx([BALANCE_PRICE, 0.0, -BALANCE_PRICE])
    # A fleet that has barely worked: 2 s apart is not 100% apart.
    small = load_price(np.array([2.0, 0.0]), tolerance=0.1)
    unit = BALANCE_PRICE / (BALANCE_MIN_LEVEL_S * 0.1)  # 1 s from a level of 1 s, read as of 60
    assert small == pytest.approx([unit, -unit])


def test_a_small_gain_goes_where_the_load_is_low_a_large_one_pays_the_price() -> None:
    # The better QPU has run 40% more than the other over the last hour.
    fleet = [View("busy", 27, 0.0, recent_busy_s=1200.0), View("idle", 27, 0.0, 800.0)]
    balanced = OnlineScheduler(preference="balanced", balance=0.1)
    balanced.add("small-gain", 5, [0.92, 0.90], [3.0, 3.0], now=0.0)
    balanced.add("large-gain", 5, [0.90, 0.50], [3.0, 3.0], now=0.0)
    starts = dict(balanced.step(fleet, now=0.0))
    assert starts == {"small-gain": 1, "large-gain": 0}
    # Without balance both go to the better QPU.
    free = OnlineScheduler(preference="balanced", balance=BALANCE_OFF)
    free.add("small-gain", 5, [0.92, 0.90], [3.0, 3.0], now=0.0)
    assert free.step(fleet, now=0.0) == [("small-gain", 0)]


def test_the_reachable_difference_fills_the_least_loaded_qpus_first() -> None:
    # 1000 s of our work lifts the idle QPU to the others: even.
    assert reachable_difference(np.array([0.0, 1000.0, 1000.0]), 1000.0) == pytest.approx(0.0)
    # 600 s over two idle QPUs beside one with 3000 s of other users' work: 300 s each at best.
    assert reachable_difference(np.array([0.0, 0.0, 3000.0]), 600.0) == pytest.approx(0.9)
    # Enough to fill the gap: the rest spreads evenly, nothing is left uneven.
    assert reachable_difference(np.array([0.0, 100.0]), 10_000.0) == pytest.approx(0.0)
    # A fleet that has barely worked is not unbalanced.
    assert reachable_difference(np.array([0.0, 30.0]), 0.0) == 0.0


def test_balance_out_of_our_reach_costs_no_fidelity() -> None:
    # Other users keep the better QPU 30x as busy as the other: no placement of our few seconds
    # of work evens that out, so the small gain is taken as without balance.
    fleet = [
        View("busy", 27, 0.0, recent_busy_s=3000.0, others_s=3000.0),
        View("idle", 27, 0.0, recent_busy_s=100.0, others_s=100.0),
    ]
    assert reachable_difference(np.array([3000.0, 100.0]), 3.0) > BALANCE_OUT_OF_REACH
    s = OnlineScheduler(preference="balanced", balance=0.1)
    s.add("small-gain", 5, [0.92, 0.90], [3.0, 3.0], now=0.0)
    assert s.step(fleet, now=0.0) == [("small-gain", 0)]
    # The same load, ours (no share of it known to be other users'): it moves as we place, so
    # it is priced and the small gain goes to the idle QPU.
    ours = [View("busy", 27, 0.0, recent_busy_s=3000.0), View("idle", 27, 0.0, 100.0)]
    s.add("next", 5, [0.92, 0.90], [3.0, 3.0], now=1.0)
    assert s.step(ours, now=1.0) == [("next", 1)]


def test_long_jobs_pay_for_the_load_they_are() -> None:
    # Same fidelity gap, one job 5x as long as the typical one: it goes where the load is low.
    fleet = [View("busy", 27, 0.0, recent_busy_s=1200.0), View("idle", 27, 0.0, 800.0)]
    s = OnlineScheduler(preference="balanced", balance=0.1)
    for k in range(20):  # the typical job: 3 s
        s.add(f"typical{k}", 5, [0.9, 0.9], [3.0, 3.0], now=0.0)
    s.pending.clear()
    s.add("short", 5, [0.95, 0.80], [3.0, 3.0], now=0.0)
    s.add("long", 5, [0.95, 0.80], [15.0, 15.0], now=0.0)
    assert dict(s.step(fleet, now=0.0)) == {"short": 0, "long": 1}


def test_the_fleet_files_balance_overrides_the_presets() -> None:
    # jct and balanced keep 0.1 by default; fidelity a looser 0.3.
    assert OnlineScheduler(preference="jct").tolerance() == 0.1
    assert OnlineScheduler(preference="balanced").tolerance() == 0.1
    assert OnlineScheduler(preference="fidelity").tolerance() == 0.3
    assert OnlineScheduler(preference="fidelity", balance=0.2).tolerance() == 0.2
    assert OnlineScheduler(preference="jct", balance=BALANCE_OFF).tolerance() is None


@pytest.mark.slow
def test_the_balanced_preset_evens_the_hours_load_by_default() -> None:
    from kernel_server.simulation.cli import build_parser, workload_and_background

    args = build_parser().parse_args(["--jobs-per-hour", "3000", "--qpus", "4", "--hours", "0.25"])
    w, _ = workload_and_background(args)
    free = simulate(w, "qonductor", "balanced", seed=1, online_balance=BALANCE_OFF).metrics()
    even = simulate(w, "qonductor", "balanced", seed=1).metrics()
    assert free["max_load_difference"] > 0.2  # 28% measured, 4% with balance
    assert even["max_load_difference"] <= 0.16
    assert even["completed"] == free["completed"] == w.num_jobs
