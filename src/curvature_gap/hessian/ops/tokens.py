"""The token-wise and token-mixing maps around the layers: linear in their input, at most bilinear in
(input, parameter), so each has first-order rules and, where it has a parameter, one cross term.

* :class:`Add` — ``y = a + b`` (residual sums, the sum of embeddings): ``ẏ = ȧ + ḃ``, ``δa = δb = δy``;
* :class:`Scale` — ``y = x ∘ γ`` (timm's LayerScale): ``ẏ = ẋ ∘ γ + x ∘ γ̇``, ``δx = δy ∘ γ``; the cross term adds
  ``δy ∘ γ̇`` to δẋ and ``Σ δy ∘ ẋ`` to γ's rows (``Σ δẏ ∘ x + δy ∘ ẋ``);
* :class:`AddParam` — ``y = x + P`` with P (n, d) shared by the samples (learned positions): rows ``Σ_B δẏ``;
* :class:`Prepend` — ``y = [P, x]`` along the tokens, P (1, k, d) shared by the samples (class and register
  tokens): rows ``Σ_B δẏ[:, :k]``;
* :class:`Pool` — ``y = mean over the tokens a…b of x`` (mean pooling, or the class token's features), (B, 1, d);
* :class:`Embed` — ``y = E[ids]`` (a lookup in the table E (V, d) at the data ``ids`` (B, n)): ``ẏ = Ė[ids]``,
  rows of E: ``δẏ`` added at the rows ``ids``;
* :class:`Patches` — the images' patches (B, n, C p p) (:func:`curvature_gap.model.patchify`), data.
"""
from __future__ import annotations

import torch

from ...model import patchify
from . import Op
from .layout import add, full, scale_rows, tok_sum, zeros_rows

__all__ = ["Add", "Scale", "AddParam", "Prepend", "Pool", "Embed", "Patches"]


class Add(Op):
    """``y = a + b``."""

    def forward(self, xs, p):
        a, b = xs
        return a + b, {}

    def vjp(self, ctx, p, d_y, need):
        return [d_y if n else None for n in need]

    def jvp(self, ctx, p, dxs, dp, c):
        return add(*dxs), {}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        return self.vjp(ctx, p, dd_y, need)


class Scale(Op):
    """``y = x ∘ γ``, γ (d,) (slot ``weight``)."""

    slots = ("weight",)

    def forward(self, xs, p):
        return xs[0] * p["weight"], {"x": xs[0]}

    def vjp(self, ctx, p, d_y, need):
        ctx["d_y"] = d_y
        return [d_y * p["weight"]]

    def jvp(self, ctx, p, dxs, dp, c):
        dx, dg = dxs[0], dp.get("weight")
        return add(None if dx is None else dx * p["weight"],
                   None if dg is None else ctx["x"].unsqueeze(2) * dg[None, None]), {"dx": dx}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        dg = dp.get("weight")
        return [add(None if dd_y is None else dd_y * p["weight"],
                    None if dg is None else ctx["d_y"].unsqueeze(2) * dg[None, None])]

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        return {"weight": scale_rows(ctx["x"], t.get("dx"), ctx["d_y"], dd_y, c, per_sample)}

    def grads(self, ctx, p, slots):
        return {"weight": tok_sum(ctx["d_y"] * ctx["x"])}


def _shared_rows(dd: torch.Tensor | None, shape, c: int, x: torch.Tensor, per_sample: bool) -> torch.Tensor:
    """Rows of a parameter of ``shape`` added to tokens of every sample, from ``δẏ`` at those tokens ``dd``
    (B or 1, n, c, d): ``Σ_B δẏ`` (c, *shape), or per sample (B, c, *shape); zero where ``dd`` is None."""
    if dd is None:
        return zeros_rows(shape, c, x, per_sample)
    if per_sample:
        return full(dd, x.shape[0]).transpose(1, 2).reshape(-1, c, *shape)
    return dd.sum(0).transpose(0, 1).reshape(c, *shape)


class AddParam(Op):
    """``y = x + P``, P (slot ``value``) of shape (n, d) or (1, n, d), the same for every sample. ``_x`` and ``_p``
    cut the tokens of a y-shaped tensor that x and P reach (here: all of them)."""

    slots = ("value",)

    def _x(self, t, p):
        return t

    _p = _x

    def forward(self, xs, p):
        return xs[0] + p["value"], {"x": xs[0]}

    def vjp(self, ctx, p, d_y, need):
        ctx["d_y"] = d_y
        return [self._x(d_y, p)]

    def jvp(self, ctx, p, dxs, dp, c):
        dx, dP = dxs[0], dp.get("value")
        if dP is None:
            return dx, {}
        x = ctx["x"]
        dP = dP.reshape(c, *x.shape[1:]).transpose(0, 1)[None]  # (1, n, c, d)
        return (dP.expand(x.shape[0], *dP.shape[1:]).contiguous() if dx is None else dx + dP), {}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        return [None if dd_y is None else self._x(dd_y, p)]

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        return {"value": _shared_rows(None if dd_y is None else self._p(dd_y, p), p["value"].shape, c, ctx["x"],
                                      per_sample)}

    def grads(self, ctx, p, slots):
        return {"value": self._p(ctx["d_y"], p).sum(0).reshape(p["value"].shape)}


