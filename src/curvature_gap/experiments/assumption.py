"""Fig. 12: how well Assumption 1 (∇L_k(w*) = 0) holds at the trained weights, against k, on the theorem's model and
on the authors'.

The theorem's model (:class:`AssumptionSettings`; the CIFAR-100 model of Table 1, the MNIST model as its stand-in):
‖∇L_k(w*)‖ over random orders of the data and its root-mean-square over all orders, exactly
(:mod:`curvature_gap.landscape.assumption1`); its rows are :func:`assumption_rows`. The authors' model: the gradient
at w* of the running mean over one pass of their loader (:mod:`.running_mean`), summed in float64 (the quantity) and
in the parameters' dtype as their ``assumption_1.py`` sums it (``fig12_authors``: their assumption_1.yaml;
``fig12_authors_mnist*``: the MNIST stand-ins, cut from the shared passes). One rule reads "its validity increases
with … a larger number of samples" on every model (:func:`curvature_gap.landscape.assumption1.validity_increases`).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, replace

import numpy as np

from .. import captions
from ..landscape.assumption1 import measure, validity_increases
from ..plotting import WIDTH, loglog_axes, new_axes
from ..row import Row
from .claims import claim_row, not_run
from .context import Context
from .running_mean import (ACCUM_TOL, CIFAR_NEEDS, CIFAR_STANDIN, DRIFT_FROM, MNIST_NEEDS, SMOKE, LoaderPassSettings,
                           authors_pass, loader_figure, on_loader, pass_title)
from .settings import Variant
from .spec import claimed

__all__ = ["compute_assumption", "plot_assumption", "message", "key_numbers", "AssumptionSettings", "assumption_rows",
           "ASSUMPTION_TOL", "validity_row",
           "accumulation_rows", "AUTHORS_SETTINGS", "FALL_TOL", "FIG12", "SPECS"]


@dataclass(frozen=True)
class AssumptionSettings(Variant):
    """Fig. 12 on the theorem's block: ||grad L_k(w*)|| against the number of samples k (Assumption 1 says it is 0)."""

    # the paper's Fig. 12 is on the 8-block CIFAR-100 model (the authors' assumption_1.yaml), so the paper profile of
    # the theorem's block is its CIFAR-100 model of Table 1; the MNIST model stands in where CIFAR-100 cannot be had
    dataset: str = "cifar100"
    n_permutations: int = 4  # sampled orders drawn (the mean over all orders is computed exactly)
    n_points: int = 30  # log-spaced sample counts from 1 to N
    chunk: int = 512  # samples per backward pass (memory only; does not change the numbers beyond rounding)
    seed: int = 0  # permutation seed


SETTINGS = {"paper": AssumptionSettings(), "smoke": AssumptionSettings(dataset="mnist", n_points=20, n_permutations=4)}
# the stand-in (as fig6_mnist is Fig. 6's): the trained MNIST model of Table 1, without a verdict on the figure
MNIST_SETTINGS = {"paper": AssumptionSettings(dataset="mnist")}
# the authors' model: their assumption_1.yaml (seed 21, the seed of configs/vit_classification_cifar_100.yaml: the
# defaults of LoaderPassSettings); smoke: the pass of their MNIST smoke run
AUTHORS_SETTINGS = {"paper": LoaderPassSettings(), "smoke": SMOKE}


def compute_assumption(ctx: Context, s: AssumptionSettings) -> tuple[dict, dict]:
    model, info = ctx.model(s)
    tr = ctx.data(s).train
    ctx.log(f"gradient norms of L_k at w* on {len(tr)} training images, {s.n_permutations} orders, exact mean")
    res = measure(model, tr.images, tr.labels, s.n_points, s.n_permutations, s.seed, ctx.torch_device, s.chunk,
                  ctx.progress)
    arrays = {k: res.pop(k) for k in ("k", "grad_norms", "mean", "rms_exact", "grad_mean")}
    meta = dict(profile=ctx.profile, model=s.model_key, n_permutations=s.n_permutations, checkpoint=info,
                quantity="‖∇L_k(w*)‖₂, L_k = mean cross-entropy of the first k samples of a random order; "
                         "rms_exact = sqrt(E‖∇L_k‖²) over all orders, from the per-sample gradient moments", **res)
    return arrays, meta


