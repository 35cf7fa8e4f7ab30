"""Exact loss Hessians of the paper's ViT (Figs. 3–5) and block spectra.

The loss is the empirical risk ``L(w) = (1/B) Σ_n ℓ(model(x_n; w), y_n)`` on one batch (cross-entropy,
batch mean, as ``nn.CrossEntropyLoss()``). Parameters are the flat vector
``parameters_to_vector(model.parameters())`` (P entries), grouped by
:func:`curvature_gap.param_groups` (``pos`` if learned, ``embed``, ``block0.query`` … ``block0.ln2``,
``head``; a bias stored beside its weight is in the weight's group, e.g. ``block0.out`` = (W_O, b_O)).

Entry points

* :func:`hessian` — the dense (P, P) Hessian, or blocks ``H[row, col]`` by group names;
* :func:`hessian_block` — one block ``H[row, col]`` of shape (|row|, |col|);
* :mod:`.spectra` — top eigenvalues and spectral norms per block via Lanczos on Hessian-vector
  products (any model size, CPU or GPU);

Methods (all exact; they differ in cost only)

* ``"vit"`` — hand-written forward-over-reverse for :class:`curvature_gap.model.ViT` with
  cross-entropy (:mod:`._vit`): block-triangular (rows at or after the tangent's group, then
  ``H = Hᵀ``), tangents batched in GEMM-friendly layouts, batch processed in sample chunks; the
  last block's FFN×FFN block in closed form (GGN through the logits + per-token LayerNorm and
  W1–W2 terms, + the GELU curvature term, as GEMMs over tokens).
* ``"functorch"`` — the same block-triangular scheme with ``torch.func`` ``vmap(jvp(grad))`` for
  any ``nn.Module`` and loss.
* ``"curvlinops"`` — ``curvlinops.HessianLinearOperator @ I`` in column chunks (the paper's tool).
* ``"torch.func"`` — ``torch.func.hessian`` in one shot (runs out of memory at paper scale).

Variants: each route declares the :class:`curvature_gap.config.ModelConfig` variants it supports in
:data:`SUPPORTS` (field -> allowed values; a missing field: any value). ``"vit"`` is written for the
theorem's post-norm, single-head, ReLU block without Q/K/V biases or W_O, with Table 1's learned
positions and biased embedding and head, and for the authors' block (``MODEL_CONFIGS["authors_mnist"]``,
``["authors_cifar100"]``): Q/K/V biases, W_O with or without bias, exact-erf GELU, FFN with or without
biases, sinusoidal (or no) positions; post-norm and one head only. The three generic routes
differentiate any ``nn.Module``.
``method="vit"`` on another variant raises a ValueError naming it; ``method="auto"`` picks ``"vit"``
for a supported ViT with cross-entropy, else ``"functorch"``.
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
from ._vit import ViTSecondOrder

__all__ = ["hessian", "hessian_block", "default_chunks", "METHODS", "SUPPORTS", "ViTSecondOrder", "unsupported"]

METHODS = ("auto", "vit", "functorch", "curvlinops", "torch.func")
# Model variants each route supports (ModelConfig field -> allowed values; a missing field: any value).
# The generic routes differentiate the module as written (torch.func / curvlinops), so every variant.
SUPPORTS: dict[str, dict] = {"vit": _vit.SUPPORTS, "functorch": {}, "curvlinops": {}, "torch.func": {}}


def unsupported(model: nn.Module, method: str) -> list[str]:
    """Why ``method`` cannot compute the Hessian of ``model`` (empty when it can)."""
    if method == "vit":
        return _vit.unsupported(model)
    return []


def _unpack(data) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(data, "images") and hasattr(data, "labels"):
        return data.images, data.labels
    images, labels = data
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


def default_chunks(device: torch.device | str, group: str | None = None) -> tuple[int, int | None]:
    """(tangents per pass, samples per pass) for ``method='vit'``.

    CPU: 16 tangents × 32 samples keeps the (samples, tangents, n, n) attention tangents in cache
    (64 × 16 for groups after the attention: ``block{i}.out`` (W_O, b_O), ``ln1``, ``ffn1``, ``ffn2``,
    ``ln2``, ``head``); GPU: 256 tangents over the whole batch.
    """
    if torch.device(device).type == "cuda":
        return 256, None
    if group is not None and group.split(".")[-1] in ("out", "ln1", "ffn1", "ffn2", "ln2") or group == "head":
        return 64, 16
    return 16, 32


def _closed_form_groups(so: ViTSecondOrder) -> list[str]:
    """Groups whose joint block comes from :meth:`ViTSecondOrder.last_ffn_hessian`.

    The closed form holds for ReLU and GELU, with or without FFN biases; a ReLU model without FFN
    biases keeps its Hessian-vector columns (the route's result for it as before GELU existed).
    """
    if not so.n_blocks or (so.cfg.activation == "relu" and not so.cfg.ffn_bias):
        return []
    last = so.n_blocks - 1
    return [f"block{last}.ffn1", f"block{last}.ffn2"]


def _orientation(so: ViTSecondOrder, row: str, col: str) -> tuple[str, str]:
    """(rows, tangent group) for one block: the cheaper of H[row, col] directly or H[col, row]ᵀ.

    Rough cost of a pass with tangents on group t and rows down to group r, with groups at depth
    δ = index / #groups in forward order: |t| · ((1 − δ_t) + 2 (1 − δ_r)) (the forward tangent runs
    from t to the loss, the backward tangent, about twice as dear, from the loss back to r).
    """
    n = len(so.groups)
    depth = {g.name: i / n for i, g in enumerate(so.groups)}
    size = {g.name: g.size for g in so.groups}

    def cost(t, r):
        return size[t] * ((1 - depth[t]) + 2 * (1 - min(depth[r], depth[t])))

    return (row, col) if cost(col, row) <= cost(row, col) else (col, row)


def _vit_blocks(so: ViTSecondOrder, pairs: list[tuple[str, str]], chunk, sample_chunk) -> dict:
    order = so.group_index
    groups = {g.name: g for g in so.groups}
    cf = _closed_form_groups(so)
    ffn = None
    out = {}
    for row, col in pairs:
        for name in (row, col):
            if name not in order:
                raise KeyError(f"unknown parameter group {name!r}; groups: {list(order)}")
        if row in cf and col in cf:  # closed form, cheaper than Hessian-vector products
            if ffn is None:
                ffn = so.last_ffn_hessian()
            off = groups[cf[0]].start
            out[(row, col)] = ffn[groups[row].start - off:groups[row].stop - off,
                                  groups[col].start - off:groups[col].stop - off].contiguous()
            continue
        r, c = _orientation(so, row, col)
        gc = so.groups[order[c]]
        ch, sc = default_chunks(so.device, c)
        ch, sc = chunk or ch, sample_chunk if sample_chunk is not None else sc
        cols = []
        for s in range(0, gc.size, ch):
            idx = torch.arange(s, min(gc.size, s + ch), device=so.device)
            cols.append(so.columns(so.group_basis(c, idx), [r], sc)[r])
        blk = torch.cat(cols).T  # H[r, c]
        out[(row, col)] = blk if (r, c) == (row, col) else blk.T.contiguous()
    return out


def _dense_plan(so: ViTSecondOrder, closed_form: list[str]) -> list[tuple[str, list[str]]]:
    """(column group, row groups) passes that together cover every pair of groups once.

    In forward order each group's pass computes the rows of the groups after it (block triangle);
    groups in ``closed_form`` get no pass: their rows are added to every other group's pass and
    their own block comes from :meth:`ViTSecondOrder.last_ffn_hessian`.
    """
    order = [g.name for g in so.groups]
    plan = []
    for gi, g in enumerate(order):
        if g in closed_form:
            continue
        rows = order[gi:] + [h for h in closed_form if order.index(h) < gi]
        plan.append((g, rows))
    return plan


def _vit_dense(so: ViTSecondOrder, chunk, sample_chunk, closed_form: bool = True) -> torch.Tensor:
    groups = {g.name: g for g in so.groups}
    P = so.groups[-1].stop
    H = torch.empty(P, P, dtype=so.dtype, device=so.device)
    cf = _closed_form_groups(so) if closed_form else []
    done = set()
    for col, rows in _dense_plan(so, cf):
        g = groups[col]
        ch, sc = default_chunks(so.device, col)
        ch, sc = chunk or ch, sample_chunk if sample_chunk is not None else sc
        for s in range(0, g.size, ch):
            idx = torch.arange(s, min(g.size, s + ch), device=so.device)
            res = so.columns(so.group_basis(col, idx), rows, sc)
            for r in rows:
                H[groups[r].slice, g.start + s:g.start + s + len(idx)] = res[r].T
        for r in rows:
            done.add((r, col))
    if cf:
        s = slice(groups[cf[0]].start, groups[cf[1]].stop)
        H[s, s] = so.last_ffn_hessian()
        done.update((a, b) for a in cf for b in cf)
    for (r, c) in list(done):  # mirror: H[c, r] = H[r, c]ᵀ
        if r != c and (c, r) not in done:
            H[groups[c].slice, groups[r].slice] = H[groups[r].slice, groups[c].slice].T
    for g in so.groups:
        D = H[g.slice, g.slice]
        H[g.slice, g.slice] = (D + D.T) / 2
    return H


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
        so = ViTSecondOrder(model, images, labels, dtype)
        if pairs is None:
            return _vit_dense(so, chunk, sample_chunk)
        res = _vit_blocks(so, pairs, chunk, sample_chunk)
        return res[pairs[0]] if single else res
    if pairs is not None and method == "functorch":
        res = {p: _generic.functorch_block(model, images, labels, p[0], p[1], loss, dtype, chunk or 16) for p in pairs}
        return res[pairs[0]] if single else res
    if method == "functorch":
        H = _generic.functorch_hessian(model, images, labels, loss, dtype, chunk or 16)
    elif method == "curvlinops":
        if loss != "cross_entropy":
            raise ValueError("method='curvlinops' is wired for cross-entropy only")
        H = _generic.curvlinops_hessian(model, images, labels, dtype, chunk or 64)
    else:
        H = _generic.torch_func_hessian(model, images, labels, loss, dtype)
    if pairs is None:
        return H
    groups = {g.name: g for g in groups_of(model)}
    res = {(r, c): H[groups[r].slice, groups[c].slice] for r, c in pairs}
    return res[pairs[0]] if single else res


def hessian_block(model: nn.Module, data, row_group: str, col_group: str, loss="cross_entropy",
                  method: str = "auto", dtype: torch.dtype | None = None, **kw) -> torch.Tensor:
    """One block ``H[row_group, col_group]`` of shape (|row|, |col|), e.g. ``("block0.value", "block0.value")``.

    Computed directly, a fraction of the dense cost: tangents on one group and rows of the other,
    in whichever orientation is cheaper (transposed if needed); the last block's FFN pair in
    closed form.
    """
    return hessian(model, data, loss, blocks=(row_group, col_group), method=method, dtype=dtype, **kw)


def group_slices(model: nn.Module) -> dict[str, slice]:
    """Group name -> slice of the flat parameter vector (rows/columns of :func:`hessian`)."""
    return {g.name: g.slice for g in groups_of(model)}


__all__ += ["group_slices"]
