"""The linear map ``C = X W [+ b]``, W stored (in, out) (the ViT's block weights, ``X @ W``) or (out, in) as
``nn.Linear`` keeps it (``X Wᵀ``; a weight with more axes, a patch-embedding convolution's (out, C, p, p), is read
as (out, C·p·p)); b (out,) broadcast over tokens.

* forward tangent ``Ċ = Ẋ W + X Ẇ [+ ḃ]``;
* adjoint ``δX = δC Wᵀ``, tangent ``δẊ = δĊ Wᵀ + δC Ẇᵀ``;
* Hessian rows of W (the tangent of ``∇_W = Xᵀ δC``): ``Ẋᵀ δC + Xᵀ δĊ``, summed over samples and tokens; of b
  (``∇_b = Σ δC``): ``Σ δĊ``. The map is bilinear in (X, W), so there is no further term.
"""
from __future__ import annotations

import torch

from . import Op
from .layout import act_times_tangent, add, broadcast, lin, tok_contract, tok_contract_rev, tok_sum, zeros_rows

__all__ = ["Linear"]


class Linear(Op):
    """``C = X W + b`` (``orientation="in_out"``) or ``C = X Wᵀ + b`` (``"out_in"``, ``nn.Linear``)."""

    slots = ("weight", "bias")

    def __init__(self, orientation: str = "out_in"):
        if orientation not in ("in_out", "out_in"):
            raise ValueError(f"orientation must be 'in_out' (X @ W) or 'out_in' (nn.Linear), not {orientation!r}")
        self.orientation, self._nn = orientation, orientation == "out_in"

    def _w(self, p) -> torch.Tensor:
        """W as (in, out)."""
        W = p["weight"]
        return W.reshape(W.shape[0], -1).T if self._nn else W

    def _dw(self, dW) -> torch.Tensor:
        """Ẇ as (c, in, out)."""
        return dW.reshape(*dW.shape[:2], -1).transpose(1, 2) if self._nn else dW

    def forward(self, xs, p):
        x, = xs
        W, b = self._w(p), p.get("bias")
        return (x @ W if b is None else x @ W + b), {"x": x}

    def vjp(self, ctx, p, d_y, need):
        ctx["d_y"] = d_y
        return [d_y @ self._w(p).T if need[0] else None]

    def jvp(self, ctx, p, dxs, dp, c):
        dx, = dxs
        dW, db = dp.get("weight"), dp.get("bias")
        return add(None if dx is None else lin(dx, self._w(p)),
                   None if dW is None else act_times_tangent(ctx["x"], self._dw(dW)),
                   None if db is None else broadcast(db, ctx["x"])), {"dx": dx}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        if not need[0]:
            return [None]
        dW = dp.get("weight")
        return [add(None if dd_y is None else lin(dd_y, self._w(p).T),
                    None if dW is None else act_times_tangent(ctx["d_y"], self._dw(dW).transpose(1, 2)))]

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        x, d_y, dx = ctx["x"], ctx["d_y"], t.get("dx")
        out = {}
        if "weight" in slots:  # (c, out, in) = δĊᵀ X + δCᵀ Ẋ (nn.Linear), or (c, in, out) = Ẋᵀ δC + Xᵀ δĊ
            (a, da), (b, db) = ((d_y, dd_y), (x, dx)) if self._nn else ((x, dx), (d_y, dd_y))
            rw = add(None if da is None else tok_contract(da, b, per_sample),
                     None if db is None else tok_contract_rev(a, db, per_sample))
            out["weight"] = zeros_rows((a.shape[-1], b.shape[-1]), c, x, per_sample) if rw is None else rw
        if "bias" in slots:
            out["bias"] = zeros_rows(p["bias"].shape, c, x, per_sample) if dd_y is None else tok_sum(dd_y, per_sample)
        return out

    def grads(self, ctx, p, slots):
        x, d_y = ctx["x"], ctx["d_y"]
        out = {}
        if "weight" in slots:
            g = x.reshape(-1, x.shape[-1]).T @ d_y.reshape(-1, d_y.shape[-1])  # (in, out)
            out["weight"] = g.T if self._nn else g
        if "bias" in slots:
            out["bias"] = tok_sum(d_y)
        return out
