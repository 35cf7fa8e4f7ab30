"""Figs. 3 and 4: the exact Hessian of the cross-entropy on one MNIST batch, at initialisation and trained.

The Hessian is :func:`curvature_gap.hessian.hessian` (exact) and is cross-checked against curvlinops,
the paper's tool, on sampled columns (:func:`.hessians.cross_check`). What is kept is what the figures
and the claim need: the whole Hessian as an image at page resolution, the attention parameters at full
resolution, the statistics of every diagonal block and of every pair of groups, and the blocks the
training-dynamics figures follow at step 0.
"""
from __future__ import annotations

import numpy as np
import torch

from ..model import param_groups, param_slices
from .context import Context
from .dynamics_blocks import blocks_from_dense, snapshot_record, trajectory_groups
from .hessians import (STATISTICS, cross_check, dense, group_pair_statistics, rankings, sample_columns,
                       unit_statistics, units_of)
from ..plotting import WIDTH, group_axes, new_figure, pooled_log_image, short_label
from .settings import HeatmapSettings, TrajectorySettings

__all__ = ["compute_heatmap", "group_table", "plot_hessian", "plot_attention", "plot_block_means", "ATTENTION"]

ATTENTION = ("query", "key", "value", "ln1")


def group_table(model) -> dict:
    """Parameter groups and tensors of ``model`` as JSON-able lists (for results)."""
    groups = param_groups(model)
    sl = param_slices(model)
    return dict(group_names=[g.name for g in groups], group_starts=[g.start for g in groups],
                group_stops=[g.stop for g in groups], param_names=list(sl),
                param_shapes=[list(p.shape) for _, p in model.named_parameters()],
                param_offsets=[s.start for s in sl.values()], n_parameters=groups[-1].stop if groups else 0)


def compute_heatmap(ctx: Context, s: HeatmapSettings, traj: TrajectorySettings) -> tuple[dict, dict]:
    if s.trained:
        model, info = ctx.trained_model(s.model)
    else:
        model, info = ctx.init_model(s.model), ctx.init_info(s.model)
    batch = ctx.first_batch(s.model, s.batch_size)
    gt = group_table(model)
    ctx.log(f"exact Hessian: {gt['n_parameters']} parameters, {s.batch_size} images "
            f"({'trained' if s.trained else 'initialised'} model)")
    with ctx.phase("hessian"):
        H, seconds = dense(model, batch, s.fast_chunk)
    cols = None if s.check_columns is None else sample_columns(model, s.check_columns, s.check_seed)
    ctx.log(f"cross-check against curvlinops on {'all' if cols is None else len(cols)} columns")
    with ctx.phase("cross-check"):
        cc = cross_check(model, batch, H, cols, s.check_batch_f64)
    cc["method"] = "curvature_gap.hessian.hessian (hand-written forward-over-reverse, exact)"
    cc["method_seconds"] = round(seconds, 2)
    Hn = H.cpu().numpy().astype(np.float64)  # computed on ctx's device; to the CPU only to store it (NumPy)
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(model(batch[0]), batch[1]))
    pairs = group_pair_statistics(Hn, gt["group_starts"], gt["group_stops"])
    stats = unit_statistics(Hn, units_of(model))
    img, f = pooled_log_image(Hn, s.eps, s.display_cells)
    names = gt["group_names"]
    att = [i for i, n in enumerate(names) if n.startswith("block0.") and n.split(".")[1] in ATTENTION]
    a0, a1 = gt["group_starts"][att[0]], gt["group_stops"][att[-1]]
    arrays = dict(image=img.astype(np.float16), attention=np.log10(np.abs(Hn[a0:a1, a0:a1]) + s.eps).astype(np.float16),
                  pair_mean=pairs["mean"], pair_max=pairs["max"], pair_fro=pairs["fro"])
    if not s.trained:  # step 0 of the training-dynamics trajectory (same model, same batch)
        rec = snapshot_record(blocks_from_dense(Hn, model), model, True, traj.eps, traj.display_cells)
        arrays.update({f"dyn_{k}": np.asarray(v) for k, v in rec.items()})
    meta = dict(
        profile=ctx.profile, model=s.model, trained=s.trained, batch_size=s.batch_size, batch="first training images",
        loss=loss, cross_check=cc, checkpoint=info, pool=f, attention_range=[int(a0), int(a1)],
        parameters_included="all: positional embedding, patch embedding, transformer block(s), head",
        unit_stats=stats, rankings=rankings(stats), statistics={k: v[0] for k, v in STATISTICS.items()},
        trajectory_groups=trajectory_groups(model), **gt)
    return arrays, meta


