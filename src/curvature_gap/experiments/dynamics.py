"""Figs. 7-11: the parameters and Hessian blocks of one kind (queries, keys, values, LayerNorms, feed-forward)
during the first training steps, on either model, cut from the trajectory of :mod:`.trajectory`.

On the theorem's model (``fig7`` … ``fig11``): the block type's entries, its Hessian block at the displayed steps
and both norms at every snapshot; on the authors' model (``fig7_authors`` …): the Hessian over their notebook's
parameter list at each of their steps (Fig. 11 also over the feed-forward weights its caption names). The paper
states no claim about these figures.
"""
from __future__ import annotations

import numpy as np

from .. import captions
from .dynamics_blocks import TYPES
from .settings import TRAJECTORY
from .spec import FigureSpec, Finding, Point
from .trajectory import AUTHORS_NEEDS, AUTHORS_SETTINGS, lists_of
from ..plotting import WIDTH, new_axes, tensor_label

__all__ = ["compute_type", "plot_entries", "plot_hessian_blocks", "plot_list_hessian", "plot_norms", "SPECS"]


# ----------------------------------------------------------------------------- the computation (a cut)
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


# ----------------------------------------------------------------------------- plots (draw results; compute nothing)
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
    fig, axs = new_axes(WIDTH, 3.6 if not tall else 5.0, 1, len(shown))
    for ax, st, (M, how) in zip(axs, shown, mats):
        im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_title(f"step {st}" + (" (all 0)" if not np.any(M) else ""))
        ax.set_xticks([])
        ax.set_yticks([])
    axs[0].set_ylabel(mats[0][1])
    fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.02, label="entry")
    return fig


def _hessian_panels(fig, axs, steps, images, n: int, edges=()):
    """log10 |H| of one block at each step, one panel each on one colour scale, with its colour bar; ``edges``:
    the offsets where the block's tensors meet (drawn as white lines); panels beyond the steps are hidden."""
    imgs = [im.astype(np.float64) for im in images]
    vmin = max(-6.0, min(float(np.nanpercentile(i, 1)) for i in imgs))
    vmax = max(float(np.nanmax(i)) for i in imgs)
    for ax, st, img in zip(axs, steps, imgs):
        im = ax.imshow(img, extent=(0, n, n, 0), cmap="viridis", vmin=vmin, vmax=vmax)
        for e in edges:
            ax.axhline(e, color="white", lw=0.5)
            ax.axvline(e, color="white", lw=0.5)
        ax.set_title(f"step {int(st)}")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axs[len(imgs):]:
        ax.set_visible(False)
    fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.02, label=r"$\log_{10}(|H_{ij}| + 10^{-6})$")


def plot_hessian_blocks(result):
    """The theorem's model: log10 |H| of the block type's Hessian at the displayed steps."""
    meta = result.meta
    fig, axs = new_axes(WIDTH, 3.4, 1, len(meta["display_steps"]))
    edges = np.cumsum([0] + [int(np.prod(t["shape"])) for t in meta["tensors"]])
    _hessian_panels(fig, axs, meta["display_steps"], result.arrays["img"], int(edges[-1]), edges[1:-1])
    pool = f" (means over {meta['pool']}×{meta['pool']} cells)" if meta["pool"] > 1 else ""
    fig.suptitle(", ".join(tensor_label(t["name"]) for t in meta["tensors"]) + pool)
    return fig


