"""Exact Hessians of any ``nn.Module`` with torch.func, and the two reference tools.

* :func:`functorch_hessian` — block-triangular forward-over-reverse: for every parameter group ``g``
  (forward order) the columns ``H[:, g]`` restricted to rows of groups at or after ``g`` are
  ``vmap(jvp(grad))`` over chunks of unit vectors, with the tangent only on ``g`` (so the forward
  tangent starts where ``g`` is used and the backward stops at ``g``); ``H = Hᵀ`` fills the rest.
* :func:`curvlinops_hessian` — ``curvlinops.HessianLinearOperator @ I`` in column chunks (the
  paper's tool; our reference).
* :func:`torch_func_hessian` — ``torch.func.hessian`` of the flat-parameter loss (one shot).
"""
from __future__ import annotations

import copy
import torch
from curvlinops import HessianLinearOperator
from torch import nn
from torch.func import grad, jvp, vmap
from tqdm.auto import tqdm

from ..model import ParamGroup, param_groups
from .loss import flat_view, loss_function, model_loss

__all__ = ["groups_of", "loss_function", "functorch_hessian", "functorch_block", "curvlinops_hessian", "curvlinops_columns",
           "torch_func_hessian", "flat_loss"]


def groups_of(model: nn.Module) -> list[ParamGroup]:
    """``param_groups(model)`` when its naming applies, else one group per parameter."""
    try:
        return param_groups(model)
    except RuntimeError:
        out, start = [], 0
        for name, p in model.named_parameters():
            out.append(ParamGroup(name, (name,), start, start + p.numel()))
            start += p.numel()
        return out


def _detached(model: nn.Module, dtype, device) -> dict[str, torch.Tensor]:
    return {n: p.detach().to(device=device, dtype=dtype) for n, p in model.named_parameters()}


def _buffers(model: nn.Module, dtype, device) -> dict[str, torch.Tensor]:
    return {n: (b.to(device=device, dtype=dtype) if b.is_floating_point() else b.to(device)) for n, b in model.named_buffers()}


def flat_loss(model: nn.Module, X: torch.Tensor, y: torch.Tensor, loss="cross_entropy", dtype=None):
    """(f, θ₀): the loss as a function of the flat parameter vector (``parameters_to_vector`` order)."""
    dtype = dtype or next(model.parameters()).dtype
    params = _detached(model, dtype, X.device)
    l = model_loss(model, loss, fixed=_buffers(model, dtype, X.device))
    names = list(params)
    unflat = flat_view(names, [params[n].shape for n in names])
    X = X.to(dtype)

    def f(theta):
        return l(unflat(theta), X, y)

    theta0 = torch.cat([params[n].reshape(-1) for n in names])
    return f, theta0


def _group_columns_fn(model, groups, gi, params, bufs, loss, X, y, rows: list[int]):
    """vmap'ed function V (c, |g|) -> H[rows, g] V (c, Σ|rows|) for group index gi."""
    g = groups[gi]
    own = list(g.param_names)
    row_names = [n for r in rows for n in groups[r].param_names if n not in own]
    diff = own + row_names
    const = {n: v for n, v in params.items() if n not in diff}
    l = model_loss(model, loss, fixed={**const, **bufs})
    unflat = flat_view(own, [params[n].shape for n in own])

    def f(tj, ta):
        return l({**unflat(tj), **ta}, X, y)

    tj0 = torch.cat([params[n].reshape(-1) for n in own])
    ta0 = {n: params[n] for n in row_names}

    def col(v):
        _, (dj, da) = jvp(lambda tj: grad(f, argnums=(0, 1))(tj, ta0), (tj0,), (v,))
        out = []
        for r in rows:
            if r == gi:
                out.append(dj)
            else:
                out.extend(da[n].reshape(-1) for n in groups[r].param_names)
        return torch.cat(out)

    return vmap(col)


