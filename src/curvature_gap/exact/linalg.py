"""Spectral norms and extreme eigenvalues: the one home of every eigenvalue computation of the package.

Dense matrices (LAPACK; ARPACK above ``LANCZOS_MIN`` rows), symmetric operators given by products (SciPy's
``eigsh``, float64, CPU; :func:`lanczos` in torch on the operators' device, several at once; batched
:func:`power_iteration`), differentiable batched tensors (:func:`matrix_norms`, :func:`top_eigenvalues`,
:func:`sym_abs_max`, :func:`gram_roots`: the adversarial searches take gradients through them), and
second-derivative tensors written, as in the paper (§2, numerator layout with ``vec_r``), as the matrix
``∂²f/∂W_i∂W_j ∈ R^{(out · n_i) × n_j}`` (:func:`second_derivative_norm`).

Tolerances are the numerical ones of LAPACK / ARPACK (``tol=1e-10``); no bound constant is involved.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigsh
from torch.func import jacfwd, jacrev, jvp, vjp

__all__ = [
    "spectral_norm", "sym_spectral_norm", "lanczos_sym_norm", "gram_norm", "second_derivative_norm",
    "second_derivative_tensor", "lanczos", "DENSE_LIMIT", "LANCZOS_MIN", "matrix_norms", "top_eigenvalues",
    "sym_abs_max", "gram_roots", "arpack_extreme", "power_iteration",
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


def sym_spectral_norm(H) -> float:
    """``max |λ(H)|`` of a dense symmetric matrix (NumPy or torch; symmetrised first: ``(H + Hᵀ)/2``,
    in float64); Lanczos (``eigsh``, largest magnitude, ``tol = 1e-13``) above ``LANCZOS_MIN`` rows."""
    # NumPy / ARPACK on the CPU by design (a dense matrix already in hand; float64 eigensolvers)
    A = H.detach().cpu().numpy() if isinstance(H, torch.Tensor) else np.asarray(H)
    S = (A.astype(np.float64) + A.T.astype(np.float64)) / 2
    if S.shape[0] > LANCZOS_MIN:
        return lanczos_sym_norm(lambda v: S @ v, S.shape[0], tol=1e-13)
    return float(np.abs(np.linalg.eigvalsh(S)).max())


def matrix_norms(M: torch.Tensor) -> torch.Tensor:
    """``‖M‖_2`` of each matrix of ``M (..., m, n)`` as a tensor (``torch.linalg.matrix_norm(ord=2)``)."""
    return torch.linalg.matrix_norm(M, ord=2)


def top_eigenvalues(H: torch.Tensor) -> torch.Tensor:
    """``λ_max`` of each symmetric matrix of ``H (..., n, n)`` (``eigvalsh``, lower triangle read)."""
    return torch.linalg.eigvalsh(H)[..., -1]


def sym_abs_max(H: torch.Tensor) -> torch.Tensor:
    """``max |λ|`` of the symmetrised ``(H + Hᵀ)/2`` of one square matrix, as a tensor."""
    return torch.linalg.eigvalsh((H + H.mT) / 2).abs().max()


def gram_roots(G: torch.Tensor) -> torch.Tensor:
    """``sqrt(λ_max(G)) = ‖K‖_2`` of each Gram matrix ``G = Kᵀ K`` of ``G (..., n, n)`` (rounding below 0 clamped)."""
    return top_eigenvalues(G).clamp_min(0).sqrt()


def arpack_extreme(op, tol: float, v0: np.ndarray | None = None, psd: bool = False) -> float:
    """One ARPACK call on the symmetric operator ``op``: the largest algebraic eigenvalue (``psd``) or the
    largest ``|λ|`` (``eigsh(k=1, which="LA"|"LM", tol)``, from ``v0``, else ARPACK's own start)."""
    ev = eigsh(op, k=1, which="LA" if psd else "LM", tol=tol, v0=v0, return_eigenvectors=False)
    return float(ev.max() if psd else np.abs(ev).max())


def lanczos_sym_norm(matvec: Callable[[np.ndarray], np.ndarray], n: int, tol: float = 1e-10,
                     psd: bool = False) -> float:
    """``max |λ|`` of an ``n × n`` symmetric operator from its products (SciPy ``eigsh``).

    ``psd=True`` asks for the largest algebraic eigenvalue (Gram operators).  Tiny operators are
    formed densely instead (ARPACK needs ``n > k + 1``).
    """
    if n <= 64:
        M = np.stack([matvec(e) for e in np.eye(n)], axis=1)
        ev = np.linalg.eigvalsh((M + M.T) / 2)
        return float(ev.max() if psd else np.abs(ev).max())
    op = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = np.random.default_rng(0).standard_normal(n)
    if not np.any(matvec(v0)):  # the zero operator (e.g. ξ_11 = 0 a.e.)
        return 0.0
    return arpack_extreme(op, tol, v0=v0, psd=psd)


def gram_norm(T: torch.Tensor) -> float:
    """Spectral norm of ``T`` reshaped to ``(rows, T.shape[-1])`` via the smaller Gram matrix."""
    return spectral_norm(T.reshape(-1, T.shape[-1]))


def second_derivative_tensor(f: Callable, args: Sequence[torch.Tensor], i: int, j) -> torch.Tensor:
    """``∂²f/∂args[i]∂args[j]`` as a tensor ``(out, n_i, n_j)`` (``j`` may be a tuple of indices,
    then a tuple of tensors is returned)."""
    T = jacfwd(jacrev(f, argnums=i), argnums=j)(*args)
    ni = args[i].numel()
    if isinstance(j, tuple):
        return tuple(t.reshape(-1, ni, args[k].numel()) for t, k in zip(T, j))
    return T.reshape(-1, ni, args[j].numel())


def second_derivative_norm(f: Callable, args: Sequence[torch.Tensor], i: int, j: int,
                           dense_limit: float = DENSE_LIMIT) -> float:
    """Spectral norm of ``∂²f/∂W_i∂W_j ∈ R^{(out·n_i) × n_j}`` (``W = args``): with ``K_a = ∂²f_a/∂W_i∂W_j`` (n_i × n_j)
    per output a, ``sqrt(λ_max(Σ_a K_aᵀ K_a))``. Formed densely (``jacfwd(jacrev)``) up to ``dense_limit`` entries, else
    matrix-free (a JVP of the Jacobian for ``M v``, a VJP for ``Mᵀ u``, Lanczos on the Gram operator)."""
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


def lanczos(matvec, dims: list[int], iters: int, device, seed: int = 0):
    """Lanczos with full reorthogonalisation for several symmetric operators at once.

    ``matvec(indices, vectors)`` returns the products of operators ``indices`` with ``vectors``
    (operator i acts on vectors of size ``dims[i]``). Operators stop after ``min(iters, dims[i])``
    steps or on an invariant subspace. Returns ascending Ritz values (float64), one tensor each.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)  # CPU draws: the same start vectors on every device
    Q = []
    for d in dims:
        v = torch.randn(d, generator=gen, dtype=torch.float64)
        Q.append([(v / v.norm()).to(device)])
    alphas: list[list[float]] = [[] for _ in dims]
    betas: list[list[float]] = [[] for _ in dims]  # one fewer than alphas, always
    active = list(range(len(dims)))
    while active:
        ws = matvec(active, [Q[i][-1] for i in active])
        still = []
        for i, w in zip(active, ws):
            w = w.to(torch.float64)
            a = torch.dot(w, Q[i][-1]).item()
            alphas[i].append(a)
            Qi = torch.stack(Q[i])
            for _ in range(2):  # full reorthogonalisation (twice is enough)
                w = w - Qi.T @ (Qi @ w)
            b = w.norm().item()
            if len(alphas[i]) >= min(iters, dims[i]) or b <= 1e-12 * max(1.0, abs(a)):
                continue
            betas[i].append(b)
            Q[i].append(w / b)
            still.append(i)
        active = still
    out = []
    for a, b in zip(alphas, betas):  # the tridiagonal T_k
        off = torch.tensor(b, dtype=torch.float64)
        out.append(torch.linalg.eigvalsh(torch.diag(torch.tensor(a, dtype=torch.float64)) + torch.diag(off, 1)
                                         + torch.diag(off, -1)))
    return out


def power_iteration(matvec: Callable[[torch.Tensor], torch.Tensor], v0: torch.Tensor, iters: int):
    """Batched power iteration: ``matvec(V)`` applies ``b`` symmetric operators to the rows of V (b, P), one
    operator per row. From the rows of ``v0``, ``iters`` steps of ``v ← H v / ‖H v‖``; returns (``‖H v‖`` with
    ``‖v‖ = 1`` after the last step, a lower estimate of ``‖H‖₂`` for each row, (b,); the relative change of
    that estimate in the last step, (b,), None for one step)."""
    v, prev, lam, rel = v0, None, None, None
    for _ in range(iters):
        v = v / torch.sqrt((v ** 2).sum(1)).unsqueeze(1)
        Hv = matvec(v)
        lam = torch.sqrt((Hv ** 2).sum(1))
        if prev is not None:
            rel = (lam - prev).abs() / lam.clamp_min(1e-300)
        prev, v = lam, Hv
    return lam, rel
