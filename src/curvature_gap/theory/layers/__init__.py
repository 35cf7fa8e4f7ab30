"""Exact loss Hessians of the Transformer layers people train, through one call: :func:`layer_hessian`.

Beyond the paper. :func:`curvature_gap.theory.encoder_layer_hessian` derives the Hessian of
``torch.nn.TransformerEncoderLayer`` as a chain of closed-form primitives; the same assembly (``H = J_Zᵀ
(∂²l/∂Z²) J_Z + Σ_k J_{in(k)}ᵀ (v̄_k · ∂²f_k) J_{in(k)}``, one parameter's columns per pass, nothing from
autograd) covers any layer written with those primitives. :mod:`.adapters` reads four classes as such
chains from the modules themselves: PyTorch's encoder layer, timm's ViT ``Block`` and Hugging Face's
``ViTLayer`` and ``BertLayer`` (their differences: fused or separate Q/K/V, LayerScale, pre- or post-norm,
where the residuals join; :mod:`.primitives` adds LayerScale's ``x ∘ γ`` and the Q/K/V packing).

On a batch X (N, L, d) of N sequences (one (L, d) sequence: N = 1) the loss is one function of all
outputs: the MSE ``l = (1/(N L d)) Σ ||Z_n − Target_n||_F²`` (``nn.MSELoss()`` of the batch) or any ``l``
given by ``∂l/∂Z`` and ``∂²l/∂Z²`` over the stacked rows (N L, d). The sequences are pushed through together:
the attention core keeps them apart (:func:`curvature_gap.theory.multihead.forward` with ``n``), every other
primitive is row-wise.

:func:`layer_hessian` returns the dense Hessian in ``named_parameters()`` order or only the blocks asked
for by name (a ViT-Tiny layer has ≈ 445k parameters: its dense Hessian, 1.6 TB in float64, does not fit);
:func:`layer_hvp` returns Hessian-vector products ``H v`` (one pass for all parameters at once).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .. import multihead as mh
from ..encoder_layer import LayerHessian, program_hessian, program_hvp
from .adapters import SUPPORTED, Layer, adapt

__all__ = ["layer_hessian", "layer_hvp", "describe", "attention_mask", "LayerHessian", "SUPPORTED", "adapters",
           "primitives"]


def _batch_first(layer: nn.Module) -> bool:
    return layer.self_attn.batch_first if type(layer) is nn.TransformerEncoderLayer else True


def _first_param(layer: nn.Module) -> torch.Tensor:
    p = next(layer.parameters(), None)
    if p is None:
        raise ValueError(f"{type(layer).__name__} has no parameters: nothing to differentiate")
    return p


def attention_mask(N: int, L: int, attn_mask=None, key_padding_mask=None, is_causal: bool = False,
                   ref: torch.Tensor | None = None) -> torch.Tensor | None:
    """The additive attention mask of :func:`layer_hessian`: (L, L) shared, (N, L, L) per sequence, or None.

    ``attn_mask`` (L, L) or (N, L, L) as ``nn.MultiheadAttention`` reads it (bool: True where a query may *not*
    attend; float: added to the scores); ``key_padding_mask`` (N, L) bool, True at padded keys; ``is_causal``
    adds the causal mask. Each is added to the others. ValueError on a wrong shape or dtype, or a query row
    with every key masked (its softmax is undefined).
    """
    ref = torch.zeros((), dtype=torch.float64) if ref is None else ref
    parts = []
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            parts.append(mh.additive_mask(L, attn_mask, False, ref))
        elif attn_mask.dim() == 3 and tuple(attn_mask.shape) == (N, L, L):
            if attn_mask.dtype == torch.bool:
                parts.append(torch.zeros(N, L, L, dtype=ref.dtype, device=ref.device).masked_fill(attn_mask, float("-inf")))
            elif attn_mask.is_floating_point():
                parts.append(attn_mask.to(dtype=ref.dtype, device=ref.device))
            else:
                raise ValueError(f"attn_mask of dtype {attn_mask.dtype} is not supported: pass a bool or a float mask")
        else:
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} is not supported: (L, L) = ({L}, {L}) "
                             f"shared by every sequence and head, or (N, L, L) = ({N}, {L}, {L}) one per sequence")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, L) or key_padding_mask.dtype != torch.bool:
            raise ValueError(f"key_padding_mask must be bool (N, L) = ({N}, {L}), True at padded keys; got "
                             f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
        kp = torch.zeros(N, L, dtype=ref.dtype, device=ref.device).masked_fill(key_padding_mask.to(ref.device),
                                                                              float("-inf"))
        parts.append(kp[:, None, :].expand(N, L, L))
    if is_causal:
        parts.append(mh.causal_mask(L, ref))
    if not parts:
        return None
    M = parts[0]
    for p in parts[1:]:
        M = M + p
    if bool(torch.isneginf(M).all(dim=-1).any()):
        raise ValueError("the attention mask masks every key of some query row: the softmax of that row is undefined")
    return M


def _prepare(layer, X, target, attn_mask, key_padding_mask, is_causal):
    """``(program, rows of X (N L, d), rows of target or None, N, L, to_layout)``: X (L, d) or a batch (N, L, d)
    ((L, N, d) for a sequence-first PyTorch layer); ``to_layout`` maps rows back to X's layout."""
    if not isinstance(layer, nn.Module):
        raise ValueError(f"layer must be a torch.nn.Module, not {type(layer).__name__}")
    w = _first_param(layer)
    if not isinstance(X, torch.Tensor) or not X.is_floating_point() or X.dtype != w.dtype or X.device != w.device:
        raise ValueError(f"X must be a floating tensor with the dtype and device of the layer ({w.dtype}, {w.device})")
    bf = _batch_first(layer)
    if X.dim() == 2:
        Xb = X[None]
    elif X.dim() == 3:
        Xb = X if bf else X.transpose(0, 1)
    else:
        raise ValueError(f"X of shape {tuple(X.shape)}: expected (L, d) or (N, L, d)" + ("" if bf else " ((L, N, d): batch_first=False)"))
    N, L, d = Xb.shape
    M = attention_mask(N, L, attn_mask, key_padding_mask, is_causal, X)
    ad = adapt(layer, M, N)
    if d != ad.d:
        raise ValueError(f"X has width {d}; {type(layer).__name__} expects {ad.d}")
    T = None
    if target is not None:
        if tuple(target.shape) != tuple(X.shape):
            raise ValueError(f"target of shape {tuple(target.shape)} must have the shape of X (the layer's output), {tuple(X.shape)}")
        Tb = target[None] if X.dim() == 2 else (target if bf else target.transpose(0, 1))
        T = Tb.reshape(N * L, d)

    def to_layout(Z):
        Zb = Z.reshape(N, L, d)
        return Zb[0] if X.dim() == 2 else (Zb if bf else Zb.transpose(0, 1))

    return ad, Xb.reshape(N * L, d), T, N, L, to_layout


