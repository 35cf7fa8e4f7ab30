"""Figs. 3 and 4: the exact Hessian of the cross-entropy on one MNIST batch, at initialisation and trained.

The Hessian is exact and cross-checked against curvlinops, the paper's tool (:mod:`.hessians`). Kept: the whole
Hessian as an image at page resolution, the attention parameters at full resolution, the statistics of every
diagonal block and of every pair of groups, and the blocks the training-dynamics figures follow at step 0.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import numpy as np
import torch

from .. import captions
from ..params import authors_hessian_order, param_groups, param_slices
from ..precision import frozen_at_one
from ..train import evaluate
from ..plotting import WIDTH, group_axes, new_axes, pooled_log_image, short_label
from ..row import Row
from .claims import claim_row, claim_verdict, not_run
from .context import Context
from .dynamics_blocks import blocks_from_dense, snapshot_record, trajectory_groups
from .hessians import (SETS, STATISTICS, cross_check, dense, group_pair_statistics, rankings, sample_columns,
                       unit_statistics, units_of)
from .settings import AUTHORS_RUN_SEEDS, TrajectorySettings, Variant
from .spec import FigureSpec, Finding, Point, claimed

__all__ = ["compute_heatmap", "heatmap_runs", "FIG3", "FIG4", "group_table", "plot_hessian", "plot_attention",
           "plot_block_means", "ATTENTION", "HeatmapSettings", "values_largest", "values_larger", "v_over_qk", "CAPTIONS",
           "PER_ENTRY", "SPECS"]


@dataclass(frozen=True)
class HeatmapSettings(Variant):
    """Figs. 3 and 4: one dense exact Hessian on one batch, of the theorem's block (as the paper describes it) or of the
    authors' model (as their code computes it: ``config.AUTHORS_RECIPES``, their notebooks/hessian_visualization.ipynb).
    On the authors' model the Hessian is float32 of the checkpoint's weights whatever the run's ``arithmetic``, as their
    notebook takes it; at step 0 both arithmetics are the same float32 initialisation."""

    # the run's step: 0 its initialisation (Fig. 3); None the end of the run (Fig. 4 on the theorem's block); their
    # notebooks/hessian_visualization.ipynb loads step 20,000 for Fig. 4
    step: int | None = 0
    # paper (Fig. 5 caption): one batch of 128 MNIST training images. The theorem's block: the first 128 (the book's
    # provenance tables); the authors': the images of their loader's first batch, all 128
    # (configs/vit_classification_mnist.yaml: data.batch_size)
    batch_size: int = 128
    # prior work's code (dalab/transformer-hessian) plots log10(|H| + 1e-6).
    eps: float = 1e-6
    # pixels per axis of the whole-Hessian image: a page-width figure shows about 600 (mean of log10 per cell).
    display_cells: int = 600
    # curvlinops cross-check: a seeded sample of this many columns covering every group (None: all columns).
    check_columns: int | None = 256
    check_seed: int = 0
    # float64 cross-check batch: small enough to be quick, large enough to exercise every path.
    check_batch_f64: int = 16
    # tangents per pass of the exact method (None: its default); cost only, same numbers.
    fast_chunk: int | None = None
    # the authors' model: their initialisation is unseeded (no torch.manual_seed in their code), so the claim is
    # also read on these seeds (initialisations at step 0, runs of the recipe to ``step`` after training), on the
    # same batch, and its verdict is a count over them (empty: the run of the recipe's seed alone).
    seeds: tuple = ()


# profile -> settings. Smoke: 4 images (a dense Hessian costs ~ P columns x batch size, 32x less than 128); on the
# authors' model the first 4 images of their loader's batch.
_SMOKE = dict(batch_size=4, check_columns=64, check_batch_f64=4, fast_chunk=128)
INIT = {"paper": HeatmapSettings(step=0), "smoke": HeatmapSettings(step=0, **_SMOKE)}
TRAINED = {"paper": HeatmapSettings(step=None), "smoke": HeatmapSettings(step=None, **_SMOKE)}
_AUTHORS = dict(model="authors", arithmetic="authors")
# paper: the figure's initialisation (the recipe's seed, 37) and nine more, seeds 0-8: ten draws of their unseeded
# initialisation (about 5 s each, the Hessian only); smoke: two, to run the count
INIT_SEEDS = (37, *range(9))
AUTHORS_INIT = {"paper": HeatmapSettings(**_AUTHORS, step=0, seeds=INIT_SEEDS),
                "smoke": HeatmapSettings(**_AUTHORS, step=0, seeds=(37, 0), **_SMOKE)}
# Fig. 4: the figure's run (seed 37) and two more runs of the recipe (settings.AUTHORS_RUN_SEEDS); smoke: two
# 3-step runs (the authors' smoke run has 3 steps of 128 images, config.RECIPES: its last is "trained")
AUTHORS_TRAINED = {"paper": HeatmapSettings(**_AUTHORS, step=20_000, seeds=AUTHORS_RUN_SEEDS),
                   "smoke": HeatmapSettings(**_AUTHORS, step=3, seeds=AUTHORS_RUN_SEEDS[:2], **_SMOKE)}
# the float32 twin: one run (the figure's), beside the bf16 runs as the arithmetic's comparison
AUTHORS_TRAINED_EXACT = {p: replace(v, arithmetic="exact", seeds=()) for p, v in AUTHORS_TRAINED.items()}


ATTENTION = ("query", "key", "value", "out", "ln1")  # "out": W_O, where the model has one
# the authors' notebook's second panel, "Hessian (Self-Attention)": the Q, K, V weights only (768 entries)
THEIR_ATTENTION = ("query", "key", "value")


def group_table(model) -> dict:
    """Parameter groups and tensors of ``model`` as JSON-able lists (for results)."""
    groups = param_groups(model)
    sl = param_slices(model)
    return dict(group_names=[g.name for g in groups], group_starts=[g.start for g in groups],
                group_stops=[g.stop for g in groups], param_names=list(sl),
                param_shapes=[list(p.shape) for _, p in model.named_parameters()],
                param_offsets=[s.start for s in sl.values()], n_parameters=groups[-1].stop if groups else 0)


def heatmap_runs(s: HeatmapSettings, ctx: Context) -> list[tuple]:
    """The runs a heatmap reads: its variant's at ``s.step``, of each seed of ``s.seeds`` (none: the recipe's)."""
    return [(s.step, seed) for seed in tuple(s.seeds) or (None,)]


def compute_heatmap(ctx: Context, s: HeatmapSettings, traj: TrajectorySettings | None) -> tuple[dict, dict]:
    """Figs. 3/4 on ``s``'s model after ``s.step`` steps of its run. The theorem's block: the first ``batch_size``
    training images, every parameter in :func:`~curvature_gap.params.param_groups` order; at step 0 also step 0 of the
    training-dynamics trajectory (same model, same batch; ``traj``: its settings). The authors' model as they computed
    it: the first batch of their shuffled, augmented loader, the image over their parameter list in their order
    (:func:`curvature_gap.params.authors_hessian_order`). The Hessian is exact (hand-written LayerNorm); the statistics
    of each diagonal block do not depend on which other parameters are included."""
    model, info = ctx.model(s, s.step)
    if s.model == "authors":
        return _authors_heatmap(ctx, s, model, info)
    batch = ctx.first_images(s, s.batch_size)
    trained = s.step != 0
    arrays, meta, Hn = _heatmap(ctx, s, model, info, batch, "trained" if trained else "initialised")
    if not trained:  # step 0 of the training-dynamics trajectory (same model, same batch)
        rec = snapshot_record(blocks_from_dense(Hn, model), model, True, traj.eps, traj.display_cells)
        arrays.update({f"dyn_{k}": np.asarray(v) for k, v in rec.items()})
    meta.update(trained=trained, batch="first training images",
                parameters_included="all: positional embedding, patch embedding, transformer block(s), head",
                trajectory_groups=trajectory_groups(model))
    return arrays, meta


def _authors_heatmap(ctx: Context, s: HeatmapSettings, model, info) -> tuple[dict, dict]:
    batch = ctx.loader_batches(s, 1, s.batch_size)[0]
    order, layout = authors_hessian_order(model)
    with ctx.phase("evaluation"):
        test_loss, test_acc = evaluate(model, ctx.data(s).test, ctx.torch_device)
    info = dict(info, test_accuracy=test_acc, test_loss=test_loss)
    arrays, meta, Hn = _heatmap(ctx, s, model, info, batch, f"after {s.step} steps of the authors' recipe",
                               display=(np.asarray(order), layout), attention=THEIR_ATTENTION, clip=True)
    if s.seeds:
        own = ctx.recipe(s).seed  # the figure's run: its Hessian is Hn
        meta["seed_leads"] = _seed_leads(ctx, s, batch, units_of(model), {own: Hn})
    at_one, n_gamma, max_dev = frozen_at_one(model)
    meta.update(arithmetic=s.arithmetic, precision=ctx.recipe(s).precision,
                layernorm_gamma=dict(exactly_one=at_one, total=n_gamma, max_abs_deviation=max_dev),
                trained=s.step > 0, step=s.step, batch=f"the first {s.batch_size} images of the first batch of the "
                "authors' shuffled, augmented training loader (their recipe's seed)", parameters_included="the authors': every weight and "
                "LayerNorm γ, β, no other bias, in their order and flattening")
    return arrays, meta


def _seed_leads(ctx: Context, s: HeatmapSettings, batch, units, known: dict) -> list[dict]:
    """For each seed of ``s.seeds``: the exact Hessian on ``batch`` of the authors' model of that seed at ``s.step``
    (``known``: seed -> one already computed), in how many of the :data:`STATISTICS` W_V's diagonal block leads each
    set of :data:`SETS` (and which block leads the weight matrices where it does not), and :func:`v_over_qk`."""
    out = []
    for seed in s.seeds:
        if seed in known:
            H = known[seed]
        else:
            model, _ = ctx.model(s, s.step, seed)
            ctx.log(f"seed {seed}, step {s.step}: exact Hessian, {len(batch[1])} images")
            with ctx.phase("hessian"):
                H = dense(model, batch, s.fast_chunk)[0].cpu().numpy().astype(np.float64)
        stats = unit_statistics(H, units)
        lead = leads(stats)
        out.append(dict(seed=int(seed), leads={k: sum(v.values()) for k, v in lead.items()},
                        weights_first={st: order[0] for st, order in rankings(stats)["weights"].items()},
                        v_over_qk=v_over_qk(stats),
                        verdict=claim_verdict(list(lead["weights"].values()),
                                              all(all(v.values()) for v in lead.values()))))
    return out


def _heatmap(ctx: Context, s, model, info, batch, state: str, display=None, attention=None,
             clip: bool = False) -> tuple[dict, dict, np.ndarray]:
    """What both heatmap results keep: the exact Hessian cross-checked against curvlinops, the image at page resolution,
    the attention block at full resolution, every diagonal block's and group pair's statistics. ``display`` = (flat
    indices, [(group, entries)]) draws the image over those parameters in that order (default: all, in ``param_groups``
    order); ``attention``: the groups of the attention image (default :data:`ATTENTION`); ``clip``: images of
    log10(max(|H|, ε)) on shared colour limits, as the authors' notebook draws them, instead of log10(|H| + ε)."""
    gt = group_table(model)
    ctx.log(f"exact Hessian: {gt['n_parameters']} parameters, {len(batch[1])} images ({state} model)")
    with ctx.phase("hessian"):
        H, seconds = dense(model, batch, s.fast_chunk)
    cols = None if s.check_columns is None else sample_columns(model, s.check_columns, s.check_seed)
    ctx.log(f"cross-check against curvlinops on {'all' if cols is None else len(cols)} columns")
    with ctx.phase("cross-check"):
        cc = cross_check(model, batch, H, cols, s.check_batch_f64)
    cc.update(method="curvature_gap.hessian.hessian (hand-written forward-over-reverse, exact)",
              method_seconds=round(seconds, 2))
    Hn = H.cpu().numpy().astype(np.float64)  # computed on ctx's device; to the CPU only to store it (NumPy)
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(model(batch[0]), batch[1]))
    stats = unit_statistics(Hn, units_of(model))
    shown, gd = Hn, gt
    if display is not None:
        idx, layout = display
        shown = Hn[np.ix_(idx, idx)]
        stops = np.cumsum([n for _, n in layout]).tolist()
        gd = dict(gt, group_names=[g for g, _ in layout], group_starts=[0] + stops[:-1], group_stops=stops,
                  n_parameters=len(idx), n_parameters_model=gt["n_parameters"])
    pairs = group_pair_statistics(shown, gd["group_starts"], gd["group_stops"])
    img, f = (pooled_log_image(np.maximum(np.abs(shown), s.eps), 0.0, s.display_cells) if clip
              else pooled_log_image(shown, s.eps, s.display_cells))
    names = gd["group_names"]
    att = [i for i, n in enumerate(names) if n.startswith("block0.") and n.split(".")[1] in (attention or ATTENTION)]
    a0, a1 = gd["group_starts"][att[0]], gd["group_stops"][att[-1]]
    block = np.abs(shown[a0:a1, a0:a1])
    arrays = dict(image=img.astype(np.float16),
                  attention=(np.log10(np.maximum(block, s.eps)) if clip else np.log10(block + s.eps)).astype(np.float16),
                  pair_mean=pairs["mean"], pair_max=pairs["max"], pair_fro=pairs["fro"])
    meta = dict(
        profile=ctx.profile, model=s.model_key, batch_size=len(batch[1]), loss=loss, cross_check=cc, checkpoint=info,
        pool=f, attention_range=[int(a0), int(a1)], attention_groups=[names[i] for i in att],
        colour="log10(max(|H|, eps)), shared limits" if clip else "log10(|H| + eps)", unit_stats=stats, rankings=rankings(stats),
        statistics={k: v[0] for k, v in STATISTICS.items()}, **gd)
    return arrays, meta, Hn


