"""Figs. 7-11: the parameters and Hessian blocks of one kind (queries, keys, values, LayerNorms,
feed-forward) during the first training steps, from the shared trajectory (:mod:`.norms`).

The paper's appendix shows these figures without stating a claim; the book describes what they show.
"""
from __future__ import annotations

import numpy as np

from .. import captions
from .dynamics_blocks import TYPES
from .settings import TRAJECTORY
from .spec import FigureSpec, Finding
from ..plotting import WIDTH, new_figure, tensor_label

__all__ = ["compute_type", "plot_entries", "plot_hessian_blocks", "plot_norms", "SPECS"]


def compute_type(figure: str, trajectory) -> tuple[dict, dict]:
    t, kinds = TYPES[figure]
    tm = trajectory.meta
    W = trajectory.arrays["w"]
    pieces = [(n, sh, o) for n, sh, o in zip(tm["param_names"], tm["param_shapes"], tm["param_offsets"])
              if n.startswith("blocks.0.") and n.split(".")[2] in kinds]
    arrays = dict(steps=trajectory.arrays["steps"], img=trajectory.arrays[f"img_{t}"],
                  hess_fro=trajectory.arrays[f"fro_{t}"], hess_spec=trajectory.arrays[f"spec_{t}"])
    for k, (n, sh, o) in enumerate(pieces):
        arrays[f"w{k}"] = W[:, o:o + int(np.prod(sh))]
    arrays["param_fro"] = np.linalg.norm(np.concatenate([arrays[f"w{k}"] for k in range(len(pieces))], 1)
                                         .astype(np.float64), axis=1)
    if t in ("layernorm", "feedforward"):
        arrays["pair_fro"] = trajectory.arrays["pair_fro"][:, 0 if t == "layernorm" else 1]
    meta = dict(profile=tm["profile"], block_type=t, groups=[f"block0.{k}" for k in kinds],
                tensors=[dict(name=n, shape=sh) for n, sh, _ in pieces], display_steps=tm["display_steps"],
                pool=tm["pools"][t], batch_size=tm["batch_size"], hessian_method=tm["hessian_method"])
    return arrays, meta


def _entry_matrix(result, row: int) -> tuple[np.ndarray, str]:
    """The block's parameters at one snapshot as a 2-D array for display."""
    tensors = result.meta["tensors"]
    mats = [result.arrays[f"w{k}"][row].reshape(t["shape"]) for k, t in enumerate(tensors)]
    kind = result.meta["block_type"]
    if kind == "layernorm":  # γ − 1 and β as rows (γ starts at 1, β at 0)
        rows = [m - 1.0 if t["name"].endswith("weight") else m for m, t in zip(mats, tensors)]
        return np.stack(rows), r"rows: $\gamma_1 - 1$, $\beta_1$, $\gamma_2 - 1$, $\beta_2$"
    if kind == "feedforward":  # W_1 (d × d_ff) over W_2ᵀ (d × d_ff); biases left out
        w1 = next(m for m, t in zip(mats, tensors) if t["name"].endswith("ffn1.weight"))
        w2 = next(m for m, t in zip(mats, tensors) if t["name"].endswith("ffn2.weight"))
        return np.concatenate([w1, w2.T], 0), r"$W_1$ (top) over $W_2^\top$ (bottom)"
    return mats[0], "rows: inputs, columns: outputs"


def plot_entries(result):
    """The parameters' entries at the displayed steps."""
    steps = list(result.arrays["steps"])
    shown = result.meta["display_steps"]
    mats = [_entry_matrix(result, steps.index(st)) for st in shown]
    lim = max(float(np.abs(m).max()) for m, _ in mats)
    tall = mats[0][0].shape[0] > 2 * mats[0][0].shape[1]
    fig = new_figure(WIDTH, 3.6 if not tall else 5.0)
    axs = fig.subplots(1, len(shown))
    for ax, st, (M, how) in zip(axs, shown, mats):
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_title(f"step {st}" + (" (all 0)" if not np.any(M) else ""))
        ax.set_xticks([])
        ax.set_yticks([])
    axs[0].set_ylabel(mats[0][1])
    fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.02, label="entry")
    return fig


