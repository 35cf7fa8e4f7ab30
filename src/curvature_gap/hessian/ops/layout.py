"""The engine's tensor layout and the products every op is written with.

Primal values are token tensors (B, n, k): B samples (sequences, images; attention heads join this axis inside
the attention op), n tokens, k features. Tangents carry ``c`` directions next to the features, (B, n, c, k), so a
product with a shared matrix is one GEMM ((B·n·c, k) @ (k, o)) and a sum over samples and tokens is one GEMM with
inner dimension B·n. A tangent may have batch 1 where it does not depend on the sample (a position tangent):
:func:`full` expands it. ``None`` is a zero tangent (a direction that has not reached the op), propagated without
arithmetic. Rows of a parameter (the tangent of its gradient) are (c, *shape), or (B, c, *shape) per sample.
"""
from __future__ import annotations

import torch

__all__ = ["add", "full", "lin", "act_times_tangent", "tok_contract", "tok_contract_rev", "tok_sum", "broadcast",
           "zeros_rows", "scale_rows"]


def add(*ts):
    """The sum of ``ts`` from the left, ``None`` a zero tangent (out of place: no operand is changed)."""
    out = None
    for t in ts:
        out = t if out is None else out if t is None else out + t
    return out


def full(t: torch.Tensor, B: int) -> torch.Tensor:
    """A token-layout tangent (B or 1, n, c, k) with its batch axis expanded to B (a view)."""
    return t.expand(B, *t.shape[1:])


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


def broadcast(dv: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-feature tangent (c, o) (a bias) in the token layout (B, n, c, o) of ``like`` (B, n, ·), as a view."""
    return dv[None, None].expand(*like.shape[:2], dv.shape[0], -1)


def zeros_rows(shape, c: int, like: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """Zero rows (c, *shape), or (B, c, *shape) per sample (B of ``like``), in ``like``'s dtype and device."""
    lead = (like.shape[0], c) if per_sample else (c,)
    return torch.zeros(*lead, *shape, dtype=like.dtype, device=like.device)


def scale_rows(x: torch.Tensor, dx, d_y: torch.Tensor, dd_y, c: int, per_sample: bool = False) -> torch.Tensor:
    """Rows of γ (d,) in ``y = x ∘ γ`` (x (B, n, d), its tangent ``dx`` or None): ``Σ δẏ ∘ x + δy ∘ ẋ``."""
    out = zeros_rows(x.shape[-1:], c, x, per_sample)
    if dd_y is not None:
        out = out + tok_sum(dd_y * x.unsqueeze(2), per_sample)
    if dx is not None:
        out = out + tok_sum(d_y.unsqueeze(2) * dx, per_sample)
    return out
