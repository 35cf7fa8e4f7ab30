"""Figs. 5 and 7–11 on the authors' model, as their code computes them.

Their ``notebooks/sa_ln_ff_changing.ipynb`` (the repository of ``config.AUTHORS_CODE``) loads the
checkpoints of their seed-37 MNIST run at steps 0, 200, …, 1000. For each of five parameter lists (its
sections Queries, Keys, Values, LayerNorm and FeedForward) it computes the Hessian of the mean
cross-entropy on the first batch of their shuffled, augmented training loader over that list alone, the
Hessian's spectral norm, and the Frobenius norm of the list's entries. Fig. 5 is the two norms against the
step, one line per list; Figs. 7–11 are each list's Hessian at the six steps, as log10 |H_ij|.

What that notebook does and this module keeps or changes:

- Its "FeedForward" list is ``feed_forward_norm.weight`` and ``feed_forward_norm.bias``: the second
  LayerNorm's γ and β, not the feed-forward weights. Their Fig. 11 is therefore the LN2–LN2 corner of
  their Fig. 10, and Fig. 5's "FeedForward" line is LN2's. Both are computed here: their list as written
  (``feedforward``) and the feed-forward weights the caption names (``ffn_weights``: W_1 and W_2).
- The Hessian over a list alone is the principal sub-matrix of the whole Hessian on the list's rows and
  columns, so one exact Hessian per step (over every parameter) gives every list's block.
- Step 0 here is the run's own initialisation. Their notebook builds a fresh, unseeded model for step 0,
  which is not the one their run started from; here the six panels follow one run.
- The LayerNorm is the hand-written one, whose second derivatives are exact (``layernorm_pitfall``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from ..exact.linalg import sym_spectral_norm
from ..hessian import hessian
from ..model import authors_indices, param_groups
from ..precision import frozen_at_one
from ..plotting import WIDTH, new_figure, pooled_log_image
from ..row import Row
from .claims import claim_verdict, not_run
from .context import Context
from .hessians import dense
from .norms import MUCH_SMALLER
from .settings import AUTHORS_RUN_SEEDS
from .spec import FigureSpec, Finding

__all__ = ["AuthorsDynamicsSettings", "LISTS", "arithmetic_comparison", "compute_trajectory_authors", "keys_values_authors", "SPECS"]


@dataclass(frozen=True)
class AuthorsDynamicsSettings:
    """Figs. 5 and 7–11 on the authors' model (their notebooks/sa_ln_ff_changing.ipynb)."""

    model: str = "authors_mnist"
    steps: tuple = (0, 200, 400, 600, 800, 1000)  # their notebook: steps = [0, 200, 400, 600, 800, 1000]
    batch_size: int = 128  # their notebook: the first batch of their training loader, all of it
    eps: float = 1e-6  # their notebook clips |H| at 1e-6 before log10; here log10(|H| + 1e-6), as for Figs. 3-4
    display_cells: int = 600  # as HeatmapSettings: the FFN weights' 2,048 rows are shown as cell means
    fast_chunk: int | None = None  # as HeatmapSettings.fast_chunk
    # precision.ARITHMETICS: the run, "authors" (their bf16 training: weights and AdamW state in bf16, so every
    # LayerNorm γ stays exactly 1.0) or "exact" (float32); the Hessians are float32 of its weights either way
    arithmetic: str = "authors"
    # other runs of the recipe besides the recipe's seed (37): their initialisation is unseeded, so the claim's
    # verdict is a count over runs (each run: 1,000 steps and six Hessians, about a minute on a CPU)
    run_seeds: tuple = ()


# smoke: the authors' smoke run has 3 steps (config.RECIPES); 4 images as Figs. 3-4's smoke
SETTINGS = {"paper": AuthorsDynamicsSettings(run_seeds=AUTHORS_RUN_SEEDS[1:]),
            "smoke": AuthorsDynamicsSettings(steps=(0, 1, 2, 3), batch_size=4, fast_chunk=128)}
EXACT_SETTINGS = {p: replace(v, arithmetic="exact", run_seeds=()) for p, v in SETTINGS.items()}  # one run

