"""curvature_gap.exact.forward: the theory's block and self-attention layer, written as the paper writes them."""
from __future__ import annotations

import math

import pytest
import torch

from cases import randn, tiny_instance
from curvature_gap.exact import forward as fw


def _ln(u):
    m = u - u.mean(1, keepdim=True)
    return m / m.pow(2).mean(1, keepdim=True).sqrt()


def test_block_forward_is_the_papers_equation():
    inst = tiny_instance(L=4, d=3, seed=1, sharpness=2.0)
    X, WQ, WK, WV, W1, W2 = inst.X, *inst.weights
    T = X @ WQ @ WK.T @ X.T / math.sqrt(inst.d_K)
    A = torch.softmax(T, dim=1)
    F = A @ X @ WV
    U = X + F
    Y = _ln(U)
    Pre = Y @ W1
    S = torch.relu(Pre) @ W2 + Y
    Z = _ln(S)
    out = fw.block_forward(X, *inst.weights)
    for name, ref in dict(A=A, F=F, U=U, Y=Y, Pre=Pre, S=S, Z=Z).items():
        torch.testing.assert_close(out[name], ref, rtol=1e-13, atol=1e-13, msg=name)
    torch.testing.assert_close(fw.scores(X, WQ, WK), T, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(fw.attention_matrix(X, WQ, WK), A, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(fw.softmax_rows(T), A, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(fw.sa_forward(X, WQ, WK, WV), F, rtol=1e-14, atol=1e-14)
    parts = fw.sa_parts(X, WQ, WK, WV)
    for name, ref in dict(T=T, A=A, F=F).items():
        torch.testing.assert_close(parts[name], ref, rtol=1e-13, atol=1e-14, msg=name)
    assert torch.equal(parts["F"], fw.sa_forward(X, WQ, WK, WV)), "one forward: bit for bit"
    torch.testing.assert_close(fw.ffn_residual(Y, W1, W2), S, rtol=1e-14, atol=1e-14)
    M = U - U.mean(1, keepdim=True)
    torch.testing.assert_close(fw.inv_std(U), 1 / M.pow(2).mean(1).sqrt(), rtol=1e-14, atol=0)  # diag of P, Thm 2
    for k in ("U", "Y", "S", "Z"):
        assert torch.equal(fw.block_output(X, *inst.weights, out=k), out[k])


def test_losses_are_the_mse_over_L_times_dV():
    inst = tiny_instance(L=3, d=2, seed=2)
    L, d = inst.X.shape
    F = fw.sa_forward(inst.X, inst.W_Q, inst.W_K, inst.W_V)
    Z = fw.block_output(inst.X, *inst.weights)
    assert float(fw.sa_loss(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)) == pytest.approx(
        float(((F - inst.Target) ** 2).sum()) / (L * d), rel=1e-14)
    assert float(fw.block_loss(inst.X, *inst.weights, inst.Target)) == pytest.approx(
        float(((Z - inst.Target) ** 2).sum()) / (L * d), rel=1e-14)


def test_layernorm_rows_have_zero_mean_and_unit_population_variance():
    Y = fw.layernorm(randn(5, 7, seed=3) * 4 + 2)
    torch.testing.assert_close(Y.mean(1), torch.zeros(5, dtype=torch.float64), rtol=0, atol=1e-14)
    torch.testing.assert_close(Y.pow(2).mean(1), torch.ones(5, dtype=torch.float64), rtol=1e-13, atol=0)


def test_layernorm_of_a_constant_row_raises_instead_of_nan():
    U = randn(3, 4, seed=4)
    U[2] = 1.5
    with pytest.raises(ValueError, match="Assumption 2"):
        fw.layernorm(U)
