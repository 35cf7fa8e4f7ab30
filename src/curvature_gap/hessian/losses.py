"""Running-mean losses for Fig. 6: per-sample losses in one forward pass, then cumulative sums.

With per-sample losses ``ℓ_1 … ℓ_N`` at fixed weights (in the order given by a permutation), the
empirical loss over the first k samples is ``L_k = (1/k) Σ_{i≤k} ℓ_i`` and the paper plots
``|L_{k+1} − L_k|`` against k on log-log axes. Since ``L_{k+1} − L_k = (ℓ_{k+1} − L_k)/(k+1)``, the
whole curve costs one forward pass over the data plus a cumulative sum: O(N), not the O(N²) of
re-evaluating the mean loss on every prefix. "Batch-by-batch" (the paper's wording) is the same
with k counting batches of ``batch_size`` samples: ``L^batch_j = L_{min(j·b, N)}``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["RunningMeans", "per_sample_losses", "running_mean_losses"]


@dataclass
class RunningMeans:
    """Per-sample losses (in visiting order) and running means, all float64 on the CPU.

    ``order`` (N,): dataset indices in visiting order; ``losses`` (N,): ℓ in that order;
    ``mean_by_sample`` (N,): L_k for k = 1…N; ``diff_by_sample`` (N−1,): |L_{k+1} − L_k|;
    ``mean_by_batch`` (⌈N/b⌉,): L after each batch; ``diff_by_batch``: its absolute differences;
    ``seen_by_batch``: samples seen after each batch (the k of ``mean_by_batch``).
    """

    order: torch.Tensor
    losses: torch.Tensor
    mean_by_sample: torch.Tensor
    diff_by_sample: torch.Tensor
    seen_by_batch: torch.Tensor
    mean_by_batch: torch.Tensor
    diff_by_batch: torch.Tensor


def _unpack(dataset):
    if hasattr(dataset, "images") and hasattr(dataset, "labels"):
        return dataset.images, dataset.labels
    return dataset


@torch.no_grad()
def per_sample_losses(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 1024,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """Cross-entropy of every sample at the current weights, (N,) float64 on the CPU.

    Forward passes of ``batch_size`` samples in eval mode on ``device`` (default: the model's);
    batches are moved to the device one at a time, so memory does not grow with N.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = torch.empty(len(labels), dtype=torch.float64)
    try:
        for s in range(0, len(labels), batch_size):
            x = images[s:s + batch_size].to(device, non_blocking=True)
            y = labels[s:s + batch_size].to(device, non_blocking=True)
            out[s:s + len(y)] = nn.functional.cross_entropy(model(x), y, reduction="none").double().cpu()
    finally:
        model.train(was_training)
    return out


def running_mean_losses(model: nn.Module, dataset, batch_size: int, device: torch.device | str | None = None,
                        permutation=None, eval_batch_size: int = 1024) -> RunningMeans:
    """Per-sample losses and running means L_k over samples and over batches of ``batch_size``.

    ``dataset``: a dataset with ``.images``/``.labels`` or ``(images, labels)``. ``permutation``:
    ``None`` (dataset order), an int seed (a random permutation from ``torch.Generator``), or an index
    tensor. Losses are computed once per sample (cost linear in N), then permuted.
    """
    images, labels = _unpack(dataset)
    n = len(labels)
    if permutation is None:
        order = torch.arange(n)
    elif isinstance(permutation, int):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(permutation))
    else:
        order = torch.as_tensor(permutation, dtype=torch.long)
        if order.numel() != n or not torch.equal(order.sort().values, torch.arange(n)):
            raise ValueError("permutation must be a permutation of range(len(dataset))")
    losses = per_sample_losses(model, images, labels, eval_batch_size, device)[order]
    csum = torch.cumsum(losses, 0)
    k = torch.arange(1, n + 1, dtype=torch.float64)
    mean = csum / k
    seen = torch.clamp(torch.arange(1, (n + batch_size - 1) // batch_size + 1) * batch_size, max=n)
    mean_b = mean[seen - 1]
    return RunningMeans(order, losses, mean, (mean[1:] - mean[:-1]).abs(), seen, mean_b, (mean_b[1:] - mean_b[:-1]).abs())
