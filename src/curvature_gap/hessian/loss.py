"""The loss of a model as a function of its named parameters: the one closure every generic Hessian route builds on.

``model_loss(model)`` returns ``l(params, X, y) = loss(model with params(X), y)`` where ``params`` maps
parameter names to tensors and every parameter or buffer it does not name keeps the value given in
``fixed`` (``torch.func.functional_call`` semantics): differentiate it with ``torch.func`` in ``params``, or
flatten it with :func:`curvature_gap.params.flat_view` (:class:`.hvp.HessianOperator`).
"""
from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch import nn
from torch.func import functional_call

__all__ = ["loss_function", "model_loss"]


def loss_function(loss) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``"cross_entropy"`` (batch mean, as ``nn.CrossEntropyLoss()``) or a callable ``(outputs, targets) -> scalar``."""
    if callable(loss):
        return loss
    if loss == "cross_entropy":
        return nn.functional.cross_entropy
    raise ValueError(f"unknown loss {loss!r}; use 'cross_entropy' or a callable(outputs, targets)")


def model_loss(model: nn.Module, loss="cross_entropy", fixed: Mapping[str, torch.Tensor] | None = None):
    """``l(params, X, y)``: ``loss`` (:func:`loss_function`) of ``model`` on ``(X, y)`` with the named
    tensors ``params`` in place of its parameters, and ``fixed`` (the other parameters and buffers) for
    the rest; what neither names is read from ``model`` itself."""
    lf = loss_function(loss)
    base = dict(fixed or {})

    def l(params: Mapping[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return lf(functional_call(model, {**base, **params}, (X,)), y)

    return l
