"""Theorem 1 for h heads with an output projection: exact quantities and instances.

The layer of :func:`.formulas.theorem1_multihead` is bias-free multi-head attention as
``torch.nn.MultiheadAttention(d, h, bias=False)`` computes it, in the theory's orientation (head c: columns
``c d_h … (c+1) d_h − 1`` of W_Q, W_K, W_V, the same rows of W_O). The exact left-hand side is the spectral norm of
the Hessian of ``l = ‖F − Target‖_F² / (L d)`` w.r.t. ``(W_Q, W_K, W_V, W_O)`` (each ``vec_r``), from
``torch.func.hessian`` of :func:`forward` in float64; :func:`pytorch_hessian` is the same Hessian by
reverse-over-reverse autograd of PyTorch's own module (MATH attention backend), the reference it is checked against.
The bound, its blocks and the softmax lemma are searched by :mod:`.search`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.func import hessian

from ..exact import linalg as la
from . import formulas

__all__ = ["MHInstance", "forward", "loss", "instance", "exact", "bound", "evaluate", "pytorch_hessian",
           "to_pytorch_index", "softmax_d2_ratio", "softmax_d2", "BLOCKS"]

BLOCKS = ("Q", "K", "V", "O")


@dataclass
class MHInstance:
    """One instance: X (L, d), the four weights (d, d), Target (L, d), h heads; ``meta`` says where from."""

    X: torch.Tensor
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    Target: torch.Tensor
    h: int
    meta: dict = field(default_factory=dict)

    @property
    def L(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    def tensors(self) -> tuple:
        return self.X, self.W_Q, self.W_K, self.W_V, self.W_O, self.Target


def forward(X, WQ, WK, WV, WO, h: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``F`` (L, d) of the module doc (``mask``: an additive (L, L) mask, e.g. causal)."""
    L, d = X.shape
    dh = d // h
    q, k, v = ((X @ W).reshape(L, h, dh).transpose(0, 1) for W in (WQ, WK, WV))
    T = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if mask is not None:
        T = T + mask
    O = (torch.softmax(T, dim=-1) @ v).transpose(0, 1).reshape(L, d)
    return O @ WO


def loss(X, WQ, WK, WV, WO, Target, h: int, mask=None) -> torch.Tensor:
    """``l = ‖F − Target‖_F² / (L d)``."""
    return (forward(X, WQ, WK, WV, WO, h, mask) - Target).pow(2).mean()


def instance(L: int, d: int, h: int, seed: int) -> MHInstance:
    """A seeded instance: X, Target ~ N(0, 1), weights ~ N(0, 1/d) (the search's families scale it)."""
    if d % h:
        raise ValueError(f"d = {d} is not divisible by h = {h}")
    g = torch.Generator().manual_seed(1_000_003 * int(seed) + 7_919 * L + 101 * d + h)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    X, T = r(L, d), r(L, d)
    WQ, WK, WV, WO = (r(d, d) / math.sqrt(d) for _ in range(4))
    return MHInstance(X, WQ, WK, WV, WO, T, h, dict(L=L, d=d, h=h, seed=seed, source="random"))


def exact(X, WQ, WK, WV, WO, T, h, mask=None) -> dict:
    """The exact quantities (differentiable in every input): ``H`` (4d², 4d²), ``norm_H = ‖H‖_2``, the block
    norms ``H_ij = ‖H(W_i, W_j)‖_2`` for the pairs of :data:`.formulas.MH_PAIRS`, and the norms the bound
    reads (spectral norms of X, the weights and Target)."""
    d = X.shape[1]
    n = d * d

    def f(v):
        a, b, c, o = (v[i * n:(i + 1) * n].reshape(d, d) for i in range(4))
        return loss(X, a, b, c, o, T, h, mask)

    H = hessian(f)(torch.cat([W.reshape(-1) for W in (WQ, WK, WV, WO)]))
    q = {"H": H, "norm_H": la.sym_abs_max(H)}
    for ij in formulas.MH_PAIRS:
        a, b = BLOCKS.index(ij[0]), BLOCKS.index(ij[1])
        q[f"H_{ij}"] = la.matrix_norms(H[a * n:(a + 1) * n, b * n:(b + 1) * n])
    for k, M in (("X", X), ("Q", WQ), ("K", WK), ("V", WV), ("O", WO), ("T", T)):
        q[f"norm_{k}"] = la.matrix_norms(M)
    return q


