"""The readout correction's projection onto probabilities, against qiskit's."""

from __future__ import annotations

import numpy as np
import pytest
from qiskit.result import QuasiDistribution

from kernel_server.estimator.mitigation.rem import nearest_probability_distribution

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("bits", [1, 3, 6, 10])
def test_the_nearest_distribution_equals_qiskits(bits: int) -> None:
    rng = np.random.default_rng(bits)
    quasi = rng.normal(1.0, 1.5, 2**bits)
    quasi /= quasi.sum()
    ours = nearest_probability_distribution(quasi)
    theirs = QuasiDistribution(dict(enumerate(quasi))).nearest_probability_distribution()
    dense = np.zeros(2**bits)
    for key, value in theirs.items():
        dense[key] = value
    assert np.allclose(ours, dense, atol=1e-12)
    assert ours.min() >= 0 and ours.sum() == pytest.approx(1.0)
