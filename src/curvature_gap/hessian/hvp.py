"""The one Hessian-vector-product operator on :func:`.loss.model_loss` (forward over reverse, ``jvp(grad)``).

:class:`HessianOperator` has curvlinops' shape: a linear operator that owns the model's parameters (a chosen
subset, by name, in ``parameters_to_vector`` order), the data and the layout of its flat vector.
``op @ V`` multiplies (P,) or (P, m) vectors; :meth:`HessianOperator.rows_times` gives the rows of more
parameters too (``H[S ∪ rows, S] V``, the block-triangular dense Hessian's pass); :meth:`HessianOperator.per_sample`
the per-sample Hessians ``∇²ℓ_i`` times one vector each (Theorem 7's power iteration).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.func import grad, jvp, vmap

from ..params import flat_view, flatten, groups_of
from .loss import model_loss

__all__ = ["HessianOperator"]


class HessianOperator:
    """``H_SS``, the Hessian of ``loss(model(X), y)`` (batch mean) w.r.t. the parameters ``S`` (names;
    default all), at the model's parameters, as a linear operator on flat vectors of S.

    ``data`` is ``(X, y)``; ``micro_batch`` splits the batch (the mean is the size-weighted sum of the
    micro-batch means); ``groups`` (names of :func:`curvature_gap.params.groups_of`) may name S instead of
    ``params``. ``dtype`` (default the model's) is the compute dtype; the operator lives on X's device.
    Attributes: ``names``, ``shape`` (P, P), ``values`` (name -> parameter), ``unflat`` (flat vector of S ->
    {name: tensor}), ``theta0`` (S at the model, flat), ``X``, ``y`` (the batch, X in ``dtype``).
    """

    def __init__(self, model: nn.Module, data, params: Sequence[str] | None = None, loss="cross_entropy",
                 dtype: torch.dtype | None = None, micro_batch: int | None = None,
                 groups: Sequence[str] | None = None):
        X, y = data
        self.model, self.loss = model, loss
        self.dtype = dtype = dtype or next(model.parameters()).dtype
        self.values = {n: p.detach().to(device=X.device, dtype=dtype) for n, p in model.named_parameters()}
        self.buffers = {n: (b.to(device=X.device, dtype=dtype) if b.is_floating_point() else b.to(X.device))
                        for n, b in model.named_buffers()}  # floating ones in dtype
        if groups is not None:
            by_name = {g.name: g for g in groups_of(model)}
            params = [n for g in groups for n in by_name[g].param_names]
        self.names = list(params) if params is not None else list(self.values)
        self.unflat = flat_view(self.names, [self.values[n].shape for n in self.names])
        self.theta0 = flatten(self.values, self.names)
        P = self.theta0.numel()
        self.shape = (P, P)
        self.X, self.y = X.to(dtype), y
        B = X.shape[0]
        step = micro_batch or B
        self.pieces = [(self.X[s:s + step], y[s:s + step], min(step, B - s) / B) for s in range(0, B, step)]

    # ------------------------------------------------------------------ the loss and its products
    def _loss(self, differentiated: Sequence[str]):
        """:func:`.loss.model_loss` with the parameters not in ``differentiated`` and the buffers held fixed."""
        diff = set(differentiated)
        return model_loss(self.model, self.loss, {**{n: v for n, v in self.values.items() if n not in diff},
                                                  **self.buffers})

    def flat_loss(self, X=None, y=None):
        """``f(θ)``: the loss on (X, y) (default: the whole batch) as a function of the flat vector of S."""
        l = self._loss(self.names)
        X, y = (self.X, self.y) if X is None else (X, y)
        return lambda theta: l(self.unflat(theta), X, y)

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        """``(H Vᵀ)ᵀ`` for V (m, P): m products at once (vmapped), summed over micro-batches."""
        if not hasattr(self, "_fns"):
            self._fns = [(vmap(lambda v, f=self.flat_loss(X, y): jvp(grad(f), (self.theta0,), (v,))[1]), w)
                         for X, y, w in self.pieces]
        out = None
        for fn, w in self._fns:
            r = fn(V.to(self.dtype)) * w
            out = r if out is None else out + r
        return out

    def __matmul__(self, V: torch.Tensor) -> torch.Tensor:
        """``H V`` for V (P,) or (P, m), as curvlinops' operators."""
        if V.dim() == 1:
            return self.matmat(V[None])[0]
        return self.matmat(V.T).T

    def rows_times(self, rows: Sequence[str]):
        """``V (m, P) -> H[S ∪ rows, S] Vᵀ`` as (m, |S| + |rows not in S|), the rows in the order S, then ``rows``
        not in S (parameter names, each flattened): the tangent on S only and the gradient of S and ``rows``,
        one vmapped pass over the whole batch."""
        extra = [n for n in rows if n not in self.names]
        l = self._loss(self.names + extra)
        ta0 = {n: self.values[n] for n in extra}

        def f(tj, ta):
            return l({**self.unflat(tj), **ta}, self.X, self.y)

        def col(v):
            _, (dj, da) = jvp(lambda tj: grad(f, argnums=(0, 1))(tj, ta0), (self.theta0,), (v,))
            return torch.cat([dj, *(da[n].flatten() for n in extra)])

        return vmap(col)

    def per_sample(self):
        """``(V (b, P), X (b, ...), y (b,)) -> (b, P)``: the Hessian of sample i's loss times V[i], vmapped over
        the samples (each sample its own batch of one)."""
        return vmap(lambda v, img, lab: jvp(grad(self.flat_loss(img[None], lab[None])), (self.theta0,), (v,))[1])
