"""Rows of ``curvature-gap verify`` for Appendix B: the matrix-calculus identities (vec_r, Kronecker products,
commutation) the derivations use."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact.instances import Instance
from ...theory import calculus as cc
from .common import Accumulator, FormulaCheck, Group, rel_err

__all__ = ["CHECKS", "GROUP"]


def _appB(rid: str, what: str, key: str, **kw) -> FormulaCheck:
    return FormulaCheck(f"appB.{rid}", "appB", what, key, **kw)


CHECKS = (
    _appB("vec_r", "vec_r(A) vs vec(A^T) and K_{m,n} vec(A)", "vec_r"),
    _appB("commutation", "K_{m,n} vec(A) vs vec(A^T); K_{n,m} K_{m,n} vs I", "K"),
    _appB("commutation_apply", "K_{m,n} M as a row permutation vs the dense product", "Kapply", role="reference"),
    _appB("vec_r_product", "(A ⊗ B^T) vec_r X vs vec_r(AXB)", "prod"),
    _appB("vec_r_hadamard", "diag(vec_r A) vec_r B vs vec_r(A∘B)", "had"),
    _appB("elementwise_division", "diag^{-1}(b) A vs A_ij / b_i", "div"),
    _appB("d_matrix_product", "∂(AXB)/∂X = A ⊗ B^T vs jacrev", "dAXB"),
    _appB("d_kron_first", "∂(X⊗Y)/∂X = (I_n⊗K_{p,q}⊗I_r)(I_{nq}⊗vec_r Y) vs jacrev", "dkx"),
    _appB("d_kron_second", "∂(X⊗Y)/∂Y = (I_n⊗K_{p,q}⊗I_r)(vec_r X⊗I_{pr}) vs jacrev", "dky"),
    _appB("product_rule", "∂(A(X)B(X))/∂X = (A⊗I)∂B + (I⊗B^T)∂A vs jacrev", "prule"),
    _appB("kron_rule", "∂(A(X)⊗B(X))/∂X (Kronecker rule) vs jacrev", "krule"),
    _appB("d_inverse", "∂D^{-1}/∂D = -D^{-1} ⊗ D^{-T} vs jacrev", "dinv"),
    _appB("d_diag", "∂diag(v)/∂v = (e_1⊗e_1 ... e_L⊗e_L) vs jacrev", "ddiag"),
    _appB("d_hadamard_square", "∂A^{∘2}/∂A = 2 diag(vec_r A) vs jacrev", "dsq"),
    _appB("d_hadamard_root", "∂A^{∘1/2}/∂A = ½ diag^{-1}(vec_r^{∘1/2} A) vs jacrev", "droot"),
    _appB("d_transpose", "∂A^T/∂A = K_{n,m} vs jacrev", "dT"),
    _appB("partial_transpose", "d²N/dW_1dW_2 partially transposed vs d²N/dW_2dW_1 (autograd)", "ptr"),
)


def measure(quick: bool, insts: list[Instance], accs: dict[str, Accumulator]) -> None:
    """Each identity on random matrices of three (quick: two) size tuples (m, n, p, q), one case each."""
    g = torch.Generator().manual_seed(123)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    dims = [(2, 3, 4, 5), (3, 2, 2, 4), (4, 3, 3, 2)]
    if quick:
        dims = dims[:2]
    for case in dims:
        m, n, p, q = case
        A = r(m, n)
        a = accs["vec_r"]
        a.add(rel_err(cc.vec_r(A), cc.vec(A.T)), case, obj=cc.vec_r(A))
        a.add(rel_err(cc.vec_r(A), cc.commutation(m, n) @ cc.vec(A)), case)
        a.add(rel_err(cc.unvec_r(cc.vec_r(A), m, n), A), case)
        a = accs["K"]
        a.add(rel_err(cc.commutation(m, n) @ cc.vec(A), cc.vec(A.T)), case, obj=cc.commutation(m, n))
        a.add(rel_err(cc.commutation(n, m) @ cc.commutation(m, n), cc.eye(m * n)), case)
        Mx = r(m * n, p)
        accs["Kapply"].add(rel_err(cc.apply_commutation(m, n, Mx), cc.commutation(m, n) @ Mx), case, obj=Mx)
        Am, Xm, Bm = r(p, m), r(m, n), r(n, q)
        accs["prod"].add(rel_err(cc.vec_r_product(Am, Xm, Bm), cc.vec_r(Am @ Xm @ Bm)), case, obj=Am @ Xm @ Bm)
        B2 = r(m, n)
        accs["had"].add(rel_err(cc.vec_r_hadamard(A, B2), cc.vec_r(A * B2)), case, obj=A)
        b = r(m).abs() + 0.5
        accs["div"].add(rel_err(cc.elementwise_row_division(A, b), A / b[:, None]), case, obj=A)
        # derivatives vs autograd
        accs["dAXB"].compare(cc.d_matrix_product(Am, Bm), ad.jacobian(lambda X_: Am @ X_ @ Bm, [Xm], 0), case)
        Xk, Yk = r(m, n), r(p, q)
        accs["dkx"].compare(cc.d_kron_wrt_first(Xk, Yk), ad.jacobian(lambda X_: cc.kron(X_, Yk), [Xk], 0), case)
        accs["dky"].compare(cc.d_kron_wrt_second(Xk, Yk), ad.jacobian(lambda Y_: cc.kron(Xk, Y_), [Yk], 0), case)
        # product rule with A(X) = C X E (p x r), B(X) = F X^T H (r x q), X (m, n)
        Cm, Em, Fm, Hm = r(p, m), r(n, 3), r(3, n), r(m, q)
        fA = lambda X_: Cm @ X_ @ Em
        fB = lambda X_: Fm @ X_.T @ Hm
        X0 = r(m, n)
        dA = cc.d_matrix_product(Cm, Em)
        dB = cc.d_matrix_product(Fm, Hm) @ cc.d_transpose(m, n)
        accs["prule"].compare(cc.product_rule(fA(X0), fB(X0), dA, dB),
                              ad.jacobian(lambda X_: fA(X_) @ fB(X_), [X0], 0), case)
        accs["krule"].compare(cc.kron_rule(fA(X0), fB(X0), dA, dB),
                              ad.jacobian(lambda X_: cc.kron(fA(X_), fB(X_)), [X0], 0), case)
        D = r(p, p) + 3 * cc.eye(p)
        accs["dinv"].compare(cc.d_inverse(D), ad.jacobian(torch.linalg.inv, [D], 0), case)
        v = r(p)
        accs["ddiag"].compare(cc.d_diag(p), ad.jacobian(torch.diag, [v], 0), case)
        accs["dsq"].compare(cc.d_hadamard_square(A), ad.jacobian(lambda A_: A_ * A_, [A], 0), case)
        Ap = A.abs() + 0.1
        accs["droot"].compare(cc.d_hadamard_root(Ap), ad.jacobian(torch.sqrt, [Ap], 0), case)
        accs["dT"].compare(cc.d_transpose(m, n), ad.jacobian(lambda A_: A_.T, [A], 0), case)
        # partial transpose: second derivatives of N(W1, W2) = W1 C W2 in both orders
        W1, Cc, W2 = r(2, m), r(m, n), r(n, 3)
        fn = lambda a_, b_: torch.tanh(a_ @ Cc @ b_)
        H12 = ad.second_derivative(fn, [W1, W2], 0, 1)
        accs["ptr"].compare(cc.partial_transpose(H12, 6, W1.numel(), W2.numel()),
                            ad.second_derivative(fn, [W1, W2], 1, 0), case)

GROUP = Group("calculus", CHECKS, measure)
