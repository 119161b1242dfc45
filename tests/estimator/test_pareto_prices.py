"""Pareto ranking and the price table (pure)."""

import itertools

import numpy as np
import pytest

from kernel_server.core.mcdm import as_minimization, dominates, pareto_ranks
from kernel_server.estimator.prices import PriceTable


def test_front_is_exactly_the_non_dominated_set():
    rng = np.random.default_rng(3)
    points = as_minimization(rng.random(60), rng.random(60) * 10, rng.random(60))
    ranks = pareto_ranks(points)
    for i in range(len(points)):
        dominated = any(dominates(points[j], points[i]) for j in range(len(points)))
        assert (ranks[i] == 0) == (not dominated)


def test_every_point_of_a_rank_is_dominated_by_the_rank_before():
    rng = np.random.default_rng(4)
    points = rng.random((80, 3))
    ranks = pareto_ranks(points)
    for r in range(1, ranks.max() + 1):
        for i in np.flatnonzero(ranks == r):
            assert any(dominates(points[j], points[i]) for j in np.flatnonzero(ranks == r - 1))
    # and no point dominates another of the same rank
    for r in range(ranks.max() + 1):
        same = np.flatnonzero(ranks == r)
        for i, j in itertools.permutations(same, 2):
            assert not dominates(points[i], points[j])


def test_hand_case():
    fid, run, cost = [0.9, 0.8, 0.95, 0.9], [10, 5, 20, 12], [1, 1, 2, 1]
    assert pareto_ranks(as_minimization(fid, run, cost)).tolist() == [0, 0, 0, 1]


def test_prices_follow_the_paper_ratio_and_accelerators_trade_time_for_money():
    prices = PriceTable()
    high_end = prices.accelerator("high-end-vm").dollars_per_hour
    assert 50 <= prices.qpu_dollars_per_hour / high_end <= 500
    slow_s, slow_cost = prices.cost(1.0, 80.0, "standard-vm")
    fast_s, fast_cost = prices.cost(1.0, 80.0, "high-end-vm")
    assert fast_s < slow_s and fast_cost > slow_cost
    with pytest.raises(ValueError, match="unknown accelerator"):
        prices.cost(1.0, 1.0, "quantum-toaster")
    custom = PriceTable.from_dict({"qpu_dollars_per_hour": 3600})
    assert custom.cost(1.0, 0.0, "standard-vm")[1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown price table keys"):
        PriceTable.from_dict({"qpu": 1})
