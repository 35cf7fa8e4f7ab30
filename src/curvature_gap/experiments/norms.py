"""Fig. 5 (parameter-block and Hessian-block norms) and Figs. 7-11 (per-block entries and norms
during the first training steps), from one shared trajectory of snapshots.

The trajectory replays the first ``n_steps`` steps of the very training run the trained model
comes from (``train.train`` with ``max_steps``, which resumes exactly), so snapshot ``s`` is the
model after ``s`` optimiser steps. At each snapshot the dense Hessian of the fixed batch (the first
training images) is computed; its block norms are kept for every snapshot and the diagonal blocks
of Figs. 7-11 at the display steps. Norms are Frobenius norms unless marked spectral.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..io import load_torch
from .common import (Context, add_footer, block_norms, fast_hessian, flat_params, group_axes, group_table, new_figure,
                     pooled_log_image, remove_tree, short_label, spectral_norm_sym)
from .settings import NormsSettings, TrajectorySettings
from .store import save_npz_atomic

# figure -> (block type, groups of block 0, paper file name)
TYPES = {
    "fig7": ("queries", ("query",)),
    "fig8": ("keys", ("key",)),
    "fig9": ("values", ("value",)),
    "fig10": ("layernorm", ("ln1", "ln2")),
    "fig11": ("feedforward", ("ffn1", "ffn2")),
}


def _type_index(meta: dict, kinds) -> np.ndarray:
    idx = []
    for k in kinds:
        g = meta["group_names"].index(f"block0.{k}")
        idx.append(np.arange(meta["group_starts"][g], meta["group_stops"][g]))
    return np.concatenate(idx)


def snapshot_steps(s: TrajectorySettings, total_steps: int) -> list[int]:
    n = min(s.n_steps, total_steps)
    steps = {st for st in s.steps if st <= n} | {0, n} | {d for d in s.display_steps if d <= n}
    return sorted(steps)


def _model_at_step(ctx: Context, s: TrajectorySettings, run, step: int):
    """The training run's model after ``step`` steps (``run`` = (dir, cfg, datasets))."""
    from ..train import train

    out, cfg, ds = run
    if step == 0:
        return ctx.init_model(s.model)
    for attempt in range(2):
        train(cfg, out, device=ctx.device, datasets=ds, max_steps=step, progress=False)
        state = load_torch(out / "last.pt")
        if state["step"] == step:
            break
        # the replay directory ran past this snapshot (its partial results were removed): start over
        remove_tree(out)
    else:  # pragma: no cover
        raise RuntimeError(f"could not replay training to step {step} in {out}")
    m = ctx.init_model(s.model)
    m.load_state_dict(state["model"])
    return m.eval()


