"""Multi-head scaled-dot-product self-attention: row softmax, its first and second derivatives, masks.

The core of ``torch.nn.MultiheadAttention`` after its input projection and before its output
projection. With ``Q, K, V`` (L, d) split into ``h`` heads of width ``d_h = d / h`` (head ``c`` is
columns ``c d_h .. (c+1) d_h - 1``):

    T_c = Q_c K_cᵀ / √d_h + M,   A_c = softmax_rows(T_c),   O_c = A_c V_c,   O = [O_1, ..., O_h]  (L, d)

``M`` (L, L) is an additive mask (0 where a query may attend, -inf where it may not; the causal mask
is -inf above the diagonal). It is a constant: it enters the derivatives only through ``A`` (A = 0
where M = -inf).

Every function works on batches of *tangents* (directions) with a leading batch dimension ``B`` next
to the unbatched point, and returns ``None`` for a derivative that is identically zero. Derivatives of
the row softmax ``a = softmax(t)`` of one row (Ormaniec et al. Lemma C.1, quoted in the paper; the
matrix form is :func:`curvature_gap.theory.attention.contract_d2A_dT2_blocks`):

* Jacobian ``∂a/∂t = diag(a) - a aᵀ``: ``ȧ = a ∘ (ṫ - (a·ṫ) 1)`` (:func:`softmax_jvp`; symmetric, so the
  transposed Jacobian is the same map, :func:`softmax_vjp`);
* second derivative contracted with a row vector ``ā`` (the adjoint of ``a``) and one direction:
  ``(ā·∂²a/∂t²)[ṫ] = ȧ ∘ (ā - (ā·a) 1) - a (ā·ȧ)`` (:func:`softmax_second`), i.e. the tangent of
  ``t̄ = a ∘ (ā - (ā·a) 1)`` with ``ā`` held fixed.

Nothing here calls automatic differentiation.
"""
from __future__ import annotations

import math

import torch

from ..model import attention_probs, scaled_scores

__all__ = [
    "split_heads", "merge_heads", "causal_mask", "additive_mask", "softmax_rows", "softmax_jvp", "softmax_vjp",
    "softmax_second", "forward", "jvp", "vjp", "hvp", "head_of_row",
]


