"""Fig. 12: how well Assumption 1 (grad L_k(w*) = 0 for consecutive k) holds, against k.

The paper does not describe its method. Here: at the trained weights w*, for random orders of the
training samples, ‖∇L_k(w*)‖₂ with L_k the mean cross-entropy of the first k samples, on a log grid of
k from 1 to N (the whole training set, where w* is an approximate minimiser). Assumption 1 holds
exactly when this is 0.

Besides a few sampled orders, the mean square over *all* orders is exact: with per-sample gradients
g_i, their mean ḡ = ∇L_N and σ² = (1/N) Σ‖g_i − ḡ‖², sampling k of N without replacement gives
E‖∇L_k‖² = ‖ḡ‖² + σ² (N − k) / (k (N − 1)). It decays like k^(−1/2) until k ≈ σ²/‖ḡ‖², where it
meets the floor ‖∇L_N(w*)‖.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from .common import Context, add_footer, new_figure
from .settings import AssumptionSettings


def k_grid(n: int, n_points: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, n, n_points)).astype(int))


def gradient_norms(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, ks: np.ndarray,
                   n_permutations: int, seed: int, device, chunk: int = 512, progress: bool = False) -> np.ndarray:
    """‖∇L_k‖₂ at the grid ``ks`` (rows: random orders): running sums of per-chunk gradients."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.eval()
    rng = np.random.default_rng(seed)
    n = len(labels)
    ks = np.asarray(ks)
    out = np.zeros((n_permutations, len(ks)))
    for r in tqdm(range(n_permutations), desc="gradient norms", unit="order", disable=not progress, leave=False):
        perm = torch.from_numpy(rng.permutation(n))
        total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        done = 0
        for j, k in enumerate(ks):
            while done < k:
                stop = min(k, done + chunk)
                idx = perm[done:stop]
                x, y = images[idx].to(device), labels[idx].to(device)
                loss = nn.functional.cross_entropy(model(x), y, reduction="sum")
                g = torch.autograd.grad(loss, params)
                total += torch.cat([t.reshape(-1) for t in g]).double().cpu()
                done = stop
            out[r, j] = float(total.norm() / k)
    return out


