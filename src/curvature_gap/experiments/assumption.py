"""Fig. 12: how well Assumption 1 (grad L_k(w*) = 0 for consecutive k) holds, against k.

The paper does not describe its method. Here: at the trained weights w*, for random orders of the
training samples, ‖∇L_k(w*)‖₂ with L_k the mean cross-entropy of the first k samples, on a log grid of
k from 1 to N (the whole training set, where w* is an approximate minimiser). Assumption 1 holds
exactly when this is 0; for i.i.d. samples it decays like k^(−1/2) towards ‖∇L_N(w*)‖.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
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


def compute_assumption(ctx: Context, s: AssumptionSettings) -> tuple[dict, dict]:
    model, info = ctx.trained_model(s.model)
    tr = ctx.datasets_for(s.model).train
    ks = k_grid(len(tr), s.n_points)
    ctx.log(f"gradient norms of L_k at w* for {len(ks)} values of k up to {len(tr)}, {s.n_permutations} orders")
    G = gradient_norms(model, tr.images, tr.labels, ks, s.n_permutations, s.seed, ctx.torch_device, s.chunk, ctx.progress)
    mean = G.mean(0)
    full = float(G[0, -1]) if ks[-1] == len(tr) else None
    # slope of the decay over the part of the grid well below N (k <= N / 10)
    sel = ks <= max(2, len(tr) // 10)
    slope = float(np.polyfit(np.log10(ks[sel]), np.log10(mean[sel]), 1)[0]) if sel.sum() >= 3 else None
    meta = dict(
        profile=ctx.profile, model=s.model, n_samples=len(tr), n_permutations=s.n_permutations,
        grad_norm_full=full, grad_norm_k1=float(mean[0]), slope_small_k=slope, checkpoint=info,
        ratio_full_to_k1=(full / float(mean[0])) if full is not None else None,
        quantity="‖∇L_k(w*)‖₂, L_k = mean cross-entropy of the first k samples of a random order",
    )
    return dict(k=ks, grad_norms=G, mean=mean), meta


def plot_assumption(result):
    a, meta = result.arrays, result.meta
    k, G, mean = a["k"], a["grad_norms"], a["mean"]
    fig = new_figure(8.5, 6.0)
    ax = fig.subplots()
    for row in G:
        ax.plot(k, row, color="tab:blue", lw=0.6, alpha=0.35)
    ax.plot(k, mean, color="tab:blue", lw=2, marker="o", ms=3, label=f"mean over {meta['n_permutations']} orders")
    ax.plot(k, mean[0] / np.sqrt(k), color="0.5", ls=":", label="k^(−1/2) (i.i.d. reference)")
    if meta["grad_norm_full"] is not None:
        ax.axhline(meta["grad_norm_full"], color="tab:red", ls="--", lw=1,
                   label=f"‖∇L_N(w*)‖ = {meta['grad_norm_full']:.2e} (all N = {meta['n_samples']})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("k (number of training samples)")
    ax.set_ylabel("‖∇L_k(w*)‖₂")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    sl = meta["slope_small_k"]
    fig.suptitle(
        "Validation of Assumption 1 (∇L_k(w*) = 0): gradient norm of the k-sample loss at the trained MNIST model\n"
        + (f"decay slope for k ≤ N/10: {sl:.3f} (i.i.d.: −0.5); " if sl is not None else "")
        + (f"‖∇L_N‖ / ‖∇l_i‖ = {meta['ratio_full_to_k1']:.2e}" if meta["ratio_full_to_k1"] is not None else ""),
        fontsize=9,
    )
    add_footer(fig, result)
    return fig
