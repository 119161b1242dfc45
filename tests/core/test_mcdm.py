"""The decision helpers against the libraries they stand beside (pymoo)."""

from __future__ import annotations

import numpy as np
import pytest
from pymoo.mcdm.pseudo_weights import PseudoWeights

from kernel_server.core.mcdm import front_2d, pareto_ranks, pseudo_weights, select

pytestmark = pytest.mark.unit


def test_pseudo_weights_equal_pymoos_on_fronts_with_spread() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = np.sort(rng.random(6))
        front = np.column_stack([x, 1 - x**2])  # a convex 2-D front, spread on both axes
        _, theirs = PseudoWeights(np.array([0.5, 0.5])).do(front, return_pseudo_weights=True)
        assert np.allclose(pseudo_weights(front), theirs)


def test_pseudo_weights_stay_defined_where_pymoo_divides_by_zero() -> None:
    one = np.array([[3.0, 0.2]])
    flat = np.array([[1.0, 0.2], [2.0, 0.2]])  # no spread on the second objective
    with np.errstate(invalid="ignore", divide="ignore"):
        _, theirs = PseudoWeights(np.array([0.5, 0.5])).do(one, return_pseudo_weights=True)
    assert np.isnan(theirs).any()
    assert pseudo_weights(one).tolist() == [[0.5, 0.5]]
    # The worst point on the spread objective carries no preference: equal weights.
    assert pseudo_weights(flat).tolist() == [[1.0, 0.0], [0.5, 0.5]]
    assert select(flat, "jct") == 0


def test_ranks_and_the_2d_front_agree() -> None:
    rng = np.random.default_rng(3)
    points = rng.random((200, 2))
    assert set(front_2d(points)) == set(np.flatnonzero(pareto_ranks(points) == 0))
    assert pareto_ranks(np.zeros((0, 3))).shape == (0,)
