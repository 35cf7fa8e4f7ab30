"""curvature_gap.exact.linalg: spectral norms (dense, ARPACK, plain Lanczos) and second-derivative norms."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cases import randn, tiny_instance
from curvature_gap.bounds.quantities import block_Z
from curvature_gap.exact import linalg as la

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("shape", [(7, 5), (600, 3), (450, 420)], ids=["small", "gram", "lanczos"])
def test_spectral_norm_on_every_path(shape):
    M = randn(*shape, seed=sum(shape))
    assert la.spectral_norm(M) == pytest.approx(float(torch.linalg.matrix_norm(M, ord=2)), rel=1e-9)
    assert la.spectral_norm(torch.zeros(0, 3, dtype=torch.float64)) == 0.0


def test_sym_spectral_norm_takes_the_largest_magnitude_and_symmetrises():
    H = np.diag([1.0, -5.0, 2.0])
    assert la.sym_spectral_norm(H) == 5.0
    assert la.sym_spectral_norm(torch.tensor([[0.0, 2.0], [0.0, 0.0]], dtype=torch.float64)) == pytest.approx(1.0)
    big = randn(450, 450, seed=1)
    big = big + big.T
    ref = float(torch.linalg.eigvalsh(big).abs().max())
    assert la.sym_spectral_norm(big) == pytest.approx(ref, rel=1e-9)          # ARPACK above LANCZOS_MIN


def test_lanczos_sym_norm_dense_arpack_psd_and_zero():
    rng = np.random.default_rng(0)
    for n in (20, 120):
        S = rng.standard_normal((n, n))
        S = S + S.T
        ev = np.linalg.eigvalsh(S)
        assert la.lanczos_sym_norm(lambda v: S @ v, n) == pytest.approx(np.abs(ev).max(), rel=1e-8)
        assert la.lanczos_sym_norm(lambda v: S @ v, n, psd=True) == pytest.approx(ev.max(), rel=1e-8)
    assert la.lanczos_sym_norm(lambda v: 0 * v, 100) == 0.0


def test_second_derivative_norm_dense_and_matrix_free_agree():
    inst = tiny_instance(L=3, d=2)
    args = [inst.X, *inst.weights]
    for i, j in ((2, 3), (4, 5), (1, 1)):
        dense = la.second_derivative_norm(block_Z, args, i, j)
        T = la.second_derivative_tensor(block_Z, args, i, j)
        assert dense == pytest.approx(float(torch.linalg.matrix_norm(T.reshape(-1, T.shape[-1]), ord=2)), rel=1e-12)
        free = la.second_derivative_norm(block_Z, args, i, j, dense_limit=0)
        assert free == pytest.approx(dense, rel=1e-8)


def test_plain_lanczos_of_several_operators_at_once():
    mats = []
    for n, seed in ((5, 0), (12, 1)):
        A = randn(n, n, seed=seed)
        mats.append(A + A.T)

    def matvec(idx, vecs):
        return [mats[i] @ v for i, v in zip(idx, vecs)]

    ritz = la.lanczos(matvec, [5, 12], iters=12, device="cpu")
    for M, r in zip(mats, ritz):     # a full Krylov space: the Ritz values are the eigenvalues
        torch.testing.assert_close(r, torch.linalg.eigvalsh(M), rtol=1e-8, atol=1e-8)
    short = la.lanczos(matvec, [5, 12], iters=3, device="cpu")
    assert [len(r) for r in short] == [3, 3]
    assert float(short[1][-1]) <= float(torch.linalg.eigvalsh(mats[1])[-1]) + 1e-12


# ---------------------------------------------------------------------------------------------- one home
def test_the_tensor_primitives_equal_the_literal_lapack_calls_they_replaced():
    """The bounds, the adversarial search and Theorem 7 once wrote these calls inline; the survivors in
    exact/linalg.py return bit-for-bit the same numbers (and stay differentiable)."""
    g = torch.Generator().manual_seed(5)
    M = torch.randn(4, 6, 5, generator=g, dtype=torch.float64)
    H = torch.randn(7, 7, generator=g, dtype=torch.float64)
    S = H @ H.T
    G = torch.einsum("bij,bik->bjk", M, M)
    assert torch.equal(la.matrix_norms(M), torch.linalg.matrix_norm(M, ord=2))
    assert torch.equal(la.top_eigenvalues(S), torch.linalg.eigvalsh(S)[-1])
    assert torch.equal(la.sym_abs_max(H), torch.linalg.eigvalsh((H + H.T) / 2).abs().max())
    assert torch.equal(la.gram_roots(G), torch.linalg.eigvalsh(G)[:, -1].clamp_min(0).sqrt())
    assert torch.allclose(la.gram_roots(G), la.matrix_norms(M), rtol=1e-12)   # what a Gram root is
    Hr = H.clone().requires_grad_(True)
    la.sym_abs_max(Hr).backward()
    assert Hr.grad is not None and torch.isfinite(Hr.grad).all()


def test_arpack_extreme_is_the_one_eigsh_call():
    from scipy.sparse.linalg import aslinearoperator, eigsh

    rng = np.random.default_rng(3)
    A = rng.standard_normal((80, 80))
    A = A + A.T
    v0 = rng.standard_normal(80)
    want = float(np.abs(eigsh(aslinearoperator(A), k=1, which="LM", tol=1e-8, v0=v0, return_eigenvectors=False)).max())
    assert la.arpack_extreme(aslinearoperator(A), tol=1e-8, v0=v0) == want
    assert abs(la.arpack_extreme(aslinearoperator(A), tol=1e-10) - np.abs(np.linalg.eigvalsh(A)).max()) < 1e-8
    P = A @ A.T
    assert abs(la.arpack_extreme(aslinearoperator(P), tol=1e-10, psd=True) - np.linalg.eigvalsh(P).max()) < 1e-6 * P.max()
