"""curvature_gap.theory.attention: self-attention Jacobians, softmax derivatives, Φ and the loss Hessian
blocks against autograd, and the printed forms that differ."""
from __future__ import annotations

import pytest
import torch
from torch.func import jacfwd, jacrev

from cases import tiny_instance
from curvature_gap.exact import derivatives as ad
from curvature_gap.exact.forward import sa_forward, softmax_rows
from curvature_gap.theory import attention as at

pytestmark = pytest.mark.usefixtures("one_thread")


def _inst():
    return tiny_instance(L=3, d=4, seed=11, sharpness=2.25)   # d_K = d_V = 4


def test_softmax_derivatives_equal_autograd():
    inst = _inst()
    T = inst.X @ inst.W_Q @ inst.W_K.T @ inst.X.T / 2.0
    A = softmax_rows(T)
    torch.testing.assert_close(at.dA_dT(A), jacrev(softmax_rows)(T).reshape(9, 9), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(at.d2A_dT2(A), jacfwd(jacrev(softmax_rows))(T).reshape(81, 9), rtol=1e-10, atol=1e-13)
    U = torch.full((3, 3), 1 / 3, dtype=torch.float64)
    torch.testing.assert_close(at.dA_dT_uniform(3), at.dA_dT(U), rtol=1e-14, atol=1e-15)


def test_jacobians_G_equal_autograd_and_the_printed_G_K_differs():
    inst = _inst()
    args = [inst.X, inst.W_Q, inst.W_K, inst.W_V]
    f = lambda X, q, k, v: sa_forward(X, q, k, v)  # noqa: E731
    G = at.jacobians(*args)
    for name, i in (("Q", 1), ("K", 2), ("V", 3)):
        ref = ad.jacobian(f, args, i)
        assert float((G[name] - ref).abs().max()) <= 1e-12 * float(ref.abs().max()), name
    ref_K = ad.jacobian(f, args, 2)
    # dF/dW_K as printed uses the commutation K_{d_V d_K} for K_{d_K, d_V}: wrong once d_K ≠ d_V
    rect = tiny_instance(L=3, d=4, seed=11, sharpness=2.25)
    rect.W_Q, rect.W_K = rect.W_Q[:, :2].contiguous(), rect.W_K[:, :2].contiguous()
    a2 = [rect.X, rect.W_Q, rect.W_K, rect.W_V]
    right = ad.jacobian(f, a2, 2)
    assert float((at.G_K(*a2) - right).abs().max()) <= 1e-12 * float(right.abs().max())
    assert float((at.G_K_printed(*a2) - right).abs().max()) > 1e-3 * float(right.abs().max())
    assert ref_K.shape == (12, 16)


@pytest.mark.parametrize("k, l", [("Q", "Q"), ("Q", "K"), ("V", "Q"), ("K", "V"), ("V", "V")])
def test_phi_is_the_second_derivative_of_F(k, l):
    inst = _inst()
    args = [inst.X, inst.W_Q, inst.W_K, inst.W_V]
    idx = {"Q": 1, "K": 2, "V": 3}
    ref = ad.second_derivative(lambda X, q, kk, v: sa_forward(X, q, kk, v), args, idx[k], idx[l])
    got = at.phi(*args, k, l)
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) <= 1e-11 * max(float(ref.abs().max()), 1.0)


def test_loss_hessian_blocks_sum_to_the_autograd_hessian():
    inst = _inst()
    blocks = at.loss_hessian_blocks(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)
    ref = ad.sa_loss_hessian_autograd(inst)
    for key, (Ho, Hf) in blocks.items():
        assert float((Ho + Hf - ref[key]).abs().max()) <= 1e-12 * float(ref[key].abs().max()), key
    assert not blocks[("V", "V")][1].any()      # F is linear in W_V: no functional part