def plot_list_hessian(result, g: str):
    """The authors' model: log10 |H| over their list ``g`` at each step, as their figure draws it."""
    a, info = result.arrays, result.meta["lists"][g]
    cols = 3
    rows = -(-len(a[f"img_{g}"]) // cols)
    fig, axs = new_axes(WIDTH, 2.5 * rows + 0.9, rows, cols, squeeze=False)
    _hessian_panels(fig, axs.ravel(), a["steps"], a[f"img_{g}"], info["n"])
    pool = f", means over {info['pool']}×{info['pool']} cells" if info["pool"] > 1 else ""
    fig.suptitle(f"{info['label']}: {info['n']} parameters{pool}")
    return fig


def _list_parts(g: str) -> tuple:
    """(plot, the caption's message, key numbers) of the authors' Hessian over their list ``g``: the message is its
    spectral norm at the first and last step."""
    def plot(result):
        return plot_list_hessian(result, g)
    plot.__doc__ = f"log10 |H| of the list {g!r} at each step, as their figure draws it."  # the figure's alt text

    def message(result) -> str:
        a, info = result.arrays, result.meta["lists"][g]
        s = a[f"spec_{g}"]
        return (f"The spectral norm of the {info['label']} block goes from {float(s[0]):.3g} at step {int(a['steps'][0])} "
                f"to {float(s[-1]):.3g} at step {int(a['steps'][-1])}.")

    def numbers(r) -> dict:
        return {f"‖H‖_2 {g} at the last step": float(r.arrays[f"spec_{g}"][-1]),
                f"‖W‖_F {g} at the last step": float(r.arrays[f"param_{g}"][-1])}
    return plot, message, numbers


def plot_norms(result):
    """Parameter norm and Hessian-block norms over the first training steps."""
    a = result.arrays
    fig, (ax1, ax2) = new_axes(WIDTH, 4.0, 1, 2)
    ax1.plot(a["steps"], a["param_fro"], marker="o", ms=3)
    ax1.set_ylabel(r"$\|W\|_F$")
    ax2.plot(a["steps"], a["hess_fro"], marker="o", ms=3, label=r"$\|H\|_F$")
    ax2.plot(a["steps"], a["hess_spec"], marker="s", ms=3, ls="--", label=r"$\|H\|_2$")
    if "pair_fro" in a:
        ax2.plot(a["steps"], a["pair_fro"], lw=1, label="cross block, " + r"$\|\cdot\|_F$")
    ax2.set_yscale("log")
    for ax, title in ((ax1, "parameters"), (ax2, "Hessian block")):
        ax.set(xlabel="training step", title=title)
        ax.grid(alpha=0.3)
    fig.legend(*ax2.get_legend_handles_labels(), loc="outside lower center", ncol=3)  # never over a curve
    return fig


def key_numbers(r) -> dict:
    a = r.arrays
    return {"‖H‖_F at the last step": float(a["hess_fro"][-1]), "‖H‖_2 at the last step": float(a["hess_spec"][-1]),
            "‖W‖_F at the last step": float(a["param_fro"][-1])}


# ----------------------------------------------------------------------------- the results of this module
def _figure(fig: str, finding: Finding | None = None) -> FigureSpec:
    """Fig. ``n`` on the theorem's model (its block type, cut from its trajectory) and on the authors' model (their
    list's Hessian; Fig. 11 also over the feed-forward weights its caption names)."""
    n = int(fig[3:])
    g = TYPES[fig][0]  # the block type, and the authors' parameter list of that name (trajectory.LISTS)
    lists = (g, "ffn_weights") if g == "feedforward" else (g,)
    return FigureSpec(
        fig, f"Fig. {n}", f"fig{n:02d}_{g}", f"{g}: entries and Hessian blocks over the first training steps",
        (Point(AUTHORS_SETTINGS, needs=AUTHORS_NEEDS, depends=("trajectory",),
               plots={("hessian" if x == g else x): _list_parts(x)[0] for x in lists},
               messages={("hessian" if x == g else x): _list_parts(x)[1] for x in lists},
               key_numbers=_list_parts(g)[2]),
         Point(TRAJECTORY, finding, depends=("trajectory",), override_key="trajectory")),
        lambda j: (lists_of(j.deps["trajectory"], lists) if j.settings.model == "authors"
                   else compute_type(fig, j.deps["trajectory"])),
        {"entries": plot_entries, "hessian": plot_hessian_blocks, "norms": plot_norms},
        {p: captions.dynamics(fig, p) for p in ("entries", "hessian", "norms")}, key_numbers=key_numbers)


# the text of Figs. 7-11 describes the blocks over the first 1,000 steps and makes no claim
SPECS = (_figure("fig7", Finding("Figs. 7–11: the blocks over the first 1,000 steps",
                                 "notebooks/fig07_11_training_dynamics", claim=False, key="figs7_11")),
         *(_figure(f"fig{n}") for n in (8, 9, 10, 11)))
