"""curvature_gap.experiments.convergence: Fig. 6's EMA and log-log trend (its numbers: test_experiments_init), and its
one claim row on either model."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from curvature_gap import experiments
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


def _result(meta, arrays=None, profile="paper"):
    return SimpleNamespace(meta=meta, arrays=arrays or {}, config={"profile": profile}, json_path="results/x.json")


def test_one_slope_row_reads_either_model_and_can_fail():
    """Fig. 6's row on the authors' model is the same rule and row as the theorem's (``convergence_slope``), named by
    the result: its what, command, stand-in note and data count are the authors' loader's."""
    standin6 = _result({"fit": {"slope": -1.099, "r2": 0.82}})
    row = cv.convergence_slope(None, standin6, experiments.spec("fig6_authors"))
    assert row.verdict == "not run" and row.result == row.id.split(".")[0] == "fig6_authors" and "-1.099" in row.note
    assert "CIFAR-100" in row.note and "fig6_authors" in row.command and "the authors' 8-block" in row.what
    good = cv.convergence_slope(_result({"fit": {"slope": -0.95, "r2": 0.9}, "n_batches": 10166}), None,
                              experiments.spec("fig6_authors"))
    bad = cv.convergence_slope(_result({"fit": {"slope": -1.3, "r2": 0.9}, "n_batches": 10166}), None,
                              experiments.spec("fig6_authors"))
    assert (good.verdict, bad.verdict) == ("reproduced", "not reproduced")
    assert good.note.endswith("10,166 batches of their loader") and good.tolerance == cv.SLOPE_TOL
    theirs = cv.convergence_slope(_result({"fit": {"slope": -0.95, "r2": 0.9}, "n_samples": 50000}), None,
                                  experiments.spec("fig6"))
    assert theirs.id == "fig6.slope" and theirs.note.endswith("50,000 samples") and "authors" not in theirs.what
    # the rows sit with each model's result, one verdict per model
    assert experiments.spec("fig6_authors").finding.key == "fig6_authors" and experiments.spec("fig6").finding.key == "fig6"
    assert experiments.spec("fig6_authors_mnist").finding is None
