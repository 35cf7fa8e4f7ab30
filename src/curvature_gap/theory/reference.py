"""Automatic-differentiation references for the closed forms (the only module under
``theory/`` that uses autograd).

Everything is hand-written (explicit mean/variance LayerNorm, explicit softmax, explicit
attention) so that ``torch.func`` transforms are exact; ``torch.nn.LayerNorm`` is never used.
Layout helpers turn torch's (out..., in...) derivatives into the paper's row-wise,
numerator layout by a reshape (torch tensors are row-major, so ``vec_r`` is ``reshape(-1)``).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch.func import hessian, jacfwd, jacrev

__all__ = [
    "layernorm_ref", "softmax_ref", "attention_ref", "block_ref", "block_loss_ref",
    "sa_loss_ref", "jacobian", "second_derivative", "fd_second_derivative",
    "loss_hessian_autograd", "fd_loss_hessian", "BLOCK_ORDER", "sa_loss_hessian_autograd",
]

BLOCK_ORDER = ("1", "2", "K", "Q", "V")


def layernorm_ref(X: torch.Tensor) -> torch.Tensor:
    """(X - mean) / sqrt(population variance), row-wise, no ε."""
    M = X - X.mean(dim=1, keepdim=True)
    return M / M.pow(2).mean(dim=1, keepdim=True).sqrt()


def softmax_ref(T: torch.Tensor) -> torch.Tensor:
    """Row softmax with a detached shift."""
    E = torch.exp(T - T.detach().amax(dim=1, keepdim=True))
    return E / E.sum(dim=1, keepdim=True)


def attention_ref(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``softmax(X W_Q W_K^T X^T/√d_K) X W_V``."""
    return softmax_ref(X @ W_Q @ W_K.T @ X.T / math.sqrt(W_Q.shape[1])) @ X @ W_V


def block_ref(X, W_Q, W_K, W_V, W_1, W_2, out: str = "Z") -> torch.Tensor:
    """Post-norm block; ``out`` in {"U", "Y", "S", "Z"}."""
    U = X + attention_ref(X, W_Q, W_K, W_V)
    if out == "U":
        return U
    Y = layernorm_ref(U)
    if out == "Y":
        return Y
    S = torch.relu(Y @ W_1) @ W_2 + Y
    if out == "S":
        return S
    return layernorm_ref(S)


def block_loss_ref(X, W_Q, W_K, W_V, W_1, W_2, Target) -> torch.Tensor:
    """``(1/(L d_V)) ||Z - Target||_F^2``."""
    L, d_V = X.shape
    return (block_ref(X, W_Q, W_K, W_V, W_1, W_2) - Target).pow(2).sum() / (L * d_V)


def sa_loss_ref(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``(1/(L d_V)) ||F - Target||_F^2`` for one self-attention layer."""
    L, d_V = X.shape
    return (attention_ref(X, W_Q, W_K, W_V) - Target).pow(2).sum() / (L * d_V)


def jacobian(f: Callable, args: Sequence[torch.Tensor], i: int) -> torch.Tensor:
    """``∂vec_r f / ∂vec_r(args[i])^T`` via ``jacrev``; shape (out, n_i)."""
    J = jacrev(f, argnums=i)(*args)
    return J.reshape(-1, args[i].numel())


def second_derivative(f: Callable, args: Sequence[torch.Tensor], i: int, j: int) -> torch.Tensor:
    """``∂vec_r(∂f/∂W_i)/∂vec_r(W_j)^T`` via ``jacfwd(jacrev)``; shape (out * n_i, n_j)."""
    H = jacfwd(jacrev(f, argnums=i), argnums=j)(*args)
    return H.reshape(-1, args[j].numel())


def fd_second_derivative(f: Callable, args: Sequence[torch.Tensor], i: int, j: int,
                         h: float = 1e-5) -> torch.Tensor:
    """Central differences of the autograd Jacobian ``∂f/∂W_i`` along each entry of ``W_j``."""
    args = list(args)
    base = args[j]
    cols = []
    for c in range(base.numel()):
        e = torch.zeros_like(base).reshape(-1)
        e[c] = h
        e = e.reshape(base.shape)
        args[j] = base + e
        jp = jacobian(f, args, i)
        args[j] = base - e
        jm = jacobian(f, args, i)
        cols.append(((jp - jm) / (2 * h)).reshape(-1))
    args[j] = base
    return torch.stack(cols, dim=1)


def _block_args(inst: dict):
    return [inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], inst["W_1"], inst["W_2"], inst["Target"]]


_IDX = {"Q": 1, "K": 2, "V": 3, "1": 4, "2": 5}


def loss_hessian_autograd(inst: dict, order=BLOCK_ORDER) -> torch.Tensor:
    """``torch.func.hessian`` of the block loss w.r.t. the weights, assembled in ``order``."""
    args = _block_args(inst)
    idx = tuple(_IDX[p] for p in order)
    H = hessian(block_loss_ref, argnums=idx)(*args)
    sizes = [args[k].numel() for k in idx]
    return torch.cat([torch.cat([H[a][b].reshape(sizes[a], sizes[b]) for b in range(len(idx))], dim=1)
                      for a in range(len(idx))], dim=0)


def fd_loss_hessian(inst: dict, order=BLOCK_ORDER, h: float = 1e-5) -> torch.Tensor:
    """Central differences of the autograd gradient of the block loss (column by column)."""
    args = _block_args(inst)
    idx = tuple(_IDX[p] for p in order)
    flat = torch.cat([args[k].reshape(-1) for k in idx])
    shapes = [args[k].shape for k in idx]

    def grad_at(v):
        parts, off = [], 0
        for s in shapes:
            m = int(torch.tensor(s).prod())
            parts.append(v[off:off + m].reshape(s))
            off += m
        a = list(args)
        for k, p in zip(idx, parts):
            a[k] = p
        g = jacrev(block_loss_ref, argnums=idx)(*a)
        return torch.cat([t.reshape(-1) for t in g])

    cols = []
    for c in range(flat.numel()):
        e = torch.zeros_like(flat)
        e[c] = h
        cols.append((grad_at(flat + e) - grad_at(flat - e)) / (2 * h))
    return torch.stack(cols, dim=1)


def sa_loss_hessian_autograd(inst: dict, order=("Q", "K", "V")) -> dict:
    """Blocks of the single-layer attention loss Hessian: ``{(i, j): (n_i, n_j)}``."""
    idx = {"Q": 1, "K": 2, "V": 3}
    args = [inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"], inst["Target"]]
    a = tuple(idx[p] for p in order)
    H = hessian(sa_loss_ref, argnums=a)(*args)
    return {(p, q): H[ia][ib].reshape(args[idx[p]].numel(), args[idx[q]].numel())
            for ia, p in enumerate(order) for ib, q in enumerate(order)}
