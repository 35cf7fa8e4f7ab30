"""Two primitives the encoder layer of PyTorch does not need and timm's and Hugging Face's layers do.

Same protocol as the primitives of :mod:`curvature_gap.theory.encoder_layer` (``forward``, ``jvp``, ``vjp``,
``hvp`` on rows X (R, ·) with tangents (B, R, ·); the module doc there gives the assembly):

* :class:`Scale`, timm's ``LayerScale``: ``y = x ∘ γ`` with γ (d,) broadcast over the rows;
* :class:`Concat`, the packing of separate Q, K, V projections (Hugging Face's ``q_proj``, ``k_proj``,
  ``v_proj``; BERT's ``query``, ``key``, ``value``) into the ``[Q, K, V]`` the attention core reads.

Nothing here calls automatic differentiation.
"""
from __future__ import annotations

import torch

from ..encoder_layer import sum_parts

__all__ = ["Scale", "Concat"]


class Scale:
    """``y = x ∘ γ``: x (R, d), γ (d,).

    Jacobians ``ẏ = ẋ ∘ γ + x ∘ γ̇``; transposed ``x̄ = ȳ ∘ γ``, ``γ̄ = 1ᵀ(ȳ ∘ x)``. The map is bilinear in
    (x, γ), so its only second derivative is the cross term: ``(ȳ·∂²y)[ẋ, γ̇]`` adds ``ȳ ∘ γ̇`` to the tangent
    of x̄ and ``1ᵀ(ȳ ∘ ẋ)`` to that of γ̄.
    """

    slots = ("weight",)

    def forward(self, xs, p):
        x, = xs
        return x * p["weight"], {"x": x, "g": p["weight"]}

    def jvp(self, ctx, dxs, dp):
        dx, = dxs
        parts = []
        if dx is not None:
            parts.append(dx * ctx["g"])
        if dp.get("weight") is not None:
            parts.append(ctx["x"] * dp["weight"][:, None, :])
        return sum_parts(parts), None

    def vjp(self, ctx, gy):
        return [gy * ctx["g"]], {"weight": (gy * ctx["x"]).sum(0)}, None

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        dx, = dxs
        dg = dp.get("weight")
        dgx = []
        if need_dx:
            if dgy is not None:
                dgx.append(dgy * ctx["g"])
            if dg is not None:
                dgx.append(gy * dg[:, None, :])
        if not need_p:
            return [sum_parts(dgx)], {}
        dgg = []
        if dgy is not None:
            dgg.append((dgy * ctx["x"]).sum(1))
        if dx is not None:
            dgg.append((gy * dx).sum(1))
        return [sum_parts(dgx)], {"weight": sum_parts(dgg)}


class Concat:
    """``y = [x_1, …, x_k]`` along the last dimension: linear, no second derivative.

    ``ẏ = [ẋ_1, …, ẋ_k]`` (a zero block where a tangent is zero), ``x̄_i`` = the i-th column block of ``ȳ``.
    """

    slots = ()

    def forward(self, xs, p):
        return torch.cat(xs, dim=-1), {"sizes": [x.shape[-1] for x in xs], "rows": xs[0].shape[0], "ref": xs[0]}

    def jvp(self, ctx, dxs, dp):
        live = [d for d in dxs if d is not None]
        if not live:
            return None, None
        B = live[0].shape[0]
        parts = [d if d is not None else ctx["ref"].new_zeros(B, ctx["rows"], n) for d, n in zip(dxs, ctx["sizes"])]
        return torch.cat(parts, dim=-1), None

    def vjp(self, ctx, gy):
        return list(gy.split(ctx["sizes"], dim=-1)), {}, None

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        if dgy is None:
            return [None] * len(ctx["sizes"]), {}
        return list(dgy.split(ctx["sizes"], dim=-1)), {}