def per_sample_gradient_moments(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, device,
                                chunk: int = 256) -> tuple[np.ndarray, float]:
    """(ḡ, mean_i ‖g_i‖²) of the per-sample cross-entropy gradients g_i (vmap over samples, float64 sums)."""
    model.eval()
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss1(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    g1 = vmap(grad(loss1), in_dims=(None, 0, 0))
    total, sq = None, 0.0
    for i in range(0, len(labels), chunk):
        G = g1(params, images[i : i + chunk].to(device), labels[i : i + chunk].to(device))
        flat = torch.cat([G[k].reshape(G[k].shape[0], -1) for k in params], 1).double()
        s = flat.sum(0).cpu()
        total = s if total is None else total + s
        sq += float((flat * flat).sum())
    n = len(labels)
    return (total / n).numpy(), sq / n


def expected_grad_norm_sq(k: np.ndarray, mean_sq_norm_of_mean: float, sigma2: float, n: int) -> np.ndarray:
    """E‖∇L_k‖² over uniformly random k-subsets of n samples (sampling without replacement)."""
    k = np.asarray(k, dtype=np.float64)
    fpc = (n - k) / (n - 1) if n > 1 else np.zeros_like(k)
    return mean_sq_norm_of_mean + sigma2 * fpc / k


def compute_assumption(ctx: Context, s: AssumptionSettings) -> tuple[dict, dict]:
    model, info = ctx.trained_model(s.model)
    tr = ctx.datasets_for(s.model).train
    ks = k_grid(len(tr), s.n_points)
    ctx.log(f"gradient norms of L_k at w* for {len(ks)} values of k up to {len(tr)}, {s.n_permutations} orders")
    G = gradient_norms(model, tr.images, tr.labels, ks, s.n_permutations, s.seed, ctx.torch_device, s.chunk, ctx.progress)
    mean = G.mean(0)
    full = float(G[0, -1]) if ks[-1] == len(tr) else None
    ctx.log("per-sample gradient moments at w* (exact mean over all orders)")
    gbar, msq = per_sample_gradient_moments(model, tr.images, tr.labels, ctx.torch_device, s.chunk // 2 or 1)
    gbar2 = float(gbar @ gbar)
    sigma2 = max(msq - gbar2, 0.0)
    rms = np.sqrt(expected_grad_norm_sq(ks, gbar2, sigma2, len(tr)))
    # slope of the decay over the part of the grid well below N (k <= N / 10)
    sel = ks <= max(2, len(tr) // 10)
    slope = float(np.polyfit(np.log10(ks[sel]), np.log10(mean[sel]), 1)[0]) if sel.sum() >= 3 else None
    meta = dict(
        profile=ctx.profile, model=s.model, n_samples=len(tr), n_permutations=s.n_permutations,
        grad_norm_full=full, grad_norm_k1=float(mean[0]), slope_small_k=slope, checkpoint=info,
        ratio_full_to_k1=(full / float(mean[0])) if full is not None else None,
        grad_norm_full_exact=float(np.sqrt(gbar2)), rms_per_sample_grad_norm=float(np.sqrt(msq)), sigma2=sigma2,
        k_floor=(sigma2 / gbar2) if gbar2 > 0 else None,
        quantity="‖∇L_k(w*)‖₂, L_k = mean cross-entropy of the first k samples of a random order; "
                  "rms_exact = sqrt(E‖∇L_k‖²) over all orders, from the per-sample gradient moments",
    )
    return dict(k=ks, grad_norms=G, mean=mean, rms_exact=rms, grad_mean=gbar.astype(np.float32)), meta


def plot_assumption(result):
    a, meta = result.arrays, result.meta
    k, G, mean = a["k"], a["grad_norms"], a["mean"]
    fig = new_figure(8.5, 6.0)
    ax = fig.subplots()
    for i, row in enumerate(G):
        ax.plot(k, row, color="tab:blue", lw=0.6, alpha=0.35, label="single random orders" if i == 0 else None)
    ax.plot(k, mean, color="tab:blue", lw=1.5, marker="o", ms=3, label=f"mean over {meta['n_permutations']} orders")
    if "rms_exact" in a:
        ax.plot(k, a["rms_exact"], color="k", lw=2, label="√E‖∇L_k‖² over all orders (exact)")
        ref0 = float(a["rms_exact"][0])
    else:
        ref0 = float(mean[0])
    ax.plot(k, ref0 / np.sqrt(k), color="0.5", ls=":", label="k^(−1/2) (i.i.d. reference)")
    if meta.get("k_floor"):
        ax.axvline(meta["k_floor"], color="0.6", lw=0.8, ls="-.",
                   label=f"k = σ²/‖∇L_N‖² = {meta['k_floor']:.3g}: variance meets the floor")
    if meta["grad_norm_full"] is not None:
        ax.axhline(meta["grad_norm_full"], color="tab:red", ls="--", lw=1,
                   label=f"‖∇L_N(w*)‖ = {meta['grad_norm_full']:.2e} (all N = {meta['n_samples']})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("k (number of training samples)")
    ax.set_ylabel("‖∇L_k(w*)‖₂")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ratio = (meta["grad_norm_full_exact"] / meta["rms_per_sample_grad_norm"]) if "rms_per_sample_grad_norm" in meta else None
    fig.suptitle(
        "Validation of Assumption 1 (∇L_k(w*) = 0): gradient norm of the k-sample loss at the trained MNIST model\n"
        + (f"‖∇L_N(w*)‖ / rms_i ‖∇l_i(w*)‖ = {ratio:.2e}: the gradient is small but not 0 for any k"
           if ratio is not None else ""),
        fontsize=9,
    )
    add_footer(fig, result)
    return fig
