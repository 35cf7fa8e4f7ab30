"""Matrix-calculus toolbox of Appendix B (row-wise vectorisation, numerator layout).

Conventions (paper §2 "Preliminaries", Appendix B):

* ``vec_r(A)`` stacks the rows of ``A`` (``A.reshape(-1)``); ``vec(A) = vec_r(A^T)`` stacks the columns.
* For ``N: R^{p x q} -> R^{n x d}`` the Jacobian is ``dN/dW := d vec_r(N) / d vec_r(W)^T``, shape ``(n*d, p*q)``.
* The second derivative ``d^2 N / dW_i dW_j := d vec_r(dN/dW_i) / d vec_r(W_j)^T`` has shape
  ``(n*d*p_i*q_i, p_j*q_j)``; its entry ``[(a, b), c]`` is ``d^2 N_a / dw_{i,b} dw_{j,c}``.
* The commutation matrix ``K_{m,n}`` is the ``mn x mn`` permutation with ``K_{m,n} vec(A) = vec(A^T)`` for ``A``
  of shape ``(m, n)``.

Closed forms in ``torch`` tensor algebra (no automatic differentiation), float64.
"""
from __future__ import annotations

import torch

__all__ = ["eye", "ones", "vec_r", "unvec_r", "vec", "commutation", "kron", "kron3", "kron4", "vec_r_product",
           "vec_r_hadamard", "elementwise_row_division", "d_matrix_product", "d_kron_wrt_first", "d_kron_wrt_second",
           "product_rule", "kron_rule", "d_inverse", "d_diag", "d_hadamard_square", "d_hadamard_root", "d_transpose",
           "partial_transpose", "apply_commutation", "blockdiag_matmul", "assemble_rowwise"]


def _opts(ref: torch.Tensor | None) -> dict:
    if ref is None:
        return {"dtype": torch.float64}
    return {"dtype": ref.dtype, "device": ref.device}