_B = "transformer_blocks.0."
# list -> (their parameter names, in their notebook's order; the label their Fig. 5 legend gives it)
LISTS = {
    "queries": ((_B + "self_attention.to_query.weight",), "Queries"),
    "keys": ((_B + "self_attention.to_key.weight",), "Keys"),
    "values": ((_B + "self_attention.to_value.weight",), "Values"),
    "layernorm": ((_B + "self_attention_norm.weight", _B + "self_attention_norm.bias",
                   _B + "feed_forward_norm.weight", _B + "feed_forward_norm.bias"), "LayerNorm"),
    # sic: their FeedForward section lists the second LayerNorm's parameters
    "feedforward": ((_B + "feed_forward_norm.weight", _B + "feed_forward_norm.bias"), "FeedForward"),
    # what the caption of Fig. 11 names: the feed-forward weights (their FFN has no biases)
    "ffn_weights": ((_B + "feed_forward.in_layer.weight", _B + "feed_forward.out_layer.weight"), "FFN weights W₁, W₂"),
}
PLOTTED = ("queries", "keys", "values", "layernorm", "feedforward")  # the five lines of their Fig. 5
FIGURES = {"fig7": "queries", "fig8": "keys", "fig9": "values", "fig10": "layernorm", "fig11": "feedforward"}


# their notebook's sections, in order: section i calls next(iter(loader)) again and so gets pass i's first batch
SECTION_PASS = {"queries": 0, "keys": 1, "values": 2, "layernorm": 3, "feedforward": 4}


def list_hessian(model, batch, flat: list[int], method_chunk=None) -> np.ndarray:
    """The exact Hessian of the mean cross-entropy on ``batch`` over the flat parameter indices ``flat`` (a list's
    principal sub-matrix), from the blocks of the parameter groups that hold them (``hessian.hessian(blocks=…)``):
    a fraction of the dense cost for the attention and LayerNorm lists."""
    groups = [g for g in param_groups(model) if any(g.start <= i < g.stop for i in flat)]
    pairs = [(a.name, b.name) for i, a in enumerate(groups) for b in groups[i:]]
    blocks = hessian(model, batch, blocks=pairs, chunk=method_chunk)
    n = sum(g.size for g in groups)
    off = {g.name: o for g, o in zip(groups, np.cumsum([0] + [g.size for g in groups]))}
    H = np.zeros((n, n))
    for (a, b), blk in blocks.items():
        B = blk.detach().cpu().double().numpy()
        H[off[a]:off[a] + B.shape[0], off[b]:off[b] + B.shape[1]] = B
        H[off[b]:off[b] + B.shape[1], off[a]:off[a] + B.shape[0]] = B.T
    local = [off[g.name] + i - g.start for i in flat for g in groups if g.start <= i < g.stop]
    return H[np.ix_(local, local)]


