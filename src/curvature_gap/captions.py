"""What each figure shows, in one sentence computed from the numbers it draws: a caption's message.

A figure's caption opens with its message (shown in bold by :func:`curvature_gap.notebook.figure`). Computed from the
figure's result, it stays true at every profile and changes when the numbers do. Each result declares the message
function of each figure part (``FigureSpec.messages``: ``result.meta``/``result.arrays`` in, TeX-in-``$…$`` text out;
:func:`curvature_gap.experiments.message` looks them up); the theory pages' figures have the functions named for them
below, given the same data. Parameter groups are written in the book's one notation (:func:`unit_tex`).
"""
from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np

from .plotting import short_label

__all__ = ["unit_tex", "u", "ordinal", "heatmap_whole", "heatmap_attention", "heatmap_means", "fig5_parameters",
           "fig5_hessians", "fig5_parameters_over_training", "fig5_hessians_over_training", "dynamics", "fig6", "fig12",
           "theorem7", "fused_ln", "theorem1_sweeps", "layernorm_flattening", "input_scaling", "ffn_kinks", "readable",
           "plural", "code_tex", "split_math"]


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
# a number in e-notation; a full stop after it ends the sentence ("k = 1.06e+05."), a dot and a digit do not
_E_NOTATION = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)e([+-]?\d+)(?![\w]|\.\d)")
_LONG_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d{6,})(?![\w])")
_MINUS = re.compile(r"(?<![\w)\]}])-(?=\d)")


def _sci(m: re.Match) -> str:
    mant, exp = float(m.group(1)), int(m.group(2))
    if mant == 0:
        return "0"
    if exp == 0:
        return f"{mant:g}"
    mant_s = "" if mant == 1 else "−1 × " if mant == -1 else f"{m.group(1)} × "
    return f"{mant_s}10{str(exp).translate(_SUPERSCRIPT)}"


def split_math(text) -> list[str]:
    """``text`` split at its ``$`` signs: even items are words, odd items TeX; one item when the signs do not
    pair up (then nothing is taken for math)."""
    parts = str(text).split("$")
    return parts if len(parts) % 2 == 1 else [str(text)]


def readable(text: str) -> str:
    """Numbers in prose as a reader writes them, outside ``$…$`` (math is left alone): ``1.4e+05`` as
    1.4 × 10⁵ (also at the end of a sentence), ``0e+00`` as 0, ``3.1622776601683795`` to four significant
    digits, ``-0.00`` as 0.00 and a minus sign (−) for a hyphen before a number."""
    parts = split_math(text)
    for i in range(0, len(parts), 2):
        t = _E_NOTATION.sub(_sci, parts[i])
        t = _LONG_FLOAT.sub(lambda m: f"{float(m.group(1)):.4g}", t)
        t = re.sub(r"(?<![\w.])-(0(?:\.0+)?)(?![\d.])", r"\1", t)
        t = re.sub(r"(10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)×", r"\1 times", t)
        parts[i] = _MINUS.sub("−", t)
    return "$".join(parts)


# a symbol of code notation in words (titles, evidence): ∂F/∂W_K, Φ_QK, G_Q, H_f, d_V, σ_min
_TEX_TOKEN = re.compile(r"(?<![\w$\\])(?:∂[A-Za-zΦξ](?:_[A-Za-z0-9]+)?/)?∂?[A-Za-zΦξσ]_(?:\{[^{}$]*\}|[A-Za-z0-9]+)"
                        r"(?:\^(?:\{[^{}$]*\}|T|[0-9]+))?(?![\w])")  # with a power or transpose: W_V^T, σ_min^2
_TEX_GREEK = {"Φ": r"\boldsymbol\Phi", "ξ": r"\boldsymbol\xi", "σ": r"\sigma"}


def _tex_symbol(m: re.Match) -> str:
    def one(sym: str) -> str:
        sym, _, sup = sym.partition("^")
        base, _, sub = sym.partition("_")
        d = r"\partial" if base.startswith("∂") else ""
        b = base.lstrip("∂")
        b = _TEX_GREEK.get(b, rf"\mathbf {b}" if b.isupper() else b)
        sub = sub[1:-1] if sub.startswith("{") else sub
        sup = r"\top" if sup == "T" else sup[1:-1] if sup.startswith("{") else sup
        return d + b + (f"_{{{sub}}}" if sub else "") + (f"^{{{sup}}}" if sup else "")
    return "$" + "/".join(one(x) for x in m.group(0).split("/")) + "$"


def code_tex(text: str) -> str:
    r"""Words with symbols of code notation (``∂F/∂W_K``, ``Φ_QK``, ``d_V``) as words with inline math
    (``$\partial\mathbf F/\partial\mathbf W_{K}$``), for headings, tables (:func:`md_math`) and evidence;
    math already in ``$…$`` is left alone."""
    return "$".join(p if i % 2 else _TEX_TOKEN.sub(_tex_symbol, p) for i, p in enumerate(split_math(text)))


