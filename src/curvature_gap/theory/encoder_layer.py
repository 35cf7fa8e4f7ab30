"""``torch.nn.TransformerEncoderLayer`` as the theory meets it: the paper's block and the authors' as points of
PyTorch's family, and the family's Hessian under PyTorch's own argument names.

Beyond the paper: the paper's block (Theorem 5, :mod:`.block`) is one post-norm, single-head ReLU layer without
``W_O``, biases or LayerNorm affine parameters. PyTorch's layer adds heads, ``W_O``, biases, the LayerNorm's
``γ, β`` and ``ε``, GELU, the pre-norm order and a causal mask. On one sequence X (L, d):

    post-norm:  U_1 = X + SA(X),       Y = LN_1(U_1),  U_2 = Y + FFN(Y),  Z = LN_2(U_2)
    pre-norm:   U_1 = X + SA(LN_1(X)),                 Z = U_1 + FFN(LN_2(U_1))
    SA(A) = O W_Oᵀ + b_O,  O = multi-head attention of [Q, K, V] = A W_inᵀ + b_in
    FFN(Y) = act(Y W_1ᵀ + b_1) W_2ᵀ + b_2,  act ∈ {ReLU, GELU (erf), GELU (tanh)}
    LN(U) = γ ∘ (U - μ)/√(σ² + ε) + β   (row mean μ, population variance σ²)

(``W`` in PyTorch's (out, in) orientation; ``x Wᵀ`` as ``nn.Linear`` computes it.)

**The assembly.** The layer is a chain of primitives ``v_k = f_k(v_{parents}, θ_k)`` ending in ``Z``, with adjoints
``v̄_k = ∂l/∂v_k``; the Hessian of ``l(Z(θ))`` is the Gauss–Newton decomposition summed over primitives,

    H = J_Zᵀ (∂²l/∂Z²) J_Z + Σ_k J_{in(k)}ᵀ (v̄_k · ∂²f_k) J_{in(k)},

where ``J_{in(k)}`` stacks the Jacobians of the inputs of ``f_k`` (and of ``θ_k``) with respect to θ and
``v̄_k · ∂²f_k`` is the primitive's second derivative contracted with its adjoint. The engine evaluates it a
column block at a time (:mod:`curvature_gap.hessian.program`: forward tangents, then the tangents of the adjoints,
each primitive's rules from :mod:`curvature_gap.hessian.ops`), reading the layer as such a chain
(:mod:`curvature_gap.hessian.layers`); nothing calls ``torch.autograd`` or ``torch.func``, and no Kronecker product
is formed. :func:`encoder_layer_hessian` is that Hessian under the layer's own argument names (``src_mask``,
``is_causal``), on one sequence; :func:`curvature_gap.layer_hessian` takes batches, blocks by name and the layers of
timm and Hugging Face.

Parameters are those of ``layer.named_parameters()``, in that order, each flattened row-major (``vec_r``); absent
ones (``bias=False``, a removed FFN bias, ``elementwise_affine=False``) are simply not there. The loss is the
paper's MSE ``l = (1/(L d)) ||Z - Target||_F²`` (``nn.MSELoss()``) or any ``l`` given by ``∂l/∂Z`` and ``∂²l/∂Z²``.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["encoder_layer_hessian", "AUTHORS_BLOCK", "authors_block", "PAPER_BLOCK", "paper_block", "paper_index"]


def _sequence(layer: nn.TransformerEncoderLayer, X: torch.Tensor) -> torch.Tensor:
    """X as one sequence (L, d): (L, d), (1, L, d), or (L, 1, d) for a sequence-first layer."""
    bf = layer.self_attn.batch_first
    if X.dim() == 3:
        if bf and X.shape[0] == 1:
            X = X[0]
        elif not bf and X.shape[1] == 1:
            X = X[:, 0]
        else:
            want = "(1, L, d)" if bf else "(L, 1, d) (batch_first=False)"
            raise ValueError(f"X of shape {tuple(X.shape)}: only one sequence is supported, X (L, d) or {want}")
    return X


def encoder_layer_hessian(layer: nn.TransformerEncoderLayer, X: torch.Tensor, loss="mse",
                          target: torch.Tensor | None = None, src_mask: torch.Tensor | None = None,
                          is_causal: bool = False, src_key_padding_mask=None, chunk: int | None = 128):
    """Closed-form Hessian of ``l(layer(X))`` with respect to ``layer.named_parameters()`` (module doc), a
    :class:`curvature_gap.hessian.layers.LayerHessian`.

    ``X`` (L, d) (or (1, L, d); (L, 1, d) when ``batch_first=False``); ``loss="mse"`` with ``target`` (L, d):
    ``l = (1/(L d))||Z - target||_F²``; or ``loss=(dl_dZ, d2l_dZ2)``, each a tensor or a callable of Z, giving
    ``∂l/∂Z`` (L, d) and ``∂²l/∂Z²`` (L d, L d) (row-major ``vec_r`` of Z). ``src_mask``, ``is_causal`` as in the
    layer's forward (``is_causal=True`` alone means the causal mask; with a ``src_mask`` that must be the causal
    mask, which PyTorch would use). ``chunk``: directions per pass. Raises ``ValueError`` for what has no rules
    (dropout in training, a custom activation, a key padding mask, several sequences, ...), naming it.
    """
    from ..hessian.layers import attention_mask, layer_hessian  # the engine; this module keeps the theory's names

    if src_key_padding_mask is not None:
        raise ValueError("src_key_padding_mask is not supported (one unpadded sequence); use src_mask (L, L) to "
                         "mask keys instead, or curvature_gap.layer_hessian(key_padding_mask=...) for a batch")
    if type(layer) is not nn.TransformerEncoderLayer:
        raise ValueError(f"{type(layer).__name__} is not supported: pass a torch.nn.TransformerEncoderLayer itself "
                         "(a subclass may change forward)")
    X = _sequence(layer, X)
    L = X.shape[0]
    if is_causal and src_mask is not None:
        causal = attention_mask(1, L, is_causal=True, ref=X)
        if not torch.equal(attention_mask(1, L, attn_mask=src_mask, ref=X), causal):
            raise ValueError("is_causal=True with a src_mask that is not the causal mask: PyTorch would use the "
                             "causal mask and ignore src_mask; pass src_mask=None or the causal mask")
        src_mask = None
    if src_mask is not None and tuple(src_mask.shape) != (L, L):
        raise ValueError(f"src_mask of shape {tuple(src_mask.shape)} is not supported: only one (L, L) = ({L}, {L}) "
                         "mask shared by every head")
    if target is not None:
        target = target.reshape(X.shape) if target.numel() == X.numel() else target
    return layer_hessian(layer, X, loss, target, attn_mask=src_mask, is_causal=is_causal, chunk=chunk)


# ====================================================================== named points of the family
AUTHORS_BLOCK = dict(nhead=1, norm_first=False, activation="gelu", bias=True, ffn_bias=False, layer_norm_eps=1e-5,
                     dropout=0.0, batch_first=True)
"""The block of the authors' experiments: one head, ``W_O`` with bias, Q/K/V biases, GELU, an FFN *without*
biases, post-norm ``nn.LayerNorm`` (γ, β) with ε = 1e-5. ``ffn_bias=False`` is represented by removing
``linear1.bias`` and ``linear2.bias`` (set to None: they are not parameters, not in the Hessian)."""

PAPER_BLOCK = dict(nhead=1, norm_first=False, activation="relu", bias=False, layer_norm_eps=0.0, dropout=0.0,
                   batch_first=True)
"""The paper's block (Theorem 5) as a layer: one head, ReLU, post-norm, no biases and LayerNorm without ε,
with ``out_proj.weight = I`` (no W_O) and ``γ = 1`` (:func:`paper_block`)."""


def authors_block(d_model: int, dim_feedforward: int, dtype=torch.float64, device=None) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` configured as :data:`AUTHORS_BLOCK` (PyTorch's initialisation)."""
    cfg = {k: v for k, v in AUTHORS_BLOCK.items() if k != "ffn_bias"}
    layer = nn.TransformerEncoderLayer(d_model, dim_feedforward=dim_feedforward, dtype=dtype, device=device, **cfg)
    layer.linear1.bias = None
    layer.linear2.bias = None
    return layer


