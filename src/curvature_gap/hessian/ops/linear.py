"""The linear map ``C = X W [+ b]`` (W stored (in, out), b (out,) broadcast over tokens).

* forward tangent ``Ċ = Ẋ W + X Ẇ [+ ḃ]``;
* adjoint ``δX = δC Wᵀ``, tangent ``δẊ = δĊ Wᵀ + δC Ẇᵀ``;
* Hessian rows of W (the tangent of ``∇_W = Xᵀ δC``): ``Ẋᵀ δC + Xᵀ δĊ``, summed over samples and tokens;
  of b (``∇_b = Σ δC``): ``Σ δĊ``. The map is bilinear in (X, W), so there is no further term.

A weight stored (out, in) (``nn.Linear``: the patch embedding and the head) is used as ``X Wᵀ``: pass ``W.T``
and the tangent ``Ẇ.transpose(1, 2)``, and transpose the rows back.
"""
from __future__ import annotations

import torch

from ...model import linear as primal  # the model's own map, x W (+ b): one implementation of the forward

__all__ = ["primal", "add", "lin", "act_times_tangent", "tok_contract", "tok_contract_rev", "tok_sum", "bias_tangent",
           "jvp", "vjp", "vjp_tangent", "weight_rows", "bias_rows"]


def add(a, b):
    """``a + b`` where ``None`` is a zero tangent."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Tangent-batched activation times a shared matrix: (..., c, i) @ (i, o) -> (..., c, o), one GEMM."""
    return (x.reshape(-1, x.shape[-1]) @ w).view(*x.shape[:-1], w.shape[-1])


def act_times_tangent(x: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
    """Shared activation times tangent matrices: x (B, n, i), dw (c, i, o) -> (B, n, c, o)."""
    c, i, o = dw.shape
    return (x @ dw.permute(1, 0, 2).reshape(i, c * o)).view(*x.shape[:-1], c, o)


def tok_contract(a: torch.Tensor, b: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Σ over (B, n) of aᵀ b for a (B, n, c, i) tangent and b (B, n, o) primal -> (c, i, o); ``per_sample``:
    the sum over n only, (B, c, i, o) (contiguous).

    Computed as (bᵀ a)ᵀ: (o, B·n) @ (B·n, c·i) is about twice as fast as the transposed-left form; per sample
    the transposed-left form ((B, c·i, n) @ (B, n, o)) is as fast and needs no permute.
    """
    Bs, n, c, i = a.shape
    o = b.shape[-1]
    if per_sample:
        return torch.bmm(a.reshape(Bs, n, c * i).transpose(1, 2), b).view(Bs, c, i, o)
    return (b.reshape(-1, o).T @ a.reshape(-1, c * i)).view(o, c, i).permute(1, 2, 0)


def tok_contract_rev(a: torch.Tensor, b: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Σ over (B, n) of aᵀ b for a (B, n, i) primal and b (B, n, c, o) tangent -> (c, i, o); ``per_sample``:
    (B, c, i, o)."""
    Bs, n, c, o = b.shape
    i = a.shape[-1]
    if per_sample:
        return torch.bmm(a.transpose(1, 2), b.reshape(Bs, n, c * o)).view(Bs, i, c, o).transpose(1, 2)
    return (a.reshape(-1, i).T @ b.reshape(-1, c * o)).view(i, c, o).transpose(0, 1)


def tok_sum(t: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Σ over (B, n) of a (B, n, ...) tensor; ``per_sample``: over n only."""
    return t.sum(1) if per_sample else t.sum((0, 1))


def bias_tangent(db: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A bias tangent (c, o) in the token layout (B, n, c, o) of ``like`` (B, n, ·), as a broadcast view."""
    return db[None, None].expand(*like.shape[:2], db.shape[0], -1)


def jvp(x, dx, W, dW=None, db=None):
    """``Ċ = Ẋ W + X Ẇ + ḃ`` (any of the tangents None); x (B, n, i), dx (B, n, c, i), dW (c, i, o), db (c, o)."""
    out = add(None if dx is None else lin(dx, W), None if dW is None else act_times_tangent(x, dW))
    if db is not None:
        out = add(out, bias_tangent(db, x))
    return out


def vjp(dC: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``δX = δC Wᵀ``."""
    return dC @ W.T


def vjp_tangent(dC, ddC, W, dW=None):
    """``δẊ = δĊ Wᵀ + δC Ẇᵀ``; dC (B, n, o) primal adjoint, ddC (B, n, c, o) its tangent (or None)."""
    out = None if ddC is None else lin(ddC, W.T)
    if dW is not None:
        out = add(out, act_times_tangent(dC, dW.transpose(1, 2)))
    return out


def weight_rows(x, dx, dC, ddC, shape, c: int, like: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Hessian rows of W, ``Ẋᵀ δC + Xᵀ δĊ`` (c, in, out), or each sample's (B, c, in, out); zeros when both
    tangents are None."""
    out = None
    if dx is not None:
        out = tok_contract(dx, dC, per_sample)
    if ddC is not None:
        t = tok_contract_rev(x, ddC, per_sample)
        out = t if out is None else out.add_(t) if per_sample else out + t
    lead = (like.shape[0], c) if per_sample else (c,)
    return torch.zeros(*lead, *shape, dtype=like.dtype, device=like.device) if out is None else out


def bias_rows(ddC, size: int, c: int, like: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Hessian rows of b, ``Σ_{B, n} δĊ`` (c, out), or each sample's (B, c, out)."""
    if ddC is None:
        lead = (like.shape[0], c) if per_sample else (c,)
        return torch.zeros(*lead, size, dtype=like.dtype, device=like.device)
    return tok_sum(ddC, per_sample)
