"""LayerNorm ``y = γ ∘ n̂ + β``, ``n̂ = (u − μ) r``, ``r = (σ² + ε)^{-1/2}`` (row-wise, population variance,
:func:`curvature_gap.model.layer_norm_parts`); γ, β (d,) or absent (``elementwise_affine=False``).

* forward tangent ``n̂̇ = r (u̇ − mean(u̇) − n̂ mean(n̂ u̇))``, ``ẏ = γ n̂̇ + γ̇ n̂ + β̇``;
* adjoint ``δn̂ = γ δy``, ``δu = r w``, ``w = δn̂ − mean(δn̂) − n̂ s``, ``s = mean(n̂ δn̂)``;
* adjoint tangent ``δn̂̇ = γ δẏ + γ̇ δy`` and
  ``δu̇ = −r mean(n̂ u̇) δu + r (δn̂̇ − mean(δn̂̇) − n̂̇ s − n̂ mean(n̂̇ δn̂ + n̂ δn̂̇))``;
* Hessian rows of γ: ``Σ (δẏ n̂ + δy n̂̇)``, of β: ``Σ δẏ``.

Primal quantities are (B, n, d) and enter the tangent formulas unsqueezed to (B, n, 1, d); the row means of a
tangent against a primal row are batched matrix-vector products (no temporary of the tangent's size), and the
adjoint tangent is computed in place on one output.
"""
from __future__ import annotations

import torch

from ...model import layer_norm_parts
from . import Op
from .layout import add, broadcast, scale_rows, tok_sum, zeros_rows

__all__ = ["LayerNorm"]


def _rowdot(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``Σ_k t[..., k] p[..., 0, k]``: a tangent (..., c, d) against a primal row (..., 1, d) -> (..., c, 1)."""
    return t @ p.transpose(-1, -2)


def normalize_jvp(n_hat, rstd, du):
    """Forward tangent of n̂: ``r (u̇ − mean u̇ − n̂ mean(n̂ u̇))``; returns (n̂̇, mean(n̂ u̇)) (n_hat, rstd
    unsqueezed (B, n, 1, ·))."""
    m_nu = _rowdot(du, n_hat) / du.shape[-1]
    out = du * rstd
    out.sub_(rstd * du.mean(-1, keepdim=True))
    return out.addcmul_(n_hat, rstd * m_nu, value=-1), m_nu


def normalize_vjp_tangent(n_hat, rstd, m_nu, dn_hat, d_n, d_u, s, dd_n):
    """δu̇ (module doc) from the primal n̂, r, δn̂, δu, s (unsqueezed), the forward tangents m_nu = mean(n̂ u̇) and
    n̂̇ (or None) and δn̂̇ (or None)."""
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


class LayerNorm(Op):
    """Row-wise LayerNorm with ε = ``eps`` and optional γ (``weight``), β (``bias``)."""

    slots = ("weight", "bias")

    def __init__(self, eps: float):
        self.eps = float(eps)

    def forward(self, xs, p):
        n_hat, rstd = layer_norm_parts(xs[0], self.eps)
        g, b = p.get("weight"), p.get("bias")
        y = n_hat if g is None else n_hat * g
        return (y if b is None else y + b), {"n": n_hat, "r": rstd}

    def vjp(self, ctx, p, d_y, need):
        g = p.get("weight")
        n_hat, rstd = ctx["n"], ctx["r"]
        d_n = d_y if g is None else d_y * g
        s = (n_hat * d_n).mean(-1, keepdim=True)
        d_u = rstd * (d_n - d_n.mean(-1, keepdim=True) - n_hat * s)
        ctx.update(d_y=d_y, d_n=d_n, d_u=d_u, s=s)
        return [d_u]

    def jvp(self, ctx, p, dxs, dp, c):
        du, = dxs
        n_hat = ctx["n"].unsqueeze(2)
        g, dg, db = p.get("weight"), dp.get("weight"), dp.get("bias")
        dn = m_nu = out = None
        if du is not None:
            dn, m_nu = normalize_jvp(n_hat, ctx["r"].unsqueeze(2), du)
            out = dn if g is None else dn * g
        out = add(out, None if dg is None else n_hat * dg[None, None], None if db is None else broadcast(db, ctx["n"]))
        return out, {"dn": dn, "m_nu": m_nu}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        if not need[0]:
            return [None]
        g, dg = p.get("weight"), dp.get("weight")
        dd_n = None if dd_y is None else dd_y if g is None else dd_y * g
        if dg is not None:
            dd_n = add(dd_n, ctx["d_y"].unsqueeze(2) * dg[None, None])
        u = lambda k: ctx[k].unsqueeze(2)  # noqa: E731
        return [normalize_vjp_tangent(u("n"), u("r"), t.get("m_nu"), t.get("dn"), u("d_n"), u("d_u"), u("s"), dd_n)]

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        n_hat = ctx["n"]
        gb = zeros_rows(n_hat.shape[-1:], c, n_hat, per_sample)
        out = {"weight": lambda: scale_rows(n_hat, t.get("dn"), ctx["d_y"], dd_y, c, per_sample),
               "bias": lambda: gb if dd_y is None else gb + tok_sum(dd_y, per_sample)}
        return {s: out[s]() for s in slots}

    def grads(self, ctx, p, slots):
        out = {"weight": tok_sum(ctx["d_y"] * ctx["n"]), "bias": tok_sum(ctx["d_y"])}
        return {s: out[s] for s in slots}