# -------------------------------------------------------------------- plots (draw results; compute nothing)
def _labels(meta) -> list[str]:
    nb = sum(1 for n in meta["group_names"] if n.endswith(".query"))
    return [short_label(n, nb) for n in meta["group_names"]]


def _plot_image(result, key: str, span: tuple, idx: list, title: str):
    """The image ``arrays[key]`` over the parameters ``span`` (start, stop), its groups ``idx`` marked, the W_V–W_V
    diagonal block (the claim's) outlined and named in a legend below the figure (off the data and the row labels),
    and a colour bar. Colour limits: the image's own range, or (the authors' images) one range over both images, as
    their notebook shares vmin and vmax between its two panels."""
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    meta, a, img = result.meta, result.arrays, result.arrays[key].astype(np.float64)
    (a0, a1), labels = span, _labels(meta)
    own = (np.concatenate([a["image"].astype(np.float64).ravel(), a["attention"].astype(np.float64).ravel()])
           if "shared" in meta.get("colour", "") else img)
    vmin = max(np.log10(result.config["settings"]["eps"]), float(np.nanpercentile(own, 1)))
    fig, ax = new_axes(WIDTH, 6.4)
    im = ax.imshow(img, extent=(a0, a1, a1, a0), cmap="viridis", vmin=vmin, vmax=float(np.nanmax(own)))
    group_axes(ax, [meta["group_starts"][i] for i in idx], [meta["group_stops"][i] for i in idx],
               [labels[i] for i in idx])
    names = meta["group_names"]
    if "block0.value" in names:
        v0, v1 = meta["group_starts"][names.index("block0.value")], meta["group_stops"][names.index("block0.value")]
        box = ax.add_patch(Rectangle((v0, v0), v1 - v0, v1 - v0, fill=False, edgecolor="#ff3b30", lw=1.6, zorder=5,
                                     label=r"$W_V$–$W_V$: the claim's block"))
        ax.figure.legend(handles=[box], loc="outside lower center", frameon=False, labelcolor="#d70015")
    cb = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cb.set_label(r"$\log_{10}\max(|H_{ij}|, 10^{-6})$" if "max" in meta.get("colour", "")
                 else r"$\log_{10}(|H_{ij}| + 10^{-6})$")
    ax.set_title(title)
    return fig