def bound(q: dict, L: int, d: int, h: int) -> dict:
    """:func:`.formulas.theorem1_multihead` at the norms of :func:`exact`'s ``q``."""
    return formulas.theorem1_multihead(*(q[f"norm_{k}"] for k in ("X", "Q", "K", "V", "O", "T")), L, d, h)


def evaluate(inst: MHInstance, mask=None) -> list[dict]:
    """Records ``{"check", "sub", "bound", "exact", "ratio"}`` at ``inst``: ``mh`` (the whole Hessian against
    M) and ``mh.blocks`` (each block against its row; sub = the pair), float64, no gradient."""
    with torch.no_grad():
        q = exact(*inst.tensors(), inst.h, mask)
    b = bound(q, inst.L, inst.d, inst.h)
    recs = [dict(check="mh", sub="", bound=float(b["M"]), exact=float(q["norm_H"]))]
    recs += [dict(check="mh.blocks", sub=ij, bound=float(b[ij]), exact=float(q[f"H_{ij}"])) for ij in formulas.MH_PAIRS]
    for r in recs:
        r["ratio"] = r["bound"] / r["exact"] if r["exact"] > 1e-12 else math.inf
    return recs


def to_pytorch_index(d: int) -> torch.Tensor:
    """``idx`` with ``H_theory = H_pytorch[idx][:, idx]``: position in ``(in_proj_weight, out_proj.weight)``
    (row-major) of each entry of ``(W_Q, W_K, W_V, W_O)`` (row-major), ``W_Q[a, b] = in_proj_weight[b, a]``,
    ``W_K[a, b] = in_proj_weight[d + b, a]``, ``W_V[a, b] = in_proj_weight[2d + b, a]``,
    ``W_O[a, b] = out_proj.weight[b, a]``."""
    a = torch.arange(d).repeat_interleave(d)
    b = torch.arange(d).repeat(d)
    return torch.cat([(k * d + b) * d + a for k in range(3)] + [3 * d * d + b * d + a])


def pytorch_hessian(inst: MHInstance, causal: bool = False) -> torch.Tensor:
    """The loss Hessian of ``torch.nn.MultiheadAttention(d, h, bias=False)`` itself w.r.t. its
    ``(in_proj_weight, out_proj.weight)``, by reverse-over-reverse autograd (MATH backend), permuted to the
    theory's ``(W_Q, W_K, W_V, W_O)`` order (:func:`to_pytorch_index`)."""
    from torch import nn
    from torch.nn.attention import SDPBackend, sdpa_kernel

    L, d = inst.X.shape
    mha = nn.MultiheadAttention(d, inst.h, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([inst.W_Q.T, inst.W_K.T, inst.W_V.T]))
        mha.out_proj.weight.copy_(inst.W_O.T)
    ps = [mha.in_proj_weight, mha.out_proj.weight]
    mask = torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), 1) if causal else None
    with sdpa_kernel(SDPBackend.MATH):
        x = inst.X[None]
        out = mha(x, x, x, need_weights=False, attn_mask=mask)[0][0]
        g = torch.autograd.grad((out - inst.Target).pow(2).mean(), ps, create_graph=True)
        flat = torch.cat([t.reshape(-1) for t in g])
        E = torch.eye(flat.numel(), dtype=torch.float64)
        H = torch.cat([t.reshape(flat.numel(), -1) for t in
                       torch.autograd.grad(flat, ps, E, is_grads_batched=True)], 1)
    idx = to_pytorch_index(d)
    return H[idx][:, idx]


# ----------------------------------------------------------------------------- the softmax lemma
def softmax_d2(z, t, s):
    """``(∂²a/∂z²)[t, s]`` of ``a = softmax(z)`` (rows): ``a ∘ (w − ⟨a, w⟩)``, ``w = t̃ ∘ s̃``, ``t̃ = t − ⟨a, t⟩``."""
    a = torch.softmax(z, -1)
    tt = t - (a * t).sum(-1, keepdim=True)
    ss = s - (a * s).sum(-1, keepdim=True)
    w = tt * ss
    return a * (w - (a * w).sum(-1, keepdim=True))


def softmax_d2_ratio(z, t, s):
    """``‖t‖‖s‖ / ‖∂²a/∂z²[t, s]‖`` per row (the lemma says ≥ 1)."""
    return t.norm(dim=-1) * s.norm(dim=-1) / softmax_d2(z, t, s).norm(dim=-1)
