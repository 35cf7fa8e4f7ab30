"""How every figure of the package looks: one style, page-width sizes, legible text, files with provenance.

Figures are drawn for a book page about 7 inches wide: a figure of width ``WIDTH`` inches shown at page
width keeps its nominal font sizes, and no text is smaller than ``MIN_FONT`` points. Each PNG carries
two text chunks, ``cg:width_in`` and ``cg:min_font_pt``, from which a browser check computes the size
text is actually drawn at on a page. Math in labels uses matplotlib's mathtext (``$\\|H\\|_F$``).
"""
from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text

# the math layers' constants that their figures need (they never import this module: no cycle)
from .bounds.sweeps import THEOREM1_SETTINGS
from .io import atomic_write_bytes
from .theory.block import BLOCK_PARAMS

__all__ = ["WIDTH", "MIN_FONT", "STYLE", "new_figure", "new_axes", "min_font_size", "png_bytes", "save_figure",
           "pooled_log_image", "group_axes", "SHORT", "short_label", "tensor_label",
           "plot_diagonal_norms_under_input_scaling", "plot_second_difference_along_W1",
           "plot_norms_as_row_flattens", "plot_theorem1_sweeps"]

WIDTH = 7.2   # inches: a book page's content width, so that fonts keep their nominal size
MIN_FONT = 9.0
STYLE = {
    "font.size": 10.5, "axes.titlesize": 11, "axes.labelsize": 10.5, "xtick.labelsize": 9.5, "ytick.labelsize": 9.5,
    "legend.fontsize": 9.5, "figure.titlesize": 11.5, "axes.grid": False, "axes.spines.top": False,
    "axes.spines.right": False, "image.interpolation": "nearest", "savefig.dpi": 150, "figure.dpi": 150,
    "mathtext.fontset": "dejavusans",
}


def new_figure(width: float = WIDTH, height: float = 4.2) -> Figure:
    """A matplotlib Figure (no pyplot state) in the package style, constrained layout."""
    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(width, height), layout="constrained")


def new_axes(width: float, height: float, *grid, **kw) -> tuple:
    """(fig, axes): :func:`new_figure` and its ``Figure.subplots(*grid, **kw)``."""
    fig = new_figure(width, height)
    return fig, fig.subplots(*grid, **kw)


def min_font_size(fig: Figure) -> float:
    """The smallest font size (points) of any visible, non-empty text in ``fig``."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else math.inf


def png_bytes(fig: Figure, dpi: int = 150) -> bytes:
    """The figure as PNG bytes, with the width and smallest-font metadata."""
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # constrained layout notes on tiny axes
        meta = {"cg:width_in": f"{fig.get_figwidth():.3f}", "cg:min_font_pt": f"{min_font_size(fig):.2f}"}
        fig.savefig(buf, format="png", dpi=dpi, metadata=meta)
    return buf.getvalue()


def save_figure(fig: Figure, stem, dpi: int = 150) -> list[str]:
    """Write ``stem.pdf``, ``stem.png`` atomically (:func:`curvature_gap.io.atomic_write_bytes`); returns the paths."""
    stem, pdf = Path(stem), io.BytesIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(pdf, format="pdf", metadata={"Title": stem.name, "Creator": "curvature-gap"})
    paths = [str(stem.with_suffix(".pdf")), str(stem.with_suffix(".png"))]
    atomic_write_bytes(paths[0], pdf.getvalue())
    atomic_write_bytes(paths[1], png_bytes(fig, dpi))
    return paths


def loglog_axes(ax, xlabel: str, ylabel: str, title: str, legend_ncol: int, below: float = -0.16) -> None:
    """Log-log axes with labels, a grid at every decade and minor tick, a title and the legend (``legend_ncol``
    columns) below the axes, never over a curve: the axes of the curves against k (Figs. 6 and 12)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, below), ncol=legend_ncol)
    ax.set_title(title)