def plot_hessian(result):
    """The whole Hessian, log10(|H| + ε), as means over square cells at page resolution."""
    meta = result.meta
    n = meta["n_parameters"]
    state = "trained" if meta["trained"] else "at initialisation"
    pool = f", means over {meta['pool']}×{meta['pool']} cells" if meta["pool"] > 1 else ""
    return _plot_image(result, "image", (0, n), range(len(meta["group_names"])),
                       f"Hessian of the loss, {n:,} parameters, {state}{pool}")


def plot_attention(result):
    """The attention parameters (W_Q, W_K, W_V) and the first LayerNorm, every entry."""
    meta = result.meta
    groups = meta["attention_groups"]
    return _plot_image(result, "attention", meta["attention_range"],
                       [i for i, n in enumerate(meta["group_names"]) if n in groups],
                       "Q, K and V weights, every entry (their panel)"
                       if [n.split(".")[-1] for n in groups] == list(THEIR_ATTENTION)
                       else "Attention parameters and LN1, every entry")


def group_pair_image(M: np.ndarray, labels, height: float, title: str, label: str, **imshow):
    """(figure, axes) of a (group, group) matrix ``M`` as an image, the groups ``labels`` on both axes, with a colour
    bar named ``label``."""
    fig, ax = new_axes(WIDTH, height)
    im = ax.imshow(M, **imshow)
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    ax.tick_params(length=0)
    fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02, label=label)
    ax.set_title(title)
    return fig, ax


