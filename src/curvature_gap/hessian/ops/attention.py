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

Layouts: tangents of q, k, x, ax are in the token layout (B, n, c, ·); tangents of T and A in the row layout
(B, n, c, n) (query token i, tangent, key token j). In that layout every product with a token-layout tensor
is one batched GEMM over the images whose output is already in its destination layout ((B, n·c, n) @ (B, n, ·),
(B, n, ·) @ (B, ·, c·n)): no tangent-sized attention tensor is ever permuted; only the token-sized ẋ, k̇ and two
results are (measured: the adjoint tangent 8.2 -> 5.5 ms per call at the MNIST model's B = 32, n = 49, c = 16).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...model import attention_probs
from .linear import add, tok_contract_rev

__all__ = ["primal", "Adjoint", "vjp", "jvp", "mix_jvp", "scores_vjp_tangent", "vjp_tangent", "scores_grad",
           "scores_rows"]


def primal(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A = softmax(q kᵀ / √d_K), the model's one implementation."""
    return attention_probs(q, k)


def scale_of(q: torch.Tensor) -> float:
    """The score scale s = 1/√d_K of :func:`curvature_gap.model.scaled_scores`."""
    return 1.0 / math.sqrt(q.shape[-1])


def _full(t: torch.Tensor, B: int) -> torch.Tensor:
    """A token-layout tangent (B or 1, n, c, k) with its batch axis expanded to B (a view)."""
    return t.expand(B, *t.shape[1:])


def _rows(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> (B, n·c, k) (a view where the layout allows)."""
    n, c, k = t.shape[1:]
    return _full(t, B).reshape(B, n * c, k)


def _cols(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> (B, k, c·n): the tangent as the right factor of ``(B, ·, k) @ (B, k, c·n)``
    (one token-sized copy)."""
    n, c, k = t.shape[1:]
    return _full(t, B).permute(0, 3, 2, 1).reshape(B, k, c * n)


@dataclass
class Adjoint:
    """Primal adjoints of the attention: δA, ρ = rowsum(A ∘ δA), δT (scaled), δq, δk, Aᵀ δax; and, for the
    adjoint tangent, ``sA = s A`` and ``sDr = s (δA − ρ)``."""

    d_A: torch.Tensor
    rho: torch.Tensor
    d_Ts: torch.Tensor
    d_q: torch.Tensor
    d_k: torch.Tensor
    d_x: torch.Tensor
    sA: torch.Tensor
    sDr: torch.Tensor


def vjp(A, x, q, k, d_ax) -> Adjoint:
    """The adjoints of the attention from δax (B, n, d)."""
    s = scale_of(q)
    d_A = d_ax @ x.transpose(-1, -2)
    rho = (A * d_A).sum(-1, keepdim=True)
    d_Ts = A * (d_A - rho) * s
    return Adjoint(d_A, rho, d_Ts, d_Ts @ k, d_Ts.transpose(-1, -2) @ q, A.transpose(-1, -2) @ d_ax,
                   A * s, (d_A - rho) * s)


def jvp(A, q, k, dq, dk, c: int, dM=None, xt=None):
    """Ȧ (B, n, c, n) from q̇, k̇ (token layout, either None) and a tangent Ṁ (c, D, D) of the bilinear form
    ``T = s x̃ M x̃ᵀ`` (``M = W̃_Q W̃_Kᵀ``, ``x̃`` (B, n, D) the block input with a column of ones where Q and K
    have biases; :func:`scores_rows`); None when all are None."""
    if dq is None and dk is None and dM is None:
        return None
    Bs, n = A.shape[:2]
    s = scale_of(q)
    dT = None  # (B, n, c·n) viewed as the row layout
    if dq is not None:  # s q̇ kᵀ: (B, n·c, d_K) @ (B, d_K, n)
        dT = torch.bmm(_rows(dq, Bs), (k * s).transpose(1, 2)).view(Bs, n, c * n)
    if dM is not None:  # s (x̃ Ṁ) x̃ᵀ: (B, n·c, D) @ (B, D, n)
        D = dM.shape[-1]
        xM = (xt.reshape(-1, D) @ dM.permute(1, 0, 2).reshape(D, c * D)).view(Bs, n * c, D)
        t = torch.bmm(xM, (xt * s).transpose(1, 2)).view(Bs, n, c * n)
        dT = t if dT is None else dT.add_(t)
    if dk is not None:  # s q k̇ᵀ: (B, n, d_K) @ (B, d_K, c·n)
        dT = torch.bmm(q * s, _cols(dk, Bs)) if dT is None else dT.baddbmm_(q * s, _cols(dk, Bs))
    dT = dT.view(Bs, n, c, n)
    A4 = A.unsqueeze(2)
    return dT.sub_((A4 * dT).sum(-1, keepdim=True)).mul_(A4)


def mix_jvp(A, x, dA, dx, c: int):
    """(ȧx = Ȧ x + A ẋ in the token layout, ẋ as (B, d, c·n) for the adjoint tangent's δax ẋᵀ, or None)."""
    Bs, n, d = x.shape
    dax = dx_c = None
    if dA is not None:  # Ȧ x: (B, n·c, n) @ (B, n, d)
        dax = torch.bmm(dA.view(Bs, n * c, n), x)
    if dx is not None:  # A ẋ: (B, n, n) @ (B, n, c·d)
        dx_c = _cols(dx, Bs)
        dxv = _full(dx, Bs).reshape(Bs, n, c * d)
        dax = torch.bmm(A, dxv) if dax is None else dax.view(Bs, n, c * d).baddbmm_(A, dxv)
    return (None if dax is None else dax.view(Bs, n, c, d)), dx_c


def scores_vjp_tangent(x, ax, adj: Adjoint, d_ax, dA, dax, dx_c, ddax, c: int):
    """``s δṪ`` (B, n, c, n), the adjoint tangent of the scores, or None; ``dx_c`` is ẋ as :func:`mix_jvp`
    returns it."""
    Bs, n, d = x.shape
    ddA = None  # δȦ = δȧx xᵀ + δax ẋᵀ, (B, n, c·n)
    if ddax is not None:
        ddA = torch.bmm(_rows(ddax, Bs), x.transpose(1, 2)).view(Bs, n, c * n)
    if dx_c is not None:
        ddA = torch.bmm(d_ax, dx_c) if ddA is None else ddA.baddbmm_(d_ax, dx_c)
    if ddA is None and dA is None:
        return None
    rs = None if ddax is None else (_full(ddax, Bs) * ax.unsqueeze(2)).sum(-1)
    if dax is not None:
        rs = add(rs, (dax * d_ax.unsqueeze(2)).sum(-1))
    rs = rs.unsqueeze(-1)  # (B, n, c, 1)
    sA4 = adj.sA.unsqueeze(2)
    ddTs = -rs * sA4 if ddA is None else ddA.view(Bs, n, c, n).sub_(rs).mul_(sA4)
    if dA is not None:
        ddTs = ddTs.addcmul_(dA, adj.sDr.unsqueeze(2))
    return ddTs


def scores_grad(xt, adj: Adjoint) -> torch.Tensor:
    """``∂L/∂M = Σ_B x̃ᵀ (s δT) x̃`` (D, D) for the bilinear form ``T = s x̃ M x̃ᵀ``."""
    return (xt.transpose(1, 2) @ adj.d_Ts @ xt).sum(0)


def scores_rows(xt, ddTs, c: int, per_sample: bool = False) -> torch.Tensor:
    """Hessian rows of the bilinear form's matrix M: the tangent of :func:`scores_grad` for tangents that enter
    at M (ẋ = 0), ``Σ_B x̃ᵀ (s δṪ) x̃`` -> (c, D, D), or each sample's (B, c, D, D)."""
    Bs, n, _, _ = ddTs.shape
    y = torch.bmm(ddTs.view(Bs, n * c, n), xt).view(Bs, n, c, -1)  # s δṪ x̃ in the token layout
    return tok_contract_rev(xt, y, per_sample)


def vjp_tangent(A, x, q, k, ax, adj: Adjoint, d_ax, dA, dax, dx_c, dq, dk, ddax, c: int, ddTs=None):
    """(δq̇, δk̇, δẋ from the mixing: Aᵀ δȧx + Ȧᵀ δax), each in the token layout or None; ``dx_c`` is ẋ as
    :func:`mix_jvp` returns it; ``ddTs`` is :func:`scores_vjp_tangent`'s result when already computed."""
    Bs, n, d = x.shape
    if ddTs is None:
        ddTs = scores_vjp_tangent(x, ax, adj, d_ax, dA, dax, dx_c, ddax, c)
    ddq = ddk = None
    if ddTs is not None:
        flat = ddTs.view(Bs, n, c * n)
        ddq = torch.bmm(ddTs.view(Bs, n * c, n), k).view(Bs, n, c * k.shape[-1])  # δṪ k, token layout
        ddk = torch.bmm(flat.transpose(1, 2), q).view(Bs, c, n, -1).permute(0, 2, 1, 3)  # δṪᵀ q, token layout
    if dk is not None:  # δT k̇
        dkv = _full(dk, Bs).reshape(Bs, n, -1)
        ddq = torch.bmm(adj.d_Ts, dkv) if ddq is None else ddq.baddbmm_(adj.d_Ts, dkv)
    if dq is not None:  # δTᵀ q̇
        t = torch.bmm(adj.d_Ts.transpose(1, 2), _full(dq, Bs).reshape(Bs, n, -1)).view(Bs, n, c, -1)
        ddk = t if ddk is None else t.add_(ddk)
    elif ddk is not None:
        ddk = ddk.contiguous()
    if ddq is not None:
        ddq = ddq.view(Bs, n, c, -1)
    ddx = None
    if ddax is not None:  # Aᵀ δȧx
        ddx = torch.bmm(A.transpose(1, 2), _full(ddax, Bs).reshape(Bs, n, c * d)).view(Bs, n, c, d)
    if dA is not None:  # Ȧᵀ δax: (B, c·n, n) @ (B, n, d), to the token layout
        t = torch.bmm(dA.view(Bs, n, c * n).transpose(1, 2), d_ax).view(Bs, c, n, d).permute(0, 2, 1, 3)
        ddx = t.contiguous() if ddx is None else ddx.add_(t)
    return ddq, ddk, ddx