def plural(n: int, word: str) -> str:
    """``1 row``, ``2 rows``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def unit_tex(unit: str) -> str:
    """A parameter group's name in the book's one notation (TeX, no ``$``): ``W_V`` as ``W_{V}``, ``LN1`` upright."""
    m = re.fullmatch(r"([A-Za-z])_\{?(\w+?)\}?", unit)
    if m:
        return f"{m.group(1)}_{{{m.group(2)}}}"
    return r"\mathrm{" + unit.replace("_", r"\_") + "}"


def u(unit: str) -> str:
    """:func:`unit_tex` as inline math."""
    return f"${unit_tex(unit)}$"


def _pair(unit: str) -> str:
    return f"${unit_tex(unit)}$–${unit_tex(unit)}$"


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st."""
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


# ---------------------------------------------------------------------------------------------- Figs. 3-4
def _when(res) -> str:
    return "after training" if res.meta.get("trained") else "at initialisation"


def _diagonal_ranking(res, stat: str) -> str:
    order, where = res.meta["rankings"]["block"][stat], _when(res).capitalize()
    if order[0] == "W_V":
        return f"{where} the {_pair('W_V')} block (outlined) is the largest diagonal block"
    k = order.index("W_V") + 1 if "W_V" in order else None
    vv = f"; {_pair('W_V')} (outlined) is {ordinal(k)} of {len(order)}" if k else ""
    return f"{where} the largest diagonal block is {_pair(order[0])}{vv}"


def heatmap_whole(res) -> str:
    return _diagonal_ranking(res, "fro") + " by Frobenius norm."


def heatmap_attention(res) -> str:
    order = [x for x in res.meta["rankings"]["weights"]["fro"] if x in ("W_Q", "W_K", "W_V", "W_O")]
    return (f"Of the {('three', 'four')[len(order) - 3]} attention blocks, {_pair(order[0])} is the largest by "
            f"Frobenius norm {_when(res)} (" + " > ".join(u(x) for x in order) + ").")


def heatmap_means(res) -> str:
    return _diagonal_ranking(res, "mean").replace(" (outlined)", "") + r" by mean $|H_{ij}|$."


# ---------------------------------------------------------------------------------------------- Fig. 5
_BLOCK = ("W_Q", "W_K", "W_V", "W_1", "W_2", "LN1", "LN2", "b_1", "b_2")


def _largest(by_time: dict, stat: str, n: int) -> list[list[str]]:
    """The ``n`` blocks largest by ``stat`` after training and at initialisation (``by_time``: stats by time)."""
    trained = next(k for k in by_time if k != "init")
    return [sorted((x for x in _BLOCK if x in by_time[k]), key=lambda x: -by_time[k][x][stat])[:n]
            for k in (trained, "init")]


def fig5_parameters(res) -> str:
    a, b = _largest(res.meta["param_norms"], "fro", 2)
    return (f"After training the block's largest parameters by Frobenius norm are {u(a[0])} and {u(a[1])}; at "
            f"initialisation they were {u(b[0])} and {u(b[1])}.")


def fig5_hessians(res) -> str:
    (a,), (b,) = _largest(res.meta["hessian_stats"], "spectral", 1)
    same = " as at initialisation" if a == b else f"; at initialisation it was {u(b)}"
    return f"After training the largest diagonal Hessian block by spectral norm is {u(a)}'s{same}."


_WEIGHT = {"Q": "W_Q", "K": "W_K", "V": "W_V", "FFN1": "W_1", "FFN2": "W_2"}  # the legend's label -> unit


def _grows_most(key: str, what: str) -> Callable:
    """The message of a Fig. 5 panel over training: whose ``key`` is largest at the end, and whose grew most."""
    def msg(res) -> str:
        a = res.arrays
        groups = [_WEIGHT.get(lab, lab) for lab in map(short_label, res.meta["groups"])]  # block0.value as W_V
        v = np.asarray(a[key], dtype=float)
        steps = np.asarray(a["steps"])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = v[-1] / v[0]
        finite = [i for i in range(len(groups)) if np.isfinite(ratio[i]) and v[0, i] > 0]
        top_end = int(np.argmax(v[-1]))
        grow = max(finite, key=lambda i: ratio[i]) if finite else None
        out = f"At step {int(steps[-1])} the largest {what} is {u(groups[top_end])}'s"
        if grow is not None:
            out += f"; {u(groups[grow])}'s grew most since step {int(steps[0])} (×{ratio[grow]:.3g})"
        return out + "."
    return msg


fig5_parameters_over_training = _grows_most("param_fro_steps", "parameter norm")
fig5_hessians_over_training = _grows_most("diag_spec_steps", "diagonal Hessian block")


# ---------------------------------------------------------------------------------------------- Figs. 7-11
_TENSOR = {"fig7": "$W_Q$", "fig8": "$W_K$", "fig9": "$W_V$", "fig10": "the LayerNorm parameters",
           "fig11": "the feed-forward weights"}


def _change(v) -> str:
    v = np.asarray(v, dtype=float)
    verb = "grows" if v[-1] > v[0] else "shrinks" if v[-1] < v[0] else "stays"
    if v[0] == 0:
        return f"{verb} from 0 to {v[-1]:.3g}"
    return f"{verb} from {v[0]:.3g} to {v[-1]:.3g} (×{v[-1] / v[0]:.3g})"