def plot_block_means(result):
    """log10 of the mean |H_ij| of every pair of parameter groups."""
    return group_pair_image(np.log10(result.arrays["pair_mean"] + 1e-30), _labels(result.meta), 6.0,
                            "Mean |entry| of each pair of parameter groups",
                            r"$\log_{10}$ mean $|H_{ij}|$ over the block", cmap="magma")[0]


# ----------------------------------------------------------------------------- the claim
# The captions of Figs. 3 and 4, verbatim (the paper's LaTeX, figures "hessian_entries" and "hessian_entries_trained";
# the colour and bold markup dropped). Fig. 3's claim is a comparative, "larger": its authors' second panel shows
# only the Q, K and V weights, so the Values block is compared with the Queries' and the Keys' (values_larger); the
# superlative, "the largest" of every block, is a second reading (values_largest, role "detail"). Fig. 4's caption
# is the superlative: the claim itself (values_largest).
CAPTIONS = {
    "fig3": "Hessian entries visualization for an initialized model with one Transformer Block. We see the entire "
            "magnitudes' heterogeneity, while the Values corresponding blocks have larger values.",
    "fig4": "Hessian entries visualization for a model trained for a number of epochs with one Transformer Block. We "
            "see the entire magnitudes' heterogeneity, while the Values-Values corresponding block has the largest "
            "values.",
}
# the blocks Fig. 3's comparative sets W_V's against: the other two of the authors' second panel
COMPARED = ("W_Q", "W_K")


