"""Multi-head softmax attention ``o = [A_1 v_1, …, A_h v_h]``, ``A_j = softmax(T_j)`` (rows),
``T_j = s q_j k_jᵀ + M`` with ``s = 1/√e`` (e the heads' query width, :func:`curvature_gap.model.attention_probs`)
and an additive mask M (0 where a query may attend, −inf where not; (n, n) or one per sample (B, n, n)), a constant:
it enters the derivatives through A only (A = 0 where M = −inf).

Heads are a reshape into the sample axis: q, k, v (B, n, h·e) are read as (B·h, n, e) (head j: columns
j·e … (j+1)·e − 1), so every rule below is the one-head rule on B·h samples. Per head, with ``ax = A v``:

* forward tangent: ``Ṫ = (q̇ kᵀ + q k̇ᵀ) s``, ``Ȧ = A ∘ (Ṫ − rowsum(A ∘ Ṫ))``; ``(ax)˙ = Ȧ v + A v̇``;
* adjoint: ``δA = δax vᵀ``, ``ρ = rowsum(A ∘ δA)``, ``δT = A ∘ (δA − ρ)``; ``δq = s δT k``, ``δk = s δTᵀ q``,
  ``δv = Aᵀ δax``;
* adjoint tangent: ``δȦ = δȧx vᵀ + δax v̇ᵀ``;
  ``δṪ = A ∘ (δȦ − rowsum(A ∘ δȦ + Ȧ ∘ δA)) + Ȧ ∘ (δA − ρ)``, where, because ``δA = δax vᵀ``, the row sum
  is token-sized: ``rowsum(A ∘ δȦ + Ȧ ∘ δA) = ⟨δȧx, ax⟩ + ⟨δax, ȧx⟩``; ``δq̇ = s (δṪ k + δT k̇)``,
  ``δk̇ = s (δṪᵀ q + δTᵀ q̇)`` (here δT carries the factor s already); ``δv̇ = Aᵀ δȧx + Ȧᵀ δax``.

With one head the scores may also be read as a bilinear form of the input x: ``T = s x̃ M x̃ᵀ`` with
``M = W̃_Q W̃_Kᵀ`` (x̃ = [x, 1] where q and k have biases). A *virtual* parameter ``scores`` = M then has the
forward tangent ``Ṫ = s x̃ Ṁ x̃ᵀ``, the rows ``Σ x̃ᵀ (s δṪ) x̃`` and the gradient ``Σ x̃ᵀ (s δT) x̃``
(:mod:`curvature_gap.hessian._vit` maps them to the query's and key's columns).

Layouts: tangents of q, k, v, ax in the token layout (B, n, c, ·); tangents of T and A in the row layout (B, n, c, n)
(query token i, tangent, key token j). In that layout every product with a token-layout tensor is one batched GEMM over
the samples whose output is already in its destination layout ((B, n·c, n) @ (B, n, ·), (B, n, ·) @ (B, ·, c·n)): no
tangent-sized attention tensor is ever permuted; only the token-sized v̇, k̇ and two results are.
"""
from __future__ import annotations

import torch

from ...model import attention_probs, scaled_scores
from . import Op
from .layout import full, tok_contract_rev, zeros_rows

__all__ = ["Attention"]