def eye(n: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Identity ``I_n`` (float64, on the device of ``ref`` when given)."""
    return torch.eye(n, **_opts(ref))


def ones(m: int, n: int | None = None, ref: torch.Tensor | None = None) -> torch.Tensor:
    """All-ones matrix ``1_{m x n}`` (a column ``1_m`` of shape (m, 1) when ``n`` is None)."""
    return torch.ones(m, 1 if n is None else n, **_opts(ref))


def vec_r(A: torch.Tensor) -> torch.Tensor:
    """Row-wise vectorisation ``vec_r(A)``: shape (m, n) -> (m*n,)."""
    return A.reshape(-1)


def unvec_r(v: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """Inverse of :func:`vec_r`: shape (m*n,) -> (m, n)."""
    return v.reshape(m, n)


def vec(A: torch.Tensor) -> torch.Tensor:
    """Column-wise vectorisation ``vec(A) = vec_r(A^T)`` (Property "vec and vec_r")."""
    return A.transpose(0, 1).reshape(-1)


def commutation(m: int, n: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Commutation matrix ``K_{m,n}`` (m*n, m*n): ``K_{m,n} vec(A) = vec(A^T)`` for ``A`` (m, n), hence
    ``vec_r(A) = K_{m,n} vec(A)`` and ``K_{n,m} K_{m,n} = I_{mn}``; entry ``[i*n + j, j*m + i] = 1``."""
    K = torch.zeros(m * n, m * n, **_opts(ref))
    i = torch.arange(m, device=K.device).repeat_interleave(n)
    j = torch.arange(n, device=K.device).repeat(m)
    K[i * n + j, j * m + i] = 1.0
    return K


def apply_commutation(m: int, n: int, M: torch.Tensor) -> torch.Tensor:
    """``K_{m,n} M`` computed as the row permutation it is (no mn x mn matrix formed).

    Row ``i*n + j`` of the result is row ``j*m + i`` of ``M``; ``M`` has m*n rows.
    """
    return M.reshape(n, m, -1).transpose(0, 1).reshape(m * n, *M.shape[1:])


def blockdiag_matmul(blocks: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """``blockdiag(blocks[0], ..., blocks[b-1]) @ M`` without forming the block-diagonal matrix.

    ``blocks`` has shape (b, p, q) and ``M`` shape (b*q, k); result (b*p, k).
    """
    b, p, q = blocks.shape
    return torch.bmm(blocks, M.reshape(b, q, -1)).reshape(b * p, -1)


def kron(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Kronecker product ``A ⊗ B`` of two matrices: (m, n) ⊗ (p, q) -> (m p, n q)."""
    m, n = A.shape
    p, q = B.shape
    return (A[:, None, :, None] * B[None, :, None, :]).reshape(m * p, n * q)


def kron3(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``A ⊗ B ⊗ C``."""
    return kron(kron(A, B), C)


def kron4(A, B, C, D) -> torch.Tensor:
    """``A ⊗ B ⊗ C ⊗ D``."""
    return kron(kron3(A, B, C), D)


def vec_r_product(A: torch.Tensor, X: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Property "Row-wise vectorisation of matrix product": ``vec_r(AXB) = (A ⊗ B^T) vec_r(X)``."""
    return kron(A, B.T) @ vec_r(X)


def vec_r_hadamard(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Property "Row-wise vectorisation of Hadamard product": ``diag(vec_r A) vec_r B``."""
    return torch.diag(vec_r(A)) @ vec_r(B)


def elementwise_row_division(A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Property "Element-wise division": ``C = diag^{-1}(b) A`` with ``C_ij = A_ij / b_i``."""
    return torch.linalg.inv(torch.diag(b.reshape(-1))) @ A


def d_matrix_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Property "Matrix-Product derivative": ``d(AXB)/dX = A ⊗ B^T`` (A, B constant).

    Shapes: A (p, m), X (m, n), B (n, q) -> (p*q, m*n).
    """
    return kron(A, B.T)


def _kron_shuffle(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``I_n ⊗ K_{p,q} ⊗ I_r`` for A (n, q), B (p, r): the left factor of every Kronecker-product derivative."""
    (n, q), (p, r) = A.shape, B.shape
    return kron3(eye(n, A), commutation(p, q, A), eye(r, A))


def d_kron_wrt_first(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Property "Kronecker-Product derivative", first factor.

    ``d(X ⊗ Y)/dX = (I_n ⊗ K_{p,q} ⊗ I_r)(I_{nq} ⊗ vec_r Y)`` for X (n, q), Y (p, r); result shape (n*p*q*r, n*q).
    """
    return _kron_shuffle(X, Y) @ kron(eye(X.numel(), X), vec_r(Y).reshape(-1, 1))


def d_kron_wrt_second(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Property "Kronecker-Product derivative", second factor.

    ``d(X ⊗ Y)/dY = (I_n ⊗ K_{p,q} ⊗ I_r)(vec_r X ⊗ I_{pr})`` for X (n, q), Y (p, r); result shape (n*p*q*r, p*r).
    """
    return _kron_shuffle(X, Y) @ kron(vec_r(X).reshape(-1, 1), eye(Y.numel(), X))


def product_rule(A: torch.Tensor, B: torch.Tensor, dA: torch.Tensor, dB: torch.Tensor) -> torch.Tensor:
    """Proposition "Matrix-valued functions multiplication derivative".

    ``d(A(X)B(X))/dX = (A ⊗ I_q) dB/dX + (I_p ⊗ B^T) dA/dX`` for A (p, r), B (r, q);
    ``dA`` has shape (p*r, N) and ``dB`` shape (r*q, N); result (p*q, N).
    """
    return kron(A, eye(B.shape[1], A)) @ dB + kron(eye(A.shape[0], A), B.T) @ dA


def kron_rule(A: torch.Tensor, B: torch.Tensor, dA: torch.Tensor, dB: torch.Tensor) -> torch.Tensor:
    """Proposition "Matrix-valued functions Kronecker product derivative".

    ``d(A(X) ⊗ B(X))/dX = (I_n ⊗ K_{p,q} ⊗ I_r)((vec_r A ⊗ I_{pr}) dB/dX + (I_{nq} ⊗ vec_r B) dA/dX)``
    for A (n, q), B (p, r); ``dA`` (n*q, N), ``dB`` (p*r, N); result (n*p*q*r, N).
    """
    inner = kron(vec_r(A)[:, None], eye(B.numel(), A)) @ dB + kron(eye(A.numel(), A), vec_r(B)[:, None]) @ dA
    return _kron_shuffle(A, B) @ inner


def d_inverse(D: torch.Tensor) -> torch.Tensor:
    """Proposition "Derivative of the invert matrix": ``dD^{-1}/dD = -D^{-1} ⊗ D^{-T}``; shape (n^2, n^2)."""
    Dinv = torch.linalg.inv(D)
    return -kron(Dinv, Dinv.T)


def d_diag(n: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Proposition "Derivative of diag(.)": ``d diag(v)/dv = (e_1 ⊗ e_1, ..., e_n ⊗ e_n)``; shape (n^2, n)."""
    E = torch.zeros(n * n, n, **_opts(ref))
    idx = torch.arange(n, device=E.device)
    E[idx * n + idx, idx] = 1.0
    return E


def d_hadamard_square(A: torch.Tensor) -> torch.Tensor:
    """Proposition "Derivative of the Hadamard square": ``dA^{∘2}/dA = 2 diag(vec_r A)``."""
    return 2.0 * torch.diag(vec_r(A))


def d_hadamard_root(A: torch.Tensor) -> torch.Tensor:
    """Proposition "Derivative of the Hadamard root" (positive entries):
    ``dA^{∘1/2}/dA = 1/2 diag^{-1}(vec_r^{∘1/2} A)``."""
    return 0.5 * torch.diag(1.0 / torch.sqrt(vec_r(A)))


def d_transpose(m: int, n: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Proposition "Transposed Matrix derivative": ``dA^T/dA = K_{n,m}`` for A of shape (m, n)."""
    return commutation(n, m, ref)


def assemble_rowwise(h: torch.Tensor) -> torch.Tensor:
    """Embed per-row blocks h (L, a, b, c) into the ((L a)(L b), L c) matrix that is zero unless all three row
    indices agree: entry ``[((i, p), (i, q)), (i, s)] = h[i, p, q, s]``."""
    L, a, b, c = h.shape
    full = torch.zeros(L, a, L, b, L, c, dtype=h.dtype, device=h.device)
    idx = torch.arange(L, device=h.device)
    full[idx, :, idx, :, idx, :] = h
    return full.reshape(L * a * L * b, L * c)


def partial_transpose(H: torch.Tensor, out: int, n_i: int, n_j: int) -> torch.Tensor:
    """Swap the two derivative slots: ``d^2 N / dW_i dW_j`` (out*n_i, n_j) to ``d^2 N / dW_j dW_i`` (out*n_j, n_i),
    ``[(a, c), b] <- [(a, b), c]`` (the symmetry of mixed partials in the paper's layout)."""
    return H.reshape(out, n_i, n_j).transpose(1, 2).reshape(out * n_j, n_i)