def compute_trajectory_authors(ctx: Context, s: AuthorsDynamicsSettings) -> tuple[dict, dict]:
    """At each step of ``s.steps`` (in order: a missing snapshot trains the run on to it): the exact Hessian of
    the authors' model over each list of :data:`LISTS` on that list's batch (:data:`SECTION_PASS`; the
    feed-forward weights take their FeedForward section's), its spectral and Frobenius norms, its image, and the
    list's parameter norm. At the last step also every list's spectral norm on each of the five batches (the
    spread their per-section batches bring), and for each extra run of ``s.run_seeds`` the norms per step."""
    passes = [(x[:s.batch_size], y[:s.batch_size]) for x, y in ctx.loader_batches(s.model, len(SECTION_PASS))]
    if s.batch_size > len(passes[0][1]):
        raise ValueError(f"{s.model}: the loader's first batch has {len(passes[0][1])} images, fewer than the "
                         f"{s.batch_size} asked")
    batch_of = {g: passes[SECTION_PASS.get(g, SECTION_PASS["feedforward"])] for g in LISTS}
    steps = sorted(s.steps)
    rec: dict[str, list] = {k: [] for k in ("loss", "seconds", "gamma_at_one")}
    infos, idx = [], None
    for step in tqdm(steps, desc="authors' snapshots", unit="snap", disable=not ctx.progress):
        model, info = ctx.model(s.model, step, arithmetic=s.arithmetic)
        rec["gamma_at_one"].append(frozen_at_one(model)[0])
        if idx is None:
            idx = {g: authors_indices(model, names) for g, (names, _) in LISTS.items()}
        ctx.log(f"step {step}: exact Hessian of each list of the authors' model on its batch ({s.batch_size} images)")
        w = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).double().numpy()
        with torch.no_grad():
            rec["loss"].append(float(torch.nn.functional.cross_entropy(model(passes[0][0]), passes[0][1])))
        t0 = time.perf_counter()
        for g, ix in idx.items():
            with ctx.phase("hessian"):
                Hg = list_hessian(model, batch_of[g], ix, s.fast_chunk)
            img, pool = pooled_log_image(Hg, s.eps, s.display_cells)
            for k, v in (("spec", sym_spectral_norm(Hg)), ("fro", float(np.linalg.norm(Hg))),
                         ("param", float(np.linalg.norm(w[ix]))), ("img", img.astype(np.float16)), ("pool", pool)):
                rec.setdefault(f"{k}_{g}", []).append(v)
        rec["seconds"].append(time.perf_counter() - t0)
        infos.append(dict(step=step, weights_sha256=info.get("weights_sha256")))
    arrays = dict(steps=np.array(steps), loss=np.array(rec["loss"]), hessian_seconds=np.array(rec["seconds"]),
                  gamma_at_one=np.array(rec["gamma_at_one"]))
    for g in LISTS:
        for k in ("spec", "fro", "param"):
            arrays[f"{k}_{g}"] = np.array(rec[f"{k}_{g}"], dtype=np.float64)
        arrays[f"img_{g}"] = np.stack(rec[f"img_{g}"])
    # the spread across their five batches, at the last step: each list on every batch
    ctx.log(f"step {steps[-1]}: every list on each of the {len(passes)} batches")
    with ctx.phase("hessian"):
        Hs = [dense(model, b, s.fast_chunk)[0].cpu().numpy().astype(np.float64) for b in passes]
    for g, ix in idx.items():
        arrays[f"spread_{g}"] = np.array([sym_spectral_norm(H[np.ix_(ix, ix)]) for H in Hs])
    # other runs of the same recipe (their initialisation is unseeded): the norms per step, on the same batches
    for seed in s.run_seeds:
        for step in steps:
            m, _ = ctx.model(s.model, step, seed=seed, arithmetic=s.arithmetic)
            w = torch.cat([p.detach().reshape(-1).cpu() for p in m.parameters()]).double().numpy()
            for g, ix in idx.items():
                with ctx.phase("hessian"):
                    Hg = list_hessian(m, batch_of[g], ix, s.fast_chunk)
                rec.setdefault(f"runs_spec_{g}", []).append(sym_spectral_norm(Hg))
                rec.setdefault(f"runs_param_{g}", []).append(float(np.linalg.norm(w[ix])))
    if s.run_seeds:
        for g in LISTS:
            for k in ("spec", "param"):
                arrays[f"runs_{k}_{g}"] = np.array(rec[f"runs_{k}_{g}"]).reshape(len(s.run_seeds), len(steps))
    meta = dict(profile=ctx.profile, model=s.model, batch_size=s.batch_size, snapshots=infos, arithmetic=s.arithmetic,
                precision=ctx.recipe(s.model, arithmetic=s.arithmetic).precision,
                gamma_total=frozen_at_one(model)[1], run_seed=ctx.recipe(s.model).seed, run_seeds=list(s.run_seeds),
                section_pass={g: SECTION_PASS.get(g, SECTION_PASS["feedforward"]) for g in LISTS},
                lists={g: dict(parameters=list(names), label=label, n=len(idx[g]), pool=int(rec[f"pool_{g}"][0]))
                       for g, (names, label) in LISTS.items()},
                batch="per list, the first images of the first batch of pass i of the authors' shuffled, augmented "
                      "training loader, i the list's section in their notebook (Queries 0, Keys 1, Values 2, "
                      "LayerNorm 3, FeedForward and the feed-forward weights 4)",
                hessian_method="curvature_gap.hessian.hessian (exact), blocks of each list's parameter groups")
    return arrays, meta


def _select(res, lists) -> tuple[dict, dict]:
    a = res.arrays
    arrays = {"steps": a["steps"], "gamma_at_one": a["gamma_at_one"]}
    for g in lists:
        for k in ("spec", "fro", "param", "img", "spread", "runs_spec", "runs_param"):
            if f"{k}_{g}" in a:
                arrays[f"{k}_{g}"] = a[f"{k}_{g}"]
    return arrays, dict(res.meta, lists={g: res.meta["lists"][g] for g in lists})


