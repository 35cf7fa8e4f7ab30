"""Beyond the paper: which diagonal block of a ``torch.nn.TransformerEncoderLayer``'s loss Hessian is largest.

The paper's Figs. 3-4 find the Values block largest in its ViT's block. Here the same statistic — the
Frobenius norm of each parameter group's diagonal block of the loss Hessian — is taken across the layer
family that PyTorch builds (:func:`curvature_gap.layer_hessian`, exact, float64): post-norm and
pre-norm, 1 and 4 heads, at PyTorch's initialisation and after a short Adam run.

**The task** (why: realisable, so every block has something to learn and the loss can reach 0; synthetic,
so it needs no data set and runs in seconds): a *teacher* layer of the same configuration (PyTorch's
initialisation with another seed) maps ``n_seq`` random sequences ``X`` (L, d), entries N(0, 1), to the
targets; the *student* (PyTorch's initialisation, its own seed) is trained on the MSE ``mean((Z − target)²)``
over those sequences (the paper's loss) by full-batch Adam. The Hessian is that training loss's, the mean over
the sequences of the per-sequence Hessians, at the student's first and last step. Dropout is 0 (the Hessian
of a deterministic layer). Parameter groups: :func:`unit_indices`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from ..hessian.layers import layer_hessian
from .context import Context
from ..plotting import WIDTH, new_axes
from .hessians import unit_statistics
from .spec import FigureSpec, Point

__all__ = ["compute_encoder_family", "plot_encoder_family", "UNITS", "CONFIGS", "unit_indices", "leaders", "ranking", "ranking_text", "EncoderFamilySettings", "SETTINGS", "SPECS"]


@dataclass(frozen=True)
class EncoderFamilySettings:
    """Beyond the paper: the diagonal Hessian blocks of nn.TransformerEncoderLayer, post/pre-norm, 1/4 heads,
    at initialisation and after a short Adam run on a teacher-student task (experiments.encoder_family)."""

    d_model: int = 16  # 4 heads of width 4; a dense float64 Hessian of 3,280 parameters per configuration
    dim_feedforward: int = 64  # 4 d_model, PyTorch's default ratio (2048 / 512)
    activation: str = "relu"  # PyTorch's default
    seq_len: int = 8  # tokens per sequence
    n_seq: int = 12  # sequences: the training set, and the loss whose Hessian is taken (cost ∝ n_seq)
    steps: int = 300  # "a few hundred" full-batch Adam steps: the loss falls by an order of magnitude or more
    lr: float = 1e-3  # Adam's default
    student_seed: int = 0
    teacher_seed: int = 1
    data_seed: int = 2
    # more draws of the same task (student seed s, teacher seed s + 1, data seed s + 2 for s = student_seed + 10 k):
    # a ranking of blocks is stated over all of them, with its spread; the figure shows the first draw
    n_draws: int = 5


SETTINGS = {
    "paper": EncoderFamilySettings(),
    # seconds: width 8 (4 heads of width 2), 2 sequences of 4 tokens, 20 steps
    "smoke": EncoderFamilySettings(d_model=8, dim_feedforward=16, seq_len=4, n_seq=2, steps=20, n_draws=2),
}


UNITS = ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2", "LN", "biases")
CONFIGS = (("post-norm", 1), ("post-norm", 4), ("pre-norm", 1), ("pre-norm", 4))
TIMES = ("initialisation", "trained")


def _layer(s: EncoderFamilySettings, norm: str, nhead: int, seed: int) -> nn.TransformerEncoderLayer:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.TransformerEncoderLayer(s.d_model, nhead, s.dim_feedforward, dropout=0.0, activation=s.activation,
                                          batch_first=True, norm_first=norm == "pre-norm", dtype=torch.float64)


def unit_indices(layer: nn.TransformerEncoderLayer) -> dict[str, np.ndarray]:
    """Unit name -> positions in the Hessian of ``layer.named_parameters()`` (each ``vec_r``): ``W_Q, W_K, W_V``
    (the row blocks of ``in_proj_weight``), ``W_O``, ``W_1``, ``W_2``, ``LN`` (both LayerNorms' γ, β) and ``biases``
    (the attention and FFN biases)."""
    d = layer.self_attn.embed_dim
    sizes = {n: p.numel() for n, p in layer.named_parameters()}
    off = dict(zip(sizes, np.cumsum([0, *sizes.values()]).tolist()))

    def rng(name, a=0, b=None):
        return np.arange(off[name] + a, off[name] + (sizes[name] if b is None else b))

    ip = "self_attn.in_proj_weight"
    out = {"W_Q": rng(ip, 0, d * d), "W_K": rng(ip, d * d, 2 * d * d), "W_V": rng(ip, 2 * d * d, 3 * d * d),
           "W_O": rng("self_attn.out_proj.weight"), "W_1": rng("linear1.weight"), "W_2": rng("linear2.weight")}
    out["LN"] = np.concatenate([rng(n) for n in off if n.startswith("norm")])
    out["biases"] = np.concatenate([rng(n) for n in off if n.endswith("bias") and not n.startswith("norm")])
    return out


def _hessian(layer, X, Y) -> np.ndarray:
    """The Hessian of ``mean over sequences of mean((layer(X_b) − Y_b)²)`` (the mean of the per-sequence ones):
    one batched call on X, Y (n_seq, L, d)."""
    return layer_hessian(layer, X, target=Y).dense.numpy()


def _stats(H: np.ndarray, units: dict) -> tuple:
    """(Frobenius norms, RMS eigenvalues ‖B‖_F/√n) of the diagonal blocks of :data:`UNITS`."""
    st = unit_statistics(H, units, ("fro", "fro_sqrt_n"))
    return ([st[u][k] for u in UNITS] for k in ("fro", "fro_sqrt_n"))


def compute_encoder_family(ctx: Context, s: EncoderFamilySettings) -> tuple[dict, dict]:
    """The first draw (the figure) and ``n_draws`` draws in all (arrays ``*_draws``: draw × config × time × unit)."""
    t0 = time.perf_counter()
    draws = [s] + [replace(s, student_seed=o, teacher_seed=o + 1, data_seed=o + 2)
                   for o in (s.student_seed + 10 * k for k in range(1, s.n_draws))]
    done = [_one_draw(ctx, d) for d in draws]
    arrays, meta = done[0]
    meta["draws"] = [dict(student_seed=d.student_seed, teacher_seed=d.teacher_seed, data_seed=d.data_seed)
                     for d in draws]
    meta["ranking"] = {}
    for st in ("fro", "fro_sqrt_n"):  # over every case, and per configuration (its draws and times)
        arrays[f"{st}_draws"] = np.stack([a[st] for a, _ in done])
        meta["ranking"][st] = ranking(arrays[f"{st}_draws"], meta["units"])
        meta["ranking"][st]["by_config"] = {c: ranking(arrays[f"{st}_draws"][:, [i]], meta["units"])["leads"]
                                            for i, c in enumerate(meta["configs"])}
    meta["seconds_first_draw"], meta["seconds"] = meta["seconds"], round(time.perf_counter() - t0, 2)
    return arrays, meta


def ranking(stat: np.ndarray, units) -> dict:
    """Over every case (draw × configuration × time) of ``stat`` (draw, config, time, unit): how often each unit
    leads, how often W_O's block exceeds W_V's and by what factors, W_V's over the larger of W_Q's and W_K's, and
    the distinct orders of the four attention blocks."""
    u = list(units)
    flat = stat.reshape(-1, stat.shape[-1])
    lead = {x: int((flat.argmax(1) == u.index(x)).sum()) for x in u}
    second = {x: int((np.argsort(-flat, 1)[:, 1] == u.index(x)).sum()) for x in u}
    o_v = flat[:, u.index("W_O")] / flat[:, u.index("W_V")]
    v_qk = flat[:, u.index("W_V")] / np.maximum(flat[:, u.index("W_Q")], flat[:, u.index("W_K")])
    att = [u.index(x) for x in ("W_Q", "W_K", "W_V", "W_O")]
    orders = sorted({" > ".join(u[att[k]] for k in np.argsort(-row[att])) for row in flat})
    return {"cases": int(flat.shape[0]), "leads": lead, "second": second,
            "O_over_V": [float(o_v.min()), float(o_v.max())], "O_exceeds_V": int((o_v > 1).sum()),
            "V_over_QK": [float(v_qk.min()), float(v_qk.max())], "attention_orders": orders}


def _one_draw(ctx: Context, s: EncoderFamilySettings) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(s.data_seed)
    X = torch.randn(s.n_seq, s.seq_len, s.d_model, generator=g, dtype=torch.float64)
    fro = np.zeros((len(CONFIGS), len(TIMES), len(UNITS)))
    rms = np.zeros_like(fro)
    losses = np.zeros((len(CONFIGS), s.steps + 1))
    t0 = time.perf_counter()
    for i, (norm, nhead) in enumerate(CONFIGS):
        teacher = _layer(s, norm, nhead, s.teacher_seed).eval()
        with torch.no_grad():
            Y = teacher(X)
        student = _layer(s, norm, nhead, s.student_seed).eval()
        units = unit_indices(student)
        sizes = {u: int(len(v)) for u, v in units.items()}
        with ctx.phase("hessian"):
            fro[i, 0], rms[i, 0] = _stats(_hessian(student, X, Y), units)
        opt = torch.optim.Adam(student.parameters(), lr=s.lr)
        with ctx.phase("training"):
            for k in range(s.steps + 1):
                loss = (student(X) - Y).pow(2).mean()
                losses[i, k] = float(loss.detach())
                if k == s.steps:
                    break
                opt.zero_grad()
                loss.backward()
                opt.step()
        with ctx.phase("hessian"):
            fro[i, 1], rms[i, 1] = _stats(_hessian(student, X, Y), units)
        ctx.log(f"  {norm}, {nhead} head(s): loss {losses[i, 0]:.3g} -> {losses[i, -1]:.3g}")
    meta = dict(profile=ctx.profile, configs=[f"{n}, {h} head{'s' if h > 1 else ''}" for n, h in CONFIGS],
                times=list(TIMES), units=list(UNITS), unit_sizes=sizes, final_loss=losses[:, -1].tolist(),
                initial_loss=losses[:, 0].tolist(), seconds=round(time.perf_counter() - t0, 2),
                leaders={"fro": leaders(fro), "fro_sqrt_n": leaders(rms)},
                task=(f"teacher-student: {s.n_seq} random sequences of {s.seq_len} tokens, d_model {s.d_model}, "
                      f"dim_feedforward {s.dim_feedforward}, {s.activation}; targets from a teacher layer of the "
                      f"same configuration (seed {s.teacher_seed}); student seed {s.student_seed}; full-batch Adam, "
                      f"lr {s.lr:g}, {s.steps} steps; MSE; float64"))
    return dict(fro=fro, fro_sqrt_n=rms, losses=losses), meta


def leaders(stat: np.ndarray) -> list[list[str]]:
    """``[config][time]`` -> the unit with the largest statistic."""
    return [[UNITS[int(np.argmax(stat[i, t]))] for t in range(stat.shape[1])] for i in range(stat.shape[0])]


_LABELS = {**{u: f"${u}$" for u in UNITS[:6]}, "LN": "LayerNorms", "biases": "biases"}


def plot_encoder_family(result):
    """The Frobenius norm of each parameter group's diagonal Hessian block, per configuration, at initialisation
    and trained"""
    meta, fro = result.meta, result.arrays["fro"]
    n_cfg, n_t, n_u = fro.shape
    fig, axes = new_axes(WIDTH, 3.9, 1, n_t, sharey=True)
    colors = {"W_Q": "#4c72b0", "W_K": "#64b5cd", "W_V": "#c44e52", "W_O": "#dd8452", "W_1": "#55a868",
              "W_2": "#8fbc8f", "LN": "#8172b3", "biases": "#937860"}
    w = 0.8 / n_u
    x = np.arange(n_cfg)
    for t, ax in enumerate(axes):
        for k, u in enumerate(meta["units"]):
            ax.bar(x - 0.4 + (k + 0.5) * w, fro[:, t, k], w, color=colors[u], label=_LABELS[u])
        ax.set_yscale("log")
        ax.set_xticks(x, [c.replace("-norm, ", "\n") for c in meta["configs"]])   # "post\n1 head"
        ax.set_title(meta["times"][t])
    axes[0].set_ylabel(r"$\|H_{\mathrm{block}}\|_F$")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=n_u, frameon=False, columnspacing=1.0,
               handlelength=1.2)
    return fig


def _share(counts: dict, n: int) -> str:
    return " or ".join(f"{_LABELS[k]} ({v}/{n})" for v, k in sorted(((v, k) for k, v in counts.items() if v), reverse=True))


def message(result) -> str:
    """The figure's caption, one sentence: which block leads under each statistic over every draw, configuration and
    time, and W_O against W_V against W_Q, W_K with the spread (:func:`ranking_text` says the rest)."""
    meta = result.meta
    fro, ent = meta["ranking"]["fro"], meta["ranking"]["fro_sqrt_n"]
    n = fro["cases"]
    lead = [k for k, v in fro["leads"].items() if v]
    lead_t = f"{_LABELS[lead[0]]} leads by Frobenius norm in {fro['leads'][lead[0]]}/{n} cases" if len(lead) == 1 else \
        f"By Frobenius norm {_share(fro['leads'], n)} lead"
    ent_t = " or ".join(_LABELS[k] for k, v in sorted(ent["leads"].items(), key=lambda kv: -kv[1]) if v)
    o_v, v_qk = fro["O_over_V"], fro["V_over_QK"]
    return (f"{lead_t}, {ent_t} by RMS eigenvalue; $W_O$'s block exceeds $W_V$'s in {fro['O_exceeds_V']}/{n} "
            f"({o_v[0]:.2f}–{o_v[1]:.2f}×), and $W_V$'s exceeds $W_Q$'s and $W_K$'s by {v_qk[0]:.1f}–{v_qk[1]:.1f}×.")


def ranking_text(result) -> str:
    """The ranking of the blocks over every draw, configuration and time, in words for the page: the largest and the
    second by Frobenius norm (and why the largest: its size), the largest by RMS eigenvalue (‖H‖_F/√n) by norm
    placement, and the order of the four attention blocks with what varies and why — all read off ``result``."""
    meta = result.meta

    def by_norm(st: str) -> str:
        per = {}
        for c, counts in meta["ranking"][st]["by_config"].items():
            per.setdefault(c.split(",")[0], set()).update(k for k, v in counts.items() if v)
        if all(len(v) == 1 for v in per.values()):
            return " (" + ", ".join(f"{_LABELS[next(iter(v))]} in {k}" for k, v in per.items()) + ")"
        return ""
    fro, ent = meta["ranking"]["fro"], meta["ranking"]["fro_sqrt_n"]
    n, size = fro["cases"], meta["unit_sizes"]
    lead = [k for k, v in fro["leads"].items() if v]
    why = (f", whose weight has {size[lead[0]] / size['W_V']:.0f}× the entries of an attention weight"
           if len(lead) == 1 and size[lead[0]] > size["W_V"] else "")
    top2 = {" > ".join(o.split(" > ")[:2]) for o in fro["attention_orders"]}
    att = ("of the four equal-size attention blocks $W_O$'s and then $W_V$'s lead in every case; only $W_Q$ and $W_K$ "
           "swap: they enter the scores symmetrically ($XW_QW_K^\\top X^\\top$), so which is larger is the draw's"
           if top2 == {"W_O > W_V"} else
           f"the four equal-size attention blocks come in {len(fro['attention_orders'])} orders")
    o_v, v_qk = fro["O_over_V"], fro["V_over_QK"]
    return (f"Over {n} cases ({len(meta['draws'])} draws × {len(meta['configs'])} configurations × {len(meta['times'])} "
            f"times): by Frobenius norm, which grows with a block's size, the largest block is {_share(fro['leads'], n)}"
            f"{why}, and the second {_share(fro['second'], n)}; by RMS eigenvalue ($\\lVert H\\rVert_F/\\sqrt n$, $n$ "
            f"the block's rows, which does not grow with its size) the largest is "
            f"{_share(ent['leads'], n)}{by_norm('fro_sqrt_n')}. And {att}: $W_O$'s block exceeds $W_V$'s in "
            f"{fro['O_exceeds_V']}/{n} cases ({o_v[0]:.2f}–{o_v[1]:.2f}×), and $W_V$'s exceeds the larger of $W_Q$'s "
            f"and $W_K$'s by {v_qk[0]:.1f}–{v_qk[1]:.1f}× depending on the draw.")


def key_numbers(r) -> dict:
    fro = r.arrays["fro"]
    return {f"largest block Frobenius norm, {c}, {when}": float(fro[i, t].max())
            for i, c in enumerate(r.meta["configs"]) for t, when in enumerate(r.meta["times"])}


# ----------------------------------------------------------------------------- the results of this module
SPECS = (
    FigureSpec("encoder_family", "beyond the paper", "extra_encoder_family",
               "the diagonal Hessian blocks of nn.TransformerEncoderLayer, post/pre-norm, 1/4 heads",
               (Point(SETTINGS, needs="nothing (synthetic data)"),),
               lambda j: compute_encoder_family(j.ctx, j.settings), {"blocks": plot_encoder_family}, {"blocks": message},
               key_numbers=key_numbers),
)
