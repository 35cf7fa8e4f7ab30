"""Figs. 6 and 12 on the authors' model, as their code computes them, and their MNIST stand-ins.

Their ``src/experiments/vit_classification/loss_landscape_convergence.py`` (Fig. 6) and ``assumption_1.py``
(Fig. 12), in the repository of ``config.AUTHORS_CODE``, hold the trained weights w* fixed and run over
their shuffled, augmented training loader, batch by batch, for ``trainer.num_epochs`` epochs, with k
counting the samples seen so far:

- Fig. 6: the running mean L_k of the per-sample loss over the samples seen, and |L_{k+1} − L_k| at
  every batch;
- Fig. 12: the gradient at w* of the running mean, ‖(1/k) Σ ∇ℓ_i(w*)‖₂, accumulated from the gradient of
  each batch's summed loss and logged every 16 batches.

The paper profile is what their configurations (``configs/experiments/vit_classification/*.yaml``) run: the
8-block CIFAR-100 model at step 10,000 of their recipe, 26 epochs of its loader; Fig. 6 reads the run of
seed 42, Fig. 12 the run of seed 21 (each configuration's ``common.seed``, which names the checkpoint's run
and seeds the loader). Those are ``fig6_authors`` and ``fig12_authors``, and carry the verdicts on the
authors' model. Where CIFAR-100 cannot be had, ``fig6_authors_mnist`` and ``fig12_authors_mnist`` run the
same procedure on their MNIST model at the trained checkpoint of Fig. 4 (step 20,000): stand-ins, without a
verdict. The loader is the one their recipe trains on (``train.recipe_loader``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from matplotlib.ticker import FuncFormatter
from tqdm.auto import tqdm

from ..plotting import WIDTH, loglog_axes, new_figure
from ..row import Row
from ..train import recipe_loader
from .claims import not_run
from .context import Context
from .convergence import SLOPE_TOL, fit_loglog, loglog_ema
from .spec import FigureSpec, Finding

__all__ = ["AuthorsRunningSettings", "loader_pass", "compute_running_authors", "slope_row", "validity_row", "SPECS"]

_EXPERIMENTS = "configs/experiments/vit_classification"  # in the authors' repository (config.AUTHORS_CODE), code/


@dataclass(frozen=True)
class AuthorsRunningSettings:
    """One pass of the authors' loader at fixed trained weights (their loss_landscape_convergence.py, assumption_1.py).

    The defaults are their Fig. 12 configuration (``configs/experiments/vit_classification/assumption_1.yaml``)."""

    model: str = "authors_cifar100"  # *.yaml: model.params (8 blocks, model_dim 128, CIFAR-100)
    # *.yaml: common.seed, which names the trained run (checkpoint_path .../vit_classification_seed_<seed>/) and
    # seeds their loader (data.seed); None: the recipe's own seed. Here it also seeds the run's initialisation.
    run_seed: int | None = 21
    step: int = 10_000  # *.yaml: model.checkpoint_path .../checkpoints/step_10000/model.pt
    epochs: int = 26  # *.yaml: trainer.num_epochs (10,166 batches of CIFAR-100)
    gradients: bool = True  # assumption_1.py (Fig. 12) takes the gradient; loss_landscape_convergence.py does not
    log_every: int = 16  # assumption_1.py: `if step % 16 == 0` (Fig. 12)
    ema_beta: float = 0.5  # as ConvergenceSettings (the paper's constant is not stated)
    fit_k_min: int = 4  # as ConvergenceSettings
    fit_points: int = 40  # as ConvergenceSettings


# Fig. 6: loss_landscape_convergence.yaml (common.seed 42: the run and the loader of seed 42); Fig. 12:
# assumption_1.yaml (seed 21, the seed of configs/vit_classification_cifar_100.yaml). smoke: the authors'
# MNIST smoke run (3 steps of 128 images) and 8 passes over its training subset (24 batches).
_SMOKE = AuthorsRunningSettings(model="authors_mnist", run_seed=None, step=3, epochs=8, log_every=1)
FIG6_SETTINGS = {"paper": AuthorsRunningSettings(run_seed=42, gradients=False),
                 "smoke": replace(_SMOKE, gradients=False)}
FIG12_SETTINGS = {"paper": AuthorsRunningSettings(), "smoke": _SMOKE}
# the stand-ins where CIFAR-100 cannot be had: their MNIST model at Fig. 4's checkpoint (step 20,000; their
# MNIST configuration has no Fig. 6/12 experiment), with the recipe's own seed (37); 2 epochs are 938
# batches, three decades of k, in about 20 s on a CPU. One pass (``authors_mnist_pass``) serves both.
MNIST_SETTINGS = {"paper": AuthorsRunningSettings(model="authors_mnist", run_seed=None, step=20_000, epochs=2)}


def loader_pass(model, cfg, ds, epochs: int, log_every: int, gradients: bool, device, progress: bool = False,
                max_batches: int | None = None) -> dict:
    """One pass of ``epochs`` epochs over the authors' loader (``train.recipe_loader`` of ``cfg`` over ``ds``)
    at the fixed weights of ``model``: after every batch the number of samples seen and the running mean of
    the per-sample cross-entropy; with ``gradients``, every ``log_every`` batches also the norm of the gradient
    of that running mean (accumulated from each batch's summed loss). ``max_batches`` stops early (timing)."""
    params = list(model.parameters())
    grad_sum = [torch.zeros_like(p) for p in params]
    loss_sum, seen = 0.0, 0
    n_seen, running, g_seen, g_norm = [], [], [], []
    total = -(-len(ds.train) // cfg.batch_size) * epochs
    for step, x, y in tqdm(recipe_loader(cfg, ds, epochs), total=total, desc="loader", unit="batch",
                           disable=not progress):
        if max_batches is not None and step >= max_batches:
            break
        x, y = x.to(device), y.to(device)
        with torch.set_grad_enabled(gradients):
            loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
        if gradients:
            for acc, g in zip(grad_sum, torch.autograd.grad(loss, params)):
                acc.add_(g)
        loss_sum += loss.item()
        seen += len(y)
        n_seen.append(seen)
        running.append(loss_sum / seen)
        if gradients and step % log_every == 0:
            g_seen.append(seen)
            g_norm.append(float(torch.sqrt(sum(((a / seen) ** 2).sum() for a in grad_sum))))
    out = dict(n_seen=np.array(n_seen), running_loss=np.array(running, dtype=np.float64))
    if gradients:
        out.update(grad_samples=np.array(g_seen), grad_norm=np.array(g_norm, dtype=np.float64))
    return out


def compute_running_authors(ctx: Context, s: AuthorsRunningSettings) -> tuple[dict, dict]:
    """The pass of :func:`loader_pass` at step ``s.step`` of the authors' run of seed ``s.run_seed``, with Fig. 6's
    |L_{k+1} − L_k| and its log-log trend, and (``s.gradients``) Fig. 12's gradient norms and their trend."""
    model, info = ctx.recipe_model(s.model, s.step, s.run_seed)
    cfg = ctx.recipe_cfg(s.model, s.run_seed)
    ds = ctx.recipe_datasets(s.model)
    n_batches = -(-len(ds.train) // cfg.batch_size) * s.epochs
    ctx.log(f"{n_batches} batches of the authors' loader (seed {cfg.seed}) at step {s.step}: running mean loss"
            + (" and gradient" if s.gradients else ""))
    p = loader_pass(model, cfg, ds, s.epochs, s.log_every, s.gradients, ctx.torch_device, ctx.progress)
    running = p["running_loss"]
    delta = np.abs(np.diff(running))  # |L_{k+1} − L_k|, k = 1 .. batches − 1 (their first batch has no L_k)
    k = np.arange(1, len(delta) + 1)
    positive = np.maximum(delta, np.finfo(float).tiny)
    fit = fit_loglog(k, positive, s.fit_k_min, s.fit_points)
    k_ema, y_ema = loglog_ema(k, positive, s.ema_beta)
    arrays = dict(n_samples=p["n_seen"][1:], k=k, delta=delta, running_loss=running, k_ema=k_ema, ema=y_ema)
    meta = dict(profile=ctx.profile, model=s.model, seed=cfg.seed, step=s.step, epochs=s.epochs,
                batch_size=cfg.batch_size, log_every=s.log_every if s.gradients else None, n_blocks=cfg.model_config().n_blocks, n_train=len(ds.train),
                n_batches=len(running), checkpoint=info, fit=fit,
                loader="the authors' training loader: shuffled by their seed, augmented, normalised (train.recipe_loader)",
                quantities="L_k: running mean cross-entropy over the samples seen"
                           + ("; grad: ‖∇ of the running mean‖₂ at w*" if s.gradients else ""))
    if s.gradients:
        arrays.update(grad_samples=p["grad_samples"], grad_norm=p["grad_norm"])
        # the trend of the gradient norm against the samples seen: log-log least squares, equal weight per decade
        g = p["grad_samples"]
        meta["grad_fit"] = fit_loglog(g, p["grad_norm"], int(g[0]), s.fit_points) if len(g) > 1 else None
        meta["grad_slope"] = meta["grad_fit"]["slope"] if len(g) > 1 else float("nan")
    return arrays, meta


# -------------------------------------------------------------------- plots (draw results; compute nothing)
def _title(meta) -> str:
    data = "MNIST" if meta["model"] == "authors_mnist" else "CIFAR-100"
    return f"The authors' {meta['n_blocks']}-block {data} model at step {meta['step']:,} (seed {meta['seed']})"


def plot_convergence_authors(result):
    """|L_{k+1} − L_k| against the samples seen, one pass over the authors' loader, with its EMA and trend."""
    a, meta = result.arrays, result.meta
    b = meta["batch_size"]
    fit = meta["fit"]
    fig = new_figure(WIDTH, 5.2)
    ax = fig.subplots()
    ax.plot(a["n_samples"], a["delta"], color="tab:blue", lw=0.5, alpha=0.45, label="one pass of their loader")
    ax.plot(a["k_ema"] * b, a["ema"], color="tab:blue", lw=2.0, label="EMA")
    kk = np.array([fit["k_fit"][0], a["k"][-1]], dtype=float)
    ax.plot(kk * b, 10 ** (fit["slope"] * np.log10(kk) + fit["intercept"]), color="0.45", lw=1.6,
            label=f"linear trend, slope {fit['slope']:.3f}")
    loglog_axes(ax, f"training samples seen ({meta['n_batches']} batches of {b}, {meta['epochs']} epochs)",
                r"$|\mathcal{L}_{k+1}(w^*) - \mathcal{L}_k(w^*)|$", _title(meta), legend_ncol=3)
    return fig


def plot_gradient_authors(result):
    """‖∇ of the running mean loss‖ at w* against the samples seen (their Fig. 12's quantity)."""
    a, meta = result.arrays, result.meta
    fig = new_figure(WIDTH, 4.6)
    ax = fig.subplots()
    ax.plot(a["grad_samples"], a["grad_norm"], color="tab:blue", lw=1.4, marker="o", ms=2)
    loglog_axes(ax, "training samples seen", r"$\|\nabla\mathcal{L}_k(w^*)\|_2$",
                f"{_title(meta)}\nAssumption 1 says this is 0")
    if a["grad_norm"].max() < 10 * a["grad_norm"].min():  # less than a decade: plain numbers, not 8 × 10⁰
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FuncFormatter(lambda v, _: f"{v:g}"))
    return fig


def _msg6(result) -> str:
    f = result.meta["fit"]
    return f"The fitted log-log slope is {f['slope']:.3f} (R² {f['r2']:.3f}); the running-mean identity alone predicts −1."


def _msg12(result) -> str:
    a, slope = result.arrays, result.meta["grad_slope"]
    return (f"The gradient norm goes from {float(a['grad_norm'][0]):.3g} after {int(a['grad_samples'][0])} samples to "
            f"{float(a['grad_norm'][-1]):.3g} after {int(a['grad_samples'][-1]):,} (log-log slope {slope:.3f}; averaging "
            "alone gives −0.5); it is not 0 at any k.")


# ----------------------------------------------------------------------------- the claims on the authors' model
_NEEDS = "CIFAR-100, and the authors' recipe trained to step 10,000 (hours on a CPU: a GPU)"
_STANDIN = "Needs CIFAR-100 (not obtainable offline) and the 8-block model trained to step 10,000 of the authors' recipe."


def slope_row(result, standin=None) -> Row:
    """Fig. 6 on the authors' model: the fitted log-log slope of |L_{k+1} − L_k| over one pass of their loader
    is −1 within ``SLOPE_TOL`` (the rule of the theorem's block, :func:`.convergence.convergence_slope`)."""
    what = (f"'the log-log trend follows this prediction': fitted slope of |L_(k+1) − L_k| against k within {SLOPE_TOL} "
            "of −1 (the authors' 8-block CIFAR-100 model, one pass of their loader)")
    if result is None:
        row = not_run("fig6_authors.slope", "fig6_authors", what, "fig6_authors", _NEEDS)
        if standin is not None:
            f = standin.meta["fit"]
            row.note = (f"{_STANDIN} Their MNIST model (1 block) gives slope {f['slope']:.3f} (R² {f['r2']:.3f}) "
                        "as a stand-in, which the running-mean identity alone predicts for any bounded loss.")
        return row
    f = result.meta["fit"]
    return Row(id="fig6_authors.slope", result="fig6_authors", kind="claim", claim="reproduced", expected=None,
               what=what, verdict="reproduced" if abs(f["slope"] + 1) <= SLOPE_TOL else "not reproduced",
               value=f["slope"], tolerance=SLOPE_TOL, profile=result.config["profile"], evidence=[str(result.json_path)],
               note=f"slope {f['slope']:.3f}, R² {f['r2']:.3f}, {result.meta['n_batches']:,} batches of their loader")


def validity_row(result, standin=None) -> Row:
    """Fig. 12 on the authors' model: "its validity increases with … a larger number of samples", read as the
    gradient norm of the running mean falling with the samples seen (negative log-log slope)."""
    what = ("'its validity increases with … a larger number of samples': log-log slope of ‖∇L_k(w*)‖ against the "
            "samples seen, one pass of their loader (negative: reproduced; the authors' 8-block CIFAR-100 model)")
    if result is None:
        row = not_run("fig12_authors.validity_increases", "fig12_authors", what, "fig12_authors", _NEEDS)
        if standin is not None:
            row.note = (f"{_STANDIN} Their MNIST model (1 block) gives slope {standin.meta['grad_slope']:.3f} as a "
                        "stand-in; averaging alone gives −0.5.")
        return row
    s = result.meta["grad_slope"]
    return Row(id="fig12_authors.validity_increases", result="fig12_authors", kind="claim", claim="reproduced",
               expected=None, what=what, verdict="reproduced" if s < 0 else "not reproduced", value=s,
               profile=result.config["profile"], evidence=[str(result.json_path)],
               note=f"slope {s:.3f} over {len(result.arrays['grad_norm'])} logged points; averaging alone gives −0.5")


def _numbers6(r) -> dict:
    return {"fitted slope": r.meta["fit"]["slope"], "R²": r.meta["fit"]["r2"]}


def _numbers12(r) -> dict:
    return {"‖∇L_k(w*)‖ at the last k": float(r.arrays["grad_norm"][-1]), "log-log slope": r.meta["grad_slope"]}


def _compute(j):
    return compute_running_authors(j.ctx, j.settings)


_FIG6_ARRAYS = ("n_samples", "k", "delta", "running_loss", "k_ema", "ema")


def _select(keys):
    """A result's arrays ``keys`` and its meta, from the shared MNIST pass (``authors_mnist_pass``)."""
    def compute(j):
        res = j.deps["authors_mnist_pass"]
        return {k: res.arrays[k] for k in keys}, dict(res.meta)
    return compute


# ----------------------------------------------------------------------------- the results of this module
_MNIST_NEEDS = "MNIST; the authors' recipe trained to step 20,000 (about 6 min on a CPU)"
SPECS = (
    FigureSpec("fig6_authors", "Fig. 6", "fig06_loss_convergence_authors", "the loss difference |L(k+1) − L(k)| "
               "against k, the authors' model", FIG6_SETTINGS, _compute, {"convergence": plot_convergence_authors},
               {"convergence": _msg6}, needs="CIFAR-100 (paper) / MNIST (smoke)", rank=0, key_numbers=_numbers6,
               rows=lambda res: [slope_row(res.get("fig6_authors"), res.get("fig6_authors_mnist"))],
               rows_read=("fig6_authors", "fig6_authors_mnist"),
               finding=Finding("fig6_authors", "Fig. 6 on the authors' model: |L_(k+1) − L_k| follows 1/k (CIFAR-100)",
                               "notebooks/fig06_loss_convergence")),
    FigureSpec("authors_mnist_pass", "Figs. 6, 12", "", "one pass of the authors' MNIST loader at w*", MNIST_SETTINGS,
               _compute, needs=_MNIST_NEEDS, internal=True),
    FigureSpec("fig6_authors_mnist", "Fig. 6", "fig06_loss_convergence_authors_mnist", "the loss difference "
               "|L(k+1) − L(k)| against k, the authors' MNIST model (stand-in)", MNIST_SETTINGS, _select(_FIG6_ARRAYS),
               {"convergence": plot_convergence_authors}, {"convergence": _msg6}, depends=("authors_mnist_pass",),
               needs=_MNIST_NEEDS, rank=0, key_numbers=_numbers6),
    FigureSpec("fig12_authors", "Fig. 12", "fig12_assumption_1_authors", "the gradient of the running mean loss at "
               "w*, the authors' model", FIG12_SETTINGS, _compute, {"assumption": plot_gradient_authors},
               {"assumption": _msg12}, needs="CIFAR-100 (paper) / MNIST (smoke)", rank=0, key_numbers=_numbers12,
               rows=lambda res: [validity_row(res.get("fig12_authors"), res.get("fig12_authors_mnist"))],
               rows_read=("fig12_authors", "fig12_authors_mnist"),
               finding=Finding("fig12_authors", "Fig. 12 on the authors' model: Assumption 1 improves with more "
                               "samples (CIFAR-100)", "notebooks/fig12_assumption1")),
    FigureSpec("fig12_authors_mnist", "Fig. 12", "fig12_assumption_1_authors_mnist", "the gradient of the running "
               "mean loss at w*, the authors' MNIST model (stand-in)", MNIST_SETTINGS, _select(("grad_samples", "grad_norm")),
               {"assumption": plot_gradient_authors}, {"assumption": _msg12}, depends=("authors_mnist_pass",),
               needs=_MNIST_NEEDS, rank=0, key_numbers=_numbers12),
)