def plot_hessian_blocks(result):
    """log10 |H| of the block type's Hessian at the displayed steps."""
    a, meta = result.arrays, result.meta
    shown = meta["display_steps"]
    imgs = [im.astype(np.float64) for im in a["img"]]
    vmin = max(-6.0, min(float(np.nanpercentile(i, 1)) for i in imgs))
    vmax = max(float(np.nanmax(i)) for i in imgs)
    fig = new_figure(WIDTH, 3.4)
    axs = fig.subplots(1, len(shown))
    n = sum(int(np.prod(t["shape"])) for t in meta["tensors"])
    edges = np.cumsum([0] + [int(np.prod(t["shape"])) for t in meta["tensors"]])
    for ax, st, img in zip(axs, shown, imgs):
        im = ax.imshow(img, extent=(0, n, n, 0), cmap="viridis", vmin=vmin, vmax=vmax)
        for e in edges[1:-1]:
            ax.axhline(e, color="white", lw=0.5)
            ax.axvline(e, color="white", lw=0.5)
        ax.set_title(f"step {st}")
        ax.set_xticks([])
        ax.set_yticks([])
    pool = f" (means over {meta['pool']}×{meta['pool']} cells)" if meta["pool"] > 1 else ""
    fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.02, label=r"$\log_{10}(|H_{ij}| + 10^{-6})$")
    fig.suptitle(", ".join(tensor_label(t["name"]) for t in meta["tensors"]) + pool)
    return fig


def plot_norms(result):
    """Parameter norm and Hessian-block norms over the first training steps."""
    a = result.arrays
    fig = new_figure(WIDTH, 4.0)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(a["steps"], a["param_fro"], marker="o", ms=3)
    ax1.set_xlabel("training step")
    ax1.set_ylabel(r"$\|W\|_F$")
    ax1.set_title("parameters")
    ax1.grid(alpha=0.3)
    ax2.plot(a["steps"], a["hess_fro"], marker="o", ms=3, label=r"$\|H\|_F$")
    ax2.plot(a["steps"], a["hess_spec"], marker="s", ms=3, ls="--", label=r"$\|H\|_2$")
    if "pair_fro" in a:
        ax2.plot(a["steps"], a["pair_fro"], lw=1, label="cross block, " + r"$\|\cdot\|_F$")
    ax2.set_yscale("log")
    ax2.set_xlabel("training step")
    ax2.set_title("Hessian block")
    ax2.grid(alpha=0.3)
    fig.legend(*ax2.get_legend_handles_labels(), loc="outside lower center", ncol=3)  # never over a curve
    return fig


def key_numbers(r) -> dict:
    """The numbers a reader would cite, for the reproduction report (published beside recomputed)."""
    a = r.arrays
    return {"‖H‖_F at the last step": float(a["hess_fro"][-1]), "‖H‖_2 at the last step": float(a["hess_spec"][-1]),
            "‖W‖_F at the last step": float(a["param_fro"][-1])}


# ----------------------------------------------------------------------------- the results of this module
def _type_spec(fig: str, n: int, finding: Finding | None = None) -> FigureSpec:
    t = TYPES[fig][0]
    return FigureSpec(fig, f"Fig. {n}", f"fig{n:02d}_{t}", f"{t}: entries and Hessian blocks over the first training steps",
                      TRAJECTORY, lambda j: compute_type(j.name, j.deps["trajectory"]),
                      {"entries": plot_entries, "hessian": plot_hessian_blocks, "norms": plot_norms},
                      {p: captions.dynamics(fig, p) for p in ("entries", "hessian", "norms")},
                      depends=("trajectory",), override_key="trajectory", finding=finding, key_numbers=key_numbers)


# the text of Figs. 7-11 describes the blocks over the first 1,000 steps and makes no claim
SPECS = (_type_spec("fig7", 7, Finding("figs7_11", "Figs. 7–11: the blocks over the first 1,000 steps",
                                       "notebooks/fig07_11_training_dynamics", claim=False)),
         *(_type_spec(f"fig{n}", n) for n in (8, 9, 10, 11)))