def v_over_qk(stats: dict) -> dict:
    """``{statistic: W_V's diagonal block over the larger of W_Q's and W_K's}`` over :data:`STATISTICS` (above 1:
    W_V's block is larger than both, Fig. 3's comparative)."""
    return {st: stats["W_V"][st] / max(stats[u][st] for u in COMPARED) for st in STATISTICS}


def _over(ratios) -> str:
    """A range of W_V-over-W_Q/W_K ratios in words: "1.7–8.5×"."""
    lo, hi = min(ratios), max(ratios)
    return f"{lo:.3g}×" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}–{hi:.3g}×"


def _figure_seed(result):
    """The seed of the run the figure shows (its training configuration's)."""
    return ((result.config.get("train") or {}).get(result.meta["model"]) or {}).get("seed", "of the run")


def _instances(result) -> str:
    m = result.meta
    return f"{m['batch_size']} training images, {m.get('n_parameters_model', m['n_parameters']):,} parameters"


def _words(spec) -> tuple[str, str, str]:
    """(state, model, draws) of a result's variant in words, from its settings."""
    paper = spec.settings["paper"]
    init = paper.step == 0
    return ("at initialisation" if init else "after training",
            "the authors' model" if paper.model == "authors" else "the theorem's block (Table 1 model)",
            "initialisations" if init else "training runs")


