"""Figs. 6 and 12 on the authors' MNIST model, as their code computes them: MNIST stand-ins.

Their ``src/experiments/vit_classification/loss_landscape_convergence.py`` (Fig. 6) and ``assumption_1.py``
(Fig. 12), in the repository of ``config.AUTHORS_CODE``, hold the trained weights w* fixed and run over
their shuffled, augmented training loader, batch by batch, for ``trainer.num_epochs`` epochs, with k
counting the samples seen so far:

- Fig. 6: the running mean L_k of the per-sample loss over the samples seen, and |L_{k+1} − L_k| at
  every batch;
- Fig. 12: the gradient at w* of the running mean, ‖(1/k) Σ ∇ℓ_i(w*)‖₂, accumulated from the gradient of
  each batch's summed loss and logged every 16 batches.

Their configurations run both on the 8-block CIFAR-100 model (step 10,000 of its run, 26 epochs). CIFAR-100
cannot be had offline, so this is the same procedure on their MNIST model, at the trained checkpoint of
Fig. 4 (step 20,000). Neither result carries a verdict: the paper's claims are about the CIFAR-100 model.
One pass computes both. The loader is the one their recipe trains on (``train.recipe_loader``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ..plotting import WIDTH, loglog_axes, new_figure
from ..train import recipe_loader
from .context import Context
from .convergence import fit_loglog, loglog_ema
from .spec import FigureSpec

__all__ = ["AuthorsRunningSettings", "compute_running_authors", "SPECS"]


@dataclass(frozen=True)
class AuthorsRunningSettings:
    """Figs. 6 and 12 on the authors' MNIST model (their loss_landscape_convergence.py, assumption_1.py)."""

    model: str = "authors_mnist"
    # the trained checkpoint: Fig. 4's step 20,000 (their CIFAR-100 configs load step 10,000; MNIST has none)
    step: int = 20_000
    # passes over their loader: theirs is 26 epochs of CIFAR-100 (10,166 batches); 2 MNIST epochs are 938
    # batches, three decades of k, in about 20 s on a CPU
    epochs: int = 2
    log_every: int = 16  # their assumption_1.py: `if step % 16 == 0` (Fig. 12)
    ema_beta: float = 0.5  # as ConvergenceSettings (the paper's constant is not stated)
    fit_k_min: int = 4  # as ConvergenceSettings
    fit_points: int = 40  # as ConvergenceSettings


# smoke: the authors' smoke run (3 steps of 128 images) and 8 passes over its training subset (24 batches)
SETTINGS = {"paper": AuthorsRunningSettings(), "smoke": AuthorsRunningSettings(step=3, epochs=8, log_every=1)}


def compute_running_authors(ctx: Context, s: AuthorsRunningSettings) -> tuple[dict, dict]:
    """One pass of ``s.epochs`` epochs over the authors' loader at w*: after every batch the running mean
    loss, and every ``s.log_every`` batches the norm of the running mean gradient."""
    model, info = ctx.recipe_model(s.model, s.step)
    cfg = ctx.recipe_cfg(s.model)
    ds = ctx.recipe_datasets(s.model)
    params = [p for p in model.parameters()]
    grad_sum = [torch.zeros_like(p) for p in params]
    loss_sum, seen = 0.0, 0
    n_seen, running, g_seen, g_norm = [], [], [], []
    n_batches = -(-len(ds.train) // cfg.batch_size) * s.epochs
    ctx.log(f"{n_batches} batches of the authors' loader at step {s.step}: running mean loss and gradient")
    for step, x, y in tqdm(recipe_loader(cfg, ds, s.epochs), total=n_batches, desc="loader", unit="batch",
                           disable=not ctx.progress):
        x, y = x.to(ctx.torch_device), y.to(ctx.torch_device)
        loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
        grads = torch.autograd.grad(loss, params)
        for acc, g in zip(grad_sum, grads):
            acc.add_(g)
        loss_sum += float(loss)
        seen += len(y)
        n_seen.append(seen)
        running.append(loss_sum / seen)
        if step % s.log_every == 0:
            g_seen.append(seen)
            g_norm.append(float(torch.sqrt(sum(((a / seen) ** 2).sum() for a in grad_sum))))
    n_seen, running = np.array(n_seen), np.array(running, dtype=np.float64)
    delta = np.abs(np.diff(running))  # |L_{k+1} − L_k|, k = 1 .. batches − 1 (their first batch has no L_k)
    k = np.arange(1, len(delta) + 1)
    fit = fit_loglog(k, np.maximum(delta, np.finfo(float).tiny), s.fit_k_min, s.fit_points)
    k_ema, y_ema = loglog_ema(k, np.maximum(delta, np.finfo(float).tiny), s.ema_beta)
    arrays = dict(n_samples=n_seen[1:], k=k, delta=delta, running_loss=running, k_ema=k_ema, ema=y_ema,
                  grad_samples=np.array(g_seen), grad_norm=np.array(g_norm, dtype=np.float64))
    meta = dict(profile=ctx.profile, model=s.model, step=s.step, epochs=s.epochs, batch_size=cfg.batch_size,
                n_train=len(ds.train), n_batches=len(n_seen), checkpoint=info, fit=fit,
                loader="the authors' training loader: shuffled by their seed, augmented, normalised (train.recipe_loader)",
                quantities="L_k: running mean cross-entropy over the samples seen; grad: ‖∇ of the running mean‖₂ at w*")
    return arrays, meta


def _select(res, keys) -> tuple[dict, dict]:
    return {k: res.arrays[k] for k in keys}, dict(res.meta)


# -------------------------------------------------------------------- plots (draw results; compute nothing)
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
                r"$|\mathcal{L}_{k+1}(w^*) - \mathcal{L}_k(w^*)|$", f"The authors' MNIST model at step {meta['step']:,}",
                legend_ncol=3)
    return fig