def dynamics(name: str, part: str) -> Callable:
    def msg(res) -> str:
        a = res.arrays
        steps = np.asarray(a["steps"])
        span = f"between steps {int(steps[0])} and {int(steps[-1])}"
        what = _TENSOR[name]
        if part == "entries":
            return f"The Frobenius norm of {what} {_change(a['param_fro'])} {span}."
        if part == "hessian":
            return f"The Frobenius norm of the Hessian block of {what} {_change(a['hess_fro'])} {span}."
        p0, h0 = float(a["param_fro"][0]), float(a["hess_fro"][0])
        if p0 > 0 and h0 > 0:
            return (f"{span[0].upper()}{span[1:]} the norm of {what} changes ×{a['param_fro'][-1] / p0:.3g} "
                    f"and that of its Hessian block ×{a['hess_fro'][-1] / h0:.3g}.")
        return f"{span[0].upper()}{span[1:]} the Hessian block of {what} {_change(a['hess_fro'])}."
    msg.__name__ = f"_{name}_{part}"
    return msg


# ---------------------------------------------------------------------------------------------- Figs. 6, 12, Thm 7
def fig6(res) -> str:
    fit = res.meta["fit"]
    k = fit["k_fit"]
    return (f"The change of the mean loss falls like $k^{{{fit['slope']:.2f}}}$ (fit over $k = {k[0]}…{k[-1]}$, "
            f"$R^2 = {fit['r2']:.3f}$); the paper's law is $1/k$.")


def fig12(res) -> str:
    m = res.meta
    trend = "falls" if m["decreasing"] else "does not fall steadily"
    return (f"The gradient norm of the mean loss over the first $k$ samples {trend}, like $k^{{{m['slope_small_k']:.2f}}}$ "
            r"at small $k$: the $k^{-1/2}$ of averaging independent samples, which needs no shared minimiser.")


def theorem7(res) -> str:
    paths = [p for p in res.meta["paths"] if p["t"] > 0]
    exact = min(p["min_ratio_exact"] for p in paths)
    thm6 = min(p["min_ratio_thm6_ce"] for p in paths)
    holds = "holds" if exact >= 1 else "fails"
    return (f"With the exact $M$ the inequality {holds} at every distance and $k$ (smallest right/left side "
            f"{exact:.3g}); with Theorem 6's $M$ the right side exceeds the left by at least {thm6:.2g}×, so it "
            "cannot fail.")


def fused_ln(res) -> str:
    m = res.meta
    return (f"The fused LayerNorm's Hessian is wrong by up to {m['max_relative_error']:.2g} of the largest exact "
            f"entry, worst in the {m['worst_block'].replace('-', '–')} pair of groups.")


# ---------------------------------------------------------------------------------------------- theory pages
def theorem1_sweeps(records: list[dict]) -> str:
    """Self-attention page: where the printed bound falls below the exact norm, and the repaired one's least."""
    printed = [r for r in records if r["check"] == "thm1.printed"]
    repaired = [r for r in records if r["check"] == "thm1.repaired"]
    low = min(printed, key=lambda r: r["ratio"])
    rep = min(r["ratio"] for r in repaired)
    fails = [float(r["x"]) for r in printed if r["ratio"] < 1]
    first = (f"the printed bound falls below the exact norm from $a = 2^{{{math.log2(min(fails)):.0f}}}$ on "
             f"(down to {low['ratio']:.2g}×)" if fails else f"the printed bound stays above the exact norm (least {low['ratio']:.3g}×)")
    return f"As $W_Q$ and $W_K$ are rebalanced, {first}; the repaired bound never does (least {rep:.3g}×)."


def layernorm_flattening(flat: dict) -> str:
    """LayerNorm page: the measured log-log slopes of the Jacobian and Hessian norms as a row flattens."""
    return (f"Flattening one row makes LayerNorm's derivatives blow up: the Jacobian's norm grows like "
            f"$\\sigma^{{{flat['slope_jacobian']:.2f}}}$ and the Hessian's like $\\sigma^{{{flat['slope_hessian']:.2f}}}$ "
            "of the row's standard deviation, so no bound can be uniform without a floor on it.")


def input_scaling(sweep: dict) -> str:
    """Transformer-block page: which diagonal blocks the input's scale moves most, in decades."""
    dec = sweep["decades"]
    most, least = max(dec, key=dec.get), min(dec, key=dec.get)
    return (f"The input's scale moves the {u('W_' + most)} block most ({dec[most]:.1f} decades over the sweep) "
            f"and the {u('W_' + least)} block least ({dec[least]:.1f}).")


def ffn_kinks(scan: dict | None = None) -> str:
    """FFN page: along any line in W_1 the output is piecewise linear (ReLU), so its second difference is zero
    except at the kinks (true of every scan; ``scan`` is not read)."""
    return ("Along a line in $W_1$ the output is piecewise linear: its second derivative is zero except at the "
            "kinks, where a ReLU pre-activation crosses zero.")