# -------------------------------------------------------------------- plots (draw results; compute nothing)
def _labels(meta) -> list[str]:
    nb = sum(1 for n in meta["group_names"] if n.endswith(".query"))
    return [short_label(n, nb) for n in meta["group_names"]]


def _range(a: np.ndarray, eps: float) -> tuple[float, float]:
    a = a.astype(np.float64)
    return max(np.log10(eps), float(np.nanpercentile(a, 1))), float(np.nanmax(a))


def plot_claim_block(ax, meta) -> None:
    """Outline the W_V–W_V diagonal block, the block the paper's claim is about, and name it."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    names = meta["group_names"]
    if "block0.value" not in names:
        return
    i = names.index("block0.value")
    a, b = meta["group_starts"][i], meta["group_stops"][i]
    ax.add_patch(Rectangle((a, a), b - a, b - a, fill=False, edgecolor="#ff3b30", lw=1.6, zorder=5))
    ax.annotate(r"$W_V$–$W_V$: the claim's block", xy=(a, a), xytext=(-6, -2), textcoords="offset points",
                color="#d70015", fontsize=10, fontweight="bold", ha="right", va="top", zorder=6,
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))


def plot_hessian(result):
    """The whole Hessian, log10(|H| + ε), as means over square cells at page resolution."""
    meta, img = result.meta, result.arrays["image"].astype(np.float64)
    eps = result.config["settings"]["eps"]
    n = meta["n_parameters"]
    vmin, vmax = _range(img, eps)
    fig = new_figure(WIDTH, 6.4)
    ax = fig.subplots()
    im = ax.imshow(img, extent=(0, n, n, 0), cmap="viridis", vmin=vmin, vmax=vmax)
    group_axes(ax, meta["group_starts"], meta["group_stops"], _labels(meta))
    plot_claim_block(ax, meta)
    cb = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cb.set_label(r"$\log_{10}(|H_{ij}| + 10^{-6})$")
    state = "trained" if meta["trained"] else "at initialisation"
    pool = f", means over {meta['pool']}×{meta['pool']} cells" if meta["pool"] > 1 else ""
    ax.set_title(f"Hessian of the loss, {n:,} parameters, {state}{pool}")
    return fig


def plot_attention(result):
    """The attention parameters (W_Q, W_K, W_V) and the first LayerNorm, every entry."""
    meta, A = result.meta, result.arrays["attention"].astype(np.float64)
    eps = result.config["settings"]["eps"]
    a0, a1 = meta["attention_range"]
    idx = [i for i, n in enumerate(meta["group_names"]) if n.startswith("block0.") and n.split(".")[1] in ATTENTION]
    labels = _labels(meta)
    vmin, vmax = _range(A, eps)
    fig = new_figure(WIDTH, 6.4)
    ax = fig.subplots()
    im = ax.imshow(A, extent=(a0, a1, a1, a0), cmap="viridis", vmin=vmin, vmax=vmax)
    group_axes(ax, [meta["group_starts"][i] for i in idx], [meta["group_stops"][i] for i in idx],
               [labels[i] for i in idx])
    plot_claim_block(ax, meta)
    cb = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cb.set_label(r"$\log_{10}(|H_{ij}| + 10^{-6})$")
    ax.set_title("Attention parameters and LN1, every entry")
    return fig


def plot_block_means(result):
    """log10 of the mean |H_ij| of every pair of parameter groups."""
    meta = result.meta
    M = np.log10(result.arrays["pair_mean"] + 1e-30)
    labels = _labels(meta)
    G = len(labels)
    fig = new_figure(WIDTH, 6.0)
    ax = fig.subplots()
    im = ax.imshow(M, cmap="magma")
    ax.set_xticks(range(G), labels, rotation=90)
    ax.set_yticks(range(G), labels)
    ax.tick_params(length=0)
    cb = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cb.set_label(r"$\log_{10}$ mean $|H_{ij}|$ over the block")
    ax.set_title("Mean |entry| of each pair of parameter groups")
    return fig
