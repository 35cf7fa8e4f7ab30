"""Assumption 1 (Fig. 12): how far ``∇L_k(w*)`` is from 0 at the trained weights, against k.

Assumption 1 reads ``∇L_{k−1}(w*) = ∇L_k(w*) = 0`` for the empirical losses ``L_k`` of the first k samples. At the
trained ``w*`` (an approximate minimiser of ``L_N``, all N training samples) we measure ``‖∇L_k(w*)‖_2`` for random
orders of the data on a log grid of k (:func:`order_gradient_norms`), and its mean square over *all* orders exactly:
with per-sample gradients ``g_i``, ``ḡ = ∇L_N`` and ``σ² = (1/N) Σ‖g_i − ḡ‖²``, drawing k of N without replacement gives

    E‖∇L_k‖² = ‖ḡ‖² + σ² (N − k) / (k (N − 1)),

which decays like ``k^(−1/2)`` until ``k ≈ σ²/‖ḡ‖²``, where it meets the floor ``‖∇L_N(w*)‖``
(:func:`expected_grad_norm_sq`). The assumption holds exactly only where the gradient is 0; the paper's reading "its
validity increases with more samples" is tested as a negative log-log slope at small k (:func:`claim_test`).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import grad, vmap
from tqdm.auto import tqdm

from ..hessian.loss import model_loss

__all__ = ["k_grid", "order_gradient_norms", "per_sample_gradient_moments", "expected_grad_norm_sq", "claim_test",
           "measure"]


def k_grid(n: int, n_points: int) -> np.ndarray:
    """About ``n_points`` log-spaced integers from 1 to n."""
    return np.unique(np.round(np.geomspace(1, n, n_points)).astype(int))


def order_gradient_norms(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, ks, n_orders: int,
                         seed: int, device, chunk: int = 512, progress: bool = False) -> np.ndarray:
    """‖∇L_k‖₂ at the grid ``ks`` for ``n_orders`` random orders (rows): running float64 sums of the
    gradients of summed losses over chunks of the permuted data."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.eval()
    rng = np.random.default_rng(seed)
    n = len(labels)
    ks = np.asarray(ks)
    out = np.zeros((n_orders, len(ks)))
    for r in tqdm(range(n_orders), desc="gradient norms", unit="order", disable=not progress, leave=False):
        perm = torch.from_numpy(rng.permutation(n))
        total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        done = 0
        for j, k in enumerate(ks):
            while done < k:
                stop = min(int(k), done + chunk)
                idx = perm[done:stop]
                x, y = images[idx].to(device), labels[idx].to(device)
                loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
                g = torch.autograd.grad(loss, params)  # on `device`; the float64 running sum on the CPU
                total += torch.cat([t.reshape(-1) for t in g]).double().cpu()
                done = stop
            out[r, j] = float(total.norm() / k)
    return out


def per_sample_gradient_moments(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, device,
                                chunk: int = 256) -> tuple[np.ndarray, float]:
    """(ḡ, mean_i ‖g_i‖²) of the per-sample cross-entropy gradients ``g_i`` (vmap over samples, float64 sums)."""
    model.eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    l = model_loss(model)
    g1 = vmap(grad(lambda p, x, y: l(p, x[None], y[None])), in_dims=(None, 0, 0))  # per-sample gradients
    total, sq = None, 0.0
    for i in range(0, len(labels), chunk):
        G = g1(params, images[i:i + chunk].to(device), labels[i:i + chunk].to(device))
        flat = torch.cat([G[k].reshape(G[k].shape[0], -1) for k in params], 1).double()
        s = flat.sum(0).cpu()  # summed on `device`, the running total on the CPU
        total = s if total is None else total + s
        sq += float((flat * flat).sum())
    n = len(labels)
    return (total / n).numpy(), sq / n


def expected_grad_norm_sq(k, grad_mean_sq: float, sigma2: float, n: int) -> np.ndarray:
    """E‖∇L_k‖² over uniformly random k-subsets of n samples (sampling without replacement)."""
    k = np.asarray(k, dtype=np.float64)
    fpc = (n - k) / (n - 1) if n > 1 else np.zeros_like(k)
    return grad_mean_sq + sigma2 * fpc / k


def claim_test(ks, norms, n: int) -> dict:
    """The paper's "validity increases with more samples" (:func:`validity_increases`) on the least-squares
    slope of log ‖∇L_k‖ against log k over k ≤ n/10. :func:`measure` applies it to the exact root-mean-square
    over all orders: a few sampled orders are too noisy at small k."""
    ks = np.asarray(ks, dtype=float)
    y = np.asarray(norms, dtype=float)
    sel = ks <= max(2, n // 10)
    slope = float(np.polyfit(np.log10(ks[sel]), np.log10(y[sel]), 1)[0]) if sel.sum() >= 3 else float("nan")
    return {"slope_small_k": slope, "decreasing": validity_increases(slope, y[0], y[-1])}


def validity_increases(slope: float, first: float, last: float) -> bool:
    """Fig. 12's claim, "its validity increases with … a larger number of samples", as one rule for every model:
    the log-log slope of ‖∇L_k‖ against k is negative and the norm at the largest k is below that at the smallest."""
    return bool(slope < 0 and last < first)


def measure(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, n_points: int, n_orders: int, seed: int,
            device, chunk: int = 512, progress: bool = False) -> dict:
    """Everything Fig. 12 and the Assumption 1 rows need, at the given weights."""
    n = len(labels)
    ks = k_grid(n, n_points)
    G = order_gradient_norms(model, images, labels, ks, n_orders, seed, device, chunk, progress)
    mean = G.mean(0)
    gbar, msq = per_sample_gradient_moments(model, images, labels, device, max(chunk // 2, 1))
    gbar2 = float(gbar @ gbar)
    sigma2 = max(msq - gbar2, 0.0)
    rms = np.sqrt(expected_grad_norm_sq(ks, gbar2, sigma2, n))
    return dict(k=ks, grad_norms=G, mean=mean, rms_exact=rms, grad_mean=gbar.astype(np.float32),
                grad_norm_full=float(np.sqrt(gbar2)), rms_per_sample_grad_norm=float(np.sqrt(msq)), sigma2=sigma2,
                k_floor=(sigma2 / gbar2) if gbar2 > 0 else None, n_samples=n, **claim_test(ks, rms, n))
