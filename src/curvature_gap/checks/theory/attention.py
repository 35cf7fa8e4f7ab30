"""Rows of ``curvature-gap verify`` for self-attention: the softmax Jacobians (Noci et al.), the attention
Hessian as quoted from Ormaniec et al., Lemma C1."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import Instance
from ...theory import attention as at
from ...theory import calculus as cc
from .common import FD_TOL, Accumulator, FormulaCheck, Group, check_instance, try_printed

__all__ = ["CHECKS", "GROUP"]

SA = "sa_hessian"  # the self-attention Hessian as the paper quotes it (Ormaniec et al.)
CHECKS = (
    FormulaCheck("attn.softmax.jacobian", SA, "∂A/∂T = blockdiag(diag(A_i) - A_i A_i^T) vs jacrev of row-softmax",
                 "dA", note="attention far from uniform: min over instances of max|A - 1/L| = {dev:.2f}"),
    FormulaCheck("lemC1.softmax.hessian", SA, "∂²A/∂T² (Ormaniec Lemma C.1) vs jacfwd(jacrev)", "d2A"),
    FormulaCheck("lemC1.softmax.hessian.fd", SA, "∂²A/∂T² vs central differences of the autograd Jacobian", "d2Afd",
                 tol=FD_TOL),
    FormulaCheck("lemC1.softmax.hessian_contracted", SA,
                 "Σ_ij Ḡ_ij ∂²A_ij/∂T² (row-block form) vs (vec_r Ḡ^T ⊗ I) ∂²A/∂T²", "d2Ac", role="reference"),
    FormulaCheck("noci.G_V", "thm4", "∂F/∂W_V = AX ⊗ I_{d_V} vs jacrev", "GV", role="proof"),
    FormulaCheck("noci.G_Q", "thm4", "∂F/∂W_Q = (I_L⊗W_V^T X^T) ∂A/∂T (X⊗XW_K)/√d_K vs jacrev", "GQ", role="proof"),
    FormulaCheck("noci.G_K", "thm4", "∂F/∂W_K with K_{d_K,d_V} vs jacrev (printed: K_{d_V d_K})", "GK", role="proof",
                 expected="corrected"),
    FormulaCheck("noci.uniform_dA_dT", "thm4", "uniform attention (W_Q = 0, exactly uniform rows): ∂A/∂T = "
                 "(1/L) I_L⊗(I_L - 1/L 1) and ∂F/∂W_Q built from it vs jacrev (printed prefactor 1/n)", "uni",
                 role="proof", expected="corrected",
                 note="evaluated where the formula is claimed, at exactly uniform attention; the only error is "
                      "the typo 1/n for 1/L. For non-uniform attention this formula does not apply: the bound "
                      "‖∂A/∂T‖ ≤ 1/L taken from it fails there (bounds.sa.dA_dT) while ‖∂A/∂T‖ ≤ 1/2 holds "
                      "(bounds.sa.dA_dT_general)"),
    FormulaCheck("orm.S_shuffle", SA, "I_L ⊗ S vs jacrev of M ⊗ I_{d_V} (S as used in H_f(V,Q), Φ_VQ)", "S",
                 expected="corrected"),
    FormulaCheck("orm.Ho.VV", SA, "H_o(W_V,W_V) = 2/(L d_V) M_1^T M_1 ⊗ I vs 2/(L d_V) J^T J (autograd J)", "HoVV"),
    FormulaCheck("orm.Ho.QQ", SA, "H_o(W_Q,W_Q) (Z_1 form) vs 2/(L d_V) J_Q^T J_Q", "HoQQ"),
    FormulaCheck("orm.Ho.VQ", SA, "H_o(W_V,W_Q) (Z_1 form) vs 2/(L d_V) J_V^T J_Q", "HoVQ"),
    FormulaCheck("orm.Ho.QK", SA, "H_o(W_Q,W_K) (Z_1 form, K_{d_K,d_V}) vs 2/(L d_V) J_Q^T J_K", "HoQK"),
    FormulaCheck("orm.Hf.VV", SA, "H_f(W_V,W_V) = 0 vs autograd loss Hessian - H_o", "HfVV",
                 note="relative to max |SA loss Hessian|"),
    FormulaCheck("orm.Hf.QQ", SA, "H_f(W_Q,W_Q) (R, Z_2 form) vs autograd loss Hessian - H_o", "HfQQ"),
    FormulaCheck("orm.Hf.VQ", SA, "H_f(W_V,W_Q) (R, S, Z_1 form) vs autograd loss Hessian - H_o", "HfVQ"),
    FormulaCheck("orm.Hf.QK", SA, "H_f(W_Q,W_K) (Z_2 and [R(Z_1⊗I)S]⊗I_{d_K} terms) vs autograd loss Hessian - H_o",
                 "HfQK"),
    FormulaCheck("sa.loss_hessian", SA, "full 3x3-block SA loss Hessian H_o + H_f (all pairs) vs torch.func.hessian",
                 "SA"),
)


def measure(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """On the instances (attention far from uniform; finite differences: quick, the first only) and, for the
    uniform-attention formula, one instance with W_Q = 0."""
    uni = check_instance(4, 6, 3, 6, seed=3, uniform="zero_query")
    dev = []
    for k, inst in enumerate(insts):
        X, WQ, WK, WV, Tg = inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target
        L, d_V = X.shape
        T = fw.scores(X, WQ, WK)
        Am = fw.attention_matrix(X, WQ, WK)
        dev.append(float((Am - 1.0 / L).abs().max()))
        A["dA"].compare(at.dA_dT(Am), ad.jacobian(fw.softmax_rows, [T], 0), inst)
        d2 = at.d2A_dT2(Am)
        A["d2A"].compare(d2, ad.second_derivative(fw.softmax_rows, [T], 0, 0), inst)
        if k == 0 or not quick:
            A["d2Afd"].compare(d2, ad.fd_second_derivative(fw.softmax_rows, [T], 0, 0), inst)
        Gb = torch.randn(L, L, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
        A["d2Ac"].compare(at.contract_d2A_dT2(Am, Gb), cc.kron(cc.vec_r(Gb).reshape(1, -1), cc.eye(L * L, X)) @ d2,
                          inst)
        args = [X, WQ, WK, WV]
        J = {p: ad.jacobian(fw.sa_forward, args, i) for p, i in (("Q", 1), ("K", 2), ("V", 3))}
        A["GV"].compare(at.G_V(X, WQ, WK), J["V"], inst)
        A["GQ"].compare(at.G_Q(X, WQ, WK, WV), J["Q"], inst)
        A["GK"].compare(at.G_K(X, WQ, WK, WV), J["K"], inst)
        try_printed(A["GK"], lambda: at.G_K_printed(X, WQ, WK, WV), J["K"], inst)
        # S: I_L ⊗ S = ∂(M ⊗ I_{d_V})/∂M for M (L, d_V)
        A["S"].compare(cc.kron(cc.eye(L, X), at.S_shuffle(d_V, X)),
                       ad.jacobian(lambda M_: cc.kron(M_, cc.eye(d_V, M_)), [X], 0), inst)
        S_shape = tuple(at.S_shuffle(d_V, X).shape)
        if S_shape != (d_V ** 2, d_V):
            A["S"].ill.append(f"stated shape ({d_V ** 2}, {d_V}) but (I⊗K)(vec_r I⊗I) is {S_shape} at dV={d_V}")
        # Ormaniec blocks vs autograd
        Hs = ad.sa_loss_hessian_autograd(inst)
        scale = max(float(h.abs().max()) for h in Hs.values())
        Ho_ref = {(i, j): 2.0 / (L * d_V) * J[i].T @ J[j] for i in "QKV" for j in "QKV"}
        for (i, j), Ho, Hf in (("VV", at.Ho_VV, at.Hf_VV), ("QQ", at.Ho_QQ, at.Hf_QQ), ("VQ", at.Ho_VQ, at.Hf_VQ),
                               ("QK", at.Ho_QK, at.Hf_QK)):
            A[f"Ho{i}{j}"].compare(Ho(X, WQ, WK, WV), Ho_ref[(i, j)], inst)
            A[f"Hf{i}{j}"].compare(Hf(X, WQ, WK, WV, Tg), Hs[(i, j)] - Ho_ref[(i, j)], inst,
                                   scale=scale if (i, j) == ("V", "V") else 0.0)
        blocks = at.loss_hessian_blocks(X, WQ, WK, WV, Tg)
        full = torch.cat([torch.cat([blocks[(i, j)][0] + blocks[(i, j)][1] for j in "QKV"], 1) for i in "QKV"], 0)
        A["SA"].compare(full, torch.cat([torch.cat([Hs[(i, j)] for j in "QKV"], 1) for i in "QKV"], 0), inst)
    # uniform attention: ∂A/∂T = (1/L) I_L ⊗ (I_L - 1/L) at W_Q = 0
    X, WQ, WK, WV = uni.X, uni.W_Q, uni.W_K, uni.W_V
    T = fw.scores(X, WQ, WK)
    A["uni"].compare(at.dA_dT_uniform(X.shape[0], X), ad.jacobian(fw.softmax_rows, [T], 0), uni)
    A["uni"].compare(at.G_Q_uniform(X, WK, WV), ad.jacobian(fw.sa_forward, [X, WQ, WK, WV], 1), uni)
    A["uni"].ill.append("the prefactor 1/n names no quantity of the theorem (n is not defined there)")
    A["dA"].values["dev"] = min(dev)

GROUP = Group("attention", CHECKS, measure)