def plot_gradient_authors(result):
    """‖∇ of the running mean loss‖ at w* against the samples seen (their Fig. 12's quantity)."""
    a, meta = result.arrays, result.meta
    fig = new_figure(WIDTH, 4.6)
    ax = fig.subplots()
    ax.plot(a["grad_samples"], a["grad_norm"], color="tab:blue", lw=1.4, marker="o", ms=2)
    loglog_axes(ax, "training samples seen", r"$\|\nabla\mathcal{L}_k(w^*)\|_2$",
                f"The authors' MNIST model at step {meta['step']:,}: Assumption 1 says this is 0")
    return fig


def _msg6(result) -> str:
    f = result.meta["fit"]
    return f"The fitted log-log slope is {f['slope']:.3f} (R² {f['r2']:.3f}); the running-mean identity alone predicts −1."


def _msg12(result) -> str:
    a = result.arrays
    return (f"The gradient norm falls from {float(a['grad_norm'][0]):.3g} after {int(a['grad_samples'][0])} samples to "
            f"{float(a['grad_norm'][-1]):.3g} after {int(a['grad_samples'][-1]):,}; it is not 0 at any k.")


# ----------------------------------------------------------------------------- the results of this module
_NEEDS = "MNIST; the authors' recipe trained to step 20,000 (about 6 min on a CPU)"
SPECS = (
    FigureSpec("running_authors", "Figs. 6, 12", "", "one pass of the authors' loader at w*", SETTINGS,
               lambda j: compute_running_authors(j.ctx, j.settings), needs=_NEEDS, internal=True),
    FigureSpec("fig6_authors", "Fig. 6", "fig06_loss_convergence_authors", "the loss difference |L(k+1) − L(k)| "
               "against k, the authors' MNIST model", SETTINGS,
               lambda j: _select(j.deps["running_authors"], ("n_samples", "k", "delta", "running_loss", "k_ema", "ema")),
               {"convergence": plot_convergence_authors}, {"convergence": _msg6}, depends=("running_authors",),
               needs=_NEEDS, rank=0, key_numbers=lambda r: {"fitted slope": r.meta["fit"]["slope"], "R²": r.meta["fit"]["r2"]}),
    FigureSpec("fig12_authors", "Fig. 12", "fig12_assumption_1_authors", "the gradient of the running mean loss at w*, "
               "the authors' MNIST model", SETTINGS,
               lambda j: _select(j.deps["running_authors"], ("grad_samples", "grad_norm")),
               {"assumption": plot_gradient_authors}, {"assumption": _msg12}, depends=("running_authors",),
               needs=_NEEDS, rank=0, key_numbers=lambda r: {"‖∇L_k(w*)‖ at the last k": float(r.arrays["grad_norm"][-1])}),
)