def functorch_hessian(model: nn.Module, X, y, loss="cross_entropy", dtype=None, chunk: int = 16) -> torch.Tensor:
    """Dense exact Hessian (P, P) of ``loss(model(X), y)`` by block-triangular ``vmap(jvp(grad))``."""
    dtype = dtype or next(model.parameters()).dtype
    groups = groups_of(model)
    params, bufs = _detached(model, dtype, X.device), _buffers(model, dtype, X.device)
    X = X.to(dtype)
    P = groups[-1].stop
    H = torch.zeros(P, P, dtype=dtype, device=X.device)
    for gi, g in enumerate(groups):
        rows = list(range(gi, len(groups)))
        fn = _group_columns_fn(model, groups, gi, params, bufs, loss, X, y, rows)
        eye = torch.eye(g.size, dtype=dtype, device=X.device)
        for s in range(0, g.size, chunk):
            H[g.start:, g.start + s:g.start + min(g.size, s + chunk)] = fn(eye[s:s + chunk]).T
    for gi, g in enumerate(groups):
        H[g.start:g.stop, g.stop:] = H[g.stop:, g.start:g.stop].T
    return H


def functorch_block(model: nn.Module, X, y, row: str, col: str, loss="cross_entropy", dtype=None, chunk: int = 16) -> torch.Tensor:
    """One block H[row, col] by ``vmap(jvp(grad))`` with the tangent on the later-in-order group's partner."""
    dtype = dtype or next(model.parameters()).dtype
    groups = groups_of(model)
    idx = {g.name: i for i, g in enumerate(groups)}
    ri, ci = idx[row], idx[col]
    transpose = ri < ci  # compute H[col, row] with the tangent on row (cheaper), then transpose
    if transpose:
        ri, ci = ci, ri
    params, bufs = _detached(model, dtype, X.device), _buffers(model, dtype, X.device)
    fn = _group_columns_fn(model, groups, ci, params, bufs, loss, X.to(dtype), y, [ri])
    g = groups[ci]
    eye = torch.eye(g.size, dtype=dtype, device=X.device)
    out = torch.cat([fn(eye[s:s + chunk]) for s in range(0, g.size, chunk)]).T  # (|r|, |c|)
    return out.T if transpose else out


def curvlinops_columns(model: nn.Module, X, y, columns=None, dtype=None, chunk: int = 64,
                       progress: bool = False, desc: str = "curvlinops H") -> torch.Tensor:
    """The reference: columns ``H[:, columns]`` of ``curvlinops.HessianLinearOperator(model,
    CrossEntropyLoss(), params, [(X, y)])``, i.e. ``H @ E`` for the unit vectors of ``columns``
    (default: all, the dense Hessian), ``chunk`` columns per product; (P, len(columns)) in
    ``parameters_to_vector`` order, on X's device. The model is copied (in ``dtype``), never changed."""
    dtype = dtype or next(model.parameters()).dtype
    m = copy.deepcopy(model).to(dtype=dtype, device=X.device)
    params = [p for p in m.parameters() if p.requires_grad]
    op = HessianLinearOperator(m, nn.CrossEntropyLoss(), params, [(X.to(dtype), y)], progressbar=False,
                               check_deterministic=False)
    P = op.shape[0]
    cols = torch.arange(P) if columns is None else torch.as_tensor(columns, dtype=torch.long)
    out = torch.empty(P, len(cols), dtype=dtype, device=X.device)
    for s in tqdm(range(0, len(cols), chunk), desc=desc, unit="chunk", disable=not progress, leave=False):
        c = cols[s:s + chunk]
        E = torch.zeros(P, len(c), dtype=dtype, device=X.device)
        E[c.to(X.device), torch.arange(len(c), device=X.device)] = 1
        out[:, s:s + len(c)] = op @ E
    return out


def curvlinops_hessian(model: nn.Module, X, y, dtype=None, chunk: int = 64) -> torch.Tensor:
    """The dense (P, P) Hessian by :func:`curvlinops_columns` (all columns)."""
    return curvlinops_columns(model, X, y, None, dtype, chunk)


def torch_func_hessian(model: nn.Module, X, y, loss="cross_entropy", dtype=None) -> torch.Tensor:
    """``torch.func.hessian`` of the flat-parameter loss, in one shot (memory-hungry)."""
    f, theta0 = flat_loss(model, X, y, loss, dtype)
    return torch.func.hessian(f)(theta0)
