"""LayerNorm without affine parameters and without ε: Theorems 2 and 3.

``LayerNorm(X) = P(X) M(X)`` for ``X`` of shape (L, d_V) with (paper, Theorem 2)

* ``M(X) = X - (1/d_V) X 1_{d_V} 1_{d_V}^T``                   (centering, (L, d_V))
* ``σ(X) = (1/√d_V) (M(X)^{∘2} 1_{d_V})^{∘1/2}``               (row std, population, (L,))
* ``P(X) = diag^{-1}(σ(X))``                                   ((L, L))

γ = 1, β = 0 and no ε: Assumption 2 (every row has non-zero variance) is enforced by :func:`check_assumption2`.
The Jacobian is (L d_V, L d_V) and the Hessian (Theorem 3) ((L d_V)^2, L d_V) (layout: :mod:`.calculus`); the
paper's ``G`` is :func:`dM_dX` and its ``H = ∂P/∂X`` is :func:`dP_dX`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..exact.linalg import spectral_norm
from .calculus import (assemble_rowwise, commutation, d_diag, d_kron_wrt_first, d_kron_wrt_second, eye, kron,
                       kron_rule, ones, product_rule, vec_r)

__all__ = ["check_assumption2", "layernorm_printed_definition", "center", "sigma", "P", "layernorm", "dM_dX",
           "dsigma_dX", "dP_dX", "jacobian", "d_PkronI_dX", "d_PkronI_dX_printed", "d_IkronMT_dX", "dD_dX",
           "dD_dX_printed", "d2P_dX2", "d2P_dX2_printed", "hessian", "hessian_printed", "hessian_rowwise",
           "assemble_rowwise", "contract_hessian", "norms_as_row_flattens"]


def check_assumption2(X: torch.Tensor) -> None:
    """Raise ``ValueError`` if a row of ``X`` (L, d_V) has (numerically) zero variance.

    Assumption 2 of the paper requires ``min_i σ_i^2 > 0`` for every LayerNorm input; LayerNorm without ε is undefined
    (0/0) on a constant row.  A row counts as constant when its standard deviation is below 64 ulp of its largest entry.
    """
    M = X - X.mean(dim=1, keepdim=True)
    std = M.pow(2).mean(dim=1).sqrt()
    scale = X.abs().amax(dim=1).clamp_min(torch.finfo(X.dtype).tiny)
    bad = (std <= 64 * torch.finfo(X.dtype).eps * scale).nonzero().flatten()
    if bad.numel() > 0:
        i = int(bad[0])
        raise ValueError(
            f"LayerNorm input row {i} has zero variance (σ_{i}^2 = {float(std[i]) ** 2:.3e}): "
            "Assumption 2 (min_i σ_i^2 > 0) is violated, so LayerNorm without ε and its "
            "Jacobian/Hessian are undefined there. Fix: add ε to the variance, "
            "(X - μ)/sqrt(σ^2 + ε), or perturb the input so that no row is constant."
        )


def center(X: torch.Tensor) -> torch.Tensor:
    """``M(X) = X - (1/d_V) X 1 1^T`` (Theorem 2); X (L, d_V) -> (L, d_V)."""
    d = X.shape[1]
    return X - (X @ ones(d, ref=X) @ ones(d, ref=X).T) / d


def sigma(X: torch.Tensor) -> torch.Tensor:
    """``σ(X) = (1/√d_V)(M^{∘2} 1_{d_V})^{∘1/2}`` (Theorem 2); X (L, d_V) -> (L,)."""
    check_assumption2(X)
    d = X.shape[1]
    return ((center(X).pow(2) @ ones(d, ref=X)).reshape(-1)).sqrt() / math.sqrt(d)


def P(X: torch.Tensor) -> torch.Tensor:
    """``P(X) = diag^{-1}(σ(X))`` (Theorem 2); X (L, d_V) -> (L, L)."""
    return torch.diag(1.0 / sigma(X))


def layernorm(X: torch.Tensor) -> torch.Tensor:
    """``LayerNorm(X) = P(X) M(X)`` (Theorem 2, γ = 1, β = 0, no ε); (L, d_V) -> (L, d_V)."""
    return P(X) @ center(X)


def layernorm_printed_definition(U: torch.Tensor) -> torch.Tensor:
    """§2's LayerNorm definition as printed for U (m, n): statistics over ``j = 1..m`` with ``1/m``.

    Evaluable only when m <= n (the sum then runs over the first m entries of each row).
    """
    m, n = U.shape
    if m > n:
        raise ValueError(f"ill-dimensioned: sum over j = 1..m = {m} exceeds the row length n = {n}")
    mu = U[:, :m].sum(dim=1, keepdim=True) / m
    var = (U[:, :m] - mu).pow(2).sum(dim=1, keepdim=True) / m
    return (U - mu) / var.sqrt()


def dM_dX(L: int, d: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Centering Jacobian, the paper's ``G = I_{L d_V} - (1/d_V)(I_L ⊗ 1_{d_V x d_V})``; (L d, L d)."""
    return eye(L * d, ref) - kron(eye(L, ref), ones(d, d, ref)) / d


