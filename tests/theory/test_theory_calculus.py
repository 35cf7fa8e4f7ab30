"""curvature_gap.theory.calculus: the Appendix B rules against torch.func (float64)."""
import pytest
import torch
from torch.func import jacrev

from curvature_gap.theory import calculus as cc

pytestmark = pytest.mark.usefixtures("one_thread")

@pytest.fixture
def r():
    """``r(*shape)``: standard normal float64 draws from a generator of this test alone, seeded afresh, so its
    numbers do not depend on which tests ran before."""
    g = torch.Generator().manual_seed(0)
    return lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)


def jac(f, x):
    return jacrev(f)(x).reshape(-1, x.numel())


def close(a, b, tol=1e-12):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def test_vec_r_is_row_major_flatten():
    A = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    assert cc.vec_r(A).tolist() == [0, 1, 2, 3, 4, 5]
    assert cc.vec(A).tolist() == [0, 3, 1, 4, 2, 5]


def test_commutation_definition_and_inverse(r):
    A = r(3, 4)
    K = cc.commutation(3, 4)
    close(K @ cc.vec(A), cc.vec(A.T))
    close(K @ cc.vec(A), cc.vec_r(A))
    close(cc.commutation(4, 3) @ K, torch.eye(12, dtype=torch.float64))
    M = r(12, 5)
    close(cc.apply_commutation(3, 4, M), K @ M)


def test_commutation_is_not_symmetric_in_indices():
    # K_{m,n} and K_{n,m} differ when m != n (basis of the dF/dW_K erratum)
    assert float((cc.commutation(3, 4) - cc.commutation(4, 3)).abs().max()) == 1.0


def test_vec_r_product_and_hadamard(r):
    A, X, B = r(2, 3), r(3, 4), r(4, 5)
    close(cc.vec_r_product(A, X, B), cc.vec_r(A @ X @ B))
    P, Q = r(3, 4), r(3, 4)
    close(cc.vec_r_hadamard(P, Q), cc.vec_r(P * Q))


def test_matrix_product_derivative(r):
    A, X, B = r(2, 3), r(3, 4), r(4, 5)
    close(cc.d_matrix_product(A, B), jac(lambda X_: A @ X_ @ B, X))


def test_kron_derivatives(r):
    X, Y = r(2, 3), r(4, 2)
    close(cc.d_kron_wrt_first(X, Y), jac(lambda X_: cc.kron(X_, Y), X))
    close(cc.d_kron_wrt_second(X, Y), jac(lambda Y_: cc.kron(X, Y_), Y))


def test_product_and_kron_rules(r):
    C, E, F, H, X = r(2, 3), r(4, 2), r(2, 4), r(3, 5), r(3, 4)
    fA = lambda X_: C @ X_ @ E           # (2, 2)
    fB = lambda X_: F @ X_.T @ H         # (2, 5)
    dA = cc.d_matrix_product(C, E)
    dB = cc.d_matrix_product(F, H) @ cc.d_transpose(3, 4)
    close(cc.product_rule(fA(X), fB(X), dA, dB), jac(lambda X_: fA(X_) @ fB(X_), X))
    close(cc.kron_rule(fA(X), fB(X), dA, dB), jac(lambda X_: cc.kron(fA(X_), fB(X_)), X))


def test_inverse_diag_hadamard_transpose(r):
    D = r(4, 4) + 4 * torch.eye(4, dtype=torch.float64)
    close(cc.d_inverse(D), jac(torch.linalg.inv, D))
    v = r(5)
    close(cc.d_diag(5), jac(torch.diag, v))
    A = r(3, 2)
    close(cc.d_hadamard_square(A), jac(lambda A_: A_ * A_, A))
    close(cc.d_hadamard_root(A.abs() + 0.1), jac(torch.sqrt, A.abs() + 0.1))
    close(cc.d_transpose(3, 2), jac(lambda A_: A_.T, A))


def test_partial_transpose_swaps_derivative_order(r):
    W1, C, W2 = r(2, 3), r(3, 4), r(4, 2)
    f = lambda a, b: torch.tanh(a @ C @ b)
    H12 = jacrev(jacrev(f, argnums=0), argnums=1)(W1, W2).reshape(-1, W2.numel())
    H21 = jacrev(jacrev(f, argnums=1), argnums=0)(W1, W2).reshape(-1, W1.numel())
    close(cc.partial_transpose(H12, 4, 6, 8), H21)