def split_heads(M: torch.Tensor, h: int, n: int | None = None) -> torch.Tensor:
    """(..., L, h d_h) -> (..., h, L, d_h): head ``c`` is the column block ``c d_h .. (c+1) d_h - 1``.

    With ``n``: the rows are ``n`` sequences of equal length stacked, (..., n L, h d_h) -> (..., h, n, L, d_h)."""
    if n is not None:
        *lead, NL, d = M.shape
        return M.reshape(*lead, n, NL // n, h, d // h).movedim(-2, -4)
    *lead, L, d = M.shape
    return M.reshape(*lead, L, h, d // h).transpose(-3, -2)


def merge_heads(M: torch.Tensor, n: int | None = None) -> torch.Tensor:
    """Inverse of :func:`split_heads`: (..., h, L, d_h) -> (..., L, h d_h); with ``n``
    (..., h, n, L, d_h) -> (..., n L, h d_h)."""
    if n is not None:
        *lead, h, n_, L, dh = M.shape
        return M.movedim(-4, -2).reshape(*lead, n_ * L, h * dh)
    *lead, h, L, dh = M.shape
    return M.transpose(-3, -2).reshape(*lead, L, h * dh)


def causal_mask(L: int, ref: torch.Tensor) -> torch.Tensor:
    """``M_ij = -inf`` for ``j > i``, else 0; (L, L) (``nn.Transformer.generate_square_subsequent_mask``)."""
    return torch.triu(torch.full((L, L), float("-inf"), dtype=ref.dtype, device=ref.device), diagonal=1)


def additive_mask(L: int, src_mask: torch.Tensor | None, is_causal: bool, ref: torch.Tensor) -> torch.Tensor | None:
    """The additive (L, L) mask ``M`` of :func:`forward` from ``nn.TransformerEncoderLayer``'s arguments.

    ``src_mask`` as ``nn.MultiheadAttention`` reads it: a bool mask is True where attention is *not*
    allowed, a float mask is added to the scores. ``is_causal=True`` means the causal mask (a given
    ``src_mask`` must then be that mask: PyTorch replaces it by the causal one). Raises ``ValueError``
    on a mask of another shape or a row that masks every key (softmax of all -inf is undefined).
    """
    if is_causal:
        M = causal_mask(L, ref)
        if src_mask is not None and not torch.equal(additive_mask(L, src_mask, False, ref), M):
            raise ValueError("is_causal=True with a src_mask that is not the causal mask: PyTorch would use "
                             "the causal mask and ignore src_mask; pass src_mask=None or the causal mask")
        return M
    if src_mask is None:
        return None
    if src_mask.shape != (L, L):
        raise ValueError(f"src_mask of shape {tuple(src_mask.shape)} is not supported: only one (L, L) = "
                         f"({L}, {L}) mask shared by every head (a per-head (h L, L) mask is not)")
    if src_mask.dtype == torch.bool:
        M = torch.zeros(L, L, dtype=ref.dtype, device=ref.device).masked_fill(src_mask, float("-inf"))
    elif src_mask.is_floating_point():
        M = src_mask.to(dtype=ref.dtype, device=ref.device)
    else:
        raise ValueError(f"src_mask of dtype {src_mask.dtype} is not supported: pass a bool or a float mask")
    if bool(torch.isneginf(M).all(dim=1).any()):
        raise ValueError("src_mask masks every key of some query row: the softmax of that row is undefined")
    return M


def softmax_rows(T: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax (over the last dimension); -inf entries give 0."""
    return torch.softmax(T, dim=-1)


def softmax_jvp(A: torch.Tensor, dT: torch.Tensor) -> torch.Tensor:
    """``Ȧ = (∂A/∂T)[Ṫ] = A ∘ (Ṫ - rowsum(A ∘ Ṫ))``; ``A`` (..., L, L) broadcasts against ``dT`` (B, ..., L, L)."""
    return A * (dT - (A * dT).sum(-1, keepdim=True))


def softmax_vjp(A: torch.Tensor, gA: torch.Tensor) -> torch.Tensor:
    """``T̄ = (∂A/∂T)ᵀ[Ā] = A ∘ (Ā - rowsum(Ā ∘ A))`` (the row Jacobian is symmetric)."""
    return A * (gA - (A * gA).sum(-1, keepdim=True))


def softmax_second(A: torch.Tensor, gA: torch.Tensor, dA: torch.Tensor) -> torch.Tensor:
    """``(Ā·∂²A/∂T²)[Ṫ] = Ȧ ∘ (Ā - rowsum(Ā ∘ A)) - A ∘ rowsum(Ā ∘ Ȧ)`` with ``Ȧ = softmax_jvp(A, Ṫ)``.

    ``Σ_ij Ā_ij ∂²A_ij/∂T∂T`` applied to a direction: block-diagonal over rows, per row the matrix
    ``diag(a∘ḡ) - (a·ḡ) diag(a) + 2(a·ḡ) a aᵀ - (a∘ḡ) aᵀ - a (a∘ḡ)ᵀ`` of Lemma C.1 (``ḡ`` the row of Ā).
    """
    return dA * (gA - (A * gA).sum(-1, keepdim=True)) - A * (gA * dA).sum(-1, keepdim=True)


def head_of_row(r: torch.Tensor | int, d: int, h: int):
    """The head whose columns row ``r`` of ``in_proj_weight`` (3d, d) (or entry r of ``in_proj_bias``) feeds."""
    return (r % d) // (d // h)


# ------------------------------------------------------------------ the attention core O(Q, K, V)
def forward(QKV: torch.Tensor, h: int, M: torch.Tensor | None = None,
            n: int | None = None) -> tuple[torch.Tensor, dict]:
    """``O`` (L, d) from the packed ``[Q, K, V]`` (L, 3d) (the output of ``in_proj``); and the context
    ``{"q", "k", "v"}`` (h, L, d_h), ``"A"`` (h, L, L), ``"s" = 1/√d_h`` for the derivatives.

    With ``n``: ``QKV`` (n L, 3d) holds n sequences of length L one after the other, each attending only to
    itself; the context is (h, n, L, d_h) and (h, n, L, L), ``M`` (L, L) or one mask per sequence (n, L, L)."""
    d = QKV.shape[-1] // 3
    q, k, v = (split_heads(P, h, n) for P in QKV.split(d, dim=-1))
    s = 1.0 / math.sqrt(d // h)
    # the model's one attention softmax (scaled by 1/√d_h, the heads' width), the mask added to its scores
    A = attention_probs(q, k) if M is None else softmax_rows(scaled_scores(q, k) + M)
    return merge_heads(A @ v, n), {"q": q, "k": k, "v": v, "A": A, "s": s, "h": h, "n": n}


def _add(a, b):
    """``a + b`` where None is zero."""
    return b if a is None else a if b is None else a + b


def jvp(ctx: dict, dQKV: torch.Tensor | None, head: int | None = None) -> tuple[torch.Tensor | None, dict]:
    """``Ȯ = Ȧ V + A V̇`` with ``Ṫ = s(Q̇ Kᵀ + Q K̇ᵀ)``, ``Ȧ = softmax_jvp(A, Ṫ)``; ``dQKV`` (B, L, 3d).

    ``head=c`` declares that ``dQKV`` is zero outside the columns of head c (a direction of one row of
    ``in_proj``): only that head's tangents are formed. Returns ``Ȯ`` (B, L, d) and the tangents
    ``{"dq", "dk", "dv", "dA", "head"}`` (of the heads concerned) used by :func:`hvp`."""
    if dQKV is None:
        return None, {"dq": None}
    h, s, q, k, v, A = ctx["h"], ctx["s"], ctx["q"], ctx["k"], ctx["v"], ctx["A"]
    hs = slice(None) if head is None else slice(head, head + 1)
    d = dQKV.shape[-1] // 3
    n = ctx.get("n")
    dq, dk, dv = (split_heads(P, h, n)[:, hs] for P in dQKV.split(d, dim=-1))
    dT = s * (dq @ k[hs].transpose(-1, -2) + q[hs] @ dk.transpose(-1, -2))
    dA = softmax_jvp(A[hs], dT)
    dOh = dA @ v[hs] + A[hs] @ dv
    if head is not None:
        full = dOh.new_zeros(dOh.shape[0], h, *dOh.shape[2:])
        full[:, hs] = dOh
        dOh = full
    return merge_heads(dOh, n), {"dq": dq, "dk": dk, "dv": dv, "dA": dA, "head": hs}


def vjp(ctx: dict, gO: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Transposed Jacobian: ``Ā = Ō Vᵀ``, ``V̄ = Aᵀ Ō``, ``T̄ = softmax_vjp(A, Ā)``, ``Q̄ = s T̄ K``,
    ``K̄ = s T̄ᵀ Q`` per head; returns ``[Q̄, K̄, V̄]`` (L, 3d) and ``{"gO", "gA", "gT"}``."""
    h, s, q, k, v, A, n = ctx["h"], ctx["s"], ctx["q"], ctx["k"], ctx["v"], ctx["A"], ctx.get("n")
    go = split_heads(gO, h, n)
    gA = go @ v.transpose(-1, -2)
    gT = softmax_vjp(A, gA)
    gq, gk, gv = s * gT @ k, s * gT.transpose(-1, -2) @ q, A.transpose(-1, -2) @ go
    return (torch.cat([merge_heads(gq, n), merge_heads(gk, n), merge_heads(gv, n)], dim=-1),
            {"gO": go, "gA": gA, "gT": gT})


def hvp(ctx: dict, gctx: dict, tctx: dict, dgO: torch.Tensor | None) -> torch.Tensor | None:
    """Tangent of :func:`vjp`: ``(∂O/∂QKV)ᵀ[dŌ] + (Ō·∂²O/∂QKV²)[dQKV]``; (B, L, 3d) or None.

    With ``Ō`` (from ``gctx``) fixed and the directions ``Q̇, K̇, V̇, Ȧ`` of ``tctx``:
    ``dĀ = dŌ Vᵀ + Ō V̇ᵀ``, ``dV̄ = Aᵀ dŌ + Ȧᵀ Ō``,
    ``dT̄ = softmax_vjp(A, dĀ) + softmax_second(A, Ā, Ȧ)``,
    ``dQ̄ = s(dT̄ K + T̄ K̇)``, ``dK̄ = s(dT̄ᵀ Q + T̄ᵀ Q̇)``. The bilinear terms (``Ō V̇ᵀ``, ``Ȧᵀ Ō``,
    ``T̄ K̇``, ``T̄ᵀ Q̇``) and ``softmax_second`` are the second-order part; they are formed for the heads
    of ``tctx["head"]`` only (the others have zero directions).
    """
    h, s, q, k, v, A, n = ctx["h"], ctx["s"], ctx["q"], ctx["k"], ctx["v"], ctx["A"], ctx.get("n")
    go, gA, gT = gctx["gO"], gctx["gA"], gctx["gT"]
    dq = tctx["dq"]
    dgo = None if dgO is None else split_heads(dgO, h, n)
    if dgo is None and dq is None:
        return None
    if dq is None:                                    # first order only
        dgT = softmax_vjp(A, dgo @ v.transpose(-1, -2))
        dgq, dgk, dgv = s * dgT @ k, s * dgT.transpose(-1, -2) @ q, A.transpose(-1, -2) @ dgo
        return torch.cat([merge_heads(dgq, n), merge_heads(dgk, n), merge_heads(dgv, n)], dim=-1)
    hs, dk, dv, dA = tctx["head"], tctx["dk"], tctx["dv"], tctx["dA"]
    B = dq.shape[0]
    # second-order terms of the heads concerned
    dgA2 = go[hs] @ dv.transpose(-1, -2)
    dgT2 = softmax_vjp(A[hs], dgA2) + softmax_second(A[hs], gA[hs], dA)
    dgq2 = s * (dgT2 @ k[hs] + gT[hs] @ dk)
    dgk2 = s * (dgT2.transpose(-1, -2) @ q[hs] + gT[hs].transpose(-1, -2) @ dq)
    dgv2 = dA.transpose(-1, -2) @ go[hs]
    if dgo is None:
        dgq, dgk, dgv = (q.new_zeros(B, *q.shape) for _ in range(3))
    else:
        dgT = softmax_vjp(A, dgo @ v.transpose(-1, -2))
        dgq, dgk, dgv = s * dgT @ k, s * dgT.transpose(-1, -2) @ q, A.transpose(-1, -2) @ dgo
    dgq[:, hs] += dgq2
    dgk[:, hs] += dgk2
    dgv[:, hs] += dgv2
    return torch.cat([merge_heads(dgq, n), merge_heads(dgk, n), merge_heads(dgv, n)], dim=-1)