def pooled_log_image(H: np.ndarray, eps: float, max_cells: int) -> tuple[np.ndarray, int]:
    """``log10(|H| + eps)``, averaged over square f × f cells so that the image has at most ``max_cells``
    pixels a side; returns (image, f)."""
    A = np.log10(np.abs(H).astype(np.float64) + eps)
    n = A.shape[0]
    f = max(1, math.ceil(n / max_cells))
    if f == 1:
        return A, 1
    m = math.ceil(n / f) * f
    P = np.full((m, m), np.nan)
    P[:n, :n] = A
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(P.reshape(m // f, f, m // f, f), axis=(1, 3)), f


def group_axes(ax, starts, stops, labels) -> None:
    """White gridlines at parameter-group boundaries and group labels at their centres, on both axes."""
    bounds = sorted(set(list(starts) + list(stops)))
    centres = [(a + b) / 2 for a, b in zip(starts, stops)]
    for b in bounds[1:-1]:
        ax.axvline(b, color="white", lw=0.6)
        ax.axhline(b, color="white", lw=0.6)
    ax.set_xticks(centres, labels, rotation=90)
    ax.set_yticks(centres, labels)
    ax.tick_params(length=0)


SHORT = {"query": "Q", "key": "K", "value": "V", "ln1": "LN1", "ffn1": "FFN1", "ffn2": "FFN2", "ln2": "LN2"}


def short_label(group: str, n_blocks: int = 1) -> str:
    """Axis label of a parameter group: Q, K, V, LN1, FFN1, FFN2, LN2 (with block index if > 1 block)."""
    if group.startswith("block"):
        b, kind = group[5:].split(".")
        return SHORT.get(kind, kind) + (b if n_blocks > 1 else "")
    return group


_TENSOR_LABELS = {"query": "$W_Q$", "key": "$W_K$", "value": "$W_V$", "ln1.weight": r"$\gamma_1$",
                  "ln1.bias": r"$\beta_1$", "ln2.weight": r"$\gamma_2$", "ln2.bias": r"$\beta_2$",
                  "ffn1.weight": "$W_1$", "ffn1.bias": "$b_1$", "ffn2.weight": "$W_2$", "ffn2.bias": "$b_2$"}


def tensor_label(name: str) -> str:
    """Label of a block tensor (mathtext): $W_Q$, $W_K$, $W_V$, $γ_1$, $β_1$, $W_1$, $b_1$, $W_2$, $b_2$, $γ_2$, $β_2$;
    other tensors (embed.weight, pos, head.bias) keep their names."""
    parts = name.split(".")
    return _TENSOR_LABELS.get(".".join(parts[2:]), name) if parts[0] == "blocks" else name


# ----------------------------------------------------------------------------- figures of the math layers
# The math layers (theory/, exact/, hessian/, bounds/, landscape/) compute; they never import matplotlib
# or this module (tests/test_layering.py). Their figures live here and take the result dicts they return.


def plot_diagonal_norms_under_input_scaling(data: dict):
    """Figure: the diagonal blocks' spectral norms against the input scale
    (:func:`curvature_gap.theory.block.diagonal_norms_under_input_scaling`), each curve labelled at its right end."""
    names = {"1": "$W_1$", "2": "$W_2$", "K": "$W_K$", "Q": "$W_Q$", "V": "$W_V$"}
    fig, ax = new_axes(WIDTH, 4.0)
    s = data["scale"]
    ends = {}
    for p in BLOCK_PARAMS:
        y = data["norms"][p]
        line, = ax.loglog(s, y, "o-", ms=4)
        ends[p] = (float(np.log10(y[-1])), line.get_color())
    # labels at the right ends, pushed apart vertically so that none overlaps another
    logs = [np.log10(v) for v in data["norms"].values()]
    gap = 0.07 * (max(x.max() for x in logs) - min(x.min() for x in logs))
    prev = -np.inf
    for p, (y, color) in sorted(ends.items(), key=lambda kv: kv[1][0]):
        y = max(y, prev + gap)
        ax.text(s[-1] * 1.12, 10 ** y, names[p], va="center", color=color, fontsize=10.5)
        prev = y
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, max(hi, 10 ** (prev + gap)))
    ax.set_xlim(s.min() / 1.2, s.max() * 1.8)
    ax.set_xlabel(r"input scale $s$ (the block is fed $sX$)")
    ax.set_ylabel(r"$\Vert \partial^2 l / \partial W_i^2 \Vert_2$")
    ax.set_title("The query and key blocks follow the input scale; the FFN blocks barely move")
    return fig


def plot_second_difference_along_W1(scan: dict):
    """Figure: ``s(t)`` and its second difference (:func:`curvature_gap.theory.ffn.second_difference_along_W1`), kinks dotted."""
    fig, (top, bottom) = new_axes(WIDTH, 4.6, 2, 1, sharex=True)
    top.plot(scan["t"], scan["s"], lw=1.5)
    bottom.plot(scan["t_inner"], scan["d2"], lw=1.2)
    for ax in (top, bottom):
        for k in scan["kinks"]:
            ax.axvline(k, ls=":", c="0.55", lw=1)
    e = math.log10(scan["h"])
    h = f"10^{{{round(e)}}}" if abs(e - round(e)) < 1e-9 else f"{scan['h']:.2g}"
    top.set_ylabel("$s(t)$")
    top.set_title(r"one output entry $s(t) = S_a(W_1 + tV)$: linear between kinks (dotted)")
    bottom.set_ylabel("second difference")
    bottom.set_title(rf"$(s(t+h) - 2s(t) + s(t-h))/h^2$ with $h = {h}$: zero except at the kinks")
    bottom.set_xlabel("$t$")
    return fig


def plot_norms_as_row_flattens(data: dict):
    """Figure: ‖J_LN‖_2 and ‖H_LN‖_2 against σ_min as one row flattens (:func:`curvature_gap.theory.layernorm.norms_as_row_flattens`)."""
    fig, ax = new_axes(WIDTH, 3.6)
    s = data["sigma_min"]
    i = len(s) // 3
    for key, marker, label, offset, ha, va in (
            ("hessian", "s", r"$\Vert H_{\mathrm{LN}}\Vert_2$", (8, 8), "left", "bottom"),
            ("jacobian", "o", r"$\Vert J_{\mathrm{LN}}\Vert_2$", (-8, -8), "right", "top")):
        ax.loglog(s, data[key], marker + "-", ms=4)
        slope = f"{data[f'slope_{key}']:.2f}".replace("-", "\u2212")
        ax.annotate(f"{label}, slope {slope}", (s[-1 - i], data[key][-1 - i]), xytext=offset,
                    textcoords="offset points", ha=ha, va=va, fontsize=10)
    ax.set_xlabel(r"smallest row standard deviation $\sigma_{\min}$ of the input")
    ax.set_ylabel("spectral norm")
    ax.set_title(r"LayerNorm's slope and curvature grow as $1/\sigma_{\min}$ and $1/\sigma_{\min}^2$")
    return fig


def plot_theorem1_sweeps(records: list[dict]):
    """Theorem 1's bound / exact ``‖H_i‖_2`` against the Q/K balance ``a``, as printed and repaired, for the
    sweeps of :func:`curvature_gap.bounds.sweeps.theorem1_sweeps` (one line per sweep and variant; below 1 the bound is violated)."""
    fig, ax = new_axes(WIDTH, 4.0)
    colors = {"balance": "tab:blue", "minimiser": "tab:green", "uniform": "tab:purple"}
    handles = []  # printed first, then repaired: the legend's two columns
    for check, ls, mk, what in (("thm1.printed", "-", "o", "printed"), ("thm1.repaired", "--", "s", "repaired")):
        for sweep, label in THEOREM1_SETTINGS.items():
            pts = sorted((float(r["x"]), r["ratio"]) for r in records if r["sweep"] == sweep and r["check"] == check)
            if not pts:
                continue
            x, y = zip(*pts)
            h, = ax.plot(x, y, ls=ls, marker=mk, ms=4, color=colors.get(sweep, "tab:gray"), label=f"{what}, {label}")
            handles.append(h)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhspan(1e-3, 1.0, color="tab:red", alpha=0.08, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(bottom=max(1e-3, min(float(np.min(h.get_ydata())) for h in handles) / 3))
    ax.set_xlabel(r"balance $a$: $W_Q \to a W_Q$, $W_K \to W_K/a$ (attention unchanged)")
    ax.set_ylabel(r"bound $M$ / exact $\|H_i\|_2$")
    ax.text(0.99, 0.03, "below 1: the bound is violated", transform=ax.transAxes, ha="right", va="bottom",
            fontsize=9.5, color="tab:red")
    ax.grid(alpha=0.3, which="major")
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False)
    return fig


def plot_dynamics_summary(steps, series: dict):
    """Figs. 7–11 in one panel: the Frobenius norm of each parameter group's Hessian block against the training
    step (log scale), one line per group; ``series`` maps a group's label to its norms at ``steps``."""
    fig, ax = new_axes(WIDTH, 3.6)
    for label, values in series.items():
        ax.plot(steps, values, marker="o", ms=3.5, lw=1.6, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(r"$\|H_{\mathrm{block}}\|_F$")
    ax.legend(ncols=min(len(series), 5), loc="upper center", bbox_to_anchor=(0.5, 1.18), frameon=False)
    return fig
