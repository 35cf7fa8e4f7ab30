"""curvature_gap.exact.derivatives: the autograd and finite-difference references every closed form is checked against."""
from __future__ import annotations

import pytest
import torch
from torch.func import hessian

from cases import randn, tiny_instance
from curvature_gap.exact import derivatives as ad
from curvature_gap.exact import forward as fw

pytestmark = pytest.mark.usefixtures("one_thread")


def test_jacobian_of_a_matrix_product_is_the_kronecker_form():
    # vec_r(A X B) = (A ⊗ Bᵀ) vec_r(X): the paper's numerator layout with row-major vectorisation
    A, X, B = randn(2, 3, seed=0), randn(3, 4, seed=1), randn(4, 5, seed=2)
    J = ad.jacobian(lambda a, x, b: a @ x @ b, [A, X, B], 1)
    assert J.shape == (10, 12)
    torch.testing.assert_close(J, torch.kron(A, B.T.contiguous()), rtol=1e-14, atol=1e-14)


def test_second_derivative_layout_and_finite_differences():
    X, W = randn(3, 2, seed=3), randn(2, 2, seed=4)
    f = lambda x, w: torch.tanh(x @ w)  # noqa: E731
    H = ad.second_derivative(f, [X, W], 1, 1)
    assert H.shape == (6 * 4, 4)                       # (out · n_i, n_j)
    # entry [(a, b), c] = ∂²f_a / ∂w_b ∂w_c, symmetric in b and c for each output a
    T = H.reshape(6, 4, 4)
    torch.testing.assert_close(T, T.transpose(1, 2), rtol=0, atol=1e-14)
    fd = ad.fd_second_derivative(f, [X, W], 1, 1)
    assert float((fd - H).abs().max()) < 1e-8 * float(H.abs().max())
    cross = ad.second_derivative(f, [X, W], 0, 1)
    assert cross.shape == (6 * 6, 4)


def test_loss_hessian_autograd_equals_finite_differences_and_is_symmetric():
    inst = tiny_instance(L=3, d=3, seed=5, sharpness=2.0, away_from_kinks=True)  # d_V = 2 makes LN(·) = ±1: constant
    H = ad.loss_hessian_autograd(inst)
    n = sum(getattr(inst, k).numel() for k in ("W_1", "W_2", "W_K", "W_Q", "W_V"))
    assert H.shape == (n, n)
    assert float((H - H.T).abs().max()) <= 1e-12 * float(H.abs().max())
    fd = ad.fd_loss_hessian(inst)
    assert float((fd - H).abs().max()) < 1e-6 * float(H.abs().max())


def test_flat_loss_orders_the_weights_as_asked():
    inst = tiny_instance(L=3, d=2, seed=6)
    f, x, sizes = ad.flat_loss(inst, ("V", "Q"), "sa")
    assert sizes == [4, 4]
    torch.testing.assert_close(x, torch.cat([inst.W_V.reshape(-1), inst.W_Q.reshape(-1)]))
    assert float(f(x)) == pytest.approx(float(fw.sa_loss(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)), rel=1e-14)
    blocks = ad.sa_loss_hessian_autograd(inst)
    full = hessian(ad.flat_loss(inst, ad.SA_ORDER, "sa")[0])(ad.flat_loss(inst, ad.SA_ORDER, "sa")[1])
    torch.testing.assert_close(blocks[("K", "V")], full[4:8, 8:12], rtol=0, atol=0)
    torch.testing.assert_close(blocks[("V", "K")], blocks[("K", "V")].T, rtol=0, atol=1e-14)


def test_block_slices_are_contiguous_in_order_and_split_blocks_cuts_at_them():
    assert ad.block_slices(("a", "b", "c"), (2, 4, 1)) == {"a": slice(0, 2), "b": slice(2, 6), "c": slice(6, 7)}
    H = torch.arange(49.0).reshape(7, 7)
    blocks = ad.split_blocks(H, ("a", "b", "c"), (2, 4, 1))
    assert list(blocks) == [(p, q) for p in "abc" for q in "abc"]
    assert torch.equal(blocks[("b", "c")], H[2:6, 6:7]) and torch.equal(blocks[("a", "b")], H[0:2, 2:6])
    assert torch.equal(torch.cat([torch.cat([blocks[(p, q)] for q in "abc"], 1) for p in "abc"], 0), H)


def test_dense_hessian_and_hessian_norm_dense_and_lanczos_agree():
    A = randn(70, 70, seed=7)
    A = A + A.T
    f = lambda v: 0.5 * v @ A @ v + (v ** 3).sum() / 6  # noqa: E731 - Hessian A + diag(v)
    x = randn(70, seed=8)
    H = ad.dense_hessian(f, x, chunk=16)
    torch.testing.assert_close(H, A + torch.diag(x), rtol=1e-12, atol=1e-12)
    ref = float(torch.linalg.eigvalsh(A + torch.diag(x)).abs().max())
    assert ad.hessian_norm(f, x) == pytest.approx(ref, rel=1e-12)
    assert ad.hessian_norm(f, x, dense=False) == pytest.approx(ref, rel=1e-8)   # n > 64: ARPACK