def paper_block(W_Q, W_K, W_V, W_1, W_2) -> nn.TransformerEncoderLayer:
    """The paper's block ``Z = LN(ReLU(Y W_1) W_2 + Y)``, ``Y = LN(X + softmax(X W_Q W_Kᵀ Xᵀ/√d) X W_V)`` as an
    ``nn.TransformerEncoderLayer`` (:data:`PAPER_BLOCK`); the weights in the theory's orientation
    (``X W``, :mod:`.block`): W_Q, W_K, W_V (d, d), W_1 (d, d_ff), W_2 (d_ff, d). Its parameters are
    in_proj_weight = [W_Qᵀ; W_Kᵀ; W_Vᵀ], out_proj.weight = I, linear1.weight = W_1ᵀ, linear2.weight = W_2ᵀ,
    norm1.weight = norm2.weight = 1."""
    d, d_ff = W_1.shape
    if W_Q.shape != (d, d):
        raise ValueError("nn.TransformerEncoderLayer has d_K = d_model / nhead = d_model for one head: W_Q (d, d)")
    layer = nn.TransformerEncoderLayer(d, dim_feedforward=d_ff, dtype=W_1.dtype, device=W_1.device, **PAPER_BLOCK)
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T], dim=0))
        layer.self_attn.out_proj.weight.copy_(torch.eye(d, dtype=W_1.dtype, device=W_1.device))
        layer.linear1.weight.copy_(W_1.T)
        layer.linear2.weight.copy_(W_2.T)
        layer.norm1.weight.fill_(1.0)
        layer.norm2.weight.fill_(1.0)
    return layer


def paper_index(res, d_model: int, d_ff: int) -> torch.Tensor:
    """Positions in ``res.dense`` of the theory's weights in :data:`.block.BLOCK_PARAMS` order ("1", "2", "K",
    "Q", "V"), each ``vec_r`` in the theory's orientation: ``H_theory = dense[idx][:, idx]``.

    A theory matrix ``W = W_nnᵀ`` (in, out) whose ``W_nn`` (out, in) starts at row ``r0`` of a parameter at
    offset ``o``: entry ``W[a, b]`` is ``o + (r0 + b)·in + a``. Rows 0, d, 2d of in_proj_weight hold W_Qᵀ,
    W_Kᵀ, W_Vᵀ.
    """
    off, d = res.offsets(), d_model

    def pos(name, r0, n_in, n_out):
        a = torch.arange(n_in).repeat_interleave(n_out)
        b = torch.arange(n_out).repeat(n_in)
        return off[name] + (r0 + b) * n_in + a

    ip = "self_attn.in_proj_weight"
    return torch.cat([pos("linear1.weight", 0, d, d_ff), pos("linear2.weight", 0, d_ff, d),
                      pos(ip, d, d, d), pos(ip, 0, d, d), pos(ip, 2 * d, d, d)])
