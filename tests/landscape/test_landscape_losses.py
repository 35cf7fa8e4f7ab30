"""curvature_gap.landscape.losses: per-sample losses, running means L_k and their differences (Fig. 6)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cases import SMALL_MODEL, random_batch
from curvature_gap.landscape import losses as ls
from curvature_gap.model import build_model


def test_per_sample_losses_equal_a_direct_computation_in_any_batching():
    m = build_model("mnist", seed=1, **SMALL_MODEL)
    x, y = random_batch(50, seed=2)
    with torch.no_grad():
        direct = nn.functional.cross_entropy(m(x), y, reduction="none").double().numpy()
    got = ls.per_sample_losses(m, x, y, batch_size=7)
    assert got.dtype == np.float64 and got.shape == (50,)
    np.testing.assert_allclose(got, direct, rtol=1e-6)
    assert np.array_equal(got, ls.per_sample_losses(m, x, y, batch_size=7))
    m.train()
    ls.per_sample_losses(m, x, y)
    assert m.training, "the model's mode is restored"
    # params= evaluates other weights without touching the model
    params = {k: v.detach() * (1.5 if k == "head.weight" else 1.0) for k, v in m.named_parameters()}
    shifted = ls.per_sample_losses(m, x, y, params=params)
    assert not np.allclose(shifted, got) and np.array_equal(ls.per_sample_losses(m, x, y, batch_size=7), got)


def test_running_means_and_batch_running_means():
    losses = np.array([1.0, 3.0, 2.0, 6.0, 4.0, 8.0, 5.0])
    np.testing.assert_allclose(ls.running_means(losses), [1, 2, 2, 3, 3.2, 4, 29 / 7])
    # batches of 2 in dataset order: means 2, 4, 6 (the last, incomplete batch is dropped)
    np.testing.assert_allclose(ls.batch_running_means(losses, 2), [2, 3, 4])
    np.testing.assert_allclose(ls.batch_running_means(losses, 2, order=[6, 5, 4, 3, 2, 1, 0]), [6.5, 5.75, 14 / 3])   # batch means 6.5, 5, 2.5


def test_loss_difference_identity_and_iid_slope_is_minus_one():
    rng = np.random.default_rng(0)
    losses = rng.exponential(0.7, 8192)
    D = ls.loss_differences(losses, batch_size=8, n_permutations=64, seed=1)
    assert D.shape == (64, 1023)
    # exact identity for one order: L_{k+1} - L_k = (b_{k+1} - L_k) / (k + 1)
    perm = np.random.default_rng(1).permutation(8192)
    b = losses[perm].reshape(1024, 8).mean(1)
    L = np.cumsum(b) / np.arange(1, 1025)
    np.testing.assert_allclose(D[0], np.abs((b[1:] - L[:-1]) / np.arange(2, 1025)), rtol=1e-10, atol=1e-15)
    slope = np.polyfit(np.log(np.arange(4, 1024)), np.log(D.mean(0)[3:]), 1)[0]
    assert -1.1 < slope < -0.9
    assert ls.identity_residual(losses) < 1e-12 and ls.identity_residual(losses[:1]) == 0.0


def test_too_few_batches_is_a_clear_error():
    with pytest.raises(ValueError, match="20 samples make only 2 batches of 8; need at least 3"):
        ls.loss_differences(np.ones(20), batch_size=8, n_permutations=2)
