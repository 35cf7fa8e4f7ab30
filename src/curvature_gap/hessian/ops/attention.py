"""Single-head attention softmax ``A = softmax(T)`` (rows), ``T = q kᵀ s`` with ``s = 1/√d_K``
(:func:`curvature_gap.model.attention_probs`), and the token mixing ``ax = A x``.

* forward tangent: ``Ṫ = (q̇ kᵀ + q k̇ᵀ) s``, ``Ȧ = A ∘ (Ṫ − rowsum(A ∘ Ṫ))``; ``(ax)˙ = Ȧ x + A ẋ``;
* adjoint: ``δA = δax xᵀ``, ``ρ = rowsum(A ∘ δA)``, ``δT = A ∘ (δA − ρ)``; ``δq = s δT k``,
  ``δk = s δTᵀ q``; the input receives ``Aᵀ δax`` (plus the q, k linears' adjoints);
* adjoint tangent: ``δȦ = δȧx xᵀ + δax ẋᵀ``;
  ``δṪ = A ∘ (δȦ − rowsum(A ∘ δȦ + Ȧ ∘ δA)) + Ȧ ∘ (δA − ρ)``, where, because ``δA = δax xᵀ``, the row sum
  is token-sized: ``rowsum(A ∘ δȦ + Ȧ ∘ δA) = ⟨δȧx, ax⟩ + ⟨δax, ȧx⟩``; ``δq̇ = s (δṪ k + δT k̇)``,
  ``δk̇ = s (δṪᵀ q + δTᵀ q̇)`` (here δT carries the factor s already); the input receives
  ``Aᵀ δȧx + Ȧᵀ δax``.

Tangents of q, k, x, ax are in the token layout (B, n, c, ·); tangents of T and A in (B, c, n, n).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...model import attention_probs
from .linear import add

__all__ = ["primal", "Adjoint", "vjp", "jvp", "mix_jvp", "vjp_tangent", "tok2att", "att2tok"]


def primal(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A = softmax(q kᵀ / √d_K), the model's one implementation."""
    return attention_probs(q, k)


def scale_of(q: torch.Tensor) -> float:
    """The score scale s = 1/√d_K of :func:`curvature_gap.model.scaled_scores`."""
    return 1.0 / math.sqrt(q.shape[-1])


