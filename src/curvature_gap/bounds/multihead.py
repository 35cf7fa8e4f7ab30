"""Theorem 1 for h heads with an output projection: exact quantities, instances and the adversarial search.

The layer of :func:`.formulas.theorem1_multihead`, bias-free multi-head attention as
``torch.nn.MultiheadAttention(d, h, bias=False)`` computes it, written in the theory's orientation:

    F = [A_1 X W_V^1, …, A_h X W_V^h] W_O,   A_c = softmax_rows(X W_Q^c W_K^cᵀ Xᵀ / √d_h),   d_h = d/h,

``W_Q, W_K, W_V, W_O ∈ R^{d×d}`` (head c: columns ``c d_h … (c+1) d_h − 1`` of W_Q, W_K, W_V, the same rows
of W_O), loss ``l = ‖F − Target‖_F² / (L d)``. The exact left-hand side is the spectral norm of the
Hessian of l w.r.t. ``(W_Q, W_K, W_V, W_O)`` (each ``vec_r``), from ``torch.func.hessian`` of
:func:`forward` in float64; :func:`pytorch_hessian` is the same Hessian by reverse-over-reverse autograd
of PyTorch's own module (MATH attention backend), the reference the exact quantity is checked against.

The search is the one the single-head repaired bound is put on trial with (:mod:`.adversarial`): Adam on
``log(bound/exact)`` over every entry of the instance (X, the four weights, Target), from seeded starts in
named regimes (:data:`STARTS`), each proposal re-evaluated by :func:`evaluate`, the best one recorded.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.func import hessian

from ..exact import linalg as la
from . import formulas
from .adversarial import descend

__all__ = ["MHInstance", "forward", "loss", "instance", "exact", "evaluate", "pytorch_hessian", "to_pytorch_index",
           "search", "run", "STARTS", "SEARCH", "QUICK_SEARCH", "softmax_d2_ratio", "softmax_d2_search",
           "search_extent", "softmax_d2", "BLOCKS"]

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


# Where a search starts (the single-head search's regimes, and the two rebalancings that leave F unchanged):
# scale factors of (W_Q, W_K, W_V, W_O) and whether Target = F.
STARTS = {
    "random": dict(),
    "value-dominated": dict(qk=0.25),          # scores / 16: attention near uniform
    "one-hot": dict(qk=8.0),                   # scores × 64: rows of A close to one-hot
    "minimiser": dict(fit=True),               # Target = F: loss 0 at the start
    "rebalanced": dict(q=8.0, k=1 / 8, v=8.0, o=1 / 8),   # W_Q W_Kᵀ and W_V W_O unchanged: F unchanged
}


def instance(L: int, d: int, h: int, seed: int, start: str = "random") -> MHInstance:
    """A seeded instance: X, Target ~ N(0, 1), weights ~ N(0, 1/d), then the regime ``start`` (:data:`STARTS`)."""
    if start not in STARTS:
        raise ValueError(f"unknown start {start!r}; choose one of {', '.join(STARTS)}")
    if d % h:
        raise ValueError(f"d = {d} is not divisible by h = {h}")
    g = torch.Generator().manual_seed(1_000_003 * int(seed) + 7_919 * L + 101 * d + h)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    X, T = r(L, d), r(L, d)
    WQ, WK, WV, WO = (r(d, d) / math.sqrt(d) for _ in range(4))
    st = STARTS[start]
    qk = st.get("qk", 1.0)
    WQ, WK = WQ * qk * st.get("q", 1.0), WK * qk * st.get("k", 1.0)
    WV, WO = WV * st.get("v", 1.0), WO * st.get("o", 1.0)
    if st.get("fit"):
        T = forward(X, WQ, WK, WV, WO, h)
    return MHInstance(X, WQ, WK, WV, WO, T, h, dict(L=L, d=d, h=h, seed=seed, start=start, source="start"))


def _hessian(X, WQ, WK, WV, WO, T, h, mask=None) -> torch.Tensor:
    d = X.shape[1]
    n = d * d

    def f(v):
        a, b, c, o = (v[i * n:(i + 1) * n].reshape(d, d) for i in range(4))
        return loss(X, a, b, c, o, T, h, mask)

    return hessian(f)(torch.cat([W.reshape(-1) for W in (WQ, WK, WV, WO)]))


def exact(X, WQ, WK, WV, WO, T, h, mask=None) -> dict:
    """The exact quantities (differentiable in every input): ``H`` (4d², 4d²), ``norm_H = ‖H‖_2``, the block
    norms ``H_ij = ‖H(W_i, W_j)‖_2`` for the pairs of :data:`.formulas.MH_PAIRS`, and the norms the bound
    reads (spectral norms of X, the weights and Target)."""
    d = X.shape[1]
    n = d * d
    H = _hessian(X, WQ, WK, WV, WO, T, h, mask)
    q = {"H": H, "norm_H": la.sym_abs_max(H)}
    for ij in formulas.MH_PAIRS:
        a, b = BLOCKS.index(ij[0]), BLOCKS.index(ij[1])
        q[f"H_{ij}"] = la.matrix_norms(H[a * n:(a + 1) * n, b * n:(b + 1) * n])
    for k, M in (("X", X), ("Q", WQ), ("K", WK), ("V", WV), ("O", WO), ("T", T)):
        q[f"norm_{k}"] = la.matrix_norms(M)
    return q


def _bound(q: dict, L: int, d: int, h: int) -> dict:
    f = lambda k: q[f"norm_{k}"]  # noqa: E731
    return formulas.theorem1_multihead(f("X"), f("Q"), f("K"), f("V"), f("O"), f("T"), L, d, h)


def evaluate(inst: MHInstance, mask=None) -> list[dict]:
    """Records ``{"check", "sub", "bound", "exact", "ratio"}`` at ``inst``: ``mh`` (the whole Hessian against
    M) and ``mh.blocks`` (each block against its row; sub = the pair), float64, no gradient."""
    with torch.no_grad():
        q = exact(*inst.tensors(), inst.h, mask)
    b = _bound(q, inst.L, inst.d, inst.h)
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


# ----------------------------------------------------------------------------- the search
# full: every regime of STARTS × L × h × seeds; quick (verify --quick, the pages): fewer, shorter
SEARCH = dict(L=(4, 8), d=4, h=(1, 2, 4), seeds=(0, 1), steps=80, lr=0.05)
QUICK_SEARCH = dict(L=(4,), d=4, h=(1, 2), seeds=(0,), steps=25, lr=0.05)
# the short sequences, searched too in the full run (one seed): L = 2, and L = 1, degenerate (A ≡ 1), reported apart
SHORT_SEARCH = dict(SEARCH, L=(1, 2), h=(1, 2), seeds=(0,))
# searched at an exact minimiser (Target = F kept at every step) in the full run, from one-hot attention
TIED_SEARCH = dict(SEARCH, L=(2, 4, 8), h=(1, 2), seeds=(0,), start="one-hot")


def search(L: int, d: int, h: int, seed: int, start: str, steps: int, lr: float = 0.05,
           tie_target: bool = False) -> tuple[MHInstance, float]:
    """One Adam run on ``log(M/‖H‖_2)`` over every entry of the instance from :func:`instance`; returns the
    instance with the smallest ratio seen, as :func:`evaluate` computes it (the differentiable ratio only
    proposes). ``tie_target``: ``Target = F`` at every step (an exact global minimiser, loss 0), the returned
    instance too."""
    base = instance(L, d, h, seed, start)
    params = [t.clone().requires_grad_(True) for t in base.tensors()[:5 if tie_target else 6]]

    def ratio():
        q = exact(*params, forward(*params, h), h) if tie_target else exact(*params, h)
        return _bound(q, L, d, h)["M"] / q["norm_H"]

    best, _ = descend(params, ratio, steps, lr)
    if tie_target:
        best = [*best, forward(*best, h)]
    inst = MHInstance(*best, h, dict(base.meta, source="adversarial", steps=steps, tied=tie_target))
    return inst, min(r["ratio"] for r in evaluate(inst) if r["check"] == "mh")


def search_extent(quick: bool) -> str:
    """How far the bound was searched, in words (stated on its row and page)."""
    def grid(s):
        return (f"L ∈ {{{', '.join(map(str, s['L']))}}} × h ∈ {{{', '.join(map(str, s['h']))}}} × {len(s['seeds'])} "
                f"seed{'s' if len(s['seeds']) > 1 else ''}")
    grids = [QUICK_SEARCH] if quick else [SEARCH, SHORT_SEARCH]
    n = sum(len(STARTS) * len(s["L"]) * len(s["h"]) * len(s["seeds"]) for s in grids)
    t = TIED_SEARCH
    tied = "" if quick else (f", and {len(t['L']) * len(t['h']) * len(t['seeds'])} kept at an exact minimiser (Target = "
                             f"F at every step, from {t['start']} attention, {grid(t)})")
    return (f"{n} Adam starts of {grids[0]['steps']} steps on log(bound/exact) ({', '.join(STARTS)} regimes × "
            f"({'; '.join(grid(s) for s in grids)}), d = {grids[0]['d']}), each start also evaluated as drawn{tied}")


def run(quick: bool = False, log: Callable[[str], None] | None = None) -> list[dict]:
    """Records of :func:`evaluate` at every start (as drawn, ``stage = "start"``) and at the best instance of
    its search (``stage = "searched"``); each record carries L, d, h, seed, start."""
    out = []
    runs = [(start, L, h, seed, s) for s in ([QUICK_SEARCH] if quick else [SEARCH, SHORT_SEARCH]) for start in STARTS
            for L in s["L"] for h in s["h"] for seed in s["seeds"]]
    if not quick:
        t = TIED_SEARCH
        runs += [(t["start"], L, h, seed, dict(t, tied=True)) for L in t["L"] for h in t["h"] for seed in t["seeds"]]
    for start, L, h, seed, s in runs:
        t0 = time.perf_counter()
        tied = s.get("tied", False)
        tag = dict(L=L, d=s["d"], h=h, seed=seed, start=start, minimiser=tied)
        if not tied:
            out += [dict(r, stage="start", **tag) for r in evaluate(instance(L, s["d"], h, seed, start))]
        inst, ratio = search(L, s["d"], h, seed, start, s["steps"], s["lr"], tie_target=tied)
        out += [dict(r, stage="searched", **tag) for r in evaluate(inst)]
        if log:
            log(f"  multi-head bound {start}, L={L}, h={h}, seed={seed}: ratio {ratio:.4g} "
                f"({time.perf_counter() - t0:.1f}s)")
    return out


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


def softmax_d2_search(n: int, steps: int, seed: int = 0) -> torch.Tensor:
    """Smallest ratio of :func:`softmax_d2_ratio` per row after Adam on its log, over ``n`` rows of lengths
    2 … 9 and logit scales 1 … 8 (float64, seeded); the ratio at the best point of each row."""
    g = torch.Generator().manual_seed(seed)
    best = []
    for i in range(n):
        m, scale = 2 + i % 8, 2.0 ** (i % 4)
        z, t, s = (torch.randn(m, generator=g, dtype=torch.float64) * c for c in (scale, 1.0, 1.0))
        ps = [x.clone().requires_grad_(True) for x in (z, t, s)]
        opt = torch.optim.Adam(ps, lr=0.05)
        lo = math.inf
        for _ in range(steps):
            r = softmax_d2_ratio(*ps)
            lo = min(lo, float(r.detach()))
            opt.zero_grad()
            torch.log(r).backward()
            opt.step()
        best.append(lo)
    return torch.tensor(best, dtype=torch.float64)
