"""The operation rules of the Hessian engine, one class per operation, one file of first- and second-order rules
each (the layout of BackPACK's ``core/derivatives``). :mod:`curvature_gap.hessian.program` walks programs of them:
the paper's ViT and the authors' (:mod:`.._vit`), the layers of PyTorch, timm and Hugging Face
(:mod:`..layers`) and whole timm and Hugging Face models (:mod:`..models`).

* :mod:`.linear`     — ``C = X W + b`` (W stored (in, out)) or ``X Wᵀ + b`` (``nn.Linear``, a conv's patches);
* :mod:`.layernorm`  — ``γ ∘ (u − μ) r + β``, ``r = (σ² + ε)^{-1/2}``, with or without γ, β;
* :mod:`.activation` — ReLU, GELU (erf and tanh forms), tanh;
* :mod:`.attention`  — multi-head softmax attention ``softmax(s q kᵀ + M) v``, heads as a reshape into the
  sample axis, a mask M as a constant added to the scores;
* :mod:`.tokens`     — residual sums, LayerScale, learned positions and class tokens, token pooling, embedding
  lookups, patches;
* :mod:`.loss`       — the batch-mean cross-entropy, the mean squared error, a loss given by its derivatives.

Every op answers one protocol, :class:`Op`, in the layout of :mod:`.layout` (tokens (B, n, k), tangents
(B, n, c, k)). Each is tested in float64 against reverse-over-reverse autograd and finite differences by one
harness (:func:`curvature_gap.exact.ops.op_errors`, ``tests/hessian/test_hessian_ops.py``).
"""
from __future__ import annotations

import torch

__all__ = ["Op"]


class Op:
    """One operation ``y = f(x_1, …, x_k; θ)``: its value and its first- and second-order rules.

    For a loss L with the adjoint ``δy = ∂L/∂y`` of one backward pass and ``c`` tangent directions: ``p`` maps the
    op's parameter slots to their values, ``dp`` to their tangents (c, *shape) or None (zero), ``need`` says per
    differentiable input whether its adjoint (or its tangent) is asked for (None where not):

    * ``forward(xs, p) -> (y, ctx)``: the value and a context dict for the rules (tensors with the batch axis
      first, except the keys in ``unbatched``);
    * ``vjp(ctx, p, d_y, need) -> [δx_i]``: ``δx_i = (∂y/∂x_i)ᵀ δy``; stores in ctx what the backward tangent reads;
    * ``jvp(ctx, p, dxs, dp, c) -> (ẏ, t)``: ``ẏ = Σ_i ∂y/∂x_i ẋ_i + ∂y/∂θ θ̇`` and the tangents ``t`` (a dict) the
      backward tangent reads;
    * ``vjp_tangent(ctx, p, t, dd_y, dp, c, need) -> [δẋ_i]``: the tangent of the adjoints (forward over reverse),
      ``δẋ_i = (∂y/∂x_i)ᵀ δẏ + (δy · ∂²y/∂x_i ∂(x, θ))[ẋ, θ̇]``; ``t`` is empty where no tangent reached the op;
    * ``rows(ctx, p, t, dd_y, dp, c, slots, per_sample) -> {slot: rows}``: the Hessian rows of the parameters in
      ``slots``, the tangent of their gradient, (c, *shape) or each sample's (B, c, *shape);
    * ``grads(ctx, p, slots) -> {slot: ∂L/∂θ}``.

    ``n_in``: the differentiable inputs (None: all); further inputs are data, read by ``forward`` only. The
    defaults below are the rules of a constant (no derivative reaches or leaves the op).
    """

    slots: tuple[str, ...] = ()
    n_in: int | None = None
    unbatched: tuple[str, ...] = ()

    def cut(self, ctx: dict, sl: slice) -> dict:
        """The context of the samples ``sl`` (a sample chunk of the loss, a sum over samples)."""
        return {k: (v[sl] if torch.is_tensor(v) and k not in self.unbatched else v) for k, v in ctx.items()}

    def vjp(self, ctx, p, d_y, need) -> list:
        return [None] * len(need)

    def jvp(self, ctx, p, dxs, dp, c):
        return None, {}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need) -> list:
        return [None] * len(need)

    def rows(self, ctx, p, t, dd_y, dp, c, slots, per_sample=False) -> dict:
        return {}

    def grads(self, ctx, p, slots) -> dict:
        return {}

    def describe(self) -> str:
        """The op as a table cell: its class and its settings that are numbers, names or flags (a mask: "masked")."""
        public = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        kw = [f"{k}={v!r}" for k, v in public.items() if isinstance(v, (bool, int, float, str))]
        kw += [f"{k}=..." for k, v in public.items() if torch.is_tensor(v)]
        return f"{type(self).__name__}({', '.join(kw)})"
