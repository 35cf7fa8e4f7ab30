"""Fig. 6: |L_{k+1} − L_k| against k at the trained weights w*, on the theorem's model and on the authors'.

The theorem's model (:class:`ConvergenceSettings`): the per-sample losses l_i(w*) are computed once
(:mod:`curvature_gap.landscape.losses`), each random order of the data gives L_k (the mean loss over the k batches
seen) exactly, and |L_{k+1} − L_k| is averaged over ``n_permutations`` orders, with Theorem 7's right-hand side at
w = w* drawn over it; the x-axis is k × batch size (the caption: "the number of training samples"). The authors'
model: one pass of their loader at w* (:mod:`.running_mean`), drawn as their notebook draws it (``fig6_authors``:
their loss_landscape_convergence.yaml; ``fig6_authors_mnist*``: the MNIST stand-ins, cut from the shared passes).

The trend is a least-squares line in log-log space (:func:`.running_mean.fit_loglog`; theory: slope −1, from L_{k+1} −
L_k = (b_{k+1} − L_k)/(k+1), b_{k+1} the (k+1)-th batch mean), read by one rule on every model (:func:`slope_verdict`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..config import recipe_for
from ..landscape.losses import loss_differences, per_sample_losses
from ..landscape.theorem7 import rhs
from .context import Context
from ..plotting import WIDTH, loglog_axes, new_axes
from ..row import Row
from .. import captions
from .claims import claim_row, not_run
from .running_mean import (CIFAR_NEEDS, CIFAR_STANDIN, SMOKE, LoaderPassSettings, authors_pass, fit_loglog,
                           loader_figure, on_loader, pass_title, smooth)
from .settings import Variant
from .spec import claimed

__all__ = ["compute_convergence", "ema", "loglog_ema", "fit_loglog", "plot_convergence", "message", "ConvergenceSettings",
           "convergence_slope", "slope_verdict", "key_numbers", "SLOPE_TOL", "AUTHORS_SETTINGS", "FIG6", "SPECS"]


@dataclass(frozen=True)
class ConvergenceSettings(Variant):
    """Fig. 6 on the theorem's block: |L_{k+1} - L_k| against the number of batches k at the trained weights w*."""

    dataset: str = "cifar100"  # paper: the 8-block CIFAR-100 model
    batch_size: int = 128  # "batch-by-batch": k counts batches of this size; 128 as for the Hessian figures
    n_permutations: int = 32  # orders of the data averaged over; makes the mean curve smooth
    # EMA weight of the previous point, along log-spaced k (20 per decade); the paper's constant is
    # not stated. 0.5 lags by one point (0.05 decade).
    ema_beta: float = 0.5
    fit_k_min: int = 4  # least squares in log-log for k >= 4: below, the 1/k variance term bends the curve
    fit_points: int = 40  # log-spaced k values the line is fitted to (equal weight per decade)
    seed: int = 0  # permutation seed


SETTINGS = {
    "paper": ConvergenceSettings(),
    # MNIST 1-block smoke model; batch 8 gives 256 batches out of the 2,048 training images.
    "smoke": ConvergenceSettings(dataset="mnist", batch_size=8, n_permutations=64),
}
# the stand-in for Fig. 6 where CIFAR-100 or a GPU is missing: the same procedure on the MNIST model
MNIST_SETTINGS = {"paper": ConvergenceSettings(dataset="mnist")}
# the authors' model: their loss_landscape_convergence.yaml (common.seed 42: the run and the loader of seed 42), no
# gradient; smoke: the pass of their MNIST smoke run
AUTHORS_SETTINGS = {"paper": LoaderPassSettings(run_seed=42, gradients=False), "smoke": replace(SMOKE, gradients=False)}


def ema(x: np.ndarray, beta: float) -> np.ndarray:
    """Exponential moving average e_i = beta e_{i-1} + (1 − beta) x_i, started at x_0."""
    return smooth(x, beta, 1 - beta)