def compute_trajectory(ctx: Context, s: TrajectorySettings, chash: str, store) -> tuple[dict, dict]:
    cfg = ctx.train_cfg(s.model)
    ds = ctx.datasets_for(s.model)
    steps_per_epoch = math.ceil(len(ds.train) / cfg.batch_size)
    steps = snapshot_steps(s, steps_per_epoch * cfg.epochs)
    out = ctx.run_dir(s.model) / f"trajectory-{chash}"
    partial = store.partial_dir("trajectory", chash)
    partial.mkdir(parents=True, exist_ok=True)
    batch = ctx.first_batch(s.model, s.batch_size)
    gt = group_table(ctx.init_model(s.model))
    starts, stops = gt["group_starts"], gt["group_stops"]
    type_idx = {t: _type_index(gt, kinds) for t, kinds in TYPES.values()}
    from tqdm.auto import tqdm

    method = None
    ctx.log(f"trajectory: {len(steps)} snapshots over the first {steps[-1]} steps, dense Hessian of {s.batch_size} images each")
    for step in tqdm(steps, desc="trajectory snapshots", unit="snap", disable=not ctx.progress):
        f = partial / f"step_{step:06d}.npz"
        if f.exists():
            try:
                with np.load(f, allow_pickle=False) as z:
                    if int(z["step"]) == step:
                        continue
            except Exception:  # noqa: BLE001 - an unreadable partial file is recomputed
                pass
        m = _model_at_step(ctx, s, (out, cfg, ds), step)
        t0 = time.perf_counter()
        H, method = fast_hessian(m, batch, s.fast_chunk)
        seconds = time.perf_counter() - t0
        H = H.numpy().astype(np.float64)
        nb = block_norms(H, starts, stops)
        spec = np.array([spectral_norm_sym(H[a:b, a:b]) for a, b in zip(starts, stops)])
        with torch.no_grad():
            loss = float(torch.nn.functional.cross_entropy(m(batch[0]), batch[1]))
        rec = dict(step=step, w=flat_params(m), pair_fro=nb["fro"], diag_spec=spec, loss=loss,
                   method=np.array(method), seconds=seconds)
        for t, idx in type_idx.items():
            Ht = H[np.ix_(idx, idx)]
            rec[f"fro_{t}"] = np.linalg.norm(Ht)
            rec[f"spec_{t}"] = spectral_norm_sym(Ht)
            if step in s.display_steps:
                rec[f"H_{t}"] = Ht.astype(np.float32)
        save_npz_atomic(f, rec)

    recs = []
    for step in steps:
        with np.load(partial / f"step_{step:06d}.npz", allow_pickle=False) as z:
            recs.append({k: z[k] for k in z.files})
    method = str(recs[-1]["method"])
    arrays = dict(
        steps=np.array(steps), w=np.stack([r["w"] for r in recs]).astype(np.float32),
        pair_fro=np.stack([r["pair_fro"] for r in recs]), diag_spec=np.stack([r["diag_spec"] for r in recs]),
        loss=np.array([float(r["loss"]) for r in recs]), hessian_seconds=np.array([float(r["seconds"]) for r in recs]),
    )
    shown = [st for st in steps if st in s.display_steps]
    for t in type_idx:
        arrays[f"fro_{t}"] = np.array([float(r[f"fro_{t}"]) for r in recs])
        arrays[f"spec_{t}"] = np.array([float(r[f"spec_{t}"]) for r in recs])
        arrays[f"H_{t}"] = np.stack([r[f"H_{t}"] for r in recs if int(r["step"]) in s.display_steps])
    meta = dict(profile=ctx.profile, model=s.model, hessian_method=method, display_steps=shown,
                train_config_hash=cfg.hash(), replay_dir=str(out), batch_size=s.batch_size, **gt)
    return arrays, meta


def finish_trajectory(ctx: Context, chash: str, store) -> None:
    """Remove the replay run and partial snapshots once the trajectory result is saved."""
    remove_tree(store.partial_dir("trajectory", chash))
    for d in ctx.runs_dir.glob(f"*/trajectory-{chash}"):
        remove_tree(d)


def param_group_norms(w: np.ndarray, starts, stops) -> np.ndarray:
    """Frobenius norm of each parameter group (rows of ``w`` are snapshots)."""
    w = np.atleast_2d(w).astype(np.float64)
    return np.stack([np.linalg.norm(w[:, a:b], axis=1) for a, b in zip(starts, stops)], axis=1)


# -------------------------------------------------------------------- Fig. 5
def compute_norms(ctx: Context, s: NormsSettings, deps: dict) -> tuple[dict, dict]:
    """Block norms at init and trained (the Hessians of Figs. 3 and 4) and over the trajectory."""
    out, meta = {}, {}
    t = deps["trajectory"]
    for tag, fig in (("init", "fig3"), ("trained", "fig4")):
        r = deps[fig]
        m = ctx.init_model(s.model) if tag == "init" else ctx.trained_model(s.model)[0]
        starts, stops = r["group_starts"], r["group_stops"]
        H = r["H"]
        out[f"param_fro_{tag}"] = param_group_norms(flat_params(m), starts, stops)[0]
        out[f"hess_fro_{tag}"] = r["block_fro"]
        out[f"hess_max_{tag}"] = r["block_max"]
        out[f"hess_spec_{tag}"] = np.array([spectral_norm_sym(H[a:b, a:b]) for a, b in zip(starts, stops)])
        meta[f"checkpoint_{tag}"] = r["checkpoint"]
        meta[f"batch_size_{tag}"] = r["batch_size"]
        meta.update(group_table(m))
    meta["hessian_method"] = f"curvlinops (Figs. 3-4) at init/trained, {t['hessian_method']} over training"
    out["steps"] = t["steps"]
    out["param_fro_steps"] = param_group_norms(t["w"], meta["group_starts"], meta["group_stops"])
    out["hess_fro_steps"] = np.stack([np.diag(p) for p in t["pair_fro"]])
    out["hess_spec_steps"] = t["diag_spec"]
    names = meta["group_names"]
    block = [i for i, n in enumerate(names) if n.startswith("block")]
    lab = [short_label(n) for n in names]
    rank = lambda v: [lab[i] for i in sorted(block, key=lambda i: -v[i])]  # noqa: E731
    meta.update(
        profile=ctx.profile, model=s.model, batch_size=t["batch_size"],
        norms="Frobenius norm of each parameter group and of each (group, group) Hessian block; "
              "spectral norms of the diagonal blocks are in hess_spec_*",
        block_params_by_fro_trained=rank(out["param_fro_trained"]),
        block_hessians_by_fro_trained=rank(np.diag(out["hess_fro_trained"])),
        block_hessians_by_fro_init=rank(np.diag(out["hess_fro_init"])),
        trajectory_steps=int(t["steps"][-1]),
    )
    return out, meta


