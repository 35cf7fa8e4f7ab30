"""The Hessian of ``torch.nn.TransformerEncoderLayer`` under PyTorch's own argument names, on one sequence.

Beyond the paper: the paper's block (Theorem 5, :mod:`.block`) is one post-norm, single-head ReLU layer without
``W_O``, biases or LayerNorm affine parameters; PyTorch's layer adds heads, ``W_O``, biases, the LayerNorm's ``γ, β``
and ``ε``, GELU, the pre-norm order and a causal mask (``tests/theory/test_theory_encoder_layer.py`` builds the
paper's block and the authors' as points of this family and checks Theorem 5 on it). The Hessian is the engine's
(:mod:`curvature_gap.hessian.layers`: the layer read as a program of the op rules of :mod:`curvature_gap.hessian.ops`,
no autograd); :func:`encoder_layer_hessian` takes ``src_mask`` and ``is_causal`` as the layer's forward does,
:func:`curvature_gap.layer_hessian` batches, blocks by name and the layers of timm and Hugging Face. Parameters in
``layer.named_parameters()`` order, each flattened row-major; the loss the paper's MSE
``l = (1/(L d)) ||Z - Target||_F²`` or any ``l`` given by ``∂l/∂Z`` and ``∂²l/∂Z²``.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["encoder_layer_hessian"]


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
