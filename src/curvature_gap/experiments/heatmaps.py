"""Figs. 3 and 4: the exact Hessian of the cross-entropy on one MNIST batch, at init and trained;
and the fused-LayerNorm comparison (math.md §5.1): the same Hessian through ``torch.nn.LayerNorm``
minus the exact one.

The reported Hessian is computed with curvlinops' ``HessianLinearOperator`` (the paper's tool) on
the model with the hand-written LayerNorm and cross-checked against an independent method.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..model import build_model
from .common import (Context, add_footer, block_norms, curvlinops_hessian, fast_hessian, group_axes,
                     group_table, new_figure, pooled_log_image, short_label)
from .settings import HeatmapSettings

BLOCK_KINDS = ("query", "key", "value", "ln1", "ffn1", "ffn2", "ln2")


def _model_for(ctx: Context, s: HeatmapSettings):
    if s.trained:
        return ctx.trained_model(s.model)
    m = ctx.init_model(s.model)
    from ..io import state_sha256

    cfg = ctx.train_cfg(s.model)
    return m, dict(config_hash=cfg.hash(), weights_sha256=state_sha256(m.state_dict()), steps=0,
                   note="initialisation of the training run (same seed)")


def dominance(meanabs: np.ndarray, maxabs: np.ndarray, names: list[str]) -> dict:
    """Which (group, group) block of the transformer block has the largest entries."""
    idx = [i for i, n in enumerate(names) if n.startswith("block")]
    sub_mean = meanabs[np.ix_(idx, idx)]
    sub_max = maxabs[np.ix_(idx, idx)]
    i, j = np.unravel_index(np.argmax(sub_mean), sub_mean.shape)
    k, l = np.unravel_index(np.argmax(sub_max), sub_max.shape)
    order = np.argsort(-np.diag(sub_mean))
    lab = [short_label(names[t]) for t in idx]
    vv = lab.index("V") if "V" in lab else None
    flat_rank = None
    if vv is not None:
        ranks = np.argsort(-sub_mean, axis=None)
        flat_rank = int(np.where(ranks == vv * len(idx) + vv)[0][0]) + 1
    return dict(
        largest_mean_abs_block=f"{lab[i]}-{lab[j]}", largest_mean_abs=float(sub_mean[i, j]),
        largest_max_abs_block=f"{lab[k]}-{lab[l]}", largest_max_abs=float(sub_max[k, l]),
        diagonal_blocks_by_mean_abs=[lab[t] for t in order],
        value_value_mean_abs=float(sub_mean[vv, vv]) if vv is not None else None,
        value_value_rank_by_mean_abs=flat_rank,
    )


def weight_matrix_ranking(block_mean: np.ndarray, names: list[str]) -> list[str]:
    """Diagonal blocks of the block's weight matrices (Q, K, V, FFN1, FFN2), largest mean |entry| first."""
    idx = [i for i, n in enumerate(names) if n.startswith("block0.") and n.split(".")[1] in ("query", "key", "value", "ffn1", "ffn2")]
    idx.sort(key=lambda i: -block_mean[i, i])
    return [f"{short_label(names[i])}-{short_label(names[i])}" for i in idx]


def compute_heatmap(ctx: Context, s: HeatmapSettings) -> tuple[dict, dict]:
    model, info = _model_for(ctx, s)
    batch = ctx.first_batch(s.model, s.batch_size)
    gt = group_table(model)
    ctx.log(f"curvlinops Hessian: {gt['n_parameters']} parameters, {s.batch_size} images "
            f"({'trained' if s.trained else 'initialised'} model)")
    t0 = time.perf_counter()
    H = curvlinops_hessian(model, batch, s.curvlinops_chunk, ctx.progress).numpy()
    t1 = time.perf_counter()
    Hf, method = fast_hessian(model, batch, s.fast_chunk, ctx.progress)
    t2 = time.perf_counter()
    Hf = Hf.numpy().astype(np.float64)
    scale = float(np.abs(Hf).max())
    cross = dict(
        method=method, max_abs_difference=float(np.abs(H - Hf).max()),
        max_relative_difference=float(np.abs(H - Hf).max() / scale),
        curvlinops_asymmetry=float(np.abs(H - H.T).max() / float(np.abs(H).max())),
        curvlinops_seconds=round(t1 - t0, 2), method_seconds=round(t2 - t1, 2),
    )
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(model(batch[0]), batch[1]))
    norms = block_norms(H, gt["group_starts"], gt["group_stops"])
    meta = dict(
        profile=ctx.profile, model=s.model, trained=s.trained, batch_size=s.batch_size,
        batch="first training images", loss=loss, cross_check=cross, checkpoint=info, dtype=str(H.dtype),
        parameters_included="all: positional embedding, patch embedding, transformer block(s), head",
        dominance=dominance(norms["mean"], norms["max"], gt["group_names"]), **gt,
    )
    arrays = dict(H=H.astype(np.float32), block_fro=norms["fro"], block_max=norms["max"], block_mean=norms["mean"])
    return arrays, meta