# -------------------------------------------------------------------- plots (draw results; compute nothing)
def plot_norms(result):
    """Their Fig. 5: the lists' parameter norms (left) and Hessian spectral norms (right) against the step;
    their five lines solid, the feed-forward weights (not in their figure) dashed."""
    a, meta = result.arrays, result.meta
    fig = new_figure(WIDTH, 4.4)
    axs = fig.subplots(1, 2)
    for ax, key, title, ylabel in ((axs[0], "param", "Parameters' norm", r"$\|W\|_F$"),
                                   (axs[1], "spec", "Hessians' norm", r"$\|H\|_2$")):
        for g in (g for g in LISTS if g in meta["lists"]):  # their legend's order (a stored meta is key-sorted)
            extra = g not in PLOTTED
            ax.plot(a["steps"], a[f"{key}_{g}"], marker="o", ms=3, lw=1.2 if extra else 1.6, ls="--" if extra else "-",
                    color="0.45" if extra else None, label=meta["lists"][g]["label"] + (" (not in their figure)" if extra else ""))
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.legend(*axs[0].get_legend_handles_labels(), loc="outside lower center", ncol=3)  # never over a curve
    return fig


def _plot_hessian(result, g: str):
    a, meta = result.arrays, result.meta
    imgs = [im.astype(np.float64) for im in a[f"img_{g}"]]
    vmin = max(-6.0, min(float(np.nanpercentile(i, 1)) for i in imgs))
    vmax = max(float(np.nanmax(i)) for i in imgs)
    cols = 3
    rows = -(-len(imgs) // cols)
    fig = new_figure(WIDTH, 2.5 * rows + 0.9)
    axs = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    info = meta["lists"][g]
    for ax, st, img in zip(axs, a["steps"], imgs):
        im = ax.imshow(img, extent=(0, info["n"], info["n"], 0), cmap="viridis", vmin=vmin, vmax=vmax)
        ax.set_title(f"step {int(st)}")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axs[len(imgs):]:
        ax.set_visible(False)
    fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.02, label=r"$\log_{10}(|H_{ij}| + 10^{-6})$")
    pool = f", means over {info['pool']}×{info['pool']} cells" if info["pool"] > 1 else ""
    fig.suptitle(f"{info['label']}: {info['n']} parameters{pool}")
    return fig


def _hessian_plot(g: str):
    def plot(result):
        return _plot_hessian(result, g)
    plot.__doc__ = f"log10 |H| of the list {g!r} at each step, as their figure draws it."
    return plot


def _norm_message(result) -> str:
    a, meta = result.arrays, result.meta
    last = {g: float(a[f"spec_{g}"][-1]) for g in PLOTTED}
    top = sorted(last, key=lambda g: -last[g])
    lab = {g: meta["lists"][g]["label"] for g in meta["lists"]}
    return (f"At step {int(a['steps'][-1])} the largest Hessian spectral norms are {lab[top[0]]} and {lab[top[1]]}; "
            f"their 'FeedForward' line is the second LayerNorm's (the feed-forward weights: "
            f"{float(a['spec_ffn_weights'][-1]):.3g}).")


def _hessian_message(g: str):
    def msg(result) -> str:
        a, info = result.arrays, result.meta["lists"][g]
        s = a[f"spec_{g}"]
        return (f"The spectral norm of the {info['label']} block goes from {float(s[0]):.3g} at step {int(a['steps'][0])} "
                f"to {float(s[-1]):.3g} at step {int(a['steps'][-1])}.")
    return msg


def arithmetic_comparison(authors, exact) -> dict:
    """What their bf16 arithmetic changes on Fig. 5, from the two results (``fig5_authors``: their bf16 run,
    ``fig5_authors_exact``: the float32 run of the same recipe, seed and batch): the LayerNorm γ entries still
    exactly 1.0 at each step, and each list's parameter and Hessian norms at the last step in both."""
    a, e = authors.arrays, exact.arrays
    last = int(a["steps"][-1])
    lists = {g: dict(label=authors.meta["lists"][g]["label"],
                     param=(float(a[f"param_{g}"][-1]), float(e[f"param_{g}"][-1])),
                     spec=(float(a[f"spec_{g}"][-1]), float(e[f"spec_{g}"][-1])),
                     param_start=float(a[f"param_{g}"][0]))
             for g in LISTS if g in authors.meta["lists"] and f"param_{g}" in e}  # their legend's order
    return dict(step=last, steps=[int(x) for x in a["steps"]], gamma_total=authors.meta["gamma_total"],
                gamma_at_one=([int(x) for x in a["gamma_at_one"]], [int(x) for x in e["gamma_at_one"]]), lists=lists)


