"""Rows of ``curvature-gap verify`` for §2 and Theorems 2–3: the LayerNorm definition, its Jacobian and its
Hessian."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import Instance
from ...theory import calculus as cc
from ...theory import layernorm as ln
from .common import FD_TOL, rel_err, check_instance, Accumulator, formula_row, erratum_row, try_printed


def layernorm_rows(quick: bool, insts: list[Instance]) -> list:
    Xs = [(inst.X + fw.sa_forward(inst.X, inst.W_Q, inst.W_K, inst.W_V), inst) for inst in insts]
    # one instance with L = d_V, where the printed I_L form of ∂(P⊗I)/∂X is computable
    eq = check_instance(4, 4, 3, 6, seed=5)
    Xs.append((eq.X, eq))
    A = {k: Accumulator() for k in ["def", "fwd", "G", "dsig", "dP", "J", "dPI", "dIM", "dD", "d2P", "H", "Hfd", "Hrow"]}
    center_ref = lambda X_: X_ - X_.mean(dim=1, keepdim=True)
    sigma_ref = lambda X_: center_ref(X_).pow(2).mean(dim=1).sqrt()
    P_ref = lambda X_: torch.diag(1.0 / sigma_ref(X_))
    D_ref = lambda X_: torch.diag(sigma_ref(X_))
    for k, (X, inst) in enumerate(Xs):
        L, d = X.shape
        A["fwd"].add(rel_err(ln.layernorm(X), fw.layernorm(X)), inst, X)
        A["def"].add(rel_err(ln.layernorm(X), fw.layernorm(X)), inst, X)
        try_printed(A["def"], lambda: ln.layernorm_printed_definition(X), fw.layernorm(X), inst)
        ref = ad.jacobian(center_ref, [X], 0)
        A["G"].add(rel_err(ln.dM_dX(L, d, X), ref), inst, ref)
        ref = ad.jacobian(sigma_ref, [X], 0)
        A["dsig"].add(rel_err(ln.dsigma_dX(X), ref), inst, ref)
        ref = ad.jacobian(P_ref, [X], 0)
        A["dP"].add(rel_err(ln.dP_dX(X), ref), inst, ref)
        ref = ad.jacobian(fw.layernorm, [X], 0)
        A["J"].add(rel_err(ln.jacobian(X), ref), inst, ref)
        ref = ad.jacobian(lambda X_: cc.kron(P_ref(X_), cc.eye(d, X_)), [X], 0)
        A["dPI"].add(rel_err(ln.d_PkronI_dX(X), ref), inst, ref)
        try_printed(A["dPI"], lambda: ln.d_PkronI_dX_printed(X), ref, inst)
        ref = ad.jacobian(lambda X_: cc.kron(cc.eye(L, X_), center_ref(X_).T), [X], 0)
        A["dIM"].add(rel_err(ln.d_IkronMT_dX(X), ref), inst, ref)
        ref = ad.jacobian(D_ref, [X], 0)
        A["dD"].add(rel_err(ln.dD_dX(X), ref), inst, ref)
        try_printed(A["dD"], lambda: ln.dD_dX_printed(X), ref, inst)
        ref = ad.second_derivative(P_ref, [X], 0, 0)
        A["d2P"].add(rel_err(ln.d2P_dX2(X), ref), inst, ref)
        try_printed(A["d2P"], lambda: ln.d2P_dX2_printed(X, bracketed=True), ref, inst)
        try_printed(A["d2P"], lambda: ln.d2P_dX2_printed(X, bracketed=False), ref, inst)
        ref = ad.second_derivative(fw.layernorm, [X], 0, 0)
        Hc = ln.hessian(X)
        A["H"].add(rel_err(Hc, ref), inst, ref)
        A["Hrow"].add(rel_err(ln.assemble_rowwise(ln.hessian_rowwise(X)), Hc), inst, ref)
        if k == 0 or not quick:
            fd = ad.fd_second_derivative(fw.layernorm, [X], 0, 0)
            A["Hfd"].add(rel_err(Hc, fd), inst, fd)
    n = len(Xs)
    inputs = "inputs U = X + F(X) of the instances and one L = d_V case"
    return [
        erratum_row("sec2.layernorm_definition", "row statistics over the d_V features (1/d_V) vs the reference "
                     "LayerNorm; printed: 1/m and j = 1..m for U ∈ R^{m×n}", A["def"], n_inst=n,
                     note="printed definition evaluated where m = L <= n = d_V"),
        formula_row("thm2.layernorm.forward", "P(X) M(X) vs (X - μ)/σ row-wise", A["fwd"], n_inst=n, note=inputs),
        formula_row("thm2.layernorm.dM_dX", "G = I - (1/d_V)(I_L ⊗ 1 1^T) vs jacrev of M(X)", A["G"], n_inst=n),
        formula_row("thm2.layernorm.dsigma_dX", "∂σ/∂X = (1/√d_V) A_2 (I_L⊗1^T) diag(vec_r M) G vs jacrev", A["dsig"],
             n_inst=n),
        formula_row("thm2.layernorm.dP_dX", "∂P/∂X (detailed Thm 2) vs jacrev of diag^{-1}(σ)", A["dP"], n_inst=n),
        formula_row("thm2.layernorm.jacobian", "(P⊗I)G + (I_L⊗M^T)∂P/∂X vs jacrev of LayerNorm", A["J"], n_inst=n),
        erratum_row("thm3.layernorm.d_PkronI_dX",
                     "∂(P⊗I_{d_V})/∂X = (I_L⊗K_{d_V,L}⊗I_{d_V})(I_{L²}⊗vec_r I_{d_V})∂P/∂X vs jacrev",
                     A["dPI"], n_inst=n,
                     note="printed with I_L, K_{L,L}: coincides with the corrected form when L = d_V"),
        formula_row("thm3.layernorm.d_IkronMT_dX", "(I_L⊗K_{d_V,L}⊗I_L)(vec_r I_L⊗I)K_{d_V,L}G vs jacrev of I_L⊗M^T",
             A["dIM"], n_inst=n),
        erratum_row("thm3.layernorm.dD_dX", "∂D/∂X = E ∂σ/∂X (with 1/√d_V) vs jacrev of diag(σ)", A["dD"],
                     n_inst=n, note="printed ∂D/∂X omits the 1/√d_V of ∂σ/∂X"),
        erratum_row("thm3.layernorm.d2P_dX2", "∂²P/∂X² (Thm 3 proof, corrected ∂D/∂X) vs jacfwd(jacrev)",
                     A["d2P"], n_inst=n,
                     note="printed: both readings of the 1/√d_V prefactor with the printed ∂D/∂X"),
        formula_row("thm3.layernorm.hessian", "Theorem 3 LayerNorm Hessian ((L d_V)², L d_V) vs jacfwd(jacrev)", A["H"],
             n_inst=n),
        formula_row("thm3.layernorm.hessian.fd", "Theorem 3 Hessian vs central differences of the autograd Jacobian",
             A["Hfd"], tol=FD_TOL, n_inst=1 if quick else n),
        formula_row("thm3.layernorm.hessian_rowwise", "per-row Theorem 3 (L = 1) embedded block-wise vs full Theorem 3",
             A["Hrow"], n_inst=n),
    ]