class Prepend(AddParam):
    """``y = [P, x]`` along the tokens, P (slot ``value``) of shape (1, k, d), the same for every sample."""

    def _x(self, t, p):
        return t[:, p["value"].shape[1]:]

    def _p(self, t, p):
        return t[:, :p["value"].shape[1]]

    def forward(self, xs, p):
        x, P = xs[0], p["value"]
        return torch.cat([P.expand(x.shape[0], -1, -1), x], 1), {"x": x}

    def jvp(self, ctx, p, dxs, dp, c):
        dx, dP = dxs[0], dp.get("value")
        if dx is None and dP is None:
            return None, {}
        x = ctx["x"]
        B, n, d = x.shape
        k = p["value"].shape[1]
        head = torch.zeros(B, k, c, d, dtype=x.dtype, device=x.device) if dP is None else \
            dP.reshape(c, k, d).transpose(0, 1)[None].expand(B, k, c, d)
        tail = torch.zeros(B, n, c, d, dtype=x.dtype, device=x.device) if dx is None else full(dx, B)
        return torch.cat([head, tail], 1), {}


class Pool(Op):
    """``y = mean_{start ≤ t < stop} x[:, t]``, kept as one token (B, 1, d): mean pooling (``stop`` None: to the
    end) or one token's features (``stop = start + 1``); the adjoint spreads ``δy / m`` over those tokens."""

    def __init__(self, start: int = 0, stop: int | None = None):
        self.start, self.stop = start, stop

    def forward(self, xs, p):
        return xs[0][:, self.start:self.stop].mean(1, keepdim=True), {"total": xs[0].shape[1]}

    def _spread(self, t, n: int):
        """δy (B, 1, ·) -> (B, n, ·): δy / m at the pooled tokens, 0 at the others."""
        stop = n if self.stop is None else self.stop
        if self.start == 0 and stop == n:  # every token: a view
            return (t / n).expand(t.shape[0], n, *t.shape[2:])
        out = t.new_zeros(t.shape[0], n, *t.shape[2:])
        out[:, self.start:stop] = t / (stop - self.start)
        return out

    def vjp(self, ctx, p, d_y, need):
        return [self._spread(d_y, ctx["total"])]

    def jvp(self, ctx, p, dxs, dp, c):
        return dxs[0][:, self.start:self.stop].mean(1, keepdim=True), {}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        return [None if dd_y is None else self._spread(dd_y, ctx["total"])]


class Embed(Op):
    """``y = E[ids]``: E (slot ``weight``, (V, d)), ``ids`` (B, n) the (data) input. With ``padding_idx`` (as
    ``nn.Embedding``) that row of E is a constant: it takes no tangent and has zero rows and gradient."""

    slots = ("weight",)
    n_in = 0

    def __init__(self, padding_idx: int | None = None):
        self.pad = padding_idx

    def forward(self, xs, p):
        ids = xs[0]
        return p["weight"][ids], {"ids": ids}

    def vjp(self, ctx, p, d_y, need):
        ctx["d_y"] = d_y
        return []

    def jvp(self, ctx, p, dxs, dp, c):
        dE = dp.get("weight")
        if dE is None:
            return None, {}
        ids = ctx["ids"]
        out = dE[:, ids].permute(1, 2, 0, 3)
        return (out if self.pad is None else out * (ids != self.pad)[..., None, None]), {}

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        ids, E = ctx["ids"], p["weight"]
        B, n = ids.shape
        lead = (B, c) if per_sample else (c,)
        out = torch.zeros(*lead, *E.shape, dtype=E.dtype, device=E.device)
        if dd_y is not None:
            dd = full(dd_y, B)
            if per_sample:
                for b in range(B):
                    out[b].index_add_(1, ids[b], dd[b].transpose(0, 1))
            else:
                out.index_add_(1, ids.reshape(-1), dd.reshape(B * n, c, -1).transpose(0, 1))
            if self.pad is not None:
                out[..., self.pad, :] = 0
        return {"weight": out}

    def grads(self, ctx, p, slots):
        E, d_y = p["weight"], ctx["d_y"]
        g = torch.zeros_like(E).index_add_(0, ctx["ids"].reshape(-1), d_y.reshape(-1, d_y.shape[-1]))
        if self.pad is not None:
            g[self.pad] = 0
        return {"weight": g}


class Patches(Op):
    """The patches (B, n, C p p) of images (B, C, H, W), row-major over the patch grid (data: no derivative)."""

    n_in = 0

    def __init__(self, patch: int):
        self.patch = patch

    def forward(self, xs, p):
        return patchify(xs[0], self.patch), {}
