"""Derivatives by automatic differentiation (``torch.func``) and by central finite differences.

These are the references of every closed form: Jacobians ``∂vec_r f/∂vec_r(W_i)ᵀ`` of shape
``(out, n_i)`` and second derivatives ``∂vec_r(∂f/∂W_i)/∂vec_r(W_j)ᵀ`` of shape ``(out · n_i, n_j)``
(the paper's numerator layout, §2; torch tensors are row-major, so ``vec_r`` is ``reshape(-1)``),
and loss Hessians of the theory's block and self-attention layer (:mod:`.forward`).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch.func import grad, hessian, jacrev, jvp, vmap

from ..params import flat_view, flatten, offsets
from . import linalg
from .forward import block_loss, sa_loss

__all__ = [
    "jacobian", "second_derivative", "fd_second_derivative", "loss_hessian_autograd", "fd_loss_hessian",
    "sa_loss_hessian_autograd", "dense_hessian", "hessian_norm", "BLOCK_ORDER", "ATTENTION_ORDER", "SA_ORDER", "flat_loss",
    "block_slices", "split_blocks",
]

# the theory's weights in the order of every flat vector, Hessian and table of this package (the one home of
# these orders): the block's (W_1, W_2, W_K, W_Q, W_V), its attention part, and the single layer's
BLOCK_ORDER = ("1", "2", "K", "Q", "V")
ATTENTION_ORDER = BLOCK_ORDER[2:]  # ("K", "Q", "V")
SA_ORDER = ("Q", "K", "V")
_ATTR = {"Q": "W_Q", "K": "W_K", "V": "W_V", "1": "W_1", "2": "W_2"}


def jacobian(f: Callable, args: Sequence[torch.Tensor], i: int) -> torch.Tensor:
    """``∂vec_r f / ∂vec_r(args[i])ᵀ`` via ``jacrev``; shape (out, n_i)."""
    J = jacrev(f, argnums=i)(*args)
    return J.reshape(-1, args[i].numel())


def second_derivative(f: Callable, args: Sequence[torch.Tensor], i: int, j: int) -> torch.Tensor:
    """``∂vec_r(∂f/∂W_i)/∂vec_r(W_j)ᵀ`` via ``jacfwd(jacrev)`` (:func:`.linalg.second_derivative_tensor`);
    shape (out · n_i, n_j)."""
    return linalg.second_derivative_tensor(f, args, i, j).reshape(-1, args[j].numel())


def _central(g: Callable, x: torch.Tensor, h: float) -> torch.Tensor:
    """Central differences ``(g(x + h e_c) − g(x − h e_c)) / 2h`` of ``g``, flattened, one column per entry c of x."""
    cols = []
    for c in range(x.numel()):
        e = torch.zeros_like(x).reshape(-1)
        e[c] = h
        e = e.reshape(x.shape)
        cols.append(((g(x + e) - g(x - e)) / (2 * h)).reshape(-1))
    return torch.stack(cols, dim=1)


def fd_second_derivative(f: Callable, args: Sequence[torch.Tensor], i: int, j: int,
                         h: float = 1e-5) -> torch.Tensor:
    """Central differences of the autograd Jacobian ``∂f/∂W_i`` along each entry of ``W_j``."""
    args = list(args)
    return _central(lambda w: jacobian(f, args[:j] + [w] + args[j + 1:], i), args[j], h)


def block_slices(order, sizes) -> dict:
    """``{name: slice}`` of each weight of ``order`` (sizes ``sizes``) in the flat vector that concatenates
    them in that order (:func:`curvature_gap.params.offsets`, the one home of flat offsets)."""
    return offsets(order, sizes)


def split_blocks(H: torch.Tensor, order, sizes) -> dict:
    """``{(p, q): H[p, q]}``: the blocks of a matrix over the flat vector of :func:`block_slices`."""
    sl = block_slices(order, sizes)
    return {(p, q): H[sl[p], sl[q]] for p in order for q in order}


def flat_loss(inst, order=BLOCK_ORDER, loss: str = "block"):
    """``(f, x, sizes)``: the loss of ``inst`` as a function of the flat vector ``x`` of the weights in
    ``order`` (``loss`` is ``"block"`` or ``"sa"``); the flattening is :func:`curvature_gap.params.flat_view`."""
    W0 = {p: getattr(inst, _ATTR[p]) for p in _ATTR}
    unflat = flat_view(order, [W0[p].shape for p in order])

    def f(v):
        W = {**W0, **unflat(v)}
        if loss == "sa":
            return sa_loss(inst.X, W["Q"], W["K"], W["V"], inst.Target)
        return block_loss(inst.X, W["Q"], W["K"], W["V"], W["1"], W["2"], inst.Target)

    return f, flatten(W0, order), [W0[p].numel() for p in order]


def loss_hessian_autograd(inst, order=BLOCK_ORDER) -> torch.Tensor:
    """``torch.func.hessian`` of the block loss w.r.t. the weights in ``order``, as one dense matrix."""
    f, x, _ = flat_loss(inst, order, "block")
    return hessian(f)(x)


def fd_loss_hessian(inst, order=BLOCK_ORDER, h: float = 1e-5) -> torch.Tensor:
    """Central differences of the autograd gradient of the block loss (column by column)."""
    f, x, _ = flat_loss(inst, order, "block")
    return _central(grad(f), x, h)


def sa_loss_hessian_autograd(inst, order=SA_ORDER) -> dict:
    """Blocks of the single-layer attention loss Hessian: ``{(i, j): (n_i, n_j)}``."""
    f, x, sizes = flat_loss(inst, order, "sa")
    return split_blocks(hessian(f)(x), order, sizes)


def _hvp(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v ↦ ∇²f(x) v`` (forward over reverse, ``jvp(grad)``)."""
    g = grad(f)
    return lambda v: jvp(g, (x,), (v,))[1]


def dense_hessian(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Dense Hessian of a scalar ``f`` at the flat vector ``x`` from batched Hessian-vector products
    (forward over reverse), ``chunk`` columns at a time; (n, n)."""
    hvp, n = vmap(_hvp(f, x)), x.numel()
    I = torch.eye(n, dtype=x.dtype)
    return torch.cat([hvp(I[s:s + chunk]) for s in range(0, n, chunk)], dim=0)


def hessian_norm(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, dense: bool = True) -> float:
    """``‖∇²f(x)‖_2``: dense ``eigvalsh`` or Lanczos (ARPACK, largest magnitude) on Hessian-vector products."""
    if dense:
        return linalg.sym_spectral_norm(dense_hessian(f, x))
    hvp = _hvp(f, x)
    return linalg.lanczos_sym_norm(lambda v: hvp(torch.from_numpy(v).to(x.dtype)).numpy(), x.numel())