def tok2att(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> attention layout (B, c, n, k), contiguous."""
    return t.expand(B, *t.shape[1:]).permute(0, 2, 1, 3).contiguous()


def att2tok(t: torch.Tensor) -> torch.Tensor:
    """Attention layout (B, c, n, k) -> token layout (B, n, c, k), contiguous."""
    return t.permute(0, 2, 1, 3).contiguous()


@dataclass
class Adjoint:
    """Primal adjoints of the attention: δA, ρ = rowsum(A ∘ δA), δT (scaled), δq, δk, and Aᵀ δax."""

    d_A: torch.Tensor
    rho: torch.Tensor
    d_Ts: torch.Tensor
    d_q: torch.Tensor
    d_k: torch.Tensor
    d_x: torch.Tensor


def vjp(A, x, q, k, d_ax) -> Adjoint:
    """The adjoints of the attention from δax (B, n, d)."""
    d_A = d_ax @ x.transpose(-1, -2)
    rho = (A * d_A).sum(-1, keepdim=True)
    d_Ts = A * (d_A - rho) * scale_of(q)
    return Adjoint(d_A, rho, d_Ts, d_Ts @ k, d_Ts.transpose(-1, -2) @ q, A.transpose(-1, -2) @ d_ax)


def jvp(A, q, k, dq, dk, c: int):
    """Ȧ (B, c, n, n) from q̇, k̇ (token layout, either None); None when both are."""
    if dq is None and dk is None:
        return None
    Bs, n = A.shape[:2]
    dT = None
    if dq is not None:
        dT = (tok2att(dq, Bs).view(Bs, c * n, -1) @ k.transpose(-1, -2)).view(Bs, c, n, n)
    if dk is not None:  # q k̇ᵀ as B·c small products (a transposed add would be ~3x slower)
        dk_a = tok2att(dk, Bs)
        q_rep = q.unsqueeze(1).expand(Bs, c, n, q.shape[-1]).reshape(Bs * c, n, -1)
        qdk = torch.bmm(q_rep, dk_a.view(Bs * c, n, -1).transpose(1, 2)).view(Bs, c, n, n)
        dT = qdk if dT is None else dT.add_(qdk)
    dT.mul_(scale_of(q))
    A4 = A.unsqueeze(1)
    return dT.sub_((A4 * dT).sum(-1, keepdim=True)).mul_(A4)


def mix_jvp(A, x, dA, dx, c: int):
    """(ȧx = Ȧ x + A ẋ in the token layout, ẋ in the attention layout (kept for the adjoint tangent))."""
    Bs, n, d = x.shape
    dax = dx_a = None
    if dA is not None:
        dax = att2tok((dA.view(Bs, c * n, n) @ x).view(Bs, c, n, d))
    if dx is not None:
        dx_a = tok2att(dx, Bs)
        dax = add(dax, (A @ dx.expand(Bs, n, c, d).reshape(Bs, n, c * d)).view(Bs, n, c, d))
    return dax, dx_a


def vjp_tangent(A, x, q, k, ax, adj: Adjoint, d_ax, dA, dax, dx_a, dq, dk, ddax, c: int):
    """(δq̇, δk̇, δẋ from the mixing: Aᵀ δȧx + Ȧᵀ δax), each in the token layout or None."""
    Bs, n, d = x.shape
    A4 = A.unsqueeze(1)
    ddA = None  # δȦ = δȧx xᵀ + δax ẋᵀ, layout (B, c, n, n)
    if ddax is not None:
        ddA = (tok2att(ddax, Bs).view(Bs, c * n, d) @ x.transpose(-1, -2)).view(Bs, c, n, n)
    if dx_a is not None:  # δax ẋᵀ as B·c small products
        dax_rep = d_ax.unsqueeze(1).expand(Bs, c, n, d).reshape(Bs * c, n, d)
        xd = torch.bmm(dax_rep, dx_a.view(Bs * c, n, d).transpose(1, 2)).view(Bs, c, n, n)
        ddA = xd if ddA is None else ddA.add_(xd)
    ddTs = None
    if ddA is not None or dA is not None:
        rs = None if ddax is None else (ddax * ax.unsqueeze(2)).sum(-1)
        if dax is not None:
            rs = add(rs, (dax * d_ax.unsqueeze(2)).sum(-1))
        rs = rs.transpose(1, 2).unsqueeze(-1)  # (B, n, c) -> (B, c, n, 1)
        ddTs = (-rs * A4) if ddA is None else ddA.sub_(rs).mul_(A4)
        if dA is not None:
            ddTs = ddTs.add_(dA * (adj.d_A - adj.rho).unsqueeze(1))
        ddTs = ddTs.mul_(scale_of(q))
    ddq = ddk = None
    if ddTs is not None:
        ddq = att2tok((ddTs.view(Bs, c * n, n) @ k).view(Bs, c, n, -1))
        ddk = att2tok(ddTs.transpose(-1, -2) @ q.unsqueeze(1))
    if dk is not None:
        ddq = add(ddq, (adj.d_Ts @ dk.expand(Bs, *dk.shape[1:]).reshape(Bs, n, -1)).view(Bs, n, c, -1))
    if dq is not None:
        ddk = add(ddk, (adj.d_Ts.transpose(-1, -2) @ dq.expand(Bs, *dq.shape[1:]).reshape(Bs, n, -1)).view(Bs, n, c, -1))
    ddx = None
    if ddax is not None:
        ddx = (A.transpose(-1, -2) @ ddax.reshape(Bs, n, c * d)).view(Bs, n, c, d)
    if dA is not None:
        ddx = add(ddx, att2tok(dA.transpose(-1, -2) @ d_ax.unsqueeze(1)))
    return ddq, ddk, ddx