def _bar_pair(ax, labels, a, b, ylabel, title):
    x = np.arange(len(labels))
    ax.bar(x - 0.2, a, 0.4, label="initialisation", color="tab:blue")
    ax.bar(x + 0.2, b, 0.4, label="trained", color="tab:orange")
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=90, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def _lines(ax, steps, Y, labels, ylabel, title, final=None):
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    for i, lab in enumerate(labels):
        ax.plot(steps, Y[:, i], color=cmap(i % 10), lw=1.2, label=lab)
        if final is not None:
            ax.plot([steps[-1] * 1.04], [final[i]], marker="*", color=cmap(i % 10), ms=7, ls="none")
    ax.set_yscale("log")
    ax.set_xlabel("training step", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)


def plot_norms(result):
    a, meta = result.arrays, result.meta
    nb = sum(1 for n in meta["group_names"] if n.endswith(".query"))
    labels = [short_label(n, nb) for n in meta["group_names"]]
    fig = new_figure(15, 8.5)
    axs = fig.subplots(2, 3)
    _bar_pair(axs[0, 0], labels, a["param_fro_init"], a["param_fro_trained"], "‖W_g‖_F", "(a) parameter-block norms")
    _bar_pair(axs[0, 1], labels, np.diag(a["hess_fro_init"]), np.diag(a["hess_fro_trained"]), "‖H_gg‖_F",
              "(b) Hessian-block norms (diagonal blocks)")
    steps = a["steps"]
    _lines(axs[1, 0], steps, a["param_fro_steps"], labels, "‖W_g‖_F",
           f"(d) parameter-block norms, first {steps[-1]} steps (★ trained)", a["param_fro_trained"])
    _lines(axs[1, 1], steps, a["hess_fro_steps"], labels, "‖H_gg‖_F",
           f"(e) Hessian-block norms, first {steps[-1]} steps (★ trained)", np.diag(a["hess_fro_trained"]))
    axs[1, 0].legend(fontsize=7, ncol=2)
    G = len(labels)
    for ax, key, title in ((axs[0, 2], "hess_fro_init", "(c) log10 ‖H_gh‖_F at initialisation"),
                           (axs[1, 2], "hess_fro_trained", "(f) log10 ‖H_gh‖_F trained")):
        M = np.log10(a[key] + 1e-30)
        im = ax.imshow(M, cmap="magma", interpolation="nearest")
        ax.set_xticks(range(G), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(G), labels, fontsize=7)
        for i in range(G):
            for j in range(G):
                ax.text(j, i, f"{M[i, j]:.1f}", ha="center", va="center", fontsize=5.5,
                        color="white" if M[i, j] < np.median(M) else "black")
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(
        f"Parameter-block and Hessian-block Frobenius norms, MNIST 1-block ViT; Hessian of the cross-entropy on "
        f"{meta['batch_size']} training images ({meta['hessian_method']})\n"
        f"trained, largest Hessian blocks: {', '.join(meta['block_hessians_by_fro_trained'][:3])}; "
        f"largest parameter blocks: {', '.join(meta['block_params_by_fro_trained'][:3])}",
        fontsize=9,
    )
    add_footer(fig, result)
    return fig


