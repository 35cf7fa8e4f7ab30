"""Spectral norms of the objects the bounds talk about (float64 throughout).

* :func:`spectral_norm` — ``‖M‖_2`` of a dense matrix (largest singular value).
* :func:`sym_spectral_norm` — ``max |λ|`` of a dense symmetric matrix (``eigvalsh``).
* :func:`lanczos_sym_norm` — ``max |λ|`` of a symmetric operator given by matrix-vector products
  (SciPy's implicitly restarted Lanczos, ``eigsh(which="LM")``).
* :func:`second_derivative_norm` — the spectral norm of a second-derivative tensor written, as in
  the paper (§2, numerator layout with ``vec_r``), as the matrix
  ``∂²f/∂W_i∂W_j ∈ R^{(out · n_i) × n_j}``.  With ``K_a = ∂²f_a/∂W_i∂W_j`` (``n_i × n_j``) for each
  output ``a`` this is ``sqrt(λ_max(Σ_a K_aᵀ K_a))``.  Small tensors are formed densely with
  ``jacfwd(jacrev)``; large ones are handled matrix-free (a JVP of the Jacobian for ``M v`` and a
  VJP for ``Mᵀ u``, Lanczos on the Gram operator).

Tolerances are the numerical ones of LAPACK / ARPACK (``tol=1e-10``); no bound constant is involved.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch.func import jacfwd, jacrev, jvp, vjp

__all__ = [
    "spectral_norm", "sym_spectral_norm", "lanczos_sym_norm", "gram_norm", "second_derivative_norm",
    "second_derivative_tensor", "DENSE_LIMIT",
]

DENSE_LIMIT = 2.5e7  # entries of a second-derivative tensor formed densely (≈ 200 MB in float64)


LANCZOS_MIN = 400  # dense matrices whose smaller side exceeds this use Lanczos (LAPACK is O(n³))


def spectral_norm(M: torch.Tensor) -> float:
    """``‖M‖_2`` (largest singular value) of a dense matrix; 0 for an empty one.

    Small: ``eigvalsh`` of the smaller Gram matrix (or an SVD); large (smaller side > ``LANCZOS_MIN``):
    Lanczos on the Gram operator (``eigsh``, ``tol = 1e-13``).
    """
    if M.numel() == 0:
        return 0.0
    M = M.reshape(M.shape[0], -1) if M.dim() != 2 else M
    r, c = M.shape
    if min(r, c) > LANCZOS_MIN:
        A = M.detach().numpy()
        mv = (lambda v: A.T @ (A @ v)) if c <= r else (lambda v: A @ (A.T @ v))
        return float(np.sqrt(max(lanczos_sym_norm(mv, min(r, c), tol=1e-13, psd=True), 0.0)))
    if r * c > 2.5e5:  # Gram of the short side is cheaper than an SVD
        G = M.T @ M if c <= r else M @ M.T
        return float(torch.linalg.eigvalsh(G)[-1].clamp_min(0).sqrt())
    return float(torch.linalg.matrix_norm(M, ord=2))


def sym_spectral_norm(H: torch.Tensor) -> float:
    """``max |λ(H)|`` of a dense symmetric matrix (symmetrised first: ``(H + Hᵀ)/2``); Lanczos
    (``eigsh``, largest magnitude, ``tol = 1e-13``) above ``LANCZOS_MIN`` rows."""
    S = (H + H.T) / 2
    if S.shape[0] > LANCZOS_MIN:
        A = S.detach().numpy()
        return lanczos_sym_norm(lambda v: A @ v, A.shape[0], tol=1e-13)
    return float(torch.linalg.eigvalsh(S).abs().max())


def lanczos_sym_norm(matvec: Callable[[np.ndarray], np.ndarray], n: int, tol: float = 1e-10,
                     psd: bool = False) -> float:
    """``max |λ|`` of an ``n × n`` symmetric operator from its products (SciPy ``eigsh``).

    ``psd=True`` asks for the largest algebraic eigenvalue (Gram operators).  Tiny operators are
    formed densely instead (ARPACK needs ``n > k + 1``).
    """
    from scipy.sparse.linalg import LinearOperator, eigsh

    if n <= 64:
        M = np.stack([matvec(e) for e in np.eye(n)], axis=1)
        ev = np.linalg.eigvalsh((M + M.T) / 2)
        return float(ev.max() if psd else np.abs(ev).max())
    op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(n)
    if not np.any(matvec(v0)):  # the zero operator (e.g. ξ_11 = 0 a.e.)
        return 0.0
    ev = eigsh(op, k=1, which="LA" if psd else "LM", tol=tol, v0=v0, return_eigenvectors=False)
    return float(ev.max() if psd else np.abs(ev).max())


def gram_norm(T: torch.Tensor) -> float:
    """Spectral norm of ``T`` reshaped to ``(rows, T.shape[-1])`` via the smaller Gram matrix."""
    M = T.reshape(-1, T.shape[-1])
    return spectral_norm(M)


def second_derivative_tensor(f: Callable, args: Sequence[torch.Tensor], i: int, j) -> torch.Tensor:
    """``∂²f/∂args[i]∂args[j]`` as a tensor ``(out, n_i, n_j)`` (``j`` may be a tuple of indices,
    then a tuple of tensors is returned)."""
    out = f(*args).numel()
    T = jacfwd(jacrev(f, argnums=i), argnums=j)(*args)
    ni = args[i].numel()
    if isinstance(j, tuple):
        return tuple(t.reshape(out, ni, args[k].numel()) for t, k in zip(T, j))
    return T.reshape(out, ni, args[j].numel())


def second_derivative_norm(f: Callable, args: Sequence[torch.Tensor], i: int, j: int,
                           dense_limit: float = DENSE_LIMIT) -> float:
    """Spectral norm of ``∂²f/∂W_i∂W_j ∈ R^{(out·n_i) × n_j}`` (``W = args``), see module doc."""
    args = list(args)
    out = f(*args).numel()
    ni, nj = args[i].numel(), args[j].numel()
    if out * ni * nj <= dense_limit:
        return gram_norm(second_derivative_tensor(f, args, i, j))

    def jac_i(wj):
        a = list(args)
        a[j] = wj
        return jacrev(f, argnums=i)(*a).reshape(-1)

    # (torch.func.linearize returns zeros through the nested jacrev here, so plain jvp is used)
    jvp_fn = lambda t: jvp(jac_i, (args[j],), (t,))[1]  # noqa: E731
    _, vjp_fn = vjp(jac_i, args[j])
    shape, dt = args[j].shape, args[j].dtype

    def gram(v: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(v)).to(dt).reshape(shape)
        return vjp_fn(jvp_fn(t))[0].reshape(-1).numpy()

    lam = lanczos_sym_norm(gram, nj, psd=True)
    return float(np.sqrt(max(lam, 0.0)))
