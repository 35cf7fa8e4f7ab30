"""First- and second-order rules of the operations the ViT is made of, one module per operation (the layout
of BackPACK's ``core/derivatives``): what :class:`curvature_gap.hessian._vit.ViTSecondOrder` composes, in the
order the model's :class:`~curvature_gap.config.ModelConfig` names.

* :mod:`.linear`        — ``C = X W [+ b]``: forward tangent, adjoint, adjoint tangent, Hessian rows of W, b;
* :mod:`.layernorm`     — ``n̂ = (u − μ) r``, ``r = (σ² + ε)^{-1/2}`` and its affine map ``γ n̂ + β``;
* :mod:`.attention`     — the attention softmax ``A = softmax(q kᵀ / √d_K)`` and the mixing ``A x``;
* :mod:`.activation`    — elementwise ReLU and exact-erf GELU;
* :mod:`.cross_entropy` — the batch-mean cross-entropy on logits.

Every op has the same vocabulary. For an op ``a = f(b; θ)`` with primal values from one forward pass and
adjoints ``δa = ∂L/∂a`` from one backward pass:

* ``jvp``: the forward tangent ``ȧ = f'(b)[ḃ] + ∂_θ f[θ̇]``;
* ``vjp``: the adjoint ``δb = f'(b)ᵀ δa``;
* ``vjp_tangent``: the tangent of the adjoint, ``δḃ = f'(b)ᵀ δȧ + (f''(b)[ḃ])ᵀ δa + (∂_θ f'(b)[θ̇])ᵀ δa``
  (forward-over-reverse, the Hessian-vector product's backward half);
* ``rows``: the Hessian rows of the op's own parameters, the tangent of its gradient.

Layouts. Primal activations are token tensors (B, n, k); tangents carry ``c`` directions in the layout
(B, n, c, k), so a product with a shared matrix is one GEMM; attention tangents use (B, c, n, n).
``None`` stands for a zero tangent (a direction that has not reached the op yet) and is propagated
without arithmetic. Each module is tested in float64 against reverse-over-reverse autograd and finite
differences (``tests/hessian/test_hessian_ops.py``).
"""
from . import activation, attention, cross_entropy, layernorm, linear
from .linear import add

__all__ = ["activation", "attention", "cross_entropy", "layernorm", "linear", "add"]
