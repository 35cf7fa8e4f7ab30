"""Beyond the paper: the Hessian through ``torch.nn.LayerNorm``'s fused kernel is wrong.

The same trained model, weights and batch as Fig. 4, once with the hand-written LayerNorm (the exact
Hessian, :func:`.hessians.exact_columns`) and once through ``torch.nn.functional.layer_norm`` with
curvlinops (which differentiates the fused kernel's backward): the two agree in the forward pass and
the gradient, but their Hessian columns differ by about 1e-2 relative, and the fused result is not
even symmetric. A seeded sample of columns covering every parameter group shows where.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, jacrev, jvp

from .. import captions
from ..hessian._generic import curvlinops_columns
from ..hessian.hvp import HessianOperator
from ..hessian.loss import model_loss
from ..model import build_model
from ..params import flatten, param_groups
from ..plotting import short_label
from .context import Context
from .heatmaps import group_pair_image
from .hessians import exact_columns, sample_columns
from .settings import Variant
from .spec import FigureSpec, Point

__all__ = ["compute_fused_ln", "hvp_route_errors", "plot_fused_error", "FusedSettings", "SPECS"]


@dataclass(frozen=True)
class FusedSettings(Variant):
    """Beyond the paper: the Hessian through torch.nn.LayerNorm's fused kernel minus the exact one."""

    trained: bool = True  # the trained model and batch of Fig. 4
    batch_size: int = 128
    # columns compared: a seeded sample covering every group (the error is structured by group pair).
    columns: int = 512
    seed: int = 1


SETTINGS = {"paper": FusedSettings(), "smoke": FusedSettings(batch_size=4, columns=96)}


def compute_fused_ln(ctx: Context, s: FusedSettings) -> tuple[dict, dict]:
    model, info = ctx.model(s, None if s.trained else 0)
    cfg = ctx.recipe(s)
    fused = build_model(cfg.model, seed=None, fused_ln=True, **dict(cfg.model_overrides))
    fused.load_state_dict(model.state_dict())
    fused = fused.to(ctx.torch_device).eval()
    batch = ctx.first_images(s, s.batch_size)
    cols = sample_columns(model, s.columns, s.seed)
    ctx.log(f"Hessian columns through the fused LayerNorm (curvlinops) and exact, {len(cols)} columns")
    t0 = time.perf_counter()
    with ctx.phase("cross-check"):
        # computed on ctx's device (model and batch are there); .cpu() only to compare and store in NumPy
        Hf = curvlinops_columns(fused, batch[0], batch[1], cols, torch.float32).cpu().numpy().astype(np.float64)
    t1 = time.perf_counter()
    with ctx.phase("hessian"):
        He = exact_columns(model, batch, cols, torch.float32).cpu().numpy().astype(np.float64)
    t2 = time.perf_counter()
    D = Hf - He
    scale = float(np.abs(He).max())
    groups = param_groups(model)
    names = [g.name for g in groups]
    col_group = np.array([next(i for i, g in enumerate(groups) if g.start <= c < g.stop) for c in cols])
    G = len(groups)
    err = np.full((G, G), np.nan)  # max |error| / max |H| over rows in group i, sampled columns in group j
    for j in range(G):
        sel = col_group == j
        for i, g in enumerate(groups):
            err[i, j] = float(np.abs(D[g.slice][:, sel]).max()) / scale
    sub_f, sub_e = Hf[cols], He[cols]  # the sampled principal submatrix H[S, S]
    with torch.no_grad():
        loss_gap = float(torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
                         - torch.nn.functional.cross_entropy(fused(batch[0]), batch[1]))
    worst = np.unravel_index(np.nanargmax(err), err.shape)
    meta = dict(profile=ctx.profile, model=s.model_key, trained=s.trained, batch_size=s.batch_size, checkpoint=info,
                columns=int(len(cols)), max_relative_error=float(np.abs(D).max() / scale),
                fused_asymmetry=float(np.abs(sub_f - sub_f.T).max() / scale),
                exact_asymmetry=float(np.abs(sub_e - sub_e.T).max() / scale),
                loss_difference_forward=loss_gap, curvlinops_seconds=round(t1 - t0, 2), exact_seconds=round(t2 - t1, 2),
                worst_block=f"{short_label(names[worst[0]])}-{short_label(names[worst[1]])}", group_names=names,
                fused_method="curvlinops HessianLinearOperator through torch.nn.functional.layer_norm",
                exact_method="curvature_gap.hessian (hand-written LayerNorm, exact)")
    return dict(err=err), meta