def loglog_ema(k: np.ndarray, y: np.ndarray, beta: float, per_decade: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """EMA of log10 y taken along log-spaced k (``per_decade`` points per decade of k).

    On log-log axes an EMA over consecutive k lags by a growing fraction of a decade at small k;
    along log-spaced k its lag is the same everywhere (beta / (1 − beta) points)."""
    k = np.asarray(k, dtype=np.float64)
    n = max(2, int(np.ceil(np.log10(k[-1] / k[0]) * per_decade)) + 1)
    kk = np.geomspace(k[0], k[-1], n)
    ly = np.interp(np.log10(kk), np.log10(k), np.log10(y))
    return kk, 10 ** ema(ly, beta)


def compute_convergence(ctx: Context, s: ConvergenceSettings) -> tuple[dict, dict]:
    model, info = ctx.model(s)
    tr = ctx.data(s).train
    ctx.log(f"per-sample losses at w* on {len(tr)} training images")
    losses = per_sample_losses(model, tr.images, tr.labels, device=ctx.torch_device)
    D = loss_differences(losses, s.batch_size, s.n_permutations, s.seed)
    mean = D.mean(0)
    k = np.arange(1, D.shape[1] + 1)
    fit = fit_loglog(k, mean, s.fit_k_min, s.fit_points)
    k_ema, y_ema = loglog_ema(k, mean, s.ema_beta)
    loss_max = float(losses.max())
    # Theorem 7 at w = w*: the M‖w − w*‖² term vanishes; with k counting batches the bound still holds,
    # since L_{k+1} − L_k = (b_{k+1} − L_k)/(k+1) with a batch mean b_{k+1} in [0, ℓ_max].
    arrays = dict(k=k, mean_abs_diff=mean, k_ema=k_ema, ema=y_ema, q10=np.quantile(D, 0.1, axis=0),
                  q90=np.quantile(D, 0.9, axis=0), theorem7_rhs=rhs(k, loss_max, 0.0, 0.0))
    cfg = ctx.recipe(s)
    meta = dict(profile=ctx.profile, model=s.model_key, n_blocks=cfg.model_config().n_blocks,
                dataset="MNIST" if s.dataset == "mnist" else "CIFAR-100", n_samples=len(losses),
                n_batches=int(D.shape[1] + 1), batch_size=s.batch_size, n_permutations=s.n_permutations,
                fit=fit, loss_max=loss_max, loss_mean=float(losses.mean()), checkpoint=info,
                test_accuracy=info.get("test_accuracy"))
    return arrays, meta


# -------------------------------------------------------------------- the figure (draws a result; computes nothing)
def plot_convergence(result):
    """|L_{k+1} − L_k| against the number of training samples with its smoothed curve and fitted trend: on the
    theorem's model the mean over random orders with its 10–90 % band, its EMA and Theorem 7's bound; on the
    authors' model one pass over their loader as their notebook draws it (the exponentially weighted mean over
    batches without the last ``drop_last`` batches, and a fan of fixed k⁻¹ guides), the fitted slope of the
    verdict (on the raw points) beside it."""
    a, meta = result.arrays, result.meta
    b = meta["batch_size"]
    fit = meta["fit"]
    loader = on_loader(result)
    fig, ax = new_axes(WIDTH, 5.2 if loader else 5.8)
    if loader:
        keep = slice(0, len(a["delta"]) - meta.get("drop_last", 0))
        x = a["n_samples"][keep]
        ax.plot(x, a["delta"][keep], color="tab:blue", lw=0.5, alpha=0.35, label="each batch")
        ax.plot(x, a["ewm"][keep], color="tab:blue", lw=2.0, label=f"EWM, α = {meta.get('ewm_alpha', 0.02):g} (theirs)")
        y_lo, y_hi = np.nanpercentile(a["ewm"][keep], [1, 99])
        first = int(np.floor(np.log10(y_lo * x[0]))) - 1
        for i in range(first, int(np.ceil(np.log10(y_hi * x[-1]))) + 1):
            ax.plot(x, 10.0 ** i / x, color="0.7", lw=0.8, ls=":", label=r"$k^{-1}$ guides" if i == first else None)
        ax.set_ylim(max(y_lo / 3, float(np.min(a["delta"][keep][a["delta"][keep] > 0]))), y_hi * 3)
        trend = dict(color="0.3", lw=1.6, ls="--", label=f"fitted on every batch: slope {fit['slope']:.3f}")
    else:
        n = a["k"] * b
        ax.fill_between(n, a["q10"], a["q90"], color="tab:blue", alpha=0.12, lw=0, label="10–90 % over orders")
        ax.plot(n, a["mean_abs_diff"], color="tab:blue", lw=0.6, alpha=0.45, label=f"mean over {meta['n_permutations']} orders")
        ax.plot(a["k_ema"] * b, a["ema"], color="tab:blue", lw=2.0, label="EMA")
        trend = dict(color="0.45", lw=1.6, label=f"linear trend, slope {fit['slope']:.3f}")
    kk = np.array([fit["k_fit"][0], a["k"][-1]], dtype=float)
    ax.plot(kk * b, 10 ** (fit["slope"] * np.log10(kk) + fit["intercept"]), **trend)
    if loader:
        loglog_axes(ax, f"training samples seen ({meta['n_batches']} batches of {b}, {meta['epochs']} epochs)",
                    r"$|\mathcal{L}_{k+1}(w^*) - \mathcal{L}_k(w^*)|$", pass_title(meta), legend_ncol=3)
        return fig
    ax.plot(n, a["theorem7_rhs"], color="tab:red", ls="--", label=r"Theorem 7 at $w^*$: $2\ell_{\max}/(k+1)$")
    loglog_axes(ax, rf"training samples $k\,b$ ($k$ batches of $b = {b}$, up to {meta['n_batches']} batches)",
                r"$|\mathcal{L}_{k+1}(w^*) - \mathcal{L}_k(w^*)|$",
                f"{meta['dataset']}, {meta['n_blocks']}-block ViT, {meta['n_samples']:,} samples", legend_ncol=2, below=-0.14)
    return fig


def message(result) -> str:
    """The caption's message: the fitted slope against the 1/k law."""
    if not on_loader(result):
        return captions.fig6(result)
    f = result.meta["fit"]
    return f"The fitted log-log slope is {f['slope']:.3f} (R² {f['r2']:.3f}); the running-mean identity alone predicts −1."


def key_numbers(r) -> dict:
    m = r.meta
    out = {"fitted slope": m["fit"]["slope"], "R²": m["fit"]["r2"]}
    if not on_loader(r):
        out.update({"ℓ_max = max loss at w*": m["loss_max"], "mean loss at w*": m["loss_mean"]})
    return out


# ----------------------------------------------------------------------------- the claim
SLOPE_TOL = 0.1  # a fitted log-log slope within 0.1 of -1 "follows" the 1/k prediction (the paper gives no number)


def slope_verdict(slope: float) -> str:
    """Fig. 6's claim, "the log-log trend follows this prediction", as one rule for every model it is read on:
    the fitted log-log slope of |L_(k+1) − L_k| against k is −1 within ``SLOPE_TOL``."""
    return "reproduced" if abs(slope + 1) <= SLOPE_TOL else "not reproduced"


# per model a verdict is read on: the model its row is about, what it needs, and how the note counts the data
_MODELS = {
    "table1": dict(model="8-block CIFAR-100 model", needs="CIFAR-100 and a GPU",
                   standin=lambda f: (f"Needs CIFAR-100 (not obtainable offline) and the Table 1 model trained for "
                                      f"{recipe_for('cifar100', 'paper').epochs} epochs. The MNIST stand-in (1 block) "
                                      f"gives slope {f['slope']:.3f} (R² {f['r2']:.3f}), which the running-mean "
                                      "identity alone predicts for any bounded loss."),
                   data=lambda m: f"{m['n_samples']:,} samples"),
    "authors": dict(model="the authors' 8-block CIFAR-100 model, one pass of their loader",
                    needs=CIFAR_NEEDS,
                    standin=lambda f: (f"{CIFAR_STANDIN} Their MNIST model (1 block) gives slope {f['slope']:.3f} "
                                       f"(R² {f['r2']:.3f}) as a stand-in, which the running-mean identity alone "
                                       "predicts for any bounded loss."),
                    data=lambda m: f"{m['n_batches']:,} batches of their loader"),
}


def convergence_slope(result, standin, spec) -> Row:
    """Fig. 6's row on the result of ``spec`` (a :class:`~.spec.ResultSpec`: the theorem's CIFAR-100 model or the
    authors'): the fitted log-log slope of |L_(k+1) − L_k| is −1 within ``SLOPE_TOL`` (:func:`slope_verdict`);
    without the result, "not run" with the MNIST ``standin``'s slope in the note."""
    name = spec.name
    on = _MODELS[spec.settings["paper"].model]
    what = (f"'the log-log trend follows this prediction': fitted slope of |L_(k+1) − L_k| against k within {SLOPE_TOL} "
            f"of −1 ({on['model']})")
    if result is None:
        row = not_run(f"{name}.slope", name, what, name, on["needs"])
        if standin is not None:
            row.note = on["standin"](standin.meta["fit"])
        return row
    f = result.meta["fit"]
    return claim_row(result, id=f"{name}.slope", result=name, what=what, verdict=slope_verdict(f["slope"]),
                     value=f["slope"], tolerance=SLOPE_TOL,
                     note=f"slope {f['slope']:.3f}, R² {f['r2']:.3f}, {on['data'](result.meta)}")


# ----------------------------------------------------------------------------- the results of this module
_ARRAYS = ("n_samples", "k", "delta", "running_loss", "ewm")  # Fig. 6's arrays of a loader pass


def _compute(j):
    """Fig. 6 by the protocol of the variant's model: the theorem's block over random orders of the data, the
    authors' model over one pass of their loader (where a shared MNIST pass exists, its numbers)."""
    return compute_convergence(j.ctx, j.settings) if j.settings.model == "table1" else authors_pass(j, _ARRAYS)


FIG6 = loader_figure(
    "fig6", "Fig. 6", "fig06_loss_convergence", "the loss difference |L(k+1) − L(k)| against k",
    claim="|L_(k+1) − L_k| follows 1/k", page="notebooks/fig06_loss_convergence",
    settings=(AUTHORS_SETTINGS, SETTINGS, MNIST_SETTINGS), keys=("convergence", "convergence_mnist"),
    compute=_compute, plot=plot_convergence, message=message, key_numbers=key_numbers,
    rows=lambda res: [convergence_slope(res.get(s.name), res.get(s.standin), s) for s in claimed("fig6")])
SPECS = (FIG6,)
