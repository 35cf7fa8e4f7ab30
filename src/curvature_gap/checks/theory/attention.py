"""Rows of ``curvature-gap verify`` for self-attention: the softmax Jacobians (Noci et al.), the attention
Hessian as quoted from Ormaniec et al., Lemma C1."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import Instance
from ...theory import attention as at
from ...theory import calculus as cc
from .common import FD_TOL, rel_err, check_instance, Accumulator, formula_row, erratum_row, try_printed


def attention_rows(quick: bool, insts: list[Instance]) -> list:
    keys = ["dA", "d2A", "d2Afd", "d2Ac", "GV", "GQ", "GK", "uni", "S",
            "HoVV", "HoQQ", "HoVQ", "HoQK", "HfVV", "HfQQ", "HfVQ", "HfQK", "SA"]
    A = {k: Accumulator() for k in keys}
    uni = check_instance(4, 6, 3, 6, seed=3, uniform="zero_query")
    dev = []
    for k, inst in enumerate(insts):
        X, WQ, WK, WV, Tg = inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target
        L, d_V = X.shape
        T = fw.scores(X, WQ, WK)
        Am = fw.attention_matrix(X, WQ, WK)
        dev.append(float((Am - 1.0 / L).abs().max()))
        ref = ad.jacobian(fw.softmax_rows, [T], 0)
        A["dA"].add(rel_err(at.dA_dT(Am), ref), inst, ref)
        ref = ad.second_derivative(fw.softmax_rows, [T], 0, 0)
        d2 = at.d2A_dT2(Am)
        A["d2A"].add(rel_err(d2, ref), inst, ref)
        if k == 0 or not quick:
            fd = ad.fd_second_derivative(fw.softmax_rows, [T], 0, 0)
            A["d2Afd"].add(rel_err(d2, fd), inst, fd)
        Gb = torch.randn(L, L, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
        lit = cc.kron(cc.vec_r(Gb).reshape(1, -1), cc.eye(L * L, X)) @ d2
        A["d2Ac"].add(rel_err(at.contract_d2A_dT2(Am, Gb), lit), inst, lit)
        args = [X, WQ, WK, WV]
        J = {p: ad.jacobian(fw.sa_forward, args, i) for p, i in (("Q", 1), ("K", 2), ("V", 3))}
        A["GV"].add(rel_err(at.G_V(X, WQ, WK), J["V"]), inst, J["V"])
        A["GQ"].add(rel_err(at.G_Q(X, WQ, WK, WV), J["Q"]), inst, J["Q"])
        A["GK"].add(rel_err(at.G_K(X, WQ, WK, WV), J["K"]), inst, J["K"])
        try_printed(A["GK"], lambda: at.G_K_printed(X, WQ, WK, WV), J["K"], inst)
        # S: I_L ⊗ S = ∂(M ⊗ I_{d_V})/∂M for M (L, d_V)
        ref = ad.jacobian(lambda M_: cc.kron(M_, cc.eye(d_V, M_)), [X], 0)
        A["S"].add(rel_err(cc.kron(cc.eye(L, X), at.S_shuffle(d_V, X)), ref), inst, ref)
        S_shape = tuple(at.S_shuffle(d_V, X).shape)
        if S_shape != (d_V ** 2, d_V):
            A["S"].ill.append(f"stated shape ({d_V ** 2}, {d_V}) but (I⊗K)(vec_r I⊗I) is {S_shape} at dV={d_V}")
        # Ormaniec blocks vs autograd
        Hs = ad.sa_loss_hessian_autograd(inst)
        scale = max(float(h.abs().max()) for h in Hs.values())
        Ho_ref = {(i, j): 2.0 / (L * d_V) * J[i].T @ J[j] for i in "QKV" for j in "QKV"}
        for (i, j), fn in ((("V", "V"), at.Ho_VV), (("Q", "Q"), at.Ho_QQ), (("V", "Q"), at.Ho_VQ),
                           (("Q", "K"), at.Ho_QK)):
            A[f"Ho{i}{j}"].add(rel_err(fn(X, WQ, WK, WV), Ho_ref[(i, j)]), inst, Ho_ref[(i, j)])
        for (i, j), fn in ((("V", "V"), at.Hf_VV), (("Q", "Q"), at.Hf_QQ), (("V", "Q"), at.Hf_VQ),
                           (("Q", "K"), at.Hf_QK)):
            ref = Hs[(i, j)] - Ho_ref[(i, j)]
            A[f"Hf{i}{j}"].add(rel_err(fn(X, WQ, WK, WV, Tg), ref, scale=scale if (i, j) == ("V", "V") else 0.0),
                               inst, ref)
        blocks = at.loss_hessian_blocks(X, WQ, WK, WV, Tg)
        full = torch.cat([torch.cat([blocks[(i, j)][0] + blocks[(i, j)][1] for j in "QKV"], 1) for i in "QKV"], 0)
        ref = torch.cat([torch.cat([Hs[(i, j)] for j in "QKV"], 1) for i in "QKV"], 0)
        A["SA"].add(rel_err(full, ref), inst, ref)
    # uniform attention: ∂A/∂T = (1/L) I_L ⊗ (I_L - 1/L) at W_Q = 0
    X, WQ, WK, WV = uni.X, uni.W_Q, uni.W_K, uni.W_V
    T = fw.scores(X, WQ, WK)
    ref = ad.jacobian(fw.softmax_rows, [T], 0)
    A["uni"].add(rel_err(at.dA_dT_uniform(X.shape[0], X), ref), uni, ref)
    refQ = ad.jacobian(fw.sa_forward, [X, WQ, WK, WV], 1)
    A["uni"].add(rel_err(at.G_Q_uniform(X, WK, WV), refQ), uni, refQ)
    A["uni"].ill.append("the prefactor 1/n names no quantity of the theorem (n is not defined there)")

    n_i = len(insts)
    return [
        formula_row("attn.softmax.jacobian", "∂A/∂T = blockdiag(diag(A_i) - A_i A_i^T) vs jacrev of row-softmax", A["dA"],
             n_inst=n_i, note=f"attention far from uniform: min over instances of max|A - 1/L| = {min(dev):.2f}"),
        formula_row("lemC1.softmax.hessian", "∂²A/∂T² (Ormaniec Lemma C.1) vs jacfwd(jacrev)", A["d2A"], n_inst=n_i),
        formula_row("lemC1.softmax.hessian.fd", "∂²A/∂T² vs central differences of the autograd Jacobian", A["d2Afd"],
             tol=FD_TOL, n_inst=1 if quick else n_i),
        formula_row("lemC1.softmax.hessian_contracted", "Σ_ij Ḡ_ij ∂²A_ij/∂T² (row-block form) vs (vec_r Ḡ^T ⊗ I) ∂²A/∂T²",
             A["d2Ac"], n_inst=n_i),
        formula_row("noci.G_V", "∂F/∂W_V = AX ⊗ I_{d_V} vs jacrev", A["GV"], n_inst=n_i),
        formula_row("noci.G_Q", "∂F/∂W_Q = (I_L⊗W_V^T X^T) ∂A/∂T (X⊗XW_K)/√d_K vs jacrev", A["GQ"], n_inst=n_i),
        erratum_row("noci.G_K", "∂F/∂W_K with K_{d_K,d_V} vs jacrev (printed: K_{d_V d_K})", A["GK"], n_inst=n_i),
        erratum_row("noci.uniform_dA_dT", "uniform attention (W_Q = 0, exactly uniform rows): ∂A/∂T = "
                     "(1/L) I_L⊗(I_L - 1/L 1) and ∂F/∂W_Q built from it vs jacrev (printed prefactor 1/n)",
                     A["uni"], n_inst=1,
                     note="evaluated where the formula is claimed, at exactly uniform attention; the only error is "
                          "the typo 1/n for 1/L. For non-uniform attention this formula does not apply: the bound "
                          "‖∂A/∂T‖ ≤ 1/L taken from it fails there (bounds.sa.dA_dT) while ‖∂A/∂T‖ ≤ 1/2 holds "
                          "(bounds.sa.dA_dT_general)"),
        erratum_row("orm.S_shuffle", "I_L ⊗ S vs jacrev of M ⊗ I_{d_V} (S as used in H_f(V,Q), Φ_VQ)", A["S"],
                     n_inst=n_i),
        formula_row("orm.Ho.VV", "H_o(W_V,W_V) = 2/(L d_V) M_1^T M_1 ⊗ I vs 2/(L d_V) J^T J (autograd J)", A["HoVV"],
             n_inst=n_i),
        formula_row("orm.Ho.QQ", "H_o(W_Q,W_Q) (Z_1 form) vs 2/(L d_V) J_Q^T J_Q", A["HoQQ"], n_inst=n_i),
        formula_row("orm.Ho.VQ", "H_o(W_V,W_Q) (Z_1 form) vs 2/(L d_V) J_V^T J_Q", A["HoVQ"], n_inst=n_i),
        formula_row("orm.Ho.QK", "H_o(W_Q,W_K) (Z_1 form, K_{d_K,d_V}) vs 2/(L d_V) J_Q^T J_K", A["HoQK"], n_inst=n_i),
        formula_row("orm.Hf.VV", "H_f(W_V,W_V) = 0 vs autograd loss Hessian - H_o", A["HfVV"], n_inst=n_i,
             note="relative to max |SA loss Hessian|"),
        formula_row("orm.Hf.QQ", "H_f(W_Q,W_Q) (R, Z_2 form) vs autograd loss Hessian - H_o", A["HfQQ"], n_inst=n_i),
        formula_row("orm.Hf.VQ", "H_f(W_V,W_Q) (R, S, Z_1 form) vs autograd loss Hessian - H_o", A["HfVQ"], n_inst=n_i),
        formula_row("orm.Hf.QK", "H_f(W_Q,W_K) (Z_2 and [R(Z_1⊗I)S]⊗I_{d_K} terms) vs autograd loss Hessian - H_o",
             A["HfQK"], n_inst=n_i),
        formula_row("sa.loss_hessian", "full 3x3-block SA loss Hessian H_o + H_f (all pairs) vs torch.func.hessian",
             A["SA"], n_inst=n_i),
    ]