def values_larger(result, spec) -> Row:
    """Fig. 3's claim, the caption's comparative: W_V's diagonal Hessian block is larger than W_Q's and W_K's (the
    blocks of the authors' second panel) in every statistic, on the result of ``spec`` (a ResultSpec); on the
    authors' model counted over the initialisations of its seeds: reproduced where every draw shows it in every
    statistic, not reproduced where none shows it in any."""
    figure = spec.name
    state, model, draws = _words(spec)
    what = (f'"{CAPTIONS[spec.spec.name]}" ({state}, {model}): the comparative, as the authors\' second panel shows only '
            "Q, K and V: W_V's diagonal Hessian block larger than W_Q's and W_K's, in every statistic")
    if result is None:
        return not_run(f"{figure}.values_larger", figure, what, figure)
    n = len(STATISTICS)
    ratio = v_over_qk(result.meta["unit_stats"])
    no = [_label(st) for st, r in ratio.items() if r <= 1]
    sentence = (f"W_V's diagonal block is larger than W_Q's and W_K's in {n - len(no)}/{n} statistics"
                + (f" (not in: {', '.join(no)})" if no else "") + f"; W_V over the larger of them: {_over(ratio.values())}.")
    verdict, value = claim_verdict([r > 1 for r in ratio.values()], not no), (n - len(no)) / n
    details = {"v_over_qk": ratio, "statistics": {k: v[0] for k, v in STATISTICS.items()}, "compared": list(COMPARED)}
    seeds = result.meta.get("seed_leads") or []
    if seeds:  # a count over the draws: the verdict is the count's
        per = [sum(r > 1 for r in d["v_over_qk"].values()) for d in seeds]
        full, none = sum(k == n for k in per), sum(k == 0 for k in per)
        verdict = "reproduced" if full == len(seeds) else "not reproduced" if none == len(seeds) else "partly reproduced"
        value = full / len(seeds)
        sentence = (f"Over {len(seeds)} {draws} (their code does not seed the initialisation): W_V's diagonal block is "
                    f"larger than W_Q's and W_K's in all {n} statistics in {full}/{len(seeds)}, in none in "
                    f"{none}/{len(seeds)}; W_V over the larger of them: "
                    f"{_over([r for d in seeds for r in d['v_over_qk'].values()])}. The figure's "
                    f"{'initialisation' if draws == 'initialisations' else 'run'} (seed {_figure_seed(result)}): "
                    f"{sentence}")
        details["seeds"] = [dict(seed=d["seed"], larger=k, v_over_qk=d["v_over_qk"]) for d, k in zip(seeds, per)]
    return claim_row(result, id=f"{figure}.values_larger", result=figure, what=what, verdict=verdict, value=value,
                     instances=_instances(result), details=details,
                     note=f"{sentence} — the superlative reading ('the largest' of every block): "
                          f"{figure}.values_largest")


# the statistics of a block's entries (not of its size or spectrum): what "larger per entry" means
PER_ENTRY = ("mean", "rms", "median", "max")


def _label(st: str) -> str:
    return STATISTICS[st][0].split(" (")[0]


def _rival(stats: dict, units, lost: list[str], n_st: int) -> str:
    """Of ``units``, the one larger than W_V in the most of the statistics ``lost``, in words: "LN1 larger per
    entry (5/7 statistics; mean |H| 0.0225 vs 0.00605)" when it is larger in every statistic of
    :data:`PER_ENTRY`, else "W_2 larger in 3/7: Frobenius norm, max |H|, spectral norm"; "" if none is."""
    beats = {u: [st for st in STATISTICS if stats[u][st] > stats["W_V"][st]] for u in units if u in stats}
    beats = {u: b for u, b in beats.items() if set(b) & set(lost)}
    if not beats:
        return ""
    u = max(beats, key=lambda x: (len(beats[x]), -list(units).index(x)))
    b = beats[u]
    if all(st in b for st in PER_ENTRY):
        st = PER_ENTRY[0]
        return (f"{u} larger per entry ({len(b)}/{n_st} statistics; {_label(st)} {stats[u][st]:.3g} vs "
                f"{stats['W_V'][st]:.3g})")
    return f"{u} larger in {len(b)}/{n_st}: {', '.join(_label(st) for st in b)}"


_WORDS = {5: "five", 6: "six"}


def leads(stats: dict) -> dict:
    """``{set: {statistic: W_V's diagonal block is the largest of the set's blocks}}`` over :data:`SETS` and
    :data:`STATISTICS`."""
    return {s: {st: order[0] == "W_V" for st, order in per.items()} for s, per in rankings(stats).items()}


