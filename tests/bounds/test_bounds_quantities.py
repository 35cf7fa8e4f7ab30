"""curvature_gap.bounds.quantities: the exact left-hand sides, against their definitions by dense autograd."""
from __future__ import annotations

import math

import pytest
import torch
from torch.func import hessian, jacfwd, jacrev

from cases import randn, tiny_instance
from curvature_gap.bounds import quantities as qt
from curvature_gap.theory import attention as at
from curvature_gap.exact import derivatives as ad
from curvature_gap.exact.forward import layernorm, sa_forward, sa_loss, softmax_rows

pytestmark = pytest.mark.usefixtures("one_thread")


def test_Z1_Z2_and_softmax_derivatives_match_definitions():
    inst = tiny_instance(L=3, d=2, sharpness=4.0)
    X, L = inst.X, 3
    T = X @ inst.W_Q @ inst.W_K.T @ X.T / math.sqrt(inst.d_K)
    A = softmax_rows(T)
    dA = jacrev(softmax_rows)(T).reshape(L * L, L * L)               # ∂vec_r A/∂vec_r T
    d2A = jacfwd(jacrev(softmax_rows))(T).reshape(L ** 4, L * L)      # (L²·L²) × L²
    I = torch.eye(L, dtype=torch.float64)
    Xt = X.T.contiguous()
    Z1 = torch.kron(I, Xt) @ dA @ torch.kron(X, X)
    assert torch.allclose(at.Z1(X, A), Z1, atol=1e-13)
    K4 = torch.kron(torch.kron(torch.kron(I, Xt), Xt), Xt)
    Z2 = K4 @ d2A @ torch.kron(X, X)
    assert at.Z2_norm(X, A) == pytest.approx(float(torch.linalg.matrix_norm(Z2, ord=2)), rel=1e-10)
    assert at.dA_dT_norm(A) == pytest.approx(float(torch.linalg.matrix_norm(dA, ord=2)), rel=1e-10)
    assert at.d2A_dT2_norm(A) == pytest.approx(float(torch.linalg.matrix_norm(d2A, ord=2)), rel=1e-10)
    K = at.d2A_dT2_blocks(A)                                          # Lemma C.1 closed form
    for i in range(L):
        for j in range(L):
            auto = hessian(lambda t: softmax_rows(t[None])[0][j])(T[i])
            assert torch.allclose(K[i, j], auto, atol=1e-13)
    S = at.S_shuffle(3)
    K33 = torch.zeros(9, 9, dtype=torch.float64)
    for a in range(3):
        for b in range(3):
            K33[a * 3 + b, b * 3 + a] = 1
    I3 = torch.eye(3, dtype=torch.float64)
    assert torch.equal(S, torch.kron(I3, K33) @ torch.kron(I3.reshape(-1, 1), I3))


def test_layernorm_norms_match_dense_autograd():
    U = randn(3, 4, seed=1) + 0.3
    q = qt.layernorm_exact(U)
    J = jacrev(layernorm)(U).reshape(12, 12)
    H = jacfwd(jacrev(layernorm))(U).reshape(144, 12)
    assert q["J"] == pytest.approx(float(torch.linalg.matrix_norm(J, ord=2)), rel=1e-10)
    assert q["H"] == pytest.approx(float(torch.linalg.matrix_norm(H, ord=2)), rel=1e-10)
    P = lambda X: torch.diag(1 / (X - X.mean(1, keepdim=True)).pow(2).mean(1).sqrt())  # noqa: E731
    dP = jacrev(P)(U).reshape(9, 12)
    d2P = jacfwd(jacrev(P))(U).reshape(9 * 12, 12)
    assert q["dP"] == pytest.approx(float(torch.linalg.matrix_norm(dP, ord=2)), rel=1e-10)
    assert q["d2P"] == pytest.approx(float(torch.linalg.matrix_norm(d2P, ord=2)), rel=1e-10)
    M = U - U.mean(1, keepdim=True)
    assert q["row_norm_min"] == pytest.approx(float(M.norm(dim=1).min())) and q["std_min"] == pytest.approx(
        q["row_norm_min"] / 2)
    assert (q["m"], q["n"]) == (3, 4)
    # what Lemma 4's right-hand side reads: ‖U‖_2 and the smallest centred row norm
    assert qt.layernorm_inputs(U) == {"norm": float(torch.linalg.matrix_norm(U, ord=2)),
                                      "row_norm_min": float(M.norm(dim=1).min()), "m": 3, "n": 4}


def test_sa_hessian_and_split_match_autograd():
    inst = tiny_instance(L=3, d=2, sharpness=2.0)
    q = qt.sa_exact(inst)
    H = hessian(sa_loss, argnums=(1, 2, 3))(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)
    full = torch.cat([torch.cat([H[a][b].reshape(4, 4) for b in range(3)], 1) for a in range(3)], 0)
    assert q["H"] == pytest.approx(float(torch.linalg.eigvalsh(full).abs().max()), rel=1e-12)
    assert q["H_KQ"] == pytest.approx(float(torch.linalg.matrix_norm(full[4:8, 0:4], ord=2)), rel=1e-12)
    assert q["Hf_VV"] < 1e-14                          # F is linear in W_V
    assert q["H_VV"] == pytest.approx(q["Ho_VV"], rel=1e-12)
    F = sa_forward(inst.X, inst.W_Q, inst.W_K, inst.W_V)
    assert q["rank_FT"] == int(torch.linalg.matrix_rank(F - inst.Target)) == 2
    assert q["R"] == pytest.approx(float((F - inst.Target).norm()), rel=1e-14)
    assert "H" not in qt.sa_exact(inst, hessian=False)


def test_block_exact_norms_match_autograd():
    inst = tiny_instance(L=3, d=3, seed=2, sharpness=2.0, away_from_kinks=True)
    q = qt.block_exact(inst)
    H = ad.loss_hessian_autograd(inst)
    assert q["H"] == pytest.approx(float(torch.linalg.eigvalsh(H).abs().max()), rel=1e-10)
    args = [inst.X, *inst.weights]
    dZ1 = ad.jacobian(qt.block_Z, args, 4)
    assert q["dZ_1"] == pytest.approx(float(torch.linalg.matrix_norm(dZ1, ord=2)), rel=1e-10)
    Htr = ad.second_derivative(qt.block_Z, args, 3, 2)      # ∂²Z/∂W_V∂W_K
    assert q["Htr_VK"] == pytest.approx(float(torch.linalg.matrix_norm(Htr, ord=2)), rel=1e-10)
    xi = ad.second_derivative(qt.block_S, args, 5, 4)       # ∂B_2/∂W_1 = ∂²S/∂W_2∂W_1
    assert q["xi_21"] == pytest.approx(float(torch.linalg.matrix_norm(xi, ord=2)), rel=1e-10)
    assert q["ln_U"]["J"] == q["J_Y"] and q["ln_S"]["H"] == q["H_Z"]
    lean = qt.block_exact(inst, hessian=False, tensors=False)
    assert "H" not in lean and "xi_11" not in lean and lean["J_SY"] == pytest.approx(q["J_SY"])