# ----------------------------------------------------------------------------- the claim
def _readings(a, lists) -> dict:
    """{"parameters/step N" | "hessians/step N": {list: value}} over the steps and both panels."""
    out = {}
    for key, panel in (("param", "parameters"), ("spec", "hessians")):
        for i, st in enumerate(a["steps"]):
            out[f"{panel}/step {int(st)}"] = {g: float(a[f"{key}_{g}"][i]) for g in lists}
    return out


def _holds(values: dict) -> tuple[bool, float, list]:
    order = sorted(values, key=lambda g: -values[g])
    others = [g for g in values if g not in ("keys", "values")]
    ratio = max(values[g] for g in others) / min(values["keys"], values["values"])
    return ratio <= MUCH_SMALLER, ratio, order


def keys_values_authors(result) -> Row:
    """Fig. 5 on the authors' model: the Keys and Values lines are the two highest of their five and the
    other three at most MUCH_SMALLER × the lower of them (the reading of :func:`.norms.keys_values`)."""
    what = ("'the highest magnitude corresponds to the Keys and Values, while the other blocks exhibit much smaller "
            "absolute entries', on Fig. 5 as the authors' code draws it (their model, their five parameter lists, "
            f"steps 0–1000): at each step and in each panel, every other line is at most {MUCH_SMALLER:g} × the lower "
            "of Keys and Values")
    if result is None:
        return not_run("fig5_authors.keys_values", "fig5_authors", what, "fig5_authors")
    a = result.arrays
    theirs = {k: _holds(v) for k, v in _readings(a, PLOTTED).items()}
    fixed_lists = tuple(g for g in PLOTTED if g != "feedforward") + ("ffn_weights",)
    fixed = {k: _holds(v) for k, v in _readings(a, fixed_lists).items()}
    n = len(theirs)
    n_ok = sum(h for h, _, _ in theirs.values())
    n_top = sum(set(o[:2]) == {"keys", "values"} for _, _, o in theirs.values())
    n_fixed = sum(h for h, _, _ in fixed.values())
    low = min(theirs, key=lambda k: theirs[k][1])
    lab = {g: result.meta["lists"][g]["label"] for g in result.meta["lists"]}
    note = (f"Keys and Values are the two highest lines in {n_top}/{n} readings, and the other three at most "
            f"{MUCH_SMALLER:g} × the lower of them in {n_ok}/{n}. The closest reading is {low}: the largest other "
            f"line ({lab[next(g for g in theirs[low][2] if g not in ('keys', 'values'))]}) over the lower of Keys and "
            f"Values is {theirs[low][1]:.2f}. Their 'FeedForward' line is LN2's γ, β; with the feed-forward weights in "
            f"its place the sentence holds in {n_fixed}/{n} readings")
    verdict, value = claim_verdict([n_ok > 0], n_ok == n), n_ok / n
    runs = result.meta.get("run_seeds") or []
    per_run = [dict(seed=result.meta.get("run_seed"), holds=n_ok, of=n, verdict=verdict)]
    for r, seed in enumerate(runs):  # other runs (their initialisation is unseeded): the same reading on each
        a_r = {k: a[k] for k in ("steps",)}
        for g in PLOTTED:
            a_r[f"param_{g}"], a_r[f"spec_{g}"] = a[f"runs_param_{g}"][r], a[f"runs_spec_{g}"][r]
        ok_r = sum(_holds(v)[0] for v in _readings(a_r, PLOTTED).values())
        per_run.append(dict(seed=seed, holds=ok_r, of=n, verdict=claim_verdict([ok_r > 0], ok_r == n)))
    if runs:
        vs = [p["verdict"] for p in per_run]
        verdict = ("reproduced" if all(v == "reproduced" for v in vs) else
                   "not reproduced" if all(v == "not reproduced" for v in vs) else "partly reproduced")
        value = sum(v == "reproduced" for v in vs) / len(vs)
        per_run_text = ", ".join(f"{p['holds']}/{n}" for p in per_run)
        note = (f"Over {len(per_run)} runs (seeds {', '.join(str(p['seed']) for p in per_run)}; their initialisation "
                f"is unseeded) the sentence holds in every reading in {sum(v == 'reproduced' for v in vs)}/{len(vs)} "
                f"runs (readings per run: {per_run_text}). The run of "
                f"seed {per_run[0]['seed']}: " + note)
    spread = {g: a[f"spread_{g}"] for g in PLOTTED if f"spread_{g}" in a}
    if spread:
        worst = max(spread, key=lambda g: spread[g].max() / spread[g].min())
        note += (f". Their notebook gives each list its own batch (a fresh pass of the loader per section); at step "
                 f"{int(a['steps'][-1])} a list's Hessian norm varies across those five batches by up to "
                 f"{spread[worst].max() / spread[worst].min():.2f}× ({lab[worst]} {spread[worst].min():.3g}–"
                 f"{spread[worst].max():.3g})")
    return Row(id="fig5_authors.keys_values", result="fig5_authors", kind="claim", claim="reproduced", expected=None,
               what=what, verdict=verdict, value=value, tolerance=MUCH_SMALLER,
               profile=result.config["profile"], evidence=[str(result.json_path)], note=note,
               details={"theirs": {k: dict(holds=h, ratio=r, order=o) for k, (h, r, o) in theirs.items()},
                        "with_ffn_weights": {k: dict(holds=h, ratio=r, order=o) for k, (h, r, o) in fixed.items()},
                        "runs": per_run, "batch_spread": {g: v.tolist() for g, v in spread.items()},
                        "much_smaller_factor": MUCH_SMALLER})


