"""curvature_gap.landscape.assumption1: ‖∇L_k(w*)‖ over orders of the data (Fig. 12) and its exact mean."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cases import TINY_MODEL
from curvature_gap.landscape import assumption1 as a1
from curvature_gap.model import build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _full_grad_norm(m, x, y) -> float:
    g = torch.autograd.grad(torch.nn.functional.cross_entropy(m(x), y), list(m.parameters()))
    return float(torch.cat([t.reshape(-1) for t in g]).norm())


def test_gradient_norms_decrease_in_k_and_end_at_the_full_gradient(tiny_datasets):
    m = build_model("mnist", seed=0, **TINY_MODEL)
    x, y = tiny_datasets.train.images[:256], tiny_datasets.train.labels[:256]
    ks = a1.k_grid(256, 12)
    assert ks[0] == 1 and ks[-1] == 256 and np.all(np.diff(ks) > 0)
    G = a1.order_gradient_norms(m, x, y, ks, n_orders=8, seed=0, device="cpu", chunk=64)
    mean = G.mean(0)
    assert G.shape == (8, len(ks))
    assert mean[0] > 2 * mean[len(ks) // 2] > 2 * mean[-1] * 0.999
    np.testing.assert_allclose(G[:, -1], _full_grad_norm(m, x, y), rtol=1e-5)   # at k = N every order agrees


def test_exact_mean_square_gradient_over_orders_matches_sampling(tiny_datasets):
    m = build_model("mnist", seed=0, **TINY_MODEL)
    x, y = tiny_datasets.train.images[:48], tiny_datasets.train.labels[:48]
    gbar, msq = a1.per_sample_gradient_moments(m, x, y, "cpu", chunk=16)
    rows = []
    for i in range(48):  # per-sample gradients, one backward each
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(m(x[i:i + 1]), y[i:i + 1]), list(m.parameters()))
        rows.append(torch.cat([t.reshape(-1) for t in g]).double().numpy())
    Gs = np.stack(rows)
    np.testing.assert_allclose(gbar, Gs.mean(0), rtol=1e-4, atol=1e-7)
    assert msq == pytest.approx(float((Gs ** 2).sum(1).mean()), rel=1e-4)
    rng = np.random.default_rng(0)
    gbar2 = float(gbar @ gbar)
    for k in (1, 5, 20, 48):
        mc = np.mean([np.sum(Gs[rng.choice(48, k, replace=False)].mean(0) ** 2) for _ in range(4000)])
        exact = a1.expected_grad_norm_sq(np.array([k]), gbar2, msq - gbar2, 48)[0]
        assert exact == pytest.approx(mc, rel=0.04), k
    assert a1.expected_grad_norm_sq(np.array([48]), gbar2, msq - gbar2, 48)[0] == pytest.approx(gbar2)


def test_claim_test_reads_the_slope_at_small_k():
    ks = np.arange(1, 101)
    down = a1.claim_test(ks, 3.0 / np.sqrt(ks), 1000)
    assert down["slope_small_k"] == pytest.approx(-0.5) and down["decreasing"]
    up = a1.claim_test(ks, np.sqrt(ks), 1000)
    assert up["slope_small_k"] == pytest.approx(0.5) and not up["decreasing"]


def test_measure_returns_what_fig12_and_the_rows_need(tiny_datasets):
    m = build_model("mnist", seed=0, **TINY_MODEL)
    x, y = tiny_datasets.train.images[:64], tiny_datasets.train.labels[:64]
    res = a1.measure(m, x, y, n_points=8, n_orders=2, seed=0, device="cpu", chunk=32)
    assert set(res) >= {"k", "grad_norms", "mean", "rms_exact", "grad_mean", "grad_norm_full",
                        "rms_per_sample_grad_norm", "sigma2", "k_floor", "n_samples", "slope_small_k", "decreasing"}
    assert res["grad_norm_full"] == pytest.approx(_full_grad_norm(m, x, y), rel=1e-4)
    assert res["rms_exact"][-1] == pytest.approx(res["grad_norm_full"], rel=1e-6)   # at k = N: the full gradient
    assert res["n_samples"] == 64 and res["grad_norms"].shape == (2, len(res["k"]))
