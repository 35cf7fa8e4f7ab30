"""Rows of ``curvature-gap verify`` for Lemma 1 and the FFN parts of Theorem 4: ReLU derivatives and the
feed-forward Jacobians."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact import forward as fw
from ...exact.instances import Instance
from ...theory import ffn as ff
from .common import FD_TOL, Accumulator, FormulaCheck, Group, block_args, check_instance, try_printed

__all__ = ["CHECKS", "GROUP"]

CHECKS = (
    FormulaCheck("lem1.relu.jacobian", "lem1", "diag(vec_r 1{X>0}) vs jacrev of ReLU at Y W_1", "rj"),
    FormulaCheck("lem1.relu.hessian", "lem1", "0 vs jacfwd(jacrev) of ReLU (a.e.)", "rh",
                 note="absolute error (reference is exactly zero)"),
    FormulaCheck("lem1.relu.hessian.fd", "lem1",
                 "0 vs central differences of the ReLU Jacobian (h = 1e-6, |pre| > 1e-4)", "rfd", tol=FD_TOL,
                 note="absolute error"),
    FormulaCheck("thm4.ffn.B1", "thm4", "B_1 = (I_L⊗W_2^T) D_σ (Y⊗I_{d_ff}) vs jacrev of S w.r.t. W_1", "B1",
                 role="detail"),
    FormulaCheck("thm4.ffn.B2", "thm4", "B_2 = ReLU(Y W_1) ⊗ I_{d_V} vs jacrev of S w.r.t. W_2", "B2", role="detail"),
    FormulaCheck("thm4.ffn.J_SY", "thm4", "J_SY = (I_L⊗W_2^T) D_σ (I_L⊗W_1^T) + I vs jacrev of S w.r.t. Y", "JSY",
                 role="detail"),
    FormulaCheck("thm4.relu_mask", "thm4", "B_1 with mask 1{Y W_1 > 0} vs jacrev (printed mask: 1{X > 0})", "mask",
                 role="detail", note="printed mask evaluated where d_ff = d_V", expected="corrected"),
)


def measure(quick: bool, insts: list[Instance], A: dict[str, Accumulator]) -> None:
    """On the instances and one with d_ff = d_V (finite differences: quick, the first only)."""
    eq = check_instance(3, 6, 3, 6, seed=7)          # d_ff = d_V: printed 1{X>0} is well-shaped
    for k, inst in enumerate(insts + [eq]):
        fo = fw.block_forward(*block_args(inst))
        Y, W1, W2, X = fo["Y"], inst.W_1, inst.W_2, inst.X
        Pre = Y @ W1
        A["rj"].compare(ff.relu_jacobian(Pre), ad.jacobian(torch.relu, [Pre], 0), inst)
        A["rh"].compare(ff.relu_hessian(Pre), ad.second_derivative(torch.relu, [Pre], 0, 0), inst, scale=1.0)
        if k == 0 or not quick:
            A["rfd"].compare(ff.relu_hessian(Pre), ad.fd_second_derivative(torch.relu, [Pre], 0, 0, h=1e-6), inst,
                             scale=1.0)
        S_of = lambda Y_, W1_, W2_: torch.relu(Y_ @ W1_) @ W2_ + Y_
        ref = ad.jacobian(S_of, [Y, W1, W2], 1)
        A["B1"].compare(ff.dS_dW1(Y, W1, W2), ref, inst)
        A["mask"].compare(ff.dS_dW1(Y, W1, W2), ref, inst)
        try_printed(A["mask"], lambda: ff.dS_dW1_printed(X, Y, W1, W2), ref, inst)
        A["B2"].compare(ff.dS_dW2(Y, W1), ad.jacobian(S_of, [Y, W1, W2], 2), inst)
        A["JSY"].compare(ff.dS_dY(Y, W1, W2), ad.jacobian(S_of, [Y, W1, W2], 0), inst)

GROUP = Group("ffn", CHECKS, measure)
