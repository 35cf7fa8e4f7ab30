"""Exact loss Hessians of the paper's ViT (Figs. 3–5) and block spectra.

The loss is the empirical risk ``L(w) = (1/B) Σ_n ℓ(model(x_n; w), y_n)`` on one batch (cross-entropy, batch mean, as
``nn.CrossEntropyLoss()``). Parameters are the flat vector ``parameters_to_vector(model.parameters())`` (P entries),
grouped by :func:`curvature_gap.param_groups` (``pos`` if learned, ``embed``, ``block0.query`` … ``block0.ln2``,
``head``; a bias stored beside its weight is in the weight's group, e.g. ``block0.out`` = (W_O, b_O)).

Entry points

* :func:`hessian` — the dense (P, P) Hessian, or blocks ``H[row, col]`` by group names;
* :func:`hessian_block` — one block ``H[row, col]`` of shape (|row|, |col|);
* :mod:`.spectra` — top eigenvalues and spectral norms per block via Lanczos on Hessian-vector
  products (any model size, CPU or GPU);

Methods (all exact; they differ in cost only)

* ``"vit"`` — the engine's forward-over-reverse passes (:mod:`.program`, the op rules of :mod:`.ops`) over the program
  of :class:`curvature_gap.model.ViT` with cross-entropy, block-triangular, with the exact speed shortcuts of
  :mod:`._vit` (the last FFN block in closed form, the scores' bilinear form, the embedding from the positions' pass).
* ``"functorch"`` — the same block-triangular scheme with ``torch.func`` ``vmap(jvp(grad))`` for
  any ``nn.Module`` and loss.
* ``"curvlinops"`` — ``curvlinops.HessianLinearOperator @ I`` in column chunks (the paper's tool).
* ``"torch.func"`` — ``torch.func.hessian`` in one shot (runs out of memory at paper scale).

Variants: each route declares the :class:`curvature_gap.config.ModelConfig` variants it supports in
:data:`SUPPORTS` (field -> allowed values; a missing field: any value); every route takes every variant, but
``"vit"`` refuses a model built with ``fused_ln=True`` (its Hessian follows the hand-written LayerNorm), and
``method="auto"`` sends that one, another ``nn.Module`` or another loss to ``"functorch"``.
All methods agree with curvlinops to rounding (tested in float64); diagonal blocks of the dense
result are symmetrised, ``(H_gg + H_ggᵀ)/2``, which changes them by rounding only.
"""
from __future__ import annotations

import torch
from torch import nn

from ..model import ViT
from ..params import groups_of
from . import _generic, _vit
from ._alloc import keep_freed_memory

__all__ = ["hessian", "hessian_block", "group_slices", "METHODS", "SUPPORTS", "unsupported", "resolve_method"]

METHODS = ("auto", "vit", "functorch", "curvlinops", "torch.func")
# Model variants each route supports (ModelConfig field -> allowed values; a missing field: any value).
# The generic routes differentiate the module as written (torch.func / curvlinops), so every variant.
SUPPORTS: dict[str, dict] = {"vit": _vit.SUPPORTS, "functorch": {}, "curvlinops": {}, "torch.func": {}}


def unsupported(model: nn.Module, method: str) -> list[str]:
    """Why ``method`` cannot compute the Hessian of ``model`` (empty when it can)."""
    return _vit.unsupported(model) if method == "vit" else []


def _unpack(data) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = (data.images, data.labels) if hasattr(data, "images") and hasattr(data, "labels") else data
    return images, labels


def resolve_method(model: nn.Module, loss, method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "auto":
        if method == "vit" and (not isinstance(model, ViT) or loss != "cross_entropy"):
            raise ValueError("method='vit' needs a curvature_gap ViT and loss='cross_entropy'")
        if method == "vit" and unsupported(model, "vit"):
            raise ValueError(_vit.unsupported_message(model))
        return method
    return "vit" if loss == "cross_entropy" and not unsupported(model, "vit") else "functorch"


def hessian(model: nn.Module, data, loss="cross_entropy", blocks=None, method: str = "auto",
            dtype: torch.dtype | None = None, *, chunk: int | None = None, sample_chunk: int | None = None):
    """Exact Hessian of ``loss(model(images), labels)`` (batch mean) w.r.t. all parameters.

    ``data`` is ``(images, labels)`` or a dataset with ``.images``/``.labels`` (one batch; computed on
    the images' device). ``blocks=None`` returns the dense (P, P) tensor in ``param_groups`` order.
    ``blocks=("block0.value", "block0.query")`` returns that block H[row, col] (|row|, |col|); a list
    of such pairs returns ``{pair: block}``. ``dtype`` is the compute dtype (default: the model's);
    float64 gives agreement with curvlinops to ~1e-15, float32 to ~1e-7 relative.
    ``chunk``/``sample_chunk`` override the tangents and samples per pass (same result).
    """
    images, labels = _unpack(data)
    method = resolve_method(model, loss, method)
    if images.device.type == "cpu":
        keep_freed_memory()
    dtype = dtype or next(model.parameters()).dtype
    pairs = None
    if blocks is not None:
        single = isinstance(blocks, tuple) and len(blocks) == 2 and all(isinstance(b, str) for b in blocks)
        pairs = [blocks] if single else [tuple(b) for b in blocks]
    if method == "vit":
        so = _vit.ViTSecondOrder(model, images, labels, dtype)
        if pairs is None:
            return _vit.dense(so, chunk, sample_chunk)
        res = _vit.block_pairs(so, pairs, chunk, sample_chunk)
    elif pairs is not None and method == "functorch":
        res = {p: _generic.functorch_block(model, images, labels, p[0], p[1], loss, dtype, chunk or 16) for p in pairs}
    else:
        if method == "curvlinops" and loss != "cross_entropy":
            raise ValueError("method='curvlinops' is wired for cross-entropy only")
        H = {"functorch": lambda: _generic.functorch_hessian(model, images, labels, loss, dtype, chunk or 16),
             "curvlinops": lambda: _generic.curvlinops_hessian(model, images, labels, dtype, chunk or 64),
             "torch.func": lambda: _generic.torch_func_hessian(model, images, labels, loss, dtype)}[method]()
        if pairs is None:
            return H
        groups = {g.name: g for g in groups_of(model)}
        res = {(r, c): H[groups[r].slice, groups[c].slice] for r, c in pairs}
    return res[pairs[0]] if single else res


def hessian_block(model: nn.Module, data, row_group: str, col_group: str, loss="cross_entropy",
                  method: str = "auto", dtype: torch.dtype | None = None, **kw) -> torch.Tensor:
    """One block ``H[row_group, col_group]`` of shape (|row|, |col|), e.g. ``("block0.value", "block0.value")``.

    Computed directly, a fraction of the dense cost: tangents on one group and rows of the other, in whichever
    orientation is cheaper (transposed if needed); the last block's FFN pair in closed form.
    """
    return hessian(model, data, loss, blocks=(row_group, col_group), method=method, dtype=dtype, **kw)


def group_slices(model: nn.Module) -> dict[str, slice]:
    """Group name -> slice of the flat parameter vector (rows/columns of :func:`hessian`)."""
    return {g.name: g.slice for g in groups_of(model)}
