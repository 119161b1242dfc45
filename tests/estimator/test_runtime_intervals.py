"""Runtime intervals: conformal coverage on a synthetic set with known noise, and the shipped
model's intervals around its predictions."""

import numpy as np
import pandas as pd
import pytest

from kernel_server.estimator.runtime import FEATURES, RuntimeModel
from kernel_server.estimator.runtime_intervals import (
    LOG_OFFSET_S,
    ConformalIntervals,
    held_out_coverage,
)

pytestmark = pytest.mark.unit


def synthetic(n, seed, sigma=0.4):
    """Jobs whose true time is the prediction times a log-normal factor of known width."""
    rng = np.random.default_rng(seed)
    predicted = rng.uniform(1.0, 60.0, n)
    single = rng.random(n) < 0.6
    y = (predicted + LOG_OFFSET_S) * np.exp(rng.normal(0.0, sigma, n)) - LOG_OFFSET_S
    return single, np.maximum(y, 0.0), predicted


@pytest.mark.parametrize("coverage", [0.5, 0.8, 0.95])
def test_intervals_cover_what_they_promise_on_fresh_jobs(coverage):
    single, y, predicted = synthetic(8000, seed=1)
    calibration = ConformalIntervals.calibrate(single, y, predicted)
    fresh_single, fresh_y, fresh_predicted = synthetic(20000, seed=2)
    low, high = calibration.bounds(fresh_single, fresh_predicted, coverage)
    inside = (fresh_y >= low) & (fresh_y <= high)
    assert abs(inside.mean() - coverage) < 0.02
    # With log-normal noise the interval is the known quantiles of the factor.
    from scipy.stats import norm

    half = norm.ppf(0.5 + coverage / 2) * 0.4
    expected = (fresh_predicted + LOG_OFFSET_S) * (np.exp(half) - np.exp(-half))
    assert np.median((high - low) / expected) == pytest.approx(1.0, abs=0.06)


def test_cross_conformal_coverage_on_held_out_folds():
    single, y, predicted = synthetic(5000, seed=3)
    folds = np.random.default_rng(4).integers(0, 5, len(y))
    found = held_out_coverage(single, y, predicted, folds, coverage=0.8)
    assert 0.78 <= found["coverage"] <= 0.82
    assert 0.76 <= found["single_coverage"] <= 0.84 and 0.76 <= found["multi_coverage"] <= 0.84


def test_intervals_survive_their_json_and_refuse_a_bad_coverage():
    single, y, predicted = synthetic(500, seed=5)
    calibration = ConformalIntervals.calibrate(single, y, predicted)
    again = ConformalIntervals.from_json(calibration.to_json())
    a = calibration.bounds(single, predicted, 0.8)
    b = again.bounds(single, predicted, 0.8)
    assert np.allclose(a[0], b[0], atol=1e-3) and np.allclose(a[1], b[1], atol=1e-3)
    with pytest.raises(ValueError, match="coverage must be between 0 and 1"):
        calibration.bounds(single, predicted, 1.0)


def test_the_shipped_model_gives_an_interval_around_its_prediction():
    model = RuntimeModel.load()
    frame = pd.DataFrame(
        [[2, 5, 2, 4000, 1], [40, 200, 10, 4000, 84], [0, 1, 1, 100, 1]], columns=list(FEATURES)
    )
    point = model.predict(frame)
    low, high = model.predict_interval(frame, coverage=0.8)
    assert np.all(low <= point) and np.all(point <= high) and np.all(low >= 0)
    narrow, wide = model.predict_interval(frame, 0.5), model.predict_interval(frame, 0.95)
    assert np.all(wide[1] - wide[0] >= high - low) and np.all(high - low >= narrow[1] - narrow[0])
