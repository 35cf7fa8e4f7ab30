"""curvature_gap.experiments.convergence: Fig. 6's EMA and log-log trend (its numbers: test_experiments_init)."""
from __future__ import annotations

import numpy as np
import pytest

from curvature_gap.experiments import convergence as cv
from curvature_gap.landscape.losses import loss_differences


def test_ema():
    np.testing.assert_allclose(cv.ema(np.array([4.0, 0.0, 0.0]), 0.5), [4.0, 2.0, 1.0])
    np.testing.assert_allclose(cv.ema(np.array([1.0, 3.0]), 0.0), [1.0, 3.0])


def test_loglog_ema_keeps_the_slope_of_a_power_law():
    k = np.arange(1, 2001)
    kk, e = cv.loglog_ema(k, 3.0 / k, beta=0.5)
    assert kk[0] == 1 and kk[-1] == pytest.approx(2000)
    slope = np.polyfit(np.log10(kk[10:]), np.log10(e[10:]), 1)[0]
    assert abs(slope + 1) < 1e-4
    assert np.all(e[10:] / (3.0 / kk[10:]) < 1.13)  # lag of one point = 0.05 decade


def test_fit_loglog_recovers_the_iid_slope_of_minus_one():
    losses = np.random.default_rng(0).exponential(0.7, 8192)
    D = loss_differences(losses, batch_size=8, n_permutations=64, seed=1)
    fit = cv.fit_loglog(np.arange(1, 1024), D.mean(0), k_min=4, n_points=40)
    assert -1.1 < fit["slope"] < -0.9 and fit["r2"] > 0.98
    assert fit["k_fit"][0] == 4 and fit["k_fit"][-1] == 1023
    exact = cv.fit_loglog(np.arange(1, 101), 5.0 * np.arange(1, 101) ** -2.0, k_min=1, n_points=10)
    assert exact["slope"] == pytest.approx(-2.0) and exact["intercept"] == pytest.approx(np.log10(5.0))
    assert exact["r2"] == pytest.approx(1.0)
