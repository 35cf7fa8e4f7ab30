"""Per-sample losses, running means and their differences (Fig. 6, Theorem 7).

With per-sample losses ``ℓ_1 … ℓ_N`` at fixed weights, in the order given by a permutation, the empirical loss over the
first k samples is ``L_k = (1/k) Σ_{i≤k} ℓ_i`` and the paper plots ``|L_{k+1} − L_k|`` against k on log-log axes. Since
``L_{k+1} − L_k = (ℓ_{k+1} − L_k)/(k+1)``, the whole curve costs one forward pass over the data plus a cumulative sum:
O(N), not the O(N²) of re-evaluating the mean loss on every prefix. "Batch-by-batch" (the paper's wording) is the same
with k counting batches: ``L_j`` is the mean of the first j batch means.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

__all__ = ["per_sample_losses", "running_means", "batch_running_means", "loss_differences", "identity_residual"]


@torch.no_grad()
def per_sample_losses(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 1024,
                      device: torch.device | str | None = None, params: dict | None = None) -> np.ndarray:
    """Cross-entropy of every sample, float64, in dataset order, computed in eval mode.

    Forward passes of ``batch_size`` samples on ``device`` (default: the model's), in the model's dtype;
    ``params`` (name -> tensor) replaces those parameters (e.g. ``w* + t u``) without touching the model.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    was_training = model.training
    model.eval()
    out = np.empty(len(labels), dtype=np.float64)
    try:
        for s in range(0, len(labels), batch_size):
            x = images[s:s + batch_size].to(device=device, dtype=dtype)
            y = labels[s:s + batch_size].to(device)
            logits = model(x) if params is None else functional_call(model, params, (x,))
            out[s:s + len(y)] = nn.functional.cross_entropy(logits, y, reduction="none").double().cpu().numpy()
    finally:
        model.train(was_training)
    return out


def running_means(losses) -> np.ndarray:
    """``L_k = (1/k) Σ_{i≤k} ℓ_i`` for ``k = 1..N`` (float64)."""
    ls = np.asarray(losses, dtype=np.float64)
    return np.cumsum(ls) / np.arange(1, len(ls) + 1)


def batch_running_means(losses, batch_size: int, order=None) -> np.ndarray:
    """``L_j`` = mean of the first j batch means, j = 1..K (K full batches of ``batch_size`` samples,
    taken in ``order``, default dataset order)."""
    ls = np.asarray(losses, dtype=np.float64)
    idx = np.arange(len(ls)) if order is None else np.asarray(order)
    K = len(idx) // batch_size
    b = ls[idx[:K * batch_size]].reshape(K, batch_size).mean(1)
    return np.cumsum(b) / np.arange(1, K + 1)


def loss_differences(losses, batch_size: int, n_permutations: int, seed: int = 0) -> np.ndarray:
    """``|L_{k+1} − L_k|`` for k = 1..K−1 (K full batches), one row per random order of the samples."""
    ls = np.asarray(losses, dtype=np.float64)
    K = len(ls) // batch_size
    if K < 3:
        raise ValueError(f"{len(ls)} samples make only {K} batches of {batch_size}; need at least 3")
    rng = np.random.default_rng(seed)
    return np.stack([np.abs(np.diff(batch_running_means(ls, batch_size, rng.permutation(len(ls)))))
                     for _ in range(n_permutations)])


def identity_residual(losses) -> float:
    """``max_k |(L_{k+1} − L_k) − (ℓ_{k+1} − L_k)/(k+1)|`` for ``k = 1..N−1``: the float64 error of the
    identity behind Theorem 7's 1/k rate."""
    ls = np.asarray(losses, dtype=np.float64)
    Lk = running_means(ls)
    k = np.arange(1, len(ls))
    return float(np.abs((Lk[1:] - Lk[:-1]) - (ls[1:] - Lk[:-1]) / (k + 1)).max()) if len(k) else 0.0
