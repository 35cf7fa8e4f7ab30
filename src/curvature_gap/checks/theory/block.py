"""Rows of ``curvature-gap verify`` for the block: Lemma 2 (Φ), Theorems 4–5 and the Gauss–Newton
decomposition of its loss Hessian, also at the MNIST shape."""
from __future__ import annotations

import time

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import MNIST_SHAPE, Instance
from ...theory import attention as at
from ...theory import block as bk
from ...theory import calculus as cc
from ...theory import layernorm as ln
from .common import (FD_TOL, Accumulator, FormulaCheck, Group, block_args, check_instance, rel_err,
                     try_printed)

__all__ = ["PHI", "BLOCK", "GAUSS_NEWTON", "MNIST"]

PAIRS = tuple((k, l) for k in "QKV" for l in "QKV")  # Φ_kl: the self-attention weights
BLOCK_PAIRS = tuple((i, j) for i in bk.BLOCK_PARAMS for j in bk.BLOCK_PARAMS)  # ξ_ij, H_tr^(i,j): the five matrices
_ZERO_XI = (("1", "1"), ("2", "2"))  # ξ_11 = ξ_22 = 0: measured against the size of B_i

PHI_CHECKS = (
    *(FormulaCheck(f"thm5.phi.{k}{l}", "thm5", f"Φ_{k}{l} = ∂²F/∂W_{k}∂W_{l} (product/Kronecker rules) vs "
                   "jacfwd(jacrev)", f"{k}{l}", note="absolute w.r.t. max|∂F/∂W_V|" if (k, l) == ("V", "V") else "")
      for k, l in PAIRS),
    FormulaCheck("thm5.phi.fd", "thm5", "all 9 Φ_kl vs central differences of the autograd Jacobian of F", "fd",
                 tol=FD_TOL),
    FormulaCheck("thm5.phi.contracted", "thm5",
                 "(w^T ⊗ I) Φ_kl closed forms vs contraction of the dense Φ_kl, all 9 pairs", "c", role="reference"),
    FormulaCheck("lem2.phi.QQ", "lem2", "Φ_QQ = (1/d_K)(I_L⊗W_V^T⊗I⊗W_K^T) Z_2 (I⊗W_K) vs jacfwd(jacrev) of F",
                 "l2QQ", note="printed with the loss factor 2/(L d_V d_K)", expected="corrected"),
    FormulaCheck("lem2.phi.VQ", "lem2", "Φ_VQ = (1/√d_K)(I_L⊗S) Z_1 (I⊗W_K) vs jacfwd(jacrev) of F", "l2VQ",
                 note="printed with the loss factor 2/(L d_V √d_K)", expected="corrected"),
    FormulaCheck("lem2.phi.QK", "lem2",
                 "Φ_QK (Z_2 term / d_K + [(I_L⊗W_V^T⊗I)(Z_1⊗I)S]⊗I_{d_K} / √d_K) vs autograd", "l2QK",
                 note="printed with the loss factors 2/(L d_V d_K), 2/(L d_V √d_K)", expected="corrected"),
    FormulaCheck("lem2.phi.QK_identity", "lem2", "Φ_QK second term with I_L (as in H_f(W_Q,W_K)) vs autograd",
                 "l2QKid", expected="corrected",
                 note="Lemma 2 prints I_{d_V} ⊗ W_V^T ⊗ I_{d_V}; evaluated at L = d_V where it is well-shaped"),
    FormulaCheck("thm5.phi.uniform_zero", "thm5", "Φ_VQ, Φ_VK, Φ_QQ, Φ_KK at exactly uniform attention (W_Q = 0) vs "
                 "autograd (proof: all four vanish)", "uni", role="proof", expected="corrected",
                 note="printed claim Φ = 0 compared with the autograd Φ; autograd at W_Q = 0: {sizes}"),
)