# -------------------------------------------------------------------- Figs. 7-11
def compute_type(ctx: Context, figure: str, trajectory) -> tuple[dict, dict]:
    t, kinds = TYPES[figure]
    tm = trajectory.meta
    gi = [tm["group_names"].index(f"block0.{k}") for k in kinds]
    names, shapes, offs = tm["param_names"], tm["param_shapes"], tm["param_offsets"]
    W = trajectory["w"]
    pieces = [(n, sh, o) for n, sh, o in zip(names, shapes, offs) if n.startswith("blocks.0.") and n.split(".")[2] in kinds]
    entries = {}
    for n, sh, o in pieces:
        entries[n] = W[:, o : o + int(np.prod(sh))]
    arrays = dict(
        steps=trajectory["steps"], H_display=trajectory[f"H_{t}"], hess_fro=trajectory[f"fro_{t}"],
        hess_spec=trajectory[f"spec_{t}"],
        param_fro=np.linalg.norm(np.concatenate([v for v in entries.values()], axis=1).astype(np.float64), axis=1),
        sub_fro=np.stack([[p[i, j] for i in gi for j in gi] for p in trajectory["pair_fro"]]),
    )
    for k, (n, sh, o) in enumerate(pieces):
        arrays[f"w{k}"] = entries[n]
    meta = dict(
        profile=ctx.profile, block_type=t, groups=[f"block0.{k}" for k in kinds],
        sub_blocks=[f"{short_label('block0.' + a)}-{short_label('block0.' + b)}" for a in kinds for b in kinds],
        tensors=[dict(name=n, shape=sh) for n, sh, _ in pieces], display_steps=tm["display_steps"],
        hessian_method=tm["hessian_method"], batch_size=tm["batch_size"],
        norms="Frobenius (param_fro, hess_fro, sub_fro) and spectral (hess_spec) norms",
    )
    return arrays, meta


def _entry_matrix(result, step_row: int) -> tuple[np.ndarray, str]:
    """The block's parameters at one snapshot as a 2-D array for display."""
    tensors = result.meta["tensors"]
    mats = [result.arrays[f"w{k}"][step_row].reshape(t["shape"]) for k, t in enumerate(tensors)]
    kind = result.meta["block_type"]
    if kind == "layernorm":  # gamma_1 - 1, beta_1, gamma_2 - 1, beta_2 as rows (gamma starts at 1)
        rows = [m - 1.0 if t["name"].endswith("weight") else m for m, t in zip(mats, tensors)]
        return np.stack(rows), "γ − 1 and β (γ starts at 1, β at 0)"
    if kind == "feedforward":  # W_1 (d x d_ff) over W_2ᵀ (d x d_ff); biases left out
        w1 = [m for m, t in zip(mats, tensors) if t["name"].endswith("ffn1.weight")][0]
        w2 = [m for m, t in zip(mats, tensors) if t["name"].endswith("ffn2.weight")][0]
        return np.concatenate([w1, w2.T], 0), "W₁ (top) over W₂ᵀ (bottom); biases not shown"
    return mats[0], "rows: inputs (d_V), columns: outputs (X @ W)"


_TENSOR_LABELS = {"query": "W_Q", "key": "W_K", "value": "W_V", "ln1.weight": "γ₁", "ln1.bias": "β₁",
                  "ln2.weight": "γ₂", "ln2.bias": "β₂", "ffn1.weight": "W₁", "ffn1.bias": "b₁",
                  "ffn2.weight": "W₂", "ffn2.bias": "b₂"}


def tensor_label(name: str) -> str:
    """Short label of a block tensor: W_Q, W_K, W_V, γ₁, β₁, W₁, b₁, W₂, b₂, γ₂, β₂."""
    key = ".".join(name.split(".")[2:])
    return _TENSOR_LABELS.get(key, key)