# -------------------------------------------------------------------- the figure (draws a result; computes nothing)
def plot_assumption(result):
    """‖∇L_k(w*)‖ against k. The theorem's model: sampled orders, their mean, the exact root-mean-square over all
    orders, on log-log axes. The authors' model (their Fig. 12's quantity): the mean over the runs (one loader pass
    each) with a ±1 std band, summed as their code sums it (the parameters' dtype) and in float64, over the same
    gradients; log x, linear y, as their notebook draws it."""
    a, meta = result.arrays, result.meta
    if not on_loader(result):
        k = a["k"]
        fig, ax = new_axes(WIDTH, 5.6)
        for i, row in enumerate(a["grad_norms"]):
            ax.plot(k, row, color="tab:blue", lw=0.6, alpha=0.4, label="random orders" if i == 0 else None)
        ax.plot(k, a["rms_exact"], color="k", lw=2, label=r"$\sqrt{E\|\nabla\mathcal{L}_k\|^2}$ over all orders")
        ax.plot(k, float(a["rms_exact"][0]) / np.sqrt(k), color="0.5", ls=":", label=r"$\propto k^{-1/2}$")
        ax.axhline(meta["grad_norm_full"], color="tab:red", ls="--", lw=1,
                   label=rf"$\|\nabla\mathcal{{L}}_N(w^*)\| = {meta['grad_norm_full']:.3g}$ (all $N$ samples)")
        loglog_axes(ax, r"$k$ (training samples)", r"$\|\nabla\mathcal{L}_k(w^*)\|_2$",
                    r"Assumption 1 says this is 0 for every $k$", legend_ncol=2)
        return fig
    # 4.6 in: narrow enough to be seen whole on a phone with its smallest text at 7 pt (notebook.phone_min_width:
    # 7 × 4.6 × 96 / 9.5 pt = 326 px); its point, where the two sums part (the largest k, at the right), and both
    # legend entries are then on a 390 px screen without scrolling
    fig, ax = new_axes(4.6, 4.9)
    g = a["grad_samples"]
    dtype = "bf16" if meta.get("precision") == "bf16" else "float32"
    for key, label, color, ls in (("grad_norm_theirs", f"summed in {dtype}, as their code sums it", "tab:red", "-"),
                                  ("grad_norm", "summed in float64 (the quantity)", "tab:blue", "--")):
        y = a[key]
        mean, std = y.mean(axis=0), y.std(axis=0)
        ax.plot(g, mean, color=color, ls=ls, lw=1.8, label=label)
        if len(y) > 1:
            ax.fill_between(g, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.set_xlabel("training samples seen")
    ax.set_ylabel(r"$\|\nabla\mathcal{L}_k(w^*)\|_2$")
    n = len(a["grad_norm"])
    runs = f"mean ± std over {n} runs" if n > 1 else "one pass of its loader"
    ax.set_title(textwrap.fill(pass_title(meta), 44) + "\n" + textwrap.fill(f"{runs}; Assumption 1 says this is 0", 44))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)  # below the axes, one entry a line
    return fig


def message(result) -> str:
    """The caption's message: how the gradient norm changes with k, and (the authors' model) what the sum their code
    takes does to it."""
    if not on_loader(result):
        return captions.fig12(result)
    a, m = result.arrays, result.meta
    exact, theirs = a["grad_norm"].mean(axis=0), a["grad_norm_theirs"].mean(axis=0)
    dtype = "bf16" if m.get("precision") == "bf16" else "float32"
    return (f"Summed in float64 the gradient norm goes from {float(exact[0]):.3g} after {int(a['grad_samples'][0])} "
            f"samples to {float(exact[-1]):.3g} after {int(a['grad_samples'][-1]):,}; summed in {dtype} as their code "
            f"sums the same gradients it ends at {float(theirs[-1]):.3g} ({m['theirs_over_exact']:.2f} of the float64 "
            "sum). It is not 0 at any k.")


def key_numbers(r) -> dict:
    m = r.meta
    if not on_loader(r):
        return {"‖∇L_N(w*)‖": m["grad_norm_full"], "rms per-sample gradient norm": m["rms_per_sample_grad_norm"],
                "slope at small k": m["slope_small_k"]}
    return {"‖∇L_k(w*)‖ at the last k (float64 sum, mean over runs)": float(r.arrays["grad_norm"][:, -1].mean()),
            "their sum over the float64 sum at the last k": m["theirs_over_exact"],
            "float64 norm at the last k over k ≈ 60,000": m["exact_drift"]}


# ----------------------------------------------------------------------------- the claims on the authors' model
# "falls": the float64 norm at the largest k below (1 − FALL_TOL) × its value at k ≈ DRIFT_FROM; averaging alone
# would give a fall like k^(−1/2) (a factor 2 over the 5 epochs here) for a zero-mean gradient
FALL_TOL = 0.10
THEIR_CIFAR_BATCHES = 10_166  # 26 epochs of ceil(50,000 / 128) = 391 batches: their Fig. 12 pass on CIFAR-100


