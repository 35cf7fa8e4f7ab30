"""Problem instances: one sequence ``X``, one block's weights and an MSE target, in float64.

An :class:`Instance` holds ``X ∈ R^{L×d_V}``, ``W_Q, W_K ∈ R^{d_V×d_K}``, ``W_V ∈ R^{d_V×d_V}``,
``W_1 ∈ R^{d_V×d_ff}``, ``W_2 ∈ R^{d_ff×d_V}`` and a ``Target ∈ R^{L×d_V}`` (the MSE target of
Theorem 1, ``F = A(X) X W_V``, and of Theorem 6, the block output ``Z``). ``meta`` records how it
was made (seed, sweep, swept value, target choice) so that a saved counter-example can be replayed.

Random instances (:func:`random_instance`): ``X = σ·N(0,1)``, ``W_Q, W_K, W_V, W_1 ~ N(0, 1/d_V)``,
``W_2 ~ N(0, 1/d_ff)`` from one seeded generator, so that a sweep changes only the swept factor:

* ``sigma``      input scale σ (``X ← σ X``), as in Ormaniec et al.'s growth-rate sweeps;
* ``sharpness``  β: ``W_Q ← √β W_Q``, ``W_K ← √β W_K`` so that ``T = X W_Q W_Kᵀ Xᵀ/√d_K`` scales by β
                 (β = 0 is exactly uniform attention, with W_Q = W_K = 0);
* ``balance``    a: ``W_Q ← a W_Q``, ``W_K ← W_K / a`` (leaves ``T``, ``A`` and ``F`` unchanged);
* ``uniform``    exactly uniform attention with non-zero weights: ``"zero_query"`` sets ``W_Q = 0``;
                 ``"orthogonal"`` zeroes the second half of W_Q's columns and the first half of W_K's,
                 so that ``W_Q W_Kᵀ = 0`` while both stay non-zero (d_K ≥ 2);
* ``target``     ``"random"`` (``N(0,1)`` entries, named choice), ``"zero"``, ``"perturbed"`` (the
                 output of the same layer/block with every weight multiplied entrywise by
                 ``1 + 0.1 N(0,1)``) or ``"fit"`` (the layer's/block's own output: the loss is 0 there,
                 so the weights are an exact global minimiser, the paper's w*);
* ``away_from_kinks``  redraw (a new seed per attempt) until no ReLU pre-activation ``Y W_1`` lies
                 within 1e-4 of its kink and every LayerNorm input row has non-zero variance, so that
                 finite differences do not straddle a kink and Assumption 2 holds.

The closed-form checks use ``sharpness=2.25`` (attention far from uniform) and ``away_from_kinks``.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

import torch

from .forward import block_forward, sa_forward

__all__ = ["Instance", "random_instance", "refit", "from_block", "from_model", "TARGETS", "UNIFORM", "MNIST_SHAPE"]

TARGETS = ("random", "zero", "perturbed", "fit")
UNIFORM = (None, "zero_query", "orthogonal")
MNIST_SHAPE = (49, 16, 16, 64)   # L (tokens of a 28x28 image, patch 4), d_V = d_K = 16, d_ff = 64
_KEYS = ("X", "W_Q", "W_K", "W_V", "W_1", "W_2", "Target")


@dataclass
class Instance:
    """One sequence ``X`` (L × d_V), one block's weights and an MSE target; float64 tensors."""

    X: torch.Tensor
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_1: torch.Tensor
    W_2: torch.Tensor
    Target: torch.Tensor
    meta: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(L, d_V, d_K, d_ff)``."""
        return (*self.X.shape, self.W_Q.shape[1], self.W_1.shape[1])

    L, d_V, d_K, d_ff = (property(lambda self, i=i: self.shape[i]) for i in range(4))

    def shape_str(self) -> str:
        return "L={},dV={},dK={},dff={}".format(*self.shape)

    @property
    def weights(self) -> tuple:
        """``(W_Q, W_K, W_V, W_1, W_2)``."""
        return (self.W_Q, self.W_K, self.W_V, self.W_1, self.W_2)

    def n_values(self) -> int:
        return sum(getattr(self, k).numel() for k in _KEYS)

    def tensors(self) -> dict:
        return {k: getattr(self, k) for k in _KEYS}

    def to_json(self) -> dict:
        """Exact JSON form (Python floats round-trip float64 exactly)."""
        return {"shape": list(self.shape), "meta": self.meta,
                **{k: getattr(self, k).tolist() for k in _KEYS}}

    @classmethod
    def from_json(cls, d: dict) -> "Instance":
        L, d_V, d_K, d_ff = d["shape"]
        shapes = dict(X=(L, d_V), W_Q=(d_V, d_K), W_K=(d_V, d_K), W_V=(d_V, d_V), W_1=(d_V, d_ff), W_2=(d_ff, d_V),
                      Target=(L, d_V))
        return cls(**{k: torch.tensor(d[k], dtype=torch.float64).reshape(shapes[k]) for k in _KEYS},
                   meta=dict(d.get("meta", {})))


def _target(kind: str, inst: Instance, g: torch.Generator, scale: float, output: str) -> torch.Tensor:
    L, d_V = inst.L, inst.d_V
    if kind == "random":
        return scale * torch.randn(L, d_V, generator=g, dtype=torch.float64)
    if kind == "zero":
        return torch.zeros(L, d_V, dtype=torch.float64)
    if kind in ("perturbed", "fit"):
        w = {k: getattr(inst, k) for k in ("W_Q", "W_K", "W_V", "W_1", "W_2")}
        if kind == "perturbed":
            w = {k: v * (1 + 0.1 * torch.randn(v.shape, generator=g, dtype=torch.float64)) for k, v in w.items()}
        if output == "attention":
            return sa_forward(inst.X, w["W_Q"], w["W_K"], w["W_V"]).detach()
        return block_forward(inst.X, w["W_Q"], w["W_K"], w["W_V"], w["W_1"], w["W_2"])["Z"].detach()
    raise ValueError(f"unknown target {kind!r}; choose one of {TARGETS}")


def refit(inst: Instance, output: str) -> Instance:
    """``inst`` with ``Target`` recomputed as the ``output`` ("attention": F, "block": Z) of its own ``X`` and weights:
    an exact minimiser (loss 0) in this machine's arithmetic. A stored minimiser's Target is F as the machine that
    wrote it rounded it; another CPU rounds F in other last bits, and a residual of rounding size makes
    ``rank(F − Target)`` full instead of 0, which moves every bound that carries √rank."""
    return replace(inst, Target=_target("fit", inst, None, 1.0, output), meta=dict(inst.meta))


def _regular(inst: Instance) -> bool:
    """No ReLU pre-activation within 1e-4 of its kink and no zero-variance LayerNorm input row."""
    try:
        fw = block_forward(inst.X, *inst.weights)
    except ValueError:  # a zero-variance LayerNorm row (Assumption 2)
        return False
    for U in (fw["U"], fw["S"]):
        M = U - U.mean(dim=1, keepdim=True)
        std = M.pow(2).mean(dim=1).sqrt()
        if bool((std <= 64 * torch.finfo(U.dtype).eps * U.abs().amax(dim=1)).any()):
            return False
    return float(fw["Pre"].abs().min()) > 1e-4


def random_instance(L: int = 8, d_V: int = 8, d_K: int | None = None, d_ff: int | None = None,
                    seed: int = 0, sigma: float = 1.0, sharpness: float = 1.0, balance: float = 1.0,
                    uniform: str | None = None, target: str = "random", target_scale: float = 1.0,
                    target_output: str = "block", away_from_kinks: bool = False, **meta) -> Instance:
    """A seeded random instance (see module doc); ``d_K = d_V`` and ``d_ff = 4 d_V`` by default."""
    d_K = d_V if d_K is None else d_K
    d_ff = 4 * d_V if d_ff is None else d_ff
    if uniform not in UNIFORM:
        raise ValueError(f"unknown uniform={uniform!r}; choose one of {UNIFORM}")
    if uniform == "orthogonal" and d_K < 2:
        raise ValueError("uniform='orthogonal' needs d_K >= 2 (W_Q and W_K use disjoint columns)")
    for attempt in range(100 if away_from_kinks else 1):
        g = torch.Generator().manual_seed(1_000_003 * int(seed) + 7919 * attempt + 17)
        r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
        X = r(L, d_V)
        W_Q, W_K, W_V = r(d_V, d_K) / math.sqrt(d_V), r(d_V, d_K) / math.sqrt(d_V), r(d_V, d_V) / math.sqrt(d_V)
        W_1, W_2 = r(d_V, d_ff) / math.sqrt(d_V), r(d_ff, d_V) / math.sqrt(d_ff)
        if uniform == "zero_query":
            W_Q = torch.zeros_like(W_Q)
        elif uniform == "orthogonal":
            W_Q[:, d_K // 2:] = 0.0
            W_K[:, :d_K // 2] = 0.0
        sq = math.sqrt(sharpness)
        inst = Instance(sigma * X, sq * balance * W_Q, sq / balance * W_K, W_V, W_1, W_2,
                        torch.zeros(L, d_V, dtype=torch.float64))
        inst.Target = _target(target, inst, g, target_scale, target_output)
        inst.meta = dict(source="random", seed=int(seed), sigma=float(sigma), sharpness=float(sharpness),
                         balance=float(balance), uniform=uniform, target=target, target_scale=float(target_scale),
                         **({"attempt": attempt} if attempt else {}), **meta)
        if not away_from_kinks or _regular(inst):
            return inst
    raise RuntimeError("could not draw an instance away from the ReLU kinks in 100 attempts")


def from_block(block, X: torch.Tensor, target: str = "perturbed", seed: int = 0, **meta) -> Instance:
    """An instance from a trained :class:`curvature_gap.model.Block` and tokens ``X`` (L × d_V).

    The theorems' block has no FFN biases and LayerNorms with ``γ = 1, β = 0`` (paper §3.2); the
    block's five weight matrices are taken as they are and its biases and affine LayerNorm
    parameters are left out (a named choice, recorded in ``meta``).
    """
    f = lambda t: t.detach().to(torch.float64).clone()  # noqa: E731
    inst = Instance(f(X), f(block.query), f(block.key), f(block.value), f(block.ffn1["weight"]),
                    f(block.ffn2["weight"]), torch.zeros_like(f(X)))
    g = torch.Generator().manual_seed(1_000_003 * int(seed) + 29)
    inst.Target = _target(target, inst, g, 1.0, "block")
    inst.meta = dict(source="model-block", seed=int(seed), target=target,
                     dropped="FFN biases, LayerNorm gamma/beta (theory block)", **meta)
    return inst


def from_model(model, images: torch.Tensor, /, target: str = "perturbed", **meta) -> list[Instance]:
    """One instance per image: :func:`from_block` of the model's first block at that image's tokens
    (``model.tokens`` in float64 on a copy of the model; seed and ``sample`` = the image's index)."""
    m = copy.deepcopy(model).double().cpu()
    with torch.no_grad():
        X = m.tokens(images.double().cpu())
    return [from_block(m.blocks[0], X[i], target=target, seed=i, sample=i, **meta) for i in range(len(X))]