def _factors(X: torch.Tensor):
    """Factors of ``∂σ/∂X = (1/√d) A_2 J A_3 G`` (Theorem 2 proof / Theorem 3 proof) and their product
    ``A_2 J A_3 G = ∂τ^{∘1/2}/∂X``."""
    L, d = X.shape
    M = center(X)
    tau = (M.pow(2) @ ones(d, ref=X)).reshape(-1)          # τ = M^{∘2} 1_{d_V}, (L,)
    A2 = torch.diag(1.0 / tau.sqrt())                        # diag^{-1}(vec_r^{∘1/2} τ), (L, L)
    J = kron(eye(L, X), ones(d, ref=X).T)                    # I_L ⊗ 1_{d_V}^T, (L, L d)
    A3 = torch.diag(vec_r(M))                                # diag(vec_r M), (L d, L d)
    G = dM_dX(L, d, X)
    return M, A2, J, A3, G, A2 @ J @ A3 @ G


def dsigma_dX(X: torch.Tensor) -> torch.Tensor:
    """``∂σ/∂X = (1/√d_V) diag^{-1}(vec_r^{∘1/2}(M^{∘2}1)) (I_L ⊗ 1^T) diag(vec_r M) G``; (L, L d_V)."""
    check_assumption2(X)
    return _factors(X)[-1] / math.sqrt(X.shape[1])


def dP_dX(X: torch.Tensor) -> torch.Tensor:
    """Theorem 2 (detailed): ``∂P/∂X = (1/√d_V)(-D^{-1} ⊗ D^{-T}) E (A_2 J A_3 G)``; (L^2, L d_V).

    ``D = diag(σ)``, ``E = (e_1 ⊗ e_1, ..., e_L ⊗ e_L)``; the paper's symbol for this matrix in Theorem 3 is ``H``.
    """
    L, d = X.shape
    dsqrt_tau = _factors(X)[-1]
    Dinv = P(X)                                              # checks Assumption 2
    return -kron(Dinv, Dinv.T) @ d_diag(L, X) @ dsqrt_tau / math.sqrt(d)


def jacobian(X: torch.Tensor) -> torch.Tensor:
    """Theorem 2: ``∂LN/∂X = (P ⊗ I_{d_V}) G + (I_L ⊗ M^T) ∂P/∂X``; X (L, d_V) -> (L d_V, L d_V)."""
    L, d = X.shape
    return kron(P(X), eye(d, X)) @ dM_dX(L, d, X) + kron(eye(L, X), center(X).T) @ dP_dX(X)


# ---------------------------------------------------------------- Theorem 3 pieces
def d_PkronI_dX(X: torch.Tensor) -> torch.Tensor:
    """``∂(P ⊗ I_{d_V})/∂X = (I_L ⊗ K_{d_V,L} ⊗ I_{d_V})(I_{L^2} ⊗ vec_r I_{d_V}) ∂P/∂X``; ((L d_V)^2, L d_V).

    The Kronecker-product derivative with factors P (L, L) and I_{d_V} (the proof prints I_L, K_{L,L})."""
    return d_kron_wrt_first(P(X), eye(X.shape[1], X)) @ dP_dX(X)


def d_PkronI_dX_printed(X: torch.Tensor) -> torch.Tensor:
    """Theorem 3 proof as printed: ``(I_L ⊗ K_{L,L} ⊗ I_L)(I_{L^2} ⊗ vec_r I_L) ∂P/∂X``.

    Gives L^4 rows where ((L d_V)^2) are needed: well-defined only when L = d_V.
    """
    L, d = X.shape
    out = d_kron_wrt_first(P(X), eye(L, X)) @ dP_dX(X)
    if out.shape != (L * d * L * d, L * d):
        raise ValueError(f"ill-dimensioned: printed form has shape {tuple(out.shape)}, "
                         f"needs {(L * d * L * d, L * d)}")
    return out


def d_IkronMT_dX(X: torch.Tensor) -> torch.Tensor:
    """Theorem 3 proof: ``∂(I_L ⊗ M^T)/∂X = (I_L ⊗ K_{d_V,L} ⊗ I_L)(vec_r I_L ⊗ I_{L d_V}) K_{d_V,L} G``.

    ``I_L ⊗ M^T`` has shape (L d_V, L^2), so the derivative has shape (L^3 d_V, L d_V).
    """
    L, d = X.shape
    return d_kron_wrt_second(eye(L, X), center(X).T) @ commutation(d, L, X) @ dM_dX(L, d, X)