def plot_type(result):
    a, meta = result.arrays, result.meta
    steps = list(a["steps"])
    shown = meta["display_steps"]
    eps = result.config["settings"]["eps"]
    fig = new_figure(14, 11)
    gs = fig.add_gridspec(3, len(shown), height_ratios=[0.8, 1.2, 0.9])
    mats = [_entry_matrix(result, steps.index(st)) for st in shown]
    lim = max(float(np.abs(m).max()) for m, _ in mats)
    for c, (st, (M, how)) in enumerate(zip(shown, mats)):
        ax = fig.add_subplot(gs[0, c])
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax.set_title(f"parameters, step {st}", fontsize=9)
        ax.tick_params(labelsize=7)
        if meta["block_type"] == "layernorm":
            ax.set_yticks(range(len(meta["tensors"])), [tensor_label(t["name"]) for t in meta["tensors"]], fontsize=8)
        elif meta["block_type"] == "feedforward":
            d = M.shape[0] // 2
            ax.axhline(d - 0.5, color="k", lw=0.6)
            ax.set_yticks([d / 2 - 0.5, 1.5 * d - 0.5], ["W₁", "W₂ᵀ"], fontsize=8)
        if c == 0:
            ax.set_ylabel(how, fontsize=7)
    fig.colorbar(im, ax=[fig.axes[i] for i in range(len(shown))], shrink=0.9, pad=0.01).ax.tick_params(labelsize=7)
    Hs = a["H_display"]
    logs = [np.log10(np.abs(h.astype(np.float64)) + eps) for h in Hs]
    vmin = max(np.log10(eps), min(float(np.percentile(l, 1)) for l in logs))
    vmax = max(float(l.max()) for l in logs)
    hax = []
    sizes = [int(np.prod(t["shape"])) for t in meta["tensors"]]
    edges = np.concatenate([[0], np.cumsum(sizes)])
    tlabels = [tensor_label(t["name"]) for t in meta["tensors"]]
    for c, (st, h) in enumerate(zip(shown, Hs)):
        ax = fig.add_subplot(gs[1, c])
        img, f = pooled_log_image(h, eps, 700)
        n = h.shape[0]
        im2 = ax.imshow(img, extent=(0, n, n, 0), cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
        group_axes(ax, edges[:-1], edges[1:], tlabels, fontsize=8)
        ax.set_title(f"log10(|H| + {eps:g}), step {st}", fontsize=9)
        hax.append(ax)
    fig.colorbar(im2, ax=hax, shrink=0.9, pad=0.01).ax.tick_params(labelsize=7)

    bottom = gs[2, :].subgridspec(1, 2, wspace=0.08)
    ax = fig.add_subplot(bottom[0, 0])
    ax.plot(steps, a["param_fro"], color="tab:blue", marker="o", ms=3)
    ax.set_xlabel("training step", fontsize=8)
    ax.set_ylabel("‖W‖_F (all tensors of the block type)", fontsize=8)
    ax.set_title("parameter norm", fontsize=9)
    ax.grid(alpha=0.3)
    ax2 = fig.add_subplot(bottom[0, 1])
    ax2.plot(steps, a["hess_fro"], label="‖H‖_F", color="tab:red", marker="o", ms=3)
    ax2.plot(steps, a["hess_spec"], label="‖H‖_2", color="tab:purple", ls="--", marker="o", ms=3)
    if len(meta["sub_blocks"]) > 1:
        n_g = int(round(len(meta["sub_blocks"]) ** 0.5))
        for k, name in enumerate(meta["sub_blocks"]):
            if k // n_g > k % n_g:  # H is symmetric: the lower blocks repeat the upper ones
                continue
            ax2.plot(steps, a["sub_fro"][:, k], lw=0.8, alpha=0.8, label=f"‖H_{name}‖_F")
    ax2.set_yscale("log")
    ax2.set_xlabel("training step", fontsize=8)
    ax2.set_title("Hessian-block norms", fontsize=9)
    ax2.legend(fontsize=7, ncol=2)
    ax2.grid(alpha=0.3)
    groups = ", ".join(short_label(g) for g in meta["groups"])
    fig.suptitle(
        f"{meta['block_type'].capitalize()} ({groups}) of the MNIST 1-block ViT during the first {steps[-1]} training steps: "
        f"entries, Hessian block of the cross-entropy on {meta['batch_size']} training images ({meta['hessian_method']}), norms",
        fontsize=9,
    )
    add_footer(fig, result)
    return fig