def hvp_route_errors(name: str = "mnist", n_images: int = 2, seed: int = 0) -> dict[str, float]:
    """Which differentiation route through the fused LayerNorm goes wrong: one Hessian-vector product
    ``H v`` of the mean cross-entropy, float64, at the initialised model ``name`` on ``n_images`` random
    images (seeded), taken through ``torch.nn.functional.layer_norm`` by three routes and compared with
    the same product through the hand-written LayerNorm (forward over ``torch.func.grad``):

    * ``"forward over jacrev"``: ``jvp(jacrev(L))``, the route of curvlinops' ``HessianLinearOperator``
      (``jacrev`` runs the reverse pass under ``torch.func``'s batching);
    * ``"forward over grad"``: ``jvp(grad(L))``;
    * ``"double backward"``: ``autograd.grad`` of ``<∇L, v>``.

    Returns ``{route: max |H v − (H v)_exact| / max |(H v)_exact|}`` over all parameters."""
    exact = build_model(name, seed=seed).double().eval()
    fused = build_model(name, seed=seed, fused_ln=True).double().eval()
    fused.load_state_dict(exact.state_dict())
    cfg = exact.cfg
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_images, cfg.in_channels, cfg.image_size, cfg.image_size, generator=g, dtype=torch.float64)
    y = torch.randint(0, cfg.n_classes, (n_images,), generator=g)
    p = {n: t.detach() for n, t in exact.named_parameters()}
    v = {n: torch.randn(t.shape, generator=g, dtype=torch.float64) for n, t in p.items()}

    def loss(model):
        l = model_loss(model)
        return lambda q: l(q, x, y)

    op = HessianOperator(exact, (x, y))  # the package's one Hessian-vector product, on the exact model
    ref = op.unflat(op @ flatten(v, op.names))
    q = {n: t.clone().requires_grad_() for n, t in p.items()}
    g1 = torch.autograd.grad(loss(fused)(q), list(q.values()), create_graph=True)
    dbl = dict(zip(q, torch.autograd.grad(sum((a * v[n]).sum() for a, n in zip(g1, q)), list(q.values()))))
    routes = {"forward over jacrev": jvp(jacrev(loss(fused)), (p,), (v,))[1],
              "forward over grad": jvp(grad(loss(fused)), (p,), (v,))[1], "double backward": dbl}
    scale = max(float(t.abs().max()) for t in ref.values())
    return {r: max(float((hv[n] - ref[n]).abs().max()) for n in ref) / scale for r, hv in routes.items()}


def plot_fused_error(result):
    """log10 of the largest error in each pair of parameter groups, relative to max |H|."""
    R = np.log10(result.arrays["err"] + 1e-12)
    meta = result.meta
    fig, ax = group_pair_image(R, [short_label(n) for n in meta["group_names"]], 5.8,
                               f"Fused LayerNorm: Hessian error by group pair ({meta['columns']} sampled columns)",
                               r"$\log_{10}$(max |error| / max $|H|$)", cmap="inferno", vmin=-9,
                               vmax=max(0.0, float(np.nanmax(R))))
    ax.set(xlabel="group of the sampled column", ylabel="group of the row")
    return fig


def key_numbers(r) -> dict:
    m = r.meta
    return {"max relative error of the fused Hessian": m["max_relative_error"],
            "asymmetry of the fused Hessian": m["fused_asymmetry"]}


# ----------------------------------------------------------------------------- the results of this module
SPECS = (
    FigureSpec("fused_ln", "beyond the paper", "extra_fused_layernorm", "the fused LayerNorm's Hessian error",
               (Point(SETTINGS, override_key="fused"),), lambda j: compute_fused_ln(j.ctx, j.settings),
               {"error": plot_fused_error}, {"error": captions.fused_ln},
               runs=lambda s, ctx: [(None if s.trained else 0, None)], key_numbers=key_numbers),
)
