"""Fig. 12: how well Assumption 1 (∇L_k(w*) = 0) holds at the trained model of Table 1, against k (the CIFAR-100
model at paper scale, the MNIST model as its stand-in)
(:mod:`curvature_gap.landscape.assumption1` computes it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import captions
from ..landscape.assumption1 import measure
from .context import Context
from ..plotting import WIDTH, loglog_axes, new_figure
from .spec import FigureSpec, Finding

__all__ = ["compute_assumption", "plot_assumption", "AssumptionSettings", "SPECS"]


@dataclass(frozen=True)
class AssumptionSettings:
    """Fig. 12: ||grad L_k(w*)|| against the number of samples k (Assumption 1 says it is 0)."""

    # the paper's Fig. 12 is on the 8-block CIFAR-100 model (the authors' assumption_1.yaml), so the paper profile of
    # the theorem's block is its CIFAR-100 model of Table 1; the MNIST model stands in where CIFAR-100 cannot be had
    model: str = "cifar100"
    n_permutations: int = 4  # sampled orders drawn (the mean over all orders is computed exactly)
    n_points: int = 30  # log-spaced sample counts from 1 to N
    chunk: int = 512  # samples per backward pass (memory only; does not change the numbers beyond rounding)
    seed: int = 0  # permutation seed


SETTINGS = {"paper": AssumptionSettings(), "smoke": AssumptionSettings(model="mnist", n_points=20, n_permutations=4)}
# the stand-in (as fig6_mnist is Fig. 6's): the trained MNIST model of Table 1, without a verdict on the figure
MNIST_SETTINGS = {"paper": AssumptionSettings(model="mnist")}


def compute_assumption(ctx: Context, s: AssumptionSettings) -> tuple[dict, dict]:
    model, info = ctx.model(s.model)
    tr = ctx.data(s.model).train
    ctx.log(f"gradient norms of L_k at w* on {len(tr)} training images, {s.n_permutations} orders, exact mean")
    res = measure(model, tr.images, tr.labels, s.n_points, s.n_permutations, s.seed, ctx.torch_device, s.chunk,
                  ctx.progress)
    arrays = {k: res.pop(k) for k in ("k", "grad_norms", "mean", "rms_exact", "grad_mean")}
    meta = dict(profile=ctx.profile, model=s.model, n_permutations=s.n_permutations, checkpoint=info,
                quantity="‖∇L_k(w*)‖₂, L_k = mean cross-entropy of the first k samples of a random order; "
                         "rms_exact = sqrt(E‖∇L_k‖²) over all orders, from the per-sample gradient moments", **res)
    return arrays, meta


def plot_assumption(result):
    """‖∇L_k(w*)‖ against k: sampled orders, their mean, the exact root-mean-square over all orders."""
    a, meta = result.arrays, result.meta
    k = a["k"]
    fig = new_figure(WIDTH, 5.6)
    ax = fig.subplots()
    for i, row in enumerate(a["grad_norms"]):
        ax.plot(k, row, color="tab:blue", lw=0.6, alpha=0.4, label="random orders" if i == 0 else None)
    ax.plot(k, a["rms_exact"], color="k", lw=2, label=r"$\sqrt{E\|\nabla\mathcal{L}_k\|^2}$ over all orders")
    ax.plot(k, float(a["rms_exact"][0]) / np.sqrt(k), color="0.5", ls=":", label=r"$\propto k^{-1/2}$")
    ax.axhline(meta["grad_norm_full"], color="tab:red", ls="--", lw=1,
               label=rf"$\|\nabla\mathcal{{L}}_N(w^*)\| = {meta['grad_norm_full']:.3g}$ (all $N$ samples)")
    loglog_axes(ax, r"$k$ (training samples)", r"$\|\nabla\mathcal{L}_k(w^*)\|_2$",
                r"Assumption 1 says this is 0 for every $k$", legend_ncol=2)
    return fig


def key_numbers(r) -> dict:
    """The numbers a reader would cite, for the reproduction report (published beside recomputed)."""
    m = r.meta
    return {"‖∇L_N(w*)‖": m["grad_norm_full"], "rms per-sample gradient norm": m["rms_per_sample_grad_norm"],
            "slope at small k": m["slope_small_k"]}


# ----------------------------------------------------------------------------- the results of this module
# its rows (Assumption 1 literally, and the paper's reading of Fig. 12) are curvature_gap.checks.landscape's
SPECS = (
    FigureSpec("fig12", "Fig. 12", "fig12_assumption_1", "validation of Assumption 1", SETTINGS,
               lambda j: compute_assumption(j.ctx, j.settings), {"assumption": plot_assumption},
               {"assumption": captions.fig12}, needs="CIFAR-100 (paper) / MNIST (smoke)",
               override_key="assumption", verify_reads=True, key_numbers=key_numbers,
               finding=Finding("fig12", "Fig. 12: Assumption 1 improves with more samples (CIFAR-100)",
                               "notebooks/fig12_assumption1")),
    FigureSpec("fig12_mnist", "Fig. 12 (MNIST stand-in)", "fig12_assumption_1_mnist", "validation of Assumption 1, "
               "MNIST model (stand-in)", MNIST_SETTINGS, lambda j: compute_assumption(j.ctx, j.settings),
               {"assumption": plot_assumption}, {"assumption": captions.fig12}, override_key="assumption_mnist",
               verify_reads=True, key_numbers=key_numbers),
)
