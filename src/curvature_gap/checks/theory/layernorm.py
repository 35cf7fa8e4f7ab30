"""Rows of ``curvature-gap verify`` for §2 and Theorems 2–3: the LayerNorm definition, its Jacobian and its Hessian."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import Instance
from ...theory import calculus as cc
from ...theory import layernorm as ln
from .common import FD_TOL, Accumulator, FormulaCheck, Group, check_instance, try_printed

__all__ = ["CHECKS", "GROUP"]

_INPUTS = "inputs U = X + F(X) of the instances and one L = d_V case"
CHECKS = (
    FormulaCheck("sec2.layernorm_definition", "sec2", "row statistics over the d_V features (1/d_V) vs the reference "
                 "LayerNorm; printed: 1/m and j = 1..m for U ∈ R^{m×n}", "def",
                 note="printed definition evaluated where m = L <= n = d_V", expected="corrected"),
    FormulaCheck("thm2.layernorm.forward", "thm2", "P(X) M(X) vs (X - μ)/σ row-wise", "fwd", note=_INPUTS),
    FormulaCheck("thm2.layernorm.dM_dX", "thm2", "G = I - (1/d_V)(I_L ⊗ 1 1^T) vs jacrev of M(X)", "G", role="detail"),
    FormulaCheck("thm2.layernorm.dsigma_dX", "thm2",
                 "∂σ/∂X = (1/√d_V) A_2 (I_L⊗1^T) diag(vec_r M) G vs jacrev", "dsig", role="detail"),
    FormulaCheck("thm2.layernorm.dP_dX", "thm2", "∂P/∂X (detailed Thm 2) vs jacrev of diag^{-1}(σ)", "dP",
                 role="detail"),
    FormulaCheck("thm2.layernorm.jacobian", "thm2", "(P⊗I)G + (I_L⊗M^T)∂P/∂X vs jacrev of LayerNorm", "J"),
    FormulaCheck("thm3.layernorm.d_PkronI_dX", "thm3",
                 "∂(P⊗I_{d_V})/∂X = (I_L⊗K_{d_V,L}⊗I_{d_V})(I_{L²}⊗vec_r I_{d_V})∂P/∂X vs jacrev", "dPI",
                 role="proof", note="printed with I_L, K_{L,L}: coincides with the corrected form when L = d_V",
                 expected="corrected"),
    FormulaCheck("thm3.layernorm.d_IkronMT_dX", "thm3",
                 "(I_L⊗K_{d_V,L}⊗I_L)(vec_r I_L⊗I)K_{d_V,L}G vs jacrev of I_L⊗M^T", "dIM", role="proof"),
    FormulaCheck("thm3.layernorm.dD_dX", "thm3", "∂D/∂X = E ∂σ/∂X (with 1/√d_V) vs jacrev of diag(σ)", "dD",
                 role="proof", note="printed ∂D/∂X omits the 1/√d_V of ∂σ/∂X", expected="corrected"),
    FormulaCheck("thm3.layernorm.d2P_dX2", "thm3", "∂²P/∂X² (Thm 3 proof, corrected ∂D/∂X) vs jacfwd(jacrev)", "d2P",
                 role="proof", note="printed: both readings of the 1/√d_V prefactor with the printed ∂D/∂X",
                 expected="corrected"),
    FormulaCheck("thm3.layernorm.hessian", "thm3", "Theorem 3 LayerNorm Hessian ((L d_V)², L d_V) vs jacfwd(jacrev)",
                 "H"),
    FormulaCheck("thm3.layernorm.hessian.fd", "thm3",
                 "Theorem 3 Hessian vs central differences of the autograd Jacobian", "Hfd", tol=FD_TOL),
    FormulaCheck("thm3.layernorm.hessian_rowwise", "thm3",
                 "per-row Theorem 3 (L = 1) embedded block-wise vs full Theorem 3", "Hrow", role="reference"),
)


def measure(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """At the inputs U = X + F(X) of the instances and one with L = d_V (finite differences: quick, the first only)."""
    Xs = [(inst.X + fw.sa_forward(inst.X, inst.W_Q, inst.W_K, inst.W_V), inst) for inst in insts]
    # one instance with L = d_V, where the printed I_L form of ∂(P⊗I)/∂X is computable
    eq = check_instance(4, 4, 3, 6, seed=5)
    Xs.append((eq.X, eq))
    center_ref = lambda X_: X_ - X_.mean(dim=1, keepdim=True)
    sigma_ref = lambda X_: center_ref(X_).pow(2).mean(dim=1).sqrt()
    P_ref = lambda X_: torch.diag(1.0 / sigma_ref(X_))
    D_ref = lambda X_: torch.diag(sigma_ref(X_))
    for k, (X, inst) in enumerate(Xs):
        L, d = X.shape
        A["fwd"].compare(ln.layernorm(X), fw.layernorm(X), inst, obj=X)
        A["def"].compare(ln.layernorm(X), fw.layernorm(X), inst, obj=X)
        try_printed(A["def"], lambda: ln.layernorm_printed_definition(X), fw.layernorm(X), inst)
        A["G"].compare(ln.dM_dX(L, d, X), ad.jacobian(center_ref, [X], 0), inst)
        A["dsig"].compare(ln.dsigma_dX(X), ad.jacobian(sigma_ref, [X], 0), inst)
        A["dP"].compare(ln.dP_dX(X), ad.jacobian(P_ref, [X], 0), inst)
        A["J"].compare(ln.jacobian(X), ad.jacobian(fw.layernorm, [X], 0), inst)
        ref = ad.jacobian(lambda X_: cc.kron(P_ref(X_), cc.eye(d, X_)), [X], 0)
        A["dPI"].compare(ln.d_PkronI_dX(X), ref, inst)
        try_printed(A["dPI"], lambda: ln.d_PkronI_dX_printed(X), ref, inst)
        A["dIM"].compare(ln.d_IkronMT_dX(X), ad.jacobian(lambda X_: cc.kron(cc.eye(L, X_), center_ref(X_).T), [X], 0),
                         inst)
        ref = ad.jacobian(D_ref, [X], 0)
        A["dD"].compare(ln.dD_dX(X), ref, inst)
        try_printed(A["dD"], lambda: ln.dD_dX_printed(X), ref, inst)
        ref = ad.second_derivative(P_ref, [X], 0, 0)
        A["d2P"].compare(ln.d2P_dX2(X), ref, inst)
        for bracketed in (True, False):
            try_printed(A["d2P"], lambda: ln.d2P_dX2_printed(X, bracketed=bracketed), ref, inst)
        ref = ad.second_derivative(fw.layernorm, [X], 0, 0)
        Hc = ln.hessian(X)
        A["H"].compare(Hc, ref, inst)
        A["Hrow"].compare(ln.assemble_rowwise(ln.hessian_rowwise(X)), Hc, inst, obj=ref)
        if k == 0 or not quick:
            A["Hfd"].compare(Hc, ad.fd_second_derivative(fw.layernorm, [X], 0, 0), inst)

GROUP = Group("layernorm", CHECKS, measure)