def compute_fused_ln(ctx: Context, s: HeatmapSettings, exact) -> tuple[dict, dict]:
    """curvlinops' Hessian through ``torch.nn.functional.layer_norm`` minus the exact Hessian.

    ``exact`` is Fig. 4's result: curvlinops on the same weights and batch with the hand-written
    LayerNorm (itself checked against the independent method), so only the LayerNorm differs.
    """
    model, info = _model_for(ctx, s)
    if info["weights_sha256"] != exact["checkpoint"]["weights_sha256"]:
        raise RuntimeError("Fig. 4's result was computed from other weights than the current checkpoint; "
                           "recompute fig4 (delete its result) and try again")
    cfg = ctx.train_cfg(s.model)
    fused = build_model(cfg.model, seed=None, fused_ln=True, **dict(cfg.model_overrides))
    fused.load_state_dict(model.state_dict())
    fused = fused.to(ctx.torch_device).eval()
    batch = ctx.first_batch(s.model, s.batch_size)
    gt = group_table(model)
    ctx.log("curvlinops Hessian through torch.nn.functional.layer_norm (fused kernel)")
    t0 = time.perf_counter()
    Hfused = curvlinops_hessian(fused, batch, s.curvlinops_chunk, ctx.progress, desc="curvlinops H (fused LN)").numpy()
    seconds = round(time.perf_counter() - t0, 2)
    Hexact = exact["H"].astype(np.float64)
    method = f"curvlinops with the hand-written LayerNorm (Fig. 4; vs {exact['cross_check']['method']}: " \
             f"{exact['cross_check']['max_relative_difference']:.1e})"
    D = Hfused.astype(np.float64) - Hexact
    scale = float(np.abs(Hexact).max())
    nd = block_norms(D, gt["group_starts"], gt["group_stops"])
    ne = block_norms(Hexact, gt["group_starts"], gt["group_stops"])
    with torch.no_grad():
        loss_gap = float(torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
                         - torch.nn.functional.cross_entropy(fused(batch[0]), batch[1]))
    names = gt["group_names"]
    G = len(names)
    worst = np.unravel_index(np.argmax(nd["max"]), (G, G))
    meta = dict(
        profile=ctx.profile, model=s.model, trained=s.trained, batch_size=s.batch_size, checkpoint=info,
        exact_method=method, fused_method="curvlinops HessianLinearOperator through torch.nn.functional.layer_norm",
        max_abs_error=float(np.abs(D).max()), max_abs_exact=scale,
        max_relative_error=float(np.abs(D).max() / scale),
        fused_asymmetry=float(np.abs(Hfused - Hfused.T).max() / scale),
        exact_asymmetry=float(np.abs(Hexact - Hexact.T).max() / scale),
        loss_difference_forward=loss_gap, curvlinops_seconds=seconds,
        worst_block=f"{short_label(names[worst[0]])}-{short_label(names[worst[1]])}",
        blocks_with_relative_error_above_1e_6=int((nd["max"] > 1e-6 * scale).sum()), **gt,
    )
    arrays = dict(D=D.astype(np.float32), err_max=nd["max"], err_fro=nd["fro"], exact_max=ne["max"], exact_fro=ne["fro"])
    return arrays, meta


# -------------------------------------------------------------------- plots
def _labels(meta) -> list[str]:
    nb = sum(1 for n in meta["group_names"] if n.endswith(".query"))
    return [short_label(n, nb) for n in meta["group_names"]]