def _key_numbers(g: str):
    def numbers(r) -> dict:
        a = r.arrays
        return {f"‖H‖_2 {g} at the last step": float(a[f"spec_{g}"][-1]),
                f"‖W‖_F {g} at the last step": float(a[f"param_{g}"][-1])}
    return numbers


def _fig5_numbers(r) -> dict:
    a = r.arrays
    return {f"‖H‖_2 {g}, last step": float(a[f"spec_{g}"][-1]) for g in ("keys", "values", "feedforward", "ffn_weights")}


# ----------------------------------------------------------------------------- the results of this module
_NEEDS = "MNIST; trains the authors' recipe to step 1,000 (about 20 s on a CPU)"


def _type_spec(fig: str) -> FigureSpec:
    g = FIGURES[fig]
    n = int(fig[3:])
    lists = (g, "ffn_weights") if g == "feedforward" else (g,)
    plots = {"hessian": _hessian_plot(g)}
    messages = {"hessian": _hessian_message(g)}
    if g == "feedforward":
        plots["ffn_weights"] = _hessian_plot("ffn_weights")
        messages["ffn_weights"] = _hessian_message("ffn_weights")
    return FigureSpec(f"{fig}_authors", f"Fig. {n}", f"fig{n:02d}_{g}_authors",
                      f"{LISTS[g][1]}: Hessian blocks over the first 1,000 steps, the authors' model", SETTINGS,
                      lambda j: _select(j.deps["trajectory_authors"], lists), plots, messages,
                      depends=("trajectory_authors",), needs=_NEEDS, rank=0, key_numbers=_key_numbers(g))


SPECS = (
    FigureSpec("trajectory_authors", "Figs. 5, 7-11", "", "the authors' model over their first 1,000 steps", SETTINGS,
               lambda j: compute_trajectory_authors(j.ctx, j.settings), needs=_NEEDS, internal=True),
    FigureSpec("fig5_authors", "Fig. 5", "fig05_norms_authors", "parameter and Hessian norms over the first 1,000 "
               "steps, the authors' model", SETTINGS, lambda j: _select(j.deps["trajectory_authors"], tuple(LISTS)),
               {"norms": plot_norms}, {"norms": _norm_message}, depends=("trajectory_authors",), needs=_NEEDS, rank=0,
               key_numbers=_fig5_numbers, rows=lambda res: [keys_values_authors(res.get("fig5_authors"))],
               finding=Finding("fig5_authors", "Fig. 5 on the authors' model: Keys and Values have the highest norms",
                               "notebooks/fig05_block_norms")),
    *(_type_spec(f) for f in FIGURES),
    FigureSpec("trajectory_authors_exact", "Figs. 5, 7-11", "", "the authors' model over their first 1,000 steps, "
               "float32 run", EXACT_SETTINGS, lambda j: compute_trajectory_authors(j.ctx, j.settings), needs=_NEEDS,
               internal=True),
    FigureSpec("fig5_authors_exact", "Fig. 5", "fig05_norms_authors_exact", "parameter and Hessian norms over the "
               "first 1,000 steps, the authors' model, float32 run", EXACT_SETTINGS,
               lambda j: _select(j.deps["trajectory_authors_exact"], tuple(LISTS)), {"norms": plot_norms},
               {"norms": _norm_message}, depends=("trajectory_authors_exact",), needs=_NEEDS, rank=0,
               key_numbers=_fig5_numbers),
)