def dD_dX(X: torch.Tensor) -> torch.Tensor:
    """``∂D/∂X = E ∂σ/∂X`` with ``D = diag(σ)``; (L^2, L d_V)."""
    return d_diag(X.shape[0], X) @ dsigma_dX(X)


def dD_dX_printed(X: torch.Tensor) -> torch.Tensor:
    """Theorem 3 proof as printed: ``∂D/∂X = E (A_2 J A_3 G)`` -- without the 1/√d_V of ∂σ/∂X."""
    return d_diag(X.shape[0], X) @ _factors(X)[-1]


def _d2P_terms(X: torch.Tensor, dD: torch.Tensor):
    """The two products of the Theorem 3 proof for ``∂²P/∂X²`` (without the 1/√d_V prefactor).

    Returns ``T1 = (A_1 ⊗ I_{L d_V}) ∂B_1/∂X`` and ``T2 = (I_{L^2} ⊗ B_1^T) ∂A_1/∂X`` where
    ``∂A_1/∂X`` is built from the supplied ``∂D/∂X``.
    """
    L, d = X.shape
    n = L * d
    _, A2, J, A3, G, dsqrt_tau = _factors(X)
    Dinv = P(X)
    E = d_diag(L, X)
    A1 = -kron(Dinv, Dinv.T)
    B2 = J @ A3 @ G
    B1 = E @ A2 @ B2
    # ∂A_1/∂X via the Kronecker rule on (-D^{-1}) ⊗ D^{-T}
    d_negDinv = kron(Dinv, Dinv.T) @ dD                     # ∂(-D^{-1})/∂X
    d_DinvT = commutation(L, L, X) @ A1 @ dD                # ∂D^{-T}/∂X
    dA1 = kron_rule(-Dinv, Dinv.T, d_negDinv, d_DinvT)
    # ∂A_3/∂X = E_{L d} ∂vec_r(M)/∂M ∂M/∂X ;  ∂B_3/∂X = ∂²M/∂X² = 0
    dA3 = d_diag(n, X) @ G
    dB2 = kron(J, eye(n, X)) @ product_rule(A3, G, dA3, torch.zeros(n * n, n, dtype=X.dtype, device=X.device))
    # ∂A_2/∂X with A_2 = diag(√τ)^{-1}: inverse rule, diag rule, ∂√τ/∂X = A_2 J A_3 G
    dA2 = -kron(A2, A2.T) @ E @ dsqrt_tau
    dB1 = kron(E, eye(n, X)) @ product_rule(A2, B2, dA2, dB2)
    T1 = kron(A1, eye(n, X)) @ dB1
    T2 = kron(eye(L * L, X), B1.T) @ dA1
    return T1, T2


def d2P_dX2(X: torch.Tensor) -> torch.Tensor:
    """``∂²P/∂X² = (1/√d_V)[(A_1 ⊗ I) ∂B_1/∂X + (I_{L^2} ⊗ B_1^T) ∂A_1/∂X]`` (Theorem 3 proof).

    ``∂A_1/∂X`` uses ``∂D/∂X = E ∂σ/∂X`` (with the 1/√d_V of ∂σ/∂X); shape (L^3 d_V, L d_V).
    """
    d = X.shape[1]
    T1, T2 = _d2P_terms(X, dD_dX(X))
    return (T1 + T2) / math.sqrt(d)


def d2P_dX2_printed(X: torch.Tensor, bracketed: bool = True) -> torch.Tensor:
    """``∂²P/∂X²`` with the printed ``∂D/∂X`` (no 1/√d_V).

    ``bracketed=True``: the 1/√d_V multiplies both terms (the main-text reading);
    ``bracketed=False``: only the first term (the literal typesetting of the proof).
    """
    d = X.shape[1]
    T1, T2 = _d2P_terms(X, dD_dX_printed(X))
    return (T1 + T2) / math.sqrt(d) if bracketed else T1 / math.sqrt(d) + T2


def _hessian_from(X: torch.Tensor, d_PkronI: torch.Tensor, d2P: torch.Tensor) -> torch.Tensor:
    L, d = X.shape
    n = L * d
    return (kron(eye(n, X), dM_dX(L, d, X).T) @ d_PkronI  # the term ((P ⊗ I) ⊗ I) ∂²M/∂X² is 0: M is linear
            + kron(kron(eye(L, X), center(X).T), eye(n, X)) @ d2P
            + kron(eye(n, X), dP_dX(X).T) @ d_IkronMT_dX(X))