def layer_hessian(layer: nn.Module, X: torch.Tensor, loss="mse", target: torch.Tensor | None = None, blocks=None,
                  attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
                  is_causal: bool = False, chunk: int | None = 128) -> LayerHessian:
    """Exact Hessian of ``l(layer(X))`` with respect to ``layer.named_parameters()``, in closed form.

    ``layer``: ``torch.nn.TransformerEncoderLayer``, timm's ``vision_transformer.Block`` or Hugging Face's
    ``ViTLayer`` / ``BertLayer`` (exactly these classes; eval mode or no dropout; :data:`SUPPORTED` lists what
    each supports). ``X``: one sequence (L, d) or a batch (N, L, d) ((L, N, d) for a PyTorch layer with
    ``batch_first=False``), the dtype and device of the layer. ``loss="mse"`` with ``target`` of X's shape:
    ``l = mean((layer(X) − target)²)`` over all N L d entries; or ``loss=(dl_dZ, d2l_dZ2)``, tensors or
    callables of the stacked output rows Z (N L, d): ``∂l/∂Z`` (N L, d) and ``∂²l/∂Z²`` (N L d, N L d).
    ``blocks``: None (the dense (P, P) Hessian, ``.dense``) or parameter names (every block among them) or
    ``(name_a, name_b)`` pairs (just those): ``.blocks[(a, b)]`` is the (n_a, n_b) block, each parameter
    ``vec_r``-flattened (row-major, as ``p.reshape(-1)``). ``attn_mask``, ``key_padding_mask``, ``is_causal``:
    :func:`attention_mask`. ``chunk``: directions per pass (memory).

    Also returns ``.gradient`` (P,), ``.Z`` (the layer's output, X's layout) and ``.loss`` (MSE). Raises
    ``ValueError`` naming what is not supported (another class, qk-norm, a gated or GLU MLP, an activation
    without derived second derivative, dropout in training mode, a mask it cannot express).
    """
    ad, Xr, T, N, L, to_layout = _prepare(layer, X, target, attn_mask, key_padding_mask, is_causal)
    res = program_hessian(ad.nodes, dict(layer.named_parameters()), Xr, loss, T, ad.heads, chunk, blocks)
    return dataclasses.replace(res, Z=to_layout(res.Z))


def layer_hvp(layer: nn.Module, X: torch.Tensor, v: dict, loss="mse", target: torch.Tensor | None = None,
              attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
              is_causal: bool = False) -> dict:
    """Hessian-vector product ``H v`` of :func:`layer_hessian`'s loss, without forming H: ``v`` maps parameter
    names to directions of the parameters' shapes (or (B, *shape) for B directions at once; a name left out is
    a zero direction); returns ``{name: (H v)[name]}`` for every parameter, in ``named_parameters()`` order."""
    ad, Xr, T, N, L, _ = _prepare(layer, X, target, attn_mask, key_padding_mask, is_causal)
    return program_hvp(ad.nodes, dict(layer.named_parameters()), Xr, v, loss, T)


def describe(layer: nn.Module) -> list[dict]:
    """What :func:`layer_hessian` reads from ``layer``: its primitives in forward order, each as
    ``{"submodule", "primitive", "inputs", "output", "parameters"}`` (ValueError if the layer is not supported)."""
    ad = adapt(layer, None, 1)
    return [dict(submodule=n.name, primitive=type(n.op).__name__ + (f"({n.op.name})" if hasattr(n.op, "name") else ""),
                 inputs=list(n.ins), output=n.out, parameters=list(n.params.values())) for n in ad.nodes]

