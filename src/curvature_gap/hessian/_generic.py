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
from tqdm.auto import tqdm

from ..params import groups_of
from .hvp import HessianOperator

__all__ = ["functorch_hessian", "functorch_block", "curvlinops_hessian", "curvlinops_columns",
           "torch_func_hessian"]


def _columns(model: nn.Module, X, y, g, rows, loss, dtype, chunk: int) -> torch.Tensor:
    """``H[g ∪ rows, g]`` (the rows of g, then those of the groups ``rows`` other than g), (|g| + Σ|rows|, |g|):
    :meth:`HessianOperator.rows_times` with the tangent on the group ``g``, ``chunk`` unit vectors per pass."""
    fn = HessianOperator(model, (X, y), list(g.param_names), loss, dtype).rows_times(
        [n for r in rows for n in r.param_names])
    eye = torch.eye(g.size, dtype=dtype, device=X.device)
    return torch.cat([fn(eye[s:s + chunk]) for s in range(0, g.size, chunk)]).T


def functorch_hessian(model: nn.Module, X, y, loss="cross_entropy", dtype=None, chunk: int = 16) -> torch.Tensor:
    """Dense exact Hessian (P, P) of ``loss(model(X), y)`` by block-triangular ``vmap(jvp(grad))``."""
    dtype = dtype or next(model.parameters()).dtype
    groups = groups_of(model)
    P = groups[-1].stop
    H = torch.zeros(P, P, dtype=dtype, device=X.device)
    for gi, g in enumerate(groups):
        H[g.start:, g.start:g.stop] = _columns(model, X, y, g, groups[gi:], loss, dtype, chunk)
    for g in groups:
        H[g.start:g.stop, g.stop:] = H[g.stop:, g.start:g.stop].T
    return H


def functorch_block(model: nn.Module, X, y, row: str, col: str, loss="cross_entropy", dtype=None,
                    chunk: int = 16) -> torch.Tensor:
    """One block H[row, col] by ``vmap(jvp(grad))``: H[later, earlier] in group order with the tangent on the
    earlier group (cheaper), transposed if needed."""
    dtype = dtype or next(model.parameters()).dtype
    groups = groups_of(model)
    idx = {g.name: i for i, g in enumerate(groups)}
    r, c = groups[max(idx[row], idx[col])], groups[min(idx[row], idx[col])]
    out = _columns(model, X, y, c, [r], loss, dtype, chunk)[-r.size:]  # (|r|, |c|)
    return out.T if idx[row] < idx[col] else out


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
    op = HessianOperator(model, (X, y), loss=loss, dtype=dtype)
    return torch.func.hessian(op.flat_loss())(op.theta0)