def seed_count(seed_leads: list[dict], what: str = "initialisations") -> tuple[str, str, dict]:
    """(verdict, sentence, counts) of the claim over initialisations: "reproduced" when every initialisation
    reproduces it, "not reproduced" when none supports it in any reading, else "partly reproduced"."""
    n = len(seed_leads)
    counts = {v: sum(d["verdict"] == v for d in seed_leads) for v in ("reproduced", "partly reproduced", "not reproduced")}
    n_st = len(STATISTICS)
    full = sum(d["leads"]["weights"] == n_st for d in seed_leads)
    none = sum(d["leads"]["weights"] == 0 for d in seed_leads)
    rivals: dict[str, int] = {}
    for d in seed_leads:
        for u in d["weights_first"].values():
            if u != "W_V":
                rivals[u] = rivals.get(u, 0) + 1
    verdict = ("reproduced" if counts["reproduced"] == n else
               "not reproduced" if counts["not reproduced"] == n else "partly reproduced")
    rival = max(rivals, key=rivals.get) if rivals else None
    sentence = (f"Over {n} {what} (their code does not seed the initialisation): W_V's diagonal block is the largest of the "
                f"weight matrices in all {n_st} statistics in {full}/{n}, in none in {none}/{n}; the claim holds in "
                f"every reading in {counts['reproduced']}/{n}"
                + (f"; where W_V does not lead, {rival} does ({rivals[rival]} of {sum(rivals.values())} readings)"
                   if rival else "") + ".")
    return verdict, sentence, counts


def leads_without(result, drop: str | None, unit: str = "W_V") -> int:
    """In how many of the :data:`STATISTICS` ``unit``'s diagonal block is the largest of the weight matrices once
    ``drop``'s block is left out (None, or a block the model lacks: simply where it leads)."""
    stats = {u: v for u, v in result.meta["unit_stats"].items() if u != drop}
    return sum(order[0] == unit for order in rankings(stats)["weights"].values())


def values_largest(result, spec, claim: bool = True) -> Row:
    """The superlative: W_V's diagonal Hessian block is the largest (see :mod:`.claims`), on the result of ``spec``
    (a :class:`~.spec.ResultSpec`: its settings say the model and the step). ``claim``: the caption's claim (Fig. 4);
    False: a second reading beside the comparative one (Fig. 3, :func:`values_larger`), a detail that is no claim of
    the paper's."""
    figure = spec.name
    state, model, _ = _words(spec)
    what = (f'"{CAPTIONS[spec.spec.name]}" ({state}, {model}): ' if claim else
            f"the superlative reading of Fig. 3's caption, 'the largest' ({state}, {model}), beside its comparative "
            f"({figure}.values_larger): ") + ("W_V's diagonal Hessian block leads the ranking of the diagonal blocks "
                                              "of the Transformer block's parameters, per parameter set and statistic")
    role = dict(role="statement", claim="reproduced") if claim else dict(role="detail", claim=None)
    if result is None:
        return dataclasses.replace(not_run(f"{figure}.values_largest", figure, what, figure), **role)
    stats = result.meta["unit_stats"]
    table = rankings(stats)
    lead = leads(stats)
    w = lead["weights"]
    everywhere = all(all(v.values()) for v in lead.values())
    n_st = len(STATISTICS)
    parts = []
    for s, per in lead.items():
        yes = [STATISTICS[st][0] for st, v in per.items() if v]
        parts.append(f"{SETS[s][0]}: {len(yes)} of {n_st} statistics" + (f" ({', '.join(yes)})" if yes and len(yes) < n_st else ""))
    counts = {s: sum(per.values()) for s, per in lead.items()}
    # each reading adds units to the previous one; name the added unit that takes the lead from W_V
    clauses, prev = [], None
    for s, (_, members) in SETS.items():
        added = [u for u in members if u != "W_V" and (prev is None or u not in SETS[prev][1])]
        lost = [st for st in STATISTICS if (prev is None or lead[prev][st]) and not lead[s][st]]
        clauses.append(_rival(stats, added, lost, n_st))
        prev = s
    n_w = sum(u in stats for u in SETS["weights"][1])
    sentence = (f"W_V's diagonal block: the largest of the {_WORDS.get(n_w, n_w)} weight matrices in "
                f"{counts['weights']}/{n_st} "
                "statistics" + (f" ({clauses[0]})" if clauses[0] else "")
                + (f"; {clauses[1]}" if clauses[1] else "")
                + f"; the largest with the LayerNorms in {counts['with_layernorm']}/{n_st}"
                + f" and of every parameter group of the block in {counts['block']}/{n_st}"
                + (f" ({clauses[2]})" if clauses[2] else "") + ".")
    verdict, value = claim_verdict(list(w.values()), everywhere), sum(w.values()) / n_st
    details = {"rankings": table, "leads": lead, "statistics": {k: v[0] for k, v in STATISTICS.items()},
               "sets": {k: v[0] for k, v in SETS.items()}, "values": stats}
    if result.meta.get("seed_leads"):  # a count over initialisations: the verdict is the count's
        verdict, over, counts = seed_count(result.meta["seed_leads"], _words(spec)[2])
        value = counts["reproduced"] / len(result.meta["seed_leads"])
        sentence = (f"{over} The figure's {'initialisation' if result.meta.get('step', 0) == 0 else 'run'} "
                    f"(seed {_figure_seed(result)}): {sentence}")
        details["seeds"] = result.meta["seed_leads"]
    return claim_row(result, id=f"{figure}.values_largest", result=figure, **role, what=what, verdict=verdict,
                     value=value, instances=_instances(result), note=sentence + " — " + "; ".join(parts),
                     details=details)


