"""How every figure of the package looks: one style, page-width sizes, legible text, files with provenance.

Figures are drawn for a book page about 7 inches wide: a figure of width ``WIDTH`` inches shown at page
width keeps its nominal font sizes, and no text is smaller than ``MIN_FONT`` points. Each PNG carries
two text chunks, ``cg:width_in`` and ``cg:min_font_pt``, from which a browser check computes the size
text is actually drawn at on a page. Math in labels uses matplotlib's mathtext (``$\\|H\\|_F$``).
"""
from __future__ import annotations

import io
import math
import os
import tempfile
import warnings
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text

__all__ = ["WIDTH", "MIN_FONT", "STYLE", "new_figure", "min_font_size", "png_bytes", "save_figure",
           "pooled_log_image", "group_axes", "SHORT", "short_label", "tensor_label"]

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


def min_font_size(fig: Figure) -> float:
    """The smallest font size (points) of any visible, non-empty text in ``fig``."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else math.inf


def _metadata(fig: Figure) -> dict:
    return {"cg:width_in": f"{fig.get_figwidth():.3f}", "cg:min_font_pt": f"{min_font_size(fig):.2f}"}


def png_bytes(fig: Figure, dpi: int = 150) -> bytes:
    """The figure as PNG bytes, with the width and smallest-font metadata."""
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # constrained layout notes on tiny axes
        fig.savefig(buf, format="png", dpi=dpi, metadata=_metadata(fig))
    return buf.getvalue()


def save_figure(fig: Figure, stem, dpi: int = 150) -> list[str]:
    """Write ``stem.pdf`` and ``stem.png`` atomically; returns their paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("pdf", "png"):
        target = stem.with_suffix(f".{ext}")
        fd, tmp = tempfile.mkstemp(dir=stem.parent, prefix=f".{target.name}.", suffix=f".{ext}")
        os.close(fd)
        try:
            if ext == "png":
                Path(tmp).write_bytes(png_bytes(fig, dpi))
            else:
                with matplotlib.rc_context(STYLE):
                    fig.savefig(tmp, format="pdf", metadata={"Title": stem.name, "Creator": "curvature-gap"})
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        paths.append(str(target))
    return paths


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


def group_axes(ax, starts, stops, labels, which="xy", color="white", lw=0.6, fontsize=None) -> None:
    """Gridlines at parameter-group boundaries and group labels at their centres."""
    bounds = sorted(set(list(starts) + list(stops)))
    centres = [(a + b) / 2 for a, b in zip(starts, stops)]
    for b in bounds[1:-1]:
        if "x" in which:
            ax.axvline(b, color=color, lw=lw)
        if "y" in which:
            ax.axhline(b, color=color, lw=lw)
    kw = {"fontsize": fontsize} if fontsize else {}
    if "x" in which:
        ax.set_xticks(centres, labels, rotation=90, **kw)
    if "y" in which:
        ax.set_yticks(centres, labels, **kw)
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
    key = ".".join(parts[2:]) if parts[0] == "blocks" else None
    return _TENSOR_LABELS.get(key, name) if key else name