def plot_heatmap(result):
    """Three panels: the whole Hessian, the attention part at full resolution, block mean |entries|."""
    meta, H = result.meta, result.arrays["H"]
    s = result.config["settings"]
    eps, cells = s["eps"], s["display_cells"]
    labels = _labels(meta)
    starts, stops = meta["group_starts"], meta["group_stops"]
    names = meta["group_names"]
    A = np.log10(np.abs(H.astype(np.float64)) + eps)
    vmin, vmax = max(np.log10(eps), float(np.percentile(A, 1))), float(A.max())

    fig = new_figure(16.5, 6.0)
    axs = fig.subplots(1, 3, width_ratios=[1.0, 1.0, 0.95])
    img, f = pooled_log_image(H, eps, cells)
    n = H.shape[0]
    im = axs[0].imshow(img, extent=(0, n, n, 0), cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
    group_axes(axs[0], starts, stops, labels)
    title = "whole Hessian" + (f" ({f}×{f} cells: mean of log10)" if f > 1 else "")
    axs[0].set_title(f"(a) {title}", fontsize=9)

    att = [i for i, nm in enumerate(names) if nm.split(".")[-1] in ("query", "key", "value", "ln1") and nm.startswith("block0")]
    if att:
        a0, a1 = starts[att[0]], stops[att[-1]]
        sub = A[a0:a1, a0:a1]
        axs[1].imshow(sub, extent=(a0, a1, a1, a0), cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
        group_axes(axs[1], [starts[i] for i in att], [stops[i] for i in att], [labels[i] for i in att], fontsize=8)
        axs[1].set_title("(b) attention parameters of block 1, every entry", fontsize=9)
    cb = fig.colorbar(im, ax=axs[:2], shrink=0.85, pad=0.01)
    cb.set_label(f"log10(|H| + {eps:g})", fontsize=8)

    M = np.log10(result.arrays["block_mean"] + 1e-30)
    G = len(labels)
    im2 = axs[2].imshow(M, cmap="magma", interpolation="nearest")
    axs[2].set_xticks(range(G), labels, rotation=90, fontsize=7)
    axs[2].set_yticks(range(G), labels, fontsize=7)
    for i in range(G):
        for j in range(G):
            axs[2].text(j, i, f"{M[i, j]:.1f}", ha="center", va="center", fontsize=5.5,
                        color="white" if M[i, j] < np.median(M) else "black")
    axs[2].set_title("(c) log10 mean |entry| of each block", fontsize=9)
    cb2 = fig.colorbar(im2, ax=axs[2], shrink=0.85, pad=0.01)
    cb2.set_label("log10 mean |H_ij| over the block", fontsize=8)

    dom, cc = meta["dominance"], meta["cross_check"]
    state = "trained" if meta["trained"] else "at initialisation"
    mats = weight_matrix_ranking(result.arrays["block_mean"], names)
    fig.suptitle(
        f"Hessian of the cross-entropy, MNIST 1-block ViT {state}: {meta['batch_size']} training images, "
        f"{meta['n_parameters']} parameters (all: pos, embed, block, head); loss {meta['loss']:.3f}\n"
        f"curvlinops HessianLinearOperator vs {cc['method']}: max relative difference {cc['max_relative_difference']:.1e}. "
        f"Block of the transformer block with the largest mean |entry|: {dom['largest_mean_abs_block']}; "
        f"largest entry: {dom['largest_max_abs_block']}\n"
        f"weight-matrix diagonal blocks by mean |entry|: {' > '.join(mats)} "
        f"(V-V ranks #{dom['value_value_rank_by_mean_abs']} of all 49 pairs of the block's groups)",
        fontsize=9,
    )
    add_footer(fig, result)
    return fig


def plot_fused_ln(result):
    meta, D = result.meta, result.arrays["D"]
    s = result.config["settings"]
    labels = _labels(meta)
    starts, stops = meta["group_starts"], meta["group_stops"]
    scale = meta["max_abs_exact"]
    floor = 1e-7 * scale
    fig = new_figure(13.5, 6.0)
    axs = fig.subplots(1, 2, width_ratios=[1.0, 0.9])
    img, f = pooled_log_image(D, floor, s["display_cells"])
    n = D.shape[0]
    # a max-pool would be fairer to isolated errors; the mean of log10 keeps the texture visible
    im = axs[0].imshow(img, extent=(0, n, n, 0), cmap="inferno", vmin=np.log10(floor), interpolation="nearest")
    group_axes(axs[0], starts, stops, labels, color="0.7")
    axs[0].set_title("(a) log10(|H_fused − H_exact| + 1e-7·max|H|)" + (f", {f}×{f} cells: mean of log10" if f > 1 else ""), fontsize=9)
    cb = fig.colorbar(im, ax=axs[0], shrink=0.85, pad=0.01)
    cb.set_label("log10 |error|", fontsize=8)

    R = np.log10(result.arrays["err_max"] / scale + 1e-12)
    G = len(labels)
    im2 = axs[1].imshow(R, cmap="inferno", vmin=-12, vmax=max(0.0, float(R.max())), interpolation="nearest")
    axs[1].set_xticks(range(G), labels, rotation=90, fontsize=7)
    axs[1].set_yticks(range(G), labels, fontsize=7)
    for i in range(G):
        for j in range(G):
            axs[1].text(j, i, f"{R[i, j]:.0f}", ha="center", va="center", fontsize=6,
                        color="white" if R[i, j] < -4 else "black")
    axs[1].set_title("(b) log10(max |error| in block / max |H_exact|)", fontsize=9)
    fig.colorbar(im2, ax=axs[1], shrink=0.85, pad=0.01)
    fig.suptitle(
        f"Beyond the paper: curvlinops' Hessian through torch.nn.LayerNorm (fused kernel) minus the exact Hessian, "
        f"MNIST model {'trained' if meta['trained'] else 'at init'}, {meta['batch_size']} images\n"
        f"exact: {meta['exact_method']}\nmax |error| = {meta['max_abs_error']:.2e} "
        f"({meta['max_relative_error']:.1e} of max |H|), worst block {meta['worst_block']}; "
        f"asymmetry of the fused result {meta['fused_asymmetry']:.1e} of max |H| (exact: {meta['exact_asymmetry']:.0e}); "
        f"forward losses agree to {abs(meta['loss_difference_forward']):.0e}",
        fontsize=9,
    )
    add_footer(fig, result)
    return fig