def key_numbers(r) -> dict:
    m = r.meta
    out = {"loss on the batch": m["loss"],
           "curvlinops agreement, float32 (max rel. diff.)": m["cross_check"]["float32"]["max_relative_difference"],
           "curvlinops agreement, float64 (max rel. diff.)": m["cross_check"]["float64"]["max_relative_difference"]}
    for u in ("W_Q", "W_K", "W_V", "W_1", "W_2", "LN1", "LN2"):
        out[f"mean abs(H) of the {u} block"] = m["unit_stats"][u]["mean"]
    if m["trained"]:
        out["test accuracy of the trained model"] = m["checkpoint"].get("test_accuracy")
    return out


# ----------------------------------------------------------------------------- the results of this module
# what Figs. 3 and 4 share: the computation, the figure's parts and their captions' messages, the runs, key numbers
_HEAT = dict(compute=lambda j: compute_heatmap(j.ctx, j.settings, j.reads.get("trajectory")),
             plots={"hessian": plot_hessian, "attention": plot_attention, "block_means": plot_block_means},
             messages={"hessian": captions.heatmap_whole, "attention": captions.heatmap_attention,
                       "block_means": captions.heatmap_means}, runs=heatmap_runs, key_numbers=key_numbers)
_BF16_RUNS = "MNIST; trains the authors' recipe in bf16 to step 20,000, three runs (seeds 37, 0, 1; about 9 min each " \
             "on one CPU core, two side by side)"
FIG3 = FigureSpec(
    "fig3", "Fig. 3", "fig03_hessian_init", "Hessian entries at initialisation",
    (Point(AUTHORS_INIT, Finding("Fig. 3 on the authors' model: the Values blocks are largest (initialisation)",
                                 "notebooks/fig03_hessian_init")),
     Point(INIT, Finding("Fig. 3 on the theorem's block: the Values blocks are largest (initialisation)",
                         "notebooks/fig03_hessian_init"), reads=("trajectory",), override_key="init_heatmap")),
    **_HEAT, rows=lambda res: [row for s in claimed("fig3") for row in (
        values_larger(res.get(s.name), s), values_largest(res.get(s.name), s, claim=False))])
FIG4 = FigureSpec(
    "fig4", "Fig. 4", "fig04_hessian_trained", "Hessian entries after training",
    (Point(AUTHORS_TRAINED, Finding("Fig. 4 on the authors' model: the Values–Values block is largest (trained)",
                                    "notebooks/fig04_hessian_trained"), needs=_BF16_RUNS),
     Point(AUTHORS_TRAINED_EXACT, needs="MNIST; trains the authors' recipe in float32 to step 20,000 (about 6 min on a "
                                        "CPU)"),
     Point(TRAINED, Finding("Fig. 4 on the theorem's block: the Values–Values block is largest (trained)",
                            "notebooks/fig04_hessian_trained"), reads=("trajectory",), override_key="trained_heatmap")),
    **_HEAT, rows=lambda res: [values_largest(res.get(s.name), s) for s in claimed("fig4")])
SPECS = (FIG3, FIG4)