def hessian(X: torch.Tensor) -> torch.Tensor:
    """Theorem 3: LayerNorm Hessian, X (L, d_V) -> ((L d_V)^2, L d_V).

    ``((P ⊗ I) ⊗ I) ∂²M/∂X² + (I ⊗ G^T) ∂(P ⊗ I_{d_V})/∂X + ((I_L ⊗ M^T) ⊗ I) ∂²P/∂X²
    + (I ⊗ H^T) ∂(I_L ⊗ M^T)/∂X`` with the corrected ``∂(P ⊗ I_{d_V})/∂X`` and ``∂²P/∂X²``.
    Entry ``[(a, b), c] = ∂² LN_a / ∂X_b ∂X_c``.  Dense: use :func:`hessian_rowwise` for large L.
    """
    return _hessian_from(X, d_PkronI_dX(X), d2P_dX2(X))


def hessian_printed(X: torch.Tensor, bracketed: bool = True) -> torch.Tensor:
    """Theorem 3 assembled from the proof's printed pieces (I_L slip and ∂D/∂X without 1/√d_V)."""
    return _hessian_from(X, d_PkronI_dX_printed(X), d2P_dX2_printed(X, bracketed))


def hessian_rowwise(X: torch.Tensor) -> torch.Tensor:
    """Per-row LayerNorm Hessians: Theorem 3 applied to each row (L = 1); returns (L, d, d, d).

    LayerNorm acts on rows independently, so the full Hessian is block-structured:
    ``∂² LN_{(i,a)} / ∂X_{(i',b)} ∂X_{(i'',c)} = δ_{ii'} δ_{ii''} h_i[a, b, c]``.
    """
    check_assumption2(X)
    d = X.shape[1]
    return torch.stack([hessian(X[i:i + 1]).reshape(d, d, d) for i in range(X.shape[0])])


def contract_hessian(X: torch.Tensor, v: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
    """``(v^T ⊗ I_{L d_V}) H_LN = Σ_a v_a ∂² LN_a / ∂X ∂X`` as an (L d_V, L d_V) block-diagonal matrix.

    ``v`` has L*d_V entries; ``h`` are the per-row Hessians from :func:`hessian_rowwise`.
    """
    h = hessian_rowwise(X) if h is None else h
    return torch.block_diag(*torch.einsum("ia,iabc->ibc", v.reshape(X.shape), h))


# ---------------------------------------------------------------- curvature as a row becomes constant
def norms_as_row_flattens(X: torch.Tensor, factors, row: int | None = None) -> dict:
    """``‖J_LN‖_2`` (Theorem 2) and ``‖H_LN‖_2`` (Theorem 3) while one row of ``X`` (L, d_V) flattens.

    For each factor ``c`` in (0, 1] the row (default: the one with the smallest σ) becomes ``μ + c (x − μ)``, so
    ``σ_min = c σ_row → 0``, where Assumption 2 fails. ``‖H‖_2`` is the largest norm of the per-row (d_V², d_V)
    blocks (:func:`hessian_rowwise`). Returns NumPy arrays ``factor``, ``sigma_min``, ``jacobian``, ``hessian`` and
    the log-log slopes ``slope_jacobian``, ``slope_hessian`` against σ_min over the factors ≤ 0.1 (−1 and −2 once
    the row dominates: LayerNorm's k-th derivative in a row scales as σ_row^{−k})."""
    factors = np.asarray(factors, dtype=float)
    if factors.size == 0 or factors.min() <= 0 or factors.max() > 1:
        raise ValueError("factors must lie in (0, 1]: the flattened row has to stay the one with the smallest σ")
    L, d = X.shape
    row = int(torch.argmin(sigma(X))) if row is None else int(row)
    mu = X[row].mean()
    out = {k: [] for k in ("sigma_min", "jacobian", "hessian")}
    for c in factors:
        Xc = X.clone()
        Xc[row] = mu + float(c) * (X[row] - mu)
        h = hessian_rowwise(Xc)
        out["sigma_min"].append(float(sigma(Xc).min()))
        out["jacobian"].append(spectral_norm(jacobian(Xc)))
        out["hessian"].append(max(spectral_norm(h[i].reshape(d * d, d)) for i in range(L)))
    res = {"factor": factors, **{k: np.asarray(v) for k, v in out.items()}}
    small = factors <= 0.1
    for name in ("jacobian", "hessian"):
        res[f"slope_{name}"] = (float(np.polyfit(np.log(res["sigma_min"][small]), np.log(res[name][small]), 1)[0])
                                if small.sum() >= 2 else math.nan)
    return res
