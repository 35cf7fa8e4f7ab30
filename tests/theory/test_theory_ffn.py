"""curvature_gap.theory.ffn: Lemma 1 and the feed-forward Jacobians of Theorem 4 against autograd."""
from __future__ import annotations

import pytest
import torch
from torch.func import jacrev

from cases import randn
from curvature_gap.exact.forward import ffn_residual
from curvature_gap.theory import ffn as ff

pytestmark = pytest.mark.usefixtures("one_thread")


def _jac(f, x):
    return jacrev(f)(x).reshape(-1, x.numel())


def test_relu_derivatives_off_the_kinks():
    X = randn(4, 5, seed=0)
    torch.testing.assert_close(ff.relu_jacobian(X), _jac(torch.relu, X), rtol=0, atol=0)
    assert ff.relu_hessian(X).shape == (400, 20) and not ff.relu_hessian(X).any()
    assert torch.equal(ff.relu_mask(X), (X > 0).double())


def test_ffn_jacobians_equal_autograd():
    Y, W1, W2 = randn(3, 4, seed=1), randn(4, 6, seed=2), randn(6, 4, seed=3)
    torch.testing.assert_close(ff.dS_dW1(Y, W1, W2), _jac(lambda w: ffn_residual(Y, w, W2), W1), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(ff.dS_dW2(Y, W1), _jac(lambda w: ffn_residual(Y, W1, w), W2), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(ff.dS_dY(Y, W1, W2), _jac(lambda y: ffn_residual(y, W1, W2), Y), rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(ff.D_sigma(Y, W1), torch.diag((Y @ W1 > 0).double().reshape(-1)))


def test_second_difference_along_W1_is_zero_between_kinks():
    Y, W1, W2, V = randn(3, 4, seed=4), randn(4, 6, seed=5), randn(6, 4, seed=6), randn(4, 6, seed=7)
    t = torch.linspace(-2, 2, 401, dtype=torch.float64)
    scan = ff.second_difference_along_W1(Y, W1, W2, V, t, entry=(1, 2))
    assert len(scan["kinks"]) >= 1 and len(scan["kinks"]) == len(scan["jumps"])
    assert scan["max_d2_away"] < 1e-6 * scan["max_d2"]      # piecewise linear: no curvature between kinks
    # the second differences at the two grid points around a kink add up to jump / h
    assert 0.49 * max(scan["jumps"]) / scan["h"] <= scan["max_d2"] <= sum(scan["jumps"]) / scan["h"] * (1 + 1e-9)
    s_ref = (torch.relu(Y[1] @ (W1[None] + t[:, None, None] * V[None])) @ W2[:, 2] + Y[1, 2]).numpy()
    assert abs(scan["s"] - s_ref).max() < 1e-12