def _mechanism(standin) -> str:
    """What the MNIST stand-in in their arithmetic shows about the accumulation, in words with its numbers."""
    m = standin.meta
    dtype = "bf16" if m.get("precision") == "bf16" else "float32"
    batches = -(-m["largest_k"] // m["batch_size"])
    bites = m.get("bites_at_samples")
    when = (f" (the two part by more than {ACCUM_TOL:.0%} after {-(-bites // m['batch_size']):,} batches)"
            if bites else "")
    return (f"On their MNIST model at step {m['step']:,} ({m['n_passes']} {dtype} runs, a pass of {batches:,} "
            f"batches), the {dtype} sum of the same gradients ends at {m['theirs_over_exact']:.2f} of the float64 sum{when}, "
            f"while the float64 norm at k = {m['largest_k']:,} is {m['exact_drift']:.2f} of its value at "
            f"k = {m['drift_from_samples']:,}: the decline their code plots comes from summing in {dtype} (each new "
            f"batch gradient falls below half an ulp of the sum), not from the quantity. Their CIFAR-100 pass sums "
            f"{THEIR_CIFAR_BATCHES:,} batches, more than the stand-in's {batches:,}.")


ASSUMPTION_TOL = 1e-6  # "∇L_k(w*) = 0": the gradient below 1e-6 of the typical per-sample gradient


def assumption_rows(result, standin=None) -> list[Row]:
    """Assumption 1 taken literally, and the paper's reading of Fig. 12: the claim from the ``fig12`` result (the
    CIFAR-100 model of Table 1), "not run at paper scale" with the MNIST stand-in's numbers without it; Assumption 1
    itself from whichever trained model was measured."""
    measured = result if result is not None else standin
    claim_what = ("'its validity increases with … a larger number of samples': log-log slope of the root-mean-square "
                  "‖∇L_k(w*)‖ over all orders of the data against k, over k ≤ N/10 (negative: reproduced; the "
                  "CIFAR-100 model of Table 1)")
    if measured is None:
        zero = not_run("assumption1.zero", "assumption1", "∇L_k(w*) = 0 for every k", "fig12_mnist")
        return [replace(zero, kind="identity", claim="holds"),
                not_run("fig12.validity_increases", "fig12", claim_what, "fig12_mnist")]
    m = measured.meta
    rel = m["grad_norm_full"] / m["rms_per_sample_grad_norm"]
    data = "CIFAR-100" if m.get("model") == "cifar100" else "MNIST"
    averaging = (f"slope {m['slope_small_k']:.3f}: the decrease is the k^-1/2 (slope -0.5) that averaging alone "
                 f"produces; it would level off at ‖∇L_N(w*)‖ near k = {m['k_floor']:.3g}" if m.get("k_floor") else
                 f"slope {m['slope_small_k']:.3f}")
    rows = [Row(id="assumption1.zero", result="assumption1", kind="identity", claim="holds", expected=None,
                what="∇L_k(w*) = 0 for every k; value = min over k of ‖∇L_k(w*)‖ (at k = N: the full training set) "
                     "/ rms_i ‖∇l_i(w*)‖", verdict="holds" if rel <= ASSUMPTION_TOL else "fails", value=rel,
                tolerance=ASSUMPTION_TOL, profile=measured.config["profile"], evidence=[str(measured.json_path)],
                instances=f"{m['n_samples']:,} training images, trained {data} model of Table 1",
                note=f"‖∇L_N(w*)‖ = {m['grad_norm_full']:.3g} against a per-sample rms of "
                     f"{m['rms_per_sample_grad_norm']:.3g}: w* is an approximate minimiser of L_N only; for k < N "
                     "the gradient is larger still")]
    if result is None:
        row = Row(id="fig12.validity_increases", result="fig12", kind="claim", claim="reproduced", verdict="not run",
                  what=claim_what, profile="paper",
                  command="curvature-gap reproduce --only fig12 (needs CIFAR-100 and the Table 1 CIFAR-100 model)")
        row.note = ("Needs CIFAR-100 (not obtainable offline) and the Table 1 CIFAR-100 model. The MNIST stand-in "
                    f"(1 block) gives {averaging}.")
        return rows + [row]
    return rows + [claim_row(result, id="fig12.validity_increases", result="fig12", what=claim_what, note=averaging,
                             verdict="reproduced" if m["decreasing"] else "not reproduced", value=m["slope_small_k"])]


def validity_row(result, standin, spec) -> Row:
    """Fig. 12 on the authors' model (the result of ``spec``, a :class:`~.spec.ResultSpec`; ``standin``: its MNIST
    stand-in's): "its validity increases with … a larger number of samples", read as the float64 gradient norm of
    the running mean falling with the samples seen (the one rule,
    :func:`curvature_gap.landscape.assumption1.validity_increases`)."""
    name = spec.name
    what = ("'its validity increases with … a larger number of samples': log-log slope of ‖∇L_k(w*)‖ (summed in "
            "float64) against the samples seen, their loader (negative, and the norm at the largest k below the norm "
            "at the smallest: reproduced, the rule of the theorem's block; the authors' 8-block CIFAR-100 model, bf16 "
            "run)")
    if result is None:
        row = not_run(f"{name}.validity_increases", name, what, name, CIFAR_NEEDS)
        if standin is not None:
            row.note = f"{CIFAR_STANDIN} {_mechanism(standin)}"
        return row
    s = result.meta["grad_slope"]
    norms = result.arrays["grad_norm"].mean(axis=0)
    ok = validity_increases(s, norms[0], norms[-1])
    return claim_row(result, id=f"{name}.validity_increases", result=name, what=what,
                     verdict="reproduced" if ok else "not reproduced", value=s,
                     note=f"slope {s:.3f} over {result.arrays['grad_norm'].shape[1]} logged points; averaging alone "
                          f"gives −0.5. {_mechanism(result)}")


def accumulation_rows(standin, spec) -> list[Row]:
    """The MNIST stand-in of Fig. 12 in their arithmetic (``standin``, the result of ``spec.standin``; its rows
    are evidence for ``spec``'s finding): does the curve their code plots equal the quantity (``bf16_over_exact``),
    and does the quantity itself fall (``exact_drift``)?"""
    name = spec.name
    ids = (f"{spec.standin}.bf16_over_exact", f"{spec.standin}.exact_drift")
    whats = (f"the running-mean gradient norm summed in bf16 (their assumption_1.py) over the same norm summed in "
             f"float64, at the largest k, mean over the runs: within {ACCUM_TOL:g} of 1 (the authors' MNIST model, "
             "bf16 run, step 20,000)",
             f"'its validity increases with … a larger number of samples' on the float64 sum: the norm at the largest "
             f"k over its value at k ≈ {DRIFT_FROM:,}, below {1 - FALL_TOL:g} (the same runs)")
    if standin is None:
        return [not_run(i, name, w, spec.standin, MNIST_NEEDS) for i, w in zip(ids, whats)]
    m = standin.meta
    common = dict(result=name, kind="identity", claim="holds", expected=None, role="detail",
                  profile=standin.config["profile"], evidence=[str(standin.json_path)],
                  instances=f"{m['n_passes']} runs (seeds {', '.join(map(str, m['run_seeds']))}), one loader pass each, "
                            f"k up to {m['largest_k']:,}")
    lo, hi = m["theirs_over_exact_spread"]
    ratio = Row(id=ids[0], what=whats[0], verdict="holds" if abs(m["theirs_over_exact"] - 1) <= ACCUM_TOL else "fails",
                value=m["theirs_over_exact"], tolerance=ACCUM_TOL,
                note=f"ratio {m['theirs_over_exact']:.3f} (runs {lo:.3f}–{hi:.3f}). {_mechanism(standin)}", **common)
    lo, hi = m["exact_drift_spread"]
    drift = Row(id=ids[1], what=whats[1], verdict="holds" if m["exact_drift"] < 1 - FALL_TOL else "fails",
                value=m["exact_drift"], tolerance=FALL_TOL,
                note=f"float64 norm at k = {m['largest_k']:,} over its value at k = {m['drift_from_samples']:,}: "
                     f"{m['exact_drift']:.3f} (runs {lo:.3f}–{hi:.3f})", **common)
    for r in (ratio, drift):
        r.finding = r.verdict != r.claim
    return [ratio, drift]


# ----------------------------------------------------------------------------- the results of this module
_ARRAYS = ("grad_samples", "grad_norm", "grad_norm_theirs")  # Fig. 12's arrays of a loader pass


def _compute(j):
    """Fig. 12 by the protocol of the variant's model: the theorem's block over random orders of the data (exact
    moments), the authors' model over one pass of their loader (where a shared MNIST pass exists, its numbers)."""
    return compute_assumption(j.ctx, j.settings) if j.settings.model == "table1" else authors_pass(j, _ARRAYS)


def _rows(res) -> list[Row]:
    """The rows of Fig. 12: on the authors' model, the paper's reading of the figure and their arithmetic's
    accumulation; on the theorem's block, Assumption 1 as stated and the paper's reading (its MNIST stand-in
    where CIFAR-100 was not run)."""
    return [row for s in claimed("fig12")
            for row in ((validity_row(res.get(s.name), res.get(s.standin), s),
                         *accumulation_rows(res.get(s.standin), s)) if s.variant.model == "authors"
                        else assumption_rows(res.get(s.name), res.get(s.standin)))]


FIG12 = loader_figure(
    "fig12", "Fig. 12", "fig12_assumption_1", "validation of Assumption 1",
    claim="Assumption 1 improves with more samples", page="notebooks/fig12_assumption1",
    settings=(AUTHORS_SETTINGS, SETTINGS, MNIST_SETTINGS), keys=("assumption", "assumption_mnist"),
    compute=_compute, plot=plot_assumption, message=message, key_numbers=key_numbers, rows=_rows)
SPECS = (FIG12,)