def _rows(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> (B, n·c, k) (a view where the layout allows)."""
    n, c, k = t.shape[1:]
    return full(t, B).reshape(B, n * c, k)


def _cols(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> (B, k, c·n): the tangent as the right factor of ``(B, ·, k) @ (B, k, c·n)``
    (one token-sized copy)."""
    n, c, k = t.shape[1:]
    return full(t, B).permute(0, 3, 2, 1).reshape(B, k, c * n)


class Attention(Op):
    """``o = [softmax(s q_j k_jᵀ + M) v_j]_j`` of the inputs q, k, v (B, n, h·e); ``heads`` h; ``mask`` M additive,
    (n, n) or (B, n, n), or None; ``bilinear``: None, or whether x̃ has a column of ones, for the virtual parameter
    ``scores`` (one head; x is then a fourth input, data)."""

    n_in = 3

    def __init__(self, heads: int = 1, mask: torch.Tensor | None = None, bilinear: bool | None = None):
        if bilinear is not None and heads != 1:
            raise ValueError("the scores' bilinear form is a one-head shortcut")
        self.h, self.mask, self.bilinear = int(heads), mask, bilinear
        self.slots = () if bilinear is None else ("scores",)

    # ------------------------------------------------------------------ heads into the sample axis
    def _split(self, t, B: int):
        """(B or 1, n, [c,] h·e) -> (B·h, n, [c,] e): head j to sample b·h + j."""
        if t is None or self.h == 1:
            return t
        t = t.expand(B, *t.shape[1:])
        return t.reshape(*t.shape[:-1], self.h, -1).movedim(-2, 1).reshape(B * self.h, *t.shape[1:-1], -1)

    def _merge(self, t):
        """(B·h, n, [c,] e) -> (B, n, [c,] h·e), the inverse of :meth:`_split`."""
        if t is None or self.h == 1:
            return t
        return t.reshape(-1, self.h, *t.shape[1:]).movedim(1, -2).flatten(-2)

    def cut(self, ctx, sl):
        h = self.h
        return super().cut(ctx, slice(sl.start * h, sl.stop * h))

    # ------------------------------------------------------------------ the rules
    def forward(self, xs, p):
        q, k, v = (self._split(x, x.shape[0]) for x in xs[:3])
        if self.mask is None:
            A = attention_probs(q, k)
        else:
            M = self.mask if self.mask.dim() == 2 else self.mask.repeat_interleave(self.h, 0)
            A = torch.softmax(scaled_scores(q, k) + M, dim=-1)
        ax = A @ v
        ctx = {"q": q, "k": k, "v": v, "A": A, "ax": ax, "s": q.shape[-1] ** -0.5}
        if self.bilinear is not None:
            x = xs[3]
            ctx["xt"] = torch.cat([x, torch.ones(*x.shape[:2], 1, dtype=x.dtype, device=x.device)], -1) \
                if self.bilinear else x
        return self._merge(ax), ctx

    def vjp(self, ctx, p, d_y, need):
        A, q, k, v, s = ctx["A"], ctx["q"], ctx["k"], ctx["v"], ctx["s"]
        d_ax = self._split(d_y, d_y.shape[0])
        d_A = d_ax @ v.transpose(-1, -2)
        rho = (A * d_A).sum(-1, keepdim=True)
        d_Ts = A * (d_A - rho) * s
        ctx.update(d_ax=d_ax, d_Ts=d_Ts, sA=A * s, sDr=(d_A - rho) * s)
        return [self._merge(d_Ts @ k) if need[0] else None, self._merge(d_Ts.transpose(-1, -2) @ q) if need[1] else None,
                self._merge(A.transpose(-1, -2) @ d_ax) if need[2] else None]

    def jvp(self, ctx, p, dxs, dp, c):
        A, q, k, v, s = ctx["A"], ctx["q"], ctx["k"], ctx["v"], ctx["s"]
        Bs, n = A.shape[:2]
        B = Bs // self.h
        dq, dk, dv = (self._split(t, B) for t in dxs)
        dM = dp.get("scores")
        dA = None
        if dq is not None or dk is not None or dM is not None:
            dT = None  # (B, n, c·n) viewed as the row layout
            if dq is not None:  # s q̇ kᵀ: (B, n·c, e) @ (B, e, n)
                dT = torch.bmm(_rows(dq, Bs), (k * s).transpose(1, 2)).view(Bs, n, c * n)
            if dM is not None:  # s (x̃ Ṁ) x̃ᵀ: (B, n·c, D) @ (B, D, n)
                xt = ctx["xt"]
                D = dM.shape[-1]
                xM = (xt.reshape(-1, D) @ dM.permute(1, 0, 2).reshape(D, c * D)).view(Bs, n * c, D)
                t = torch.bmm(xM, (xt * s).transpose(1, 2)).view(Bs, n, c * n)
                dT = t if dT is None else dT.add_(t)
            if dk is not None:  # s q k̇ᵀ: (B, n, e) @ (B, e, c·n)
                dT = torch.bmm(q * s, _cols(dk, Bs)) if dT is None else dT.baddbmm_(q * s, _cols(dk, Bs))
            dT = dT.view(Bs, n, c, n)
            A4 = A.unsqueeze(2)
            dA = dT.sub_((A4 * dT).sum(-1, keepdim=True)).mul_(A4)
        e_v = v.shape[-1]
        dax = dv_c = None
        if dA is not None:  # Ȧ v: (B, n·c, n) @ (B, n, e)
            dax = torch.bmm(dA.view(Bs, n * c, n), v)
        if dv is not None:  # A v̇: (B, n, n) @ (B, n, c·e)
            dv_c = _cols(dv, Bs)
            dvv = full(dv, Bs).reshape(Bs, n, c * e_v)
            dax = torch.bmm(A, dvv) if dax is None else dax.view(Bs, n, c * e_v).baddbmm_(A, dvv)
        if dax is not None:
            dax = dax.view(Bs, n, c, e_v)
        return self._merge(dax), {"dq": dq, "dk": dk, "dA": dA, "dv_c": dv_c, "dax": dax}

    def _ddTs(self, ctx, t, ddax, c):
        """``s δṪ`` (B, n, c, n), the adjoint tangent of the scores, or None (kept in ``t``)."""
        if "ddTs" in t:
            return t["ddTs"]
        v, ax, d_ax = ctx["v"], ctx["ax"], ctx["d_ax"]
        dA, dax, dv_c = t.get("dA"), t.get("dax"), t.get("dv_c")
        Bs, n = v.shape[:2]
        ddA = None  # δȦ = δȧx vᵀ + δax v̇ᵀ, (B, n, c·n)
        if ddax is not None:
            ddA = torch.bmm(_rows(ddax, Bs), v.transpose(1, 2)).view(Bs, n, c * n)
        if dv_c is not None:
            ddA = torch.bmm(d_ax, dv_c) if ddA is None else ddA.baddbmm_(d_ax, dv_c)
        ddTs = None
        if ddA is not None or dA is not None:
            rs = None if ddax is None else (full(ddax, Bs) * ax.unsqueeze(2)).sum(-1)
            if dax is not None:
                r2 = (dax * d_ax.unsqueeze(2)).sum(-1)
                rs = r2 if rs is None else rs + r2
            rs = rs.unsqueeze(-1)  # (B, n, c, 1)
            sA4 = ctx["sA"].unsqueeze(2)
            ddTs = -rs * sA4 if ddA is None else ddA.view(Bs, n, c, n).sub_(rs).mul_(sA4)
            if dA is not None:
                ddTs = ddTs.addcmul_(dA, ctx["sDr"].unsqueeze(2))
        t["ddTs"] = ddTs
        return ddTs

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        A, q, k, v, d_Ts = ctx["A"], ctx["q"], ctx["k"], ctx["v"], ctx["d_Ts"]
        Bs, n = A.shape[:2]
        B = Bs // self.h
        ddax = self._split(dd_y, B)
        dq, dk, dA = t.get("dq"), t.get("dk"), t.get("dA")
        ddq = ddk = ddv = None
        if need[0] or need[1]:
            ddTs = self._ddTs(ctx, t, ddax, c)
            if need[0]:
                if ddTs is not None:  # δṪ k, token layout
                    ddq = torch.bmm(ddTs.view(Bs, n * c, n), k).view(Bs, n, c * k.shape[-1])
                if dk is not None:  # δT k̇
                    dkv = full(dk, Bs).reshape(Bs, n, -1)
                    ddq = torch.bmm(d_Ts, dkv) if ddq is None else ddq.baddbmm_(d_Ts, dkv)
                if ddq is not None:
                    ddq = ddq.view(Bs, n, c, -1)
            if need[1]:
                if ddTs is not None:  # δṪᵀ q, token layout
                    ddk = torch.bmm(ddTs.view(Bs, n, c * n).transpose(1, 2), q).view(Bs, c, n, -1).permute(0, 2, 1, 3)
                if dq is not None:  # δTᵀ q̇
                    t2 = torch.bmm(d_Ts.transpose(1, 2), full(dq, Bs).reshape(Bs, n, -1)).view(Bs, n, c, -1)
                    ddk = t2 if ddk is None else t2.add_(ddk)
                elif ddk is not None:
                    ddk = ddk.contiguous()
        if need[2]:
            e_v = v.shape[-1]
            if ddax is not None:  # Aᵀ δȧx
                ddv = torch.bmm(A.transpose(1, 2), full(ddax, Bs).reshape(Bs, n, c * e_v)).view(Bs, n, c, e_v)
            if dA is not None:  # Ȧᵀ δax: (B, c·n, n) @ (B, n, e), to the token layout
                t2 = torch.bmm(dA.view(Bs, n, c * n).transpose(1, 2), ctx["d_ax"]).view(Bs, c, n, e_v).permute(0, 2, 1, 3)
                ddv = t2.contiguous() if ddv is None else ddv.add_(t2)
        return [self._merge(ddq), self._merge(ddk), self._merge(ddv)]

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False):
        """Rows of the virtual ``scores`` M: the tangent of ``Σ x̃ᵀ (s δT) x̃`` for tangents that enter at M
        (x fixed): ``Σ x̃ᵀ (s δṪ) x̃``."""
        if "scores" not in slots:
            return {}
        xt = ctx["xt"]
        ddTs = self._ddTs(ctx, t, dd_y, c)
        D = xt.shape[-1]
        if ddTs is None:
            return {"scores": zeros_rows((D, D), c, xt, per_sample)}
        Bs, n = ddTs.shape[:2]
        y = torch.bmm(ddTs.view(Bs, n * c, n), xt).view(Bs, n, c, -1)  # s δṪ x̃ in the token layout
        return {"scores": tok_contract_rev(xt, y, per_sample)}

    def grads(self, ctx, p, slots):
        """``∂L/∂M = Σ x̃ᵀ (s δT) x̃`` (D, D)."""
        if "scores" not in slots:
            return {}
        xt = ctx["xt"]
        return {"scores": (xt.transpose(1, 2) @ ctx["d_Ts"] @ xt).sum(0)}
