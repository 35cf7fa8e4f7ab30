"""LayerNorm without affine, ``n̂ = (u − μ) r`` with ``r = (σ² + ε)^{-1/2}`` (row-wise, population variance,
:func:`curvature_gap.model.layer_norm_parts`), and its affine map ``y = γ ∘ n̂ + β``.

* forward tangent ``n̂̇ = r (u̇ − mean(u̇) − n̂ mean(n̂ u̇))``;
* adjoint ``δu = r w``, ``w = δn̂ − mean(δn̂) − n̂ s``, ``s = mean(n̂ δn̂)``;
* adjoint tangent
  ``δu̇ = −r mean(n̂ u̇) δu + r (δn̂̇ − mean(δn̂̇) − n̂̇ s − n̂ mean(n̂̇ δn̂ + n̂ δn̂̇))``;
* affine: ``ẏ = γ n̂̇ + γ̇ n̂ + β̇``; ``δn̂ = γ δy``, ``δn̂̇ = γ δẏ + γ̇ δy``; Hessian rows of γ:
  ``Σ (δẏ n̂ + δy n̂̇)``, of β: ``Σ δẏ``.

Primal quantities are (B, n, d) and enter tangent formulas unsqueezed to (B, n, 1, d).
"""
from __future__ import annotations

import torch

from ...model import affine, layer_norm_parts
from .linear import add, tok_sum

__all__ = ["primal", "jvp", "vjp", "vjp_tangent", "affine_jvp", "affine_vjp", "affine_vjp_tangent", "affine_rows"]


def primal(u: torch.Tensor, eps: float, gamma=None, beta=None):
    """(n̂, r, y) with y = γ n̂ + β, the model's arithmetic."""
    n_hat, rstd = layer_norm_parts(u, eps)
    return n_hat, rstd, affine(n_hat, gamma, beta)


def _rowdot(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``Σ_k t[..., k] p[..., 0, k]``: a tangent (..., c, d) against a primal row (..., 1, d) -> (..., c, 1), as a
    batched matrix-vector product (no temporary of the tangent's size)."""
    return t @ p.transpose(-1, -2)


def jvp(n_hat, rstd, du):
    """Forward tangent of n̂: ``r (u̇ − mean u̇ − n̂ mean(n̂ u̇))``; returns (n̂̇, mean(n̂ u̇)), or (None, None)."""
    if du is None:
        return None, None
    m_nu = _rowdot(du, n_hat) / du.shape[-1]
    out = du * rstd
    out.sub_(rstd * du.mean(-1, keepdim=True))
    return out.addcmul_(n_hat, rstd * m_nu, value=-1), m_nu


def vjp(n_hat, rstd, d_n):
    """Adjoint ``δu = r (δn̂ − mean δn̂ − n̂ s)`` with ``s = mean(n̂ δn̂)``; returns (δu, s)."""
    s = (n_hat * d_n).mean(-1, keepdim=True)
    return rstd * (d_n - d_n.mean(-1, keepdim=True) - n_hat * s), s


def vjp_tangent(n_hat, rstd, m_nu, dn_hat, d_n, d_u, s, dd_n):
    """Tangent of the adjoint (see module doc). n_hat, rstd, d_n (= δn̂), d_u (= δu), s are primal (broadcast
    over c); m_nu = mean(n̂ u̇) and dn_hat = n̂̇ are forward tangents (or None), dd_n = δn̂̇ (or None).
    Computed in place on one output, the row means as matrix-vector products."""
    out = inner = None  # inner: Σ (n̂̇ δn̂ + n̂ δn̂̇) over the row
    if dd_n is not None:
        out = dd_n * rstd
        out.sub_(rstd * dd_n.mean(-1, keepdim=True))
        inner = _rowdot(dd_n, n_hat)
    if dn_hat is not None:
        t = _rowdot(dn_hat, d_n)
        inner = t if inner is None else inner.add_(t)
        out = dn_hat * (-(rstd * s)) if out is None else out.addcmul_(dn_hat, rstd * s, value=-1)
        out.addcmul_(d_u, rstd * m_nu, value=-1)
    if inner is not None:
        out.addcmul_(n_hat, rstd * inner / n_hat.shape[-1], value=-1)
    return out


def affine_jvp(n_hat, dn_hat, gamma, dgamma=None, dbeta=None, c: int | None = None):
    """``ẏ = γ n̂̇ + γ̇ n̂ + β̇``; n_hat (B, n, 1, d) unsqueezed, dgamma/dbeta (c, d)."""
    out = None if dn_hat is None else dn_hat * gamma
    if dgamma is not None:
        out = add(out, n_hat * dgamma[None, None])
    if dbeta is not None:
        out = add(out, dbeta[None, None].expand(*n_hat.shape[:2], dbeta.shape[0], -1))
    return out


def affine_vjp(d_y, gamma):
    """``δn̂ = γ δy``."""
    return d_y * gamma


def affine_vjp_tangent(d_y, dd_y, gamma, dgamma=None):
    """``δn̂̇ = γ δẏ + γ̇ δy``; d_y (B, n, 1, d) unsqueezed."""
    out = None if dd_y is None else dd_y * gamma
    if dgamma is not None:
        out = add(out, d_y * dgamma[None, None])
    return out


def affine_rows(n_hat, dn_hat, d_y, dd_y, c: int, per_sample: bool = False):
    """Hessian rows of (γ, β): ``Σ (δẏ n̂ + δy n̂̇)`` and ``Σ δẏ`` over (B, n), each (c, d); ``per_sample``:
    the sums over n only, each (B, c, d)."""
    d = n_hat.shape[-1]
    lead = (n_hat.shape[0], c) if per_sample else (c,)
    gw = gb = torch.zeros(*lead, d, dtype=n_hat.dtype, device=n_hat.device)
    if dd_y is not None:
        gw = gw + tok_sum(dd_y * n_hat, per_sample)
        gb = gb + tok_sum(dd_y, per_sample)
    if dn_hat is not None:
        gw = gw + tok_sum(d_y * dn_hat, per_sample)
    return gw, gb
