"""Rows of ``curvature-gap verify`` for Appendix B: the matrix-calculus identities (vec_r, Kronecker products,
commutation) the derivations use."""
from __future__ import annotations

import torch

from ...exact import derivatives as ad
from ...exact.instances import Instance
from ...theory import calculus as cc
from .common import rel_err, Accumulator, formula_row


def calculus_rows(quick: bool, insts: list[Instance]) -> list:
    rows = []
    g = torch.Generator().manual_seed(123)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    dims = [(2, 3, 4, 5), (3, 2, 2, 4), (4, 3, 3, 2)]
    if quick:
        dims = dims[:2]
    accs = {k: Accumulator() for k in ["vec_r", "K", "Kapply", "prod", "had", "div", "dAXB", "dkx", "dky",
                                "prule", "krule", "dinv", "ddiag", "dsq", "droot", "dT", "ptr"]}
    for (m, n, p, q) in dims:
        A = r(m, n)
        a = accs["vec_r"]
        a.add(rel_err(cc.vec_r(A), cc.vec(A.T)), obj=cc.vec_r(A))
        a.add(rel_err(cc.vec_r(A), cc.commutation(m, n) @ cc.vec(A)))
        a.add(rel_err(cc.unvec_r(cc.vec_r(A), m, n), A))
        a = accs["K"]
        a.add(rel_err(cc.commutation(m, n) @ cc.vec(A), cc.vec(A.T)), obj=cc.commutation(m, n))
        a.add(rel_err(cc.commutation(n, m) @ cc.commutation(m, n), cc.eye(m * n)))
        Mx = r(m * n, p)
        accs["Kapply"].add(rel_err(cc.apply_commutation(m, n, Mx), cc.commutation(m, n) @ Mx), obj=Mx)
        Am, Xm, Bm = r(p, m), r(m, n), r(n, q)
        accs["prod"].add(rel_err(cc.vec_r_product(Am, Xm, Bm), cc.vec_r(Am @ Xm @ Bm)), obj=Am @ Xm @ Bm)
        B2 = r(m, n)
        accs["had"].add(rel_err(cc.vec_r_hadamard(A, B2), cc.vec_r(A * B2)), obj=A)
        b = r(m).abs() + 0.5
        accs["div"].add(rel_err(cc.elementwise_row_division(A, b), A / b[:, None]), obj=A)
        # derivatives vs autograd
        J = ad.jacobian(lambda X_: Am @ X_ @ Bm, [Xm], 0)
        accs["dAXB"].add(rel_err(cc.d_matrix_product(Am, Bm), J), obj=J)
        Xk, Yk = r(m, n), r(p, q)
        J = ad.jacobian(lambda X_: cc.kron(X_, Yk), [Xk], 0)
        accs["dkx"].add(rel_err(cc.d_kron_wrt_first(Xk, Yk), J), obj=J)
        J = ad.jacobian(lambda Y_: cc.kron(Xk, Y_), [Yk], 0)
        accs["dky"].add(rel_err(cc.d_kron_wrt_second(Xk, Yk), J), obj=J)
        # product rule with A(X) = C X E (p x r), B(X) = F X^T H (r x q), X (m, n)
        Cm, Em, Fm, Hm = r(p, m), r(n, 3), r(3, n), r(m, q)
        fA = lambda X_: Cm @ X_ @ Em
        fB = lambda X_: Fm @ X_.T @ Hm
        X0 = r(m, n)
        dA = cc.d_matrix_product(Cm, Em)
        dB = cc.d_matrix_product(Fm, Hm) @ cc.d_transpose(m, n)
        J = ad.jacobian(lambda X_: fA(X_) @ fB(X_), [X0], 0)
        accs["prule"].add(rel_err(cc.product_rule(fA(X0), fB(X0), dA, dB), J), obj=J)
        J = ad.jacobian(lambda X_: cc.kron(fA(X_), fB(X_)), [X0], 0)
        accs["krule"].add(rel_err(cc.kron_rule(fA(X0), fB(X0), dA, dB), J), obj=J)
        D = r(p, p) + 3 * cc.eye(p)
        J = ad.jacobian(torch.linalg.inv, [D], 0)
        accs["dinv"].add(rel_err(cc.d_inverse(D), J), obj=J)
        v = r(p)
        J = ad.jacobian(torch.diag, [v], 0)
        accs["ddiag"].add(rel_err(cc.d_diag(p), J), obj=J)
        J = ad.jacobian(lambda A_: A_ * A_, [A], 0)
        accs["dsq"].add(rel_err(cc.d_hadamard_square(A), J), obj=J)
        Ap = A.abs() + 0.1
        J = ad.jacobian(torch.sqrt, [Ap], 0)
        accs["droot"].add(rel_err(cc.d_hadamard_root(Ap), J), obj=J)
        J = ad.jacobian(lambda A_: A_.T, [A], 0)
        accs["dT"].add(rel_err(cc.d_transpose(m, n), J), obj=J)
        # partial transpose: second derivatives of N(W1, W2) = W1 C W2 in both orders
        W1, Cc, W2 = r(2, m), r(m, n), r(n, 3)
        fn = lambda a_, b_: torch.tanh(a_ @ Cc @ b_)
        H12 = ad.second_derivative(fn, [W1, W2], 0, 1)
        H21 = ad.second_derivative(fn, [W1, W2], 1, 0)
        accs["ptr"].add(rel_err(cc.partial_transpose(H12, 6, W1.numel(), W2.numel()), H21), obj=H21)
    spec = [
        ("appB.vec_r", "vec_r(A) vs vec(A^T) and K_{m,n} vec(A)", "vec_r"),
        ("appB.commutation", "K_{m,n} vec(A) vs vec(A^T); K_{n,m} K_{m,n} vs I", "K"),
        ("appB.commutation_apply", "K_{m,n} M as a row permutation vs the dense product", "Kapply"),
        ("appB.vec_r_product", "(A ⊗ B^T) vec_r X vs vec_r(AXB)", "prod"),
        ("appB.vec_r_hadamard", "diag(vec_r A) vec_r B vs vec_r(A∘B)", "had"),
        ("appB.elementwise_division", "diag^{-1}(b) A vs A_ij / b_i", "div"),
        ("appB.d_matrix_product", "∂(AXB)/∂X = A ⊗ B^T vs jacrev", "dAXB"),
        ("appB.d_kron_first", "∂(X⊗Y)/∂X = (I_n⊗K_{p,q}⊗I_r)(I_{nq}⊗vec_r Y) vs jacrev", "dkx"),
        ("appB.d_kron_second", "∂(X⊗Y)/∂Y = (I_n⊗K_{p,q}⊗I_r)(vec_r X⊗I_{pr}) vs jacrev", "dky"),
        ("appB.product_rule", "∂(A(X)B(X))/∂X = (A⊗I)∂B + (I⊗B^T)∂A vs jacrev", "prule"),
        ("appB.kron_rule", "∂(A(X)⊗B(X))/∂X (Kronecker rule) vs jacrev", "krule"),
        ("appB.d_inverse", "∂D^{-1}/∂D = -D^{-1} ⊗ D^{-T} vs jacrev", "dinv"),
        ("appB.d_diag", "∂diag(v)/∂v = (e_1⊗e_1 ... e_L⊗e_L) vs jacrev", "ddiag"),
        ("appB.d_hadamard_square", "∂A^{∘2}/∂A = 2 diag(vec_r A) vs jacrev", "dsq"),
        ("appB.d_hadamard_root", "∂A^{∘1/2}/∂A = ½ diag^{-1}(vec_r^{∘1/2} A) vs jacrev", "droot"),
        ("appB.d_transpose", "∂A^T/∂A = K_{n,m} vs jacrev", "dT"),
        ("appB.partial_transpose", "d²N/dW_1dW_2 partially transposed vs d²N/dW_2dW_1 (autograd)", "ptr"),
    ]
    for rid, what, key in spec:
        rows.append(formula_row(rid, what, accs[key], n_inst=len(dims)))
    return rows