def measure_phi(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """Φ on the instances (finite differences: the first), the printed Lemma 2 forms also at L = d_V, and the
    proof's claim at exactly uniform attention (W_Q = 0)."""
    eqL = check_instance(6, 6, 3, 8, seed=4)        # L = d_V: the printed I_{d_V} term is well-shaped
    uni = check_instance(4, 6, 3, 6, seed=3, uniform="zero_query")
    idx = {"Q": 1, "K": 2, "V": 3}
    for k_i, inst in enumerate(insts + [eqL]):
        X, WQ, WK, WV = inst.X, inst.W_Q, inst.W_K, inst.W_V
        L, d_V = X.shape
        n = at.sizes(d_V, WQ.shape[1])
        args = [X, WQ, WK, WV]
        main = inst is not eqL
        refs = {}
        for k, l in (PAIRS if main else [("Q", "K")]):
            refs[(k, l)] = ref = ad.second_derivative(fw.sa_forward, args, idx[k], idx[l])
            if not main:
                continue
            scale = float(ad.jacobian(fw.sa_forward, args, idx[k]).abs().max()) if (k, l) == ("V", "V") else 0.0
            ph = at.phi(X, WQ, WK, WV, k, l)
            A[f"{k}{l}"].compare(ph, ref, inst, scale)
            w = torch.randn(L * d_V, generator=torch.Generator().manual_seed(k_i), dtype=torch.float64)
            A["c"].compare(at.contract_phi(X, WQ, WK, WV, w, k, l), cc.kron(w.reshape(1, -1), cc.eye(n[k], X)) @ ph,
                           inst, scale)
            if k_i == 0:
                A["fd"].compare(ph, ad.fd_second_derivative(fw.sa_forward, args, idx[k], idx[l]), inst, scale)
        if main:
            for key, fn in (("l2QQ", at.phi_QQ_lemma2), ("l2VQ", at.phi_VQ_lemma2), ("l2QK", at.phi_QK_lemma2)):
                ref = refs[(key[2], key[3])]
                A[key].compare(fn(X, WQ, WK, WV), ref, inst)
                try_printed(A[key], lambda: fn(X, WQ, WK, WV, scale_printed=True), ref, inst)
        ref = refs[("Q", "K")]
        A["l2QKid"].compare(at.phi_QK_lemma2(X, WQ, WK, WV), ref, inst)
        try_printed(A["l2QKid"], lambda: at.phi_QK_lemma2(X, WQ, WK, WV, first_identity="dV"), ref, inst)
    # uniform attention: the proof claims Φ_VQ = Φ_VK = Φ_QQ = Φ_KK = 0
    X, WQ, WK, WV = uni.X, uni.W_Q, uni.W_K, uni.W_V
    uni_sizes = []
    for k, l in (("V", "Q"), ("V", "K"), ("Q", "Q"), ("K", "K")):
        ref = ad.second_derivative(fw.sa_forward, [X, WQ, WK, WV], idx[k], idx[l])
        A["uni"].compare(at.phi(X, WQ, WK, WV, k, l), ref, uni)
        A["uni"].printed.append(rel_err(torch.zeros_like(ref), ref))
        uni_sizes.append(f"max|Φ_{k}{l}| = {float(ref.abs().max()):.2g}")
    A["uni"].values["sizes"] = ", ".join(uni_sizes)


PHI = Group("phi", PHI_CHECKS, measure_phi)

BLOCK_CHECKS = (
    FormulaCheck("thm4.block.J_Y", "thm4", "J_Y = Theorem 2 at U = X + F(X) vs jacrev", "JY"),
    FormulaCheck("thm4.block.J_Z", "thm4", "J_Z = Theorem 2 at S vs jacrev", "JZ"),
    FormulaCheck("thm4.block.G_i", "thm4", "Theorem 4's G_i = ∂Y/∂W_i = J_Y ∂F/∂W_i, i ∈ {K,Q,V} vs jacrev", "Gi"),
    FormulaCheck("thm4.block.B_i", "thm4", "B_i = ∂S/∂W_i (B_1, B_2, J_SY J_Y G_k) vs jacrev, i ∈ {1,2,K,Q,V}", "B"),
    FormulaCheck("thm4.block.dZ_dW", "thm4", "∂Z/∂W_i = J_Z B_i vs jacrev, all five matrices", "dZ"),
    FormulaCheck("thm5.H_Y", "thm5", "H_Y = Theorem 3 at U vs jacfwd(jacrev)", "HY"),
    FormulaCheck("thm5.H_Z", "thm5", "H_Z = Theorem 3 at S vs jacfwd(jacrev)", "HZ"),
    *(FormulaCheck(f"thm5.xi.{i}{j}", "thm5", f"ξ_{i}{j} = ∂B_{i}/∂W_{j} = ∂²S/∂W_{i}∂W_{j} vs jacfwd(jacrev)",
                   f"xi{i}{j}", note="absolute w.r.t. max|B_i| (ξ is zero)" if (i, j) in _ZERO_XI else "")
      for i, j in BLOCK_PAIRS),
    FormulaCheck("thm5.xi.fd", "thm5", "all 25 ξ_ij vs central differences of the autograd Jacobian of S", "xfd",
                 tol=FD_TOL),
    FormulaCheck("thm5.xi12_naming", "thm5", "ξ_12 := ∂B_1/∂W_2 (corrected) vs autograd; printed 'ξ_12' formula",
                 "x12", role="detail", note="the printed 'ξ_12' is ∂B_2/∂W_1 = ξ_21 (see thm5.xi.21)",
                 expected="corrected"),
    FormulaCheck("thm5.xi21_printed", "thm5", "ξ_21 := ∂B_2/∂W_1 vs autograd; printed 'ξ_21' formula", "x21",
                 role="detail", expected="corrected"),
    FormulaCheck("thm5.xi1k_identity", "thm5",
                 "ξ_1k with ((I_L⊗W_2^T)D_σ ⊗ I_{n_1}) vs autograd (printed: ⊗ I_{n_k})", "x1k", role="detail",
                 note="printed form evaluable only where n_k = n_1", expected="corrected"),
    FormulaCheck("thm5.proof.dW2T_commutation", "thm5",
                 "∂vec_r(I_L⊗W_2^T)/∂W_2 ending in K_{d_V,d_ff} vs jacrev (printed K_{d_ff,d_V})", "w2T", role="proof",
                 expected="corrected"),
    *(FormulaCheck(f"thm5.H_tr.{i}{j}", "thm5", f"boxed H_tr^({i},{j}) = (J_Z⊗I)ξ_{i}{j} + (I⊗B_{i}^T)H_Z B_{j} "
                   "vs jacfwd(jacrev) of Z", f"H{i}{j}") for i, j in BLOCK_PAIRS),
    FormulaCheck("thm5.H_tr.fd", "thm5", "all 25 H_tr blocks vs central differences of the autograd Jacobian of Z",
                 "fd", tol=FD_TOL),
    FormulaCheck("thm5.symmetry", "thm5", "partial transpose of H_tr^(i,j) vs H_tr^(j,i) (closed forms), "
                 "(i,j) ∈ {(1,2),(Q,K),(1,V),(K,V)}", "sym", role="detail", expected="notation",
                 note="printed claim H_tr^(i,j) = H_tr^(j,i) compared literally where shapes agree: what holds is "
                      "equality up to a partial transpose of the two derivative slots (a notational point)"),
)


def measure_block(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """On the instances (finite differences: the first, not quick also the last) and, for the printed ξ forms, one
    with d_ff = d_V."""
    P, ATT = bk.BLOCK_PARAMS, bk.ATTN
    idx = {"Q": 1, "K": 2, "V": 3, "1": 4, "2": 5}
    eqff = check_instance(3, 6, 3, 6, seed=8)     # d_ff = d_V: n_V = n_1, printed ξ_1V well-shaped
    S_f = lambda *a: fw.block_output(*a, out="S")
    Z_f = lambda *a: fw.block_output(*a, out="Z")
    Y_f = lambda *a: fw.block_output(*a, out="Y")
    for k_i, inst in enumerate(insts + [eqff]):
        args = block_args(inst)
        L, d_V = inst.X.shape
        n = bk.param_sizes(d_V, inst.W_Q.shape[1], inst.W_1.shape[1])
        fo = bk.first_order(*args)
        main = inst is not eqff
        if main:
            A["JY"].compare(fo["J_Y"], ad.jacobian(fw.layernorm, [fo["U"]], 0), inst)
            A["JZ"].compare(fo["J_Z"], ad.jacobian(fw.layernorm, [fo["S"]], 0), inst)
            for p in ATT:
                A["Gi"].compare(fo["dY_dW"][p], ad.jacobian(Y_f, args, idx[p]), inst)
            for p in P:
                A["B"].compare(fo["B"][p], ad.jacobian(S_f, args, idx[p]), inst)
                A["dZ"].compare(fo["dZ_dW"][p], ad.jacobian(Z_f, args, idx[p]), inst)
        H_Y = ln.hessian(fo["U"])
        H_Z = ln.hessian(fo["S"])
        if main:
            A["HY"].compare(H_Y, ad.second_derivative(fw.layernorm, [fo["U"]], 0, 0), inst)
            A["HZ"].compare(H_Z, ad.second_derivative(fw.layernorm, [fo["S"]], 0, 0), inst)
        Hs = {}
        for i in P:
            jac_scale = float(fo["B"][i].abs().max())
            for j in P:
                x = bk.xi(i, j, *args, fo=fo, H_Y=H_Y)
                ref = ad.second_derivative(S_f, args, idx[i], idx[j])
                sc = jac_scale if (i, j) in _ZERO_XI else 0.0
                if main:
                    A[f"xi{i}{j}"].compare(x, ref, inst, sc)
                    if k_i == 0:
                        A["xfd"].compare(x, ad.fd_second_derivative(S_f, args, idx[i], idx[j]), inst, sc)
                # the printed ξ_12, ξ_21 and ξ_1k
                key = {("1", "2"): "x12", ("2", "1"): "x21"}.get((i, j), "x1k" if i == "1" and j in ATT else None)
                if key:
                    A[key].compare(x, ref, inst)
                    try_printed(A[key], lambda: bk.xi_printed(i, j, *args, fo=fo), ref, inst)
                if main:
                    Hs[(i, j)] = h = bk.H_tr(i, j, *args, fo=fo, H_Z=H_Z, H_Y=H_Y, xi_ij=x)
                    A[f"H{i}{j}"].compare(h, ad.second_derivative(Z_f, args, idx[i], idx[j]), inst)
        if main:
            ref = ad.jacobian(lambda W: cc.kron(cc.eye(L, W), W.T), [inst.W_2], 0)
            A["w2T"].compare(bk.dIkronW2T_dW2(inst.W_2, L), ref, inst)
            try_printed(A["w2T"], lambda: bk.dIkronW2T_dW2_printed(inst.W_2, L), ref, inst)
            for i, j in (("1", "2"), ("Q", "K"), ("1", "V"), ("K", "V")):
                pt = cc.partial_transpose(Hs[(i, j)], L * d_V, n[i], n[j])
                A["sym"].add(rel_err(pt, Hs[(j, i)]), inst, pt)
                if Hs[(i, j)].shape == Hs[(j, i)].shape:
                    A["sym"].printed.append(rel_err(Hs[(i, j)], Hs[(j, i)]))
                else:
                    A["sym"].ill.append(f"({i},{j}) vs ({j},{i}) at {inst.shape_str()}")
            if k_i == 0 or (not quick and k_i == len(insts) - 1):
                for i, j in BLOCK_PAIRS:
                    A["fd"].compare(Hs[(i, j)], ad.fd_second_derivative(Z_f, args, idx[i], idx[j]), inst,
                                    obj=Hs[("1", "1")])


BLOCK = Group("block", BLOCK_CHECKS, measure_block)

GAUSS_NEWTON_CHECKS = (
    FormulaCheck("gn.loss_hessian.literal", "gn", "The Gauss–Newton decomposition of the loss Hessian (§3.2) with "
                 "dense Theorem 5 blocks vs torch.func.hessian of the block loss over (W_1,W_2,W_K,W_Q,W_V)", "lit"),
    FormulaCheck("gn.loss_hessian.literal_symmetry", "gn", "dense assembled loss Hessian vs its transpose (25 blocks "
                 "computed independently)", "sym", role="reference"),
    FormulaCheck("gn.loss_hessian.contracted", "gn",
                 "contracted Theorem 5 + Gauss–Newton assembly vs torch.func.hessian", "con", role="reference"),
    FormulaCheck("gn.loss_hessian.fd", "gn", "contracted assembly vs central differences of the autograd gradient",
                 "fd", tol=FD_TOL),
    FormulaCheck("gn.loss_normalisation", "gn", "loss (1/(L d_V))||Z - Target||_F^2: ∂l/∂Z = 2/(L d_V) vec_r(Z-T), "
                 "∂²l/∂Z² = 2/(L d_V) vs autograd", "norm", expected="corrected",
                 note="printed: L = ||Z - Target||² (gradient 2 vec_r(Z-T)) with second derivative 2/(L d_V); "
                      "compared with the autograd Hessian of either loss"),
)


def measure_gauss_newton(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """The contracted assembly on every instance; the dense one, its symmetry and finite differences on a subset."""
    heavy = insts[:1] if quick else [insts[0], insts[-1]]
    for inst in insts:
        args = block_args(inst)
        Ha = ad.loss_hessian_autograd(inst)
        Hc = bk.assemble(bk.loss_hessian(*args, inst.Target))
        A["con"].compare(Hc, Ha, inst)
        if any(inst is h for h in heavy):
            blocks = bk.loss_hessian_literal(*args, inst.Target)
            lit = bk.assemble(blocks)
            A["lit"].compare(lit, Ha, inst)
            A["sym"].compare(lit, lit.T, inst, obj=lit)
            A["fd"].compare(Hc, ad.fd_loss_hessian(inst), inst)
            # loss normalisation: §3.2 prints L = ||Z - Target||^2 with second derivative 2/(L d_V)
            fo = bk.first_order(*args)
            L, d_V = inst.X.shape
            gauss = {key: 2.0 / (L * d_V) * fo["dZ_dW"][key[0]].T @ fo["dZ_dW"][key[1]] for key in blocks}
            mixed = bk.assemble({key: gauss[key] + (L * d_V) * (blocks[key] - gauss[key]) for key in blocks})
            unnorm = Ha * (L * d_V)                                   # Hessian of ||Z - Target||^2
            A["norm"].compare(lit, Ha, inst)
            A["norm"].printed.append(min(rel_err(mixed, Ha), rel_err(mixed, unnorm)))


GAUSS_NEWTON = Group("gauss_newton", GAUSS_NEWTON_CHECKS, measure_gauss_newton)

MNIST_CHECKS = (
    FormulaCheck("gn.loss_hessian.mnist", "gn", "contracted Theorem 5 + Gauss–Newton block loss Hessian at the "
                 "paper's MNIST size vs torch.func.hessian", "H",
                 note="random instance at L=49, d_V=d_K=16, d_ff=64 (2816 weights); closed form {closed:.1f} s, "
                      "autograd {autograd:.1f} s"),
)


def measure_mnist(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """One random instance of the paper's MNIST shape (the same with ``quick``)."""
    inst = check_instance(*MNIST_SHAPE, seed=0)
    args = block_args(inst)
    t0 = time.perf_counter()
    Hc = bk.assemble(bk.loss_hessian(*args, inst.Target))
    t1 = time.perf_counter()
    Ha = ad.loss_hessian_autograd(inst)
    t2 = time.perf_counter()
    A["H"].compare(Hc, Ha, inst)
    A["H"].values.update(closed=t1 - t0, autograd=t2 - t1)


MNIST = Group("mnist", MNIST_CHECKS, measure_mnist)
