"""The paper's figures: compute (numbers into ``results/``) separated from plot (files into ``figures/``).

``load_results(figure, profile)`` returns a figure's numbers, computing them only when the cache has
no intact result for the current configuration; ``plot_<figure>(result)`` draws them without
computing anything. ``render(figure, result, figures_dir)`` writes ``<stem>.pdf`` and ``.png``.

Figures: fig3, fig4 (Hessian heatmaps at init / trained), fig5 (block norms), fig6 (loss-landscape
convergence), fig7-fig11 (per-block entries and norms over the first training steps), fig12
(Assumption 1) and fused_ln (beyond the paper: the fused LayerNorm's Hessian error).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config import ConfigError, config_hash
from . import assumption, convergence, heatmaps, norms
from .common import Context, git_commit, save_figure, software
from .settings import as_dict, replace, settings_for
from .store import Result, ResultStore, StaleResultWarning


@dataclass(frozen=True)
class Job:
    """What a compute function gets: the context, its settings, its dependencies' results."""

    figure: str
    ctx: Context
    settings: object
    deps: dict
    config_hash: str
    store: ResultStore


@dataclass(frozen=True)
class FigureSpec:
    name: str
    paper: str  # the paper's figure number, or "beyond the paper"
    stem: str  # output file stem under figures/
    title: str
    settings_key: str  # field of settings.FigureSettings
    compute: Callable[[Job], tuple]
    plot: Callable | None
    depends: tuple = ()
    version: int = 1  # bump when the computation changes, so that old results are not reused
    finish: Callable | None = None


def _type_spec(fig: str, n: int) -> FigureSpec:
    t = norms.TYPES[fig][0]
    return FigureSpec(fig, f"Fig. {n}", f"fig{n:02d}_hessian_entries_{t}", f"{t}: entries and norms over the first training steps",
                      "trajectory", lambda j: norms.compute_type(j.ctx, j.figure, j.deps["trajectory"]), norms.plot_type,
                      depends=("trajectory",))


_SPECS = [
    FigureSpec("fig3", "Fig. 3", "fig03_hessian_entries", "Hessian entries at initialisation", "init_heatmap",
               lambda j: heatmaps.compute_heatmap(j.ctx, j.settings), heatmaps.plot_heatmap),
    FigureSpec("fig4", "Fig. 4", "fig04_hessian_entries_trained", "Hessian entries after training", "trained_heatmap",
               lambda j: heatmaps.compute_heatmap(j.ctx, j.settings), heatmaps.plot_heatmap),
    FigureSpec("fig5", "Fig. 5", "fig05_parameters_and_hessians_norm", "parameter and Hessian block norms", "norms",
               lambda j: norms.compute_norms(j.ctx, j.settings, j.deps), norms.plot_norms,
               depends=("fig3", "fig4", "trajectory")),
    FigureSpec("fig6", "Fig. 6", "fig06_loss_landscape_convergence", "|L_{k+1} - L_k| against k", "convergence",
               lambda j: convergence.compute_convergence(j.ctx, j.settings), convergence.plot_convergence,
               version=2),
    _type_spec("fig7", 7), _type_spec("fig8", 8), _type_spec("fig9", 9), _type_spec("fig10", 10), _type_spec("fig11", 11),
    FigureSpec("fig12", "Fig. 12", "fig12_assumption_1", "validation of Assumption 1", "assumption",
               lambda j: assumption.compute_assumption(j.ctx, j.settings), assumption.plot_assumption,
               version=2),
    FigureSpec("fused_ln", "beyond the paper", "extra_fused_layernorm_hessian_error",
               "Hessian through torch.nn.LayerNorm minus the exact one", "trained_heatmap",
               lambda j: heatmaps.compute_fused_ln(j.ctx, j.settings, j.deps["fig4"]), heatmaps.plot_fused_ln,
               depends=("fig4",)),
]
FIGURES: dict[str, FigureSpec] = {s.name: s for s in _SPECS}
INTERNAL: dict[str, FigureSpec] = {
    "trajectory": FigureSpec(
        "trajectory", "Figs. 5, 7-11", "", "snapshots of the first training steps", "trajectory",
        lambda j: norms.compute_trajectory(j.ctx, j.settings, j.config_hash, j.store), None,
        finish=lambda j: norms.finish_trajectory(j.ctx, j.config_hash, j.store),
    ),
}
FIGURE_NAMES = tuple(FIGURES)


def spec(figure: str) -> FigureSpec:
    if figure in FIGURES:
        return FIGURES[figure]
    if figure in INTERNAL:
        return INTERNAL[figure]
    raise ConfigError(f"unknown figure {figure!r}; valid names: {', '.join(FIGURE_NAMES)}")


def settings_of(s: FigureSpec, ctx: Context):
    base = getattr(settings_for(ctx.profile), s.settings_key)
    over = ctx.settings_overrides.get(s.name) or ctx.settings_overrides.get(s.settings_key)
    return replace(base, **over) if over else base


def config_of(s: FigureSpec, ctx: Context, settings, dep_hashes: dict) -> dict:
    """Everything that determines a figure's numbers; its hash names the result files."""
    model = getattr(settings, "model", None)
    train = {}
    if model is not None:
        cfg = ctx.train_cfg(model)
        train[model] = dict(config_hash=cfg.hash(), **cfg.to_dict())
    return dict(figure=s.name, version=s.version, profile=ctx.profile, settings=as_dict(settings), train=train,
                depends=dict(dep_hashes))


def _context(profile: str | None, ctx: Context | None, kwargs: dict) -> Context:
    if ctx is None:
        return Context(profile=profile or "smoke", **kwargs)
    if kwargs:
        raise TypeError("pass either ctx or context keyword arguments, not both")
    if profile is not None and profile != ctx.profile:
        raise ValueError(f"profile {profile!r} differs from the context's {ctx.profile!r}")
    return ctx


def _config(figure: str, ctx: Context) -> tuple[FigureSpec, object, dict, str]:
    s = spec(figure)
    settings = settings_of(s, ctx)
    config = config_of(s, ctx, settings, {d: _config(d, ctx)[3] for d in s.depends})
    return s, settings, config, config_hash(config)


def config_hash_of(figure: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> str:
    """The config hash a figure's result has (or would have), without computing anything."""
    return _config(figure, _context(profile, ctx, kwargs))[3]


def load_results(figure: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> Result:
    """A figure's numbers: read from ``results/<figure>/<hash>`` when intact, else computed and cached.

    ``profile`` is "smoke" or "paper"; other keywords build the ``Context`` (device, data_dir,
    results_dir, runs_dir, progress, recompute, ...). Results it depends on are loaded (or computed)
    only when this one must be computed. Safe to call from several processes at once.
    """
    ctx = _context(profile, ctx, kwargs)
    s, settings, config, chash = _config(figure, ctx)
    store = ResultStore(ctx.results_dir)
    if not ctx.recompute:
        r = store.load(figure, chash, config)
        if r is not None:
            return r
    with store.lock(figure, chash):
        if not ctx.recompute:  # another process may have finished it while we waited
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", StaleResultWarning)
                r = store.load(figure, chash, config)
            if r is not None:
                return r
        deps = {d: load_results(d, ctx=ctx) for d in s.depends}
        ctx.log(f"[{figure}] computing ({ctx.profile}, config {chash})")
        t0 = time.perf_counter()
        job = Job(figure, ctx, settings, deps, chash, store)
        arrays, meta = s.compute(job)
        extra = dict(provenance=dict(git=git_commit(), software=software(), device=str(ctx.torch_device),
                                     compute_seconds=round(time.perf_counter() - t0, 2)))
        r = store.save(figure, chash, config, arrays, meta, extra)
        if s.finish is not None:
            s.finish(job)
    ctx.log(f"[{figure}] results written to {r.json_path} and {r.npz_path}")
    return r


def plot(figure: str, result: Result):
    """The matplotlib Figure of ``figure`` drawn from ``result`` (nothing is computed)."""
    s = spec(figure)
    if s.plot is None:
        raise ConfigError(f"{figure} has no plot of its own")
    return s.plot(result)


def render(figure: str, result: Result, figures_dir="figures") -> list[str]:
    """Draw ``figure`` from ``result`` and write ``figures_dir/<stem>.pdf`` and ``.png``."""
    fig = plot(figure, result)
    return save_figure(fig, Path(figures_dir) / spec(figure).stem)


def _plotter(name):
    def f(result):
        return plot(name, result)

    f.__name__ = f"plot_{name}"
    f.__doc__ = f"Draw {FIGURES[name].paper} ({FIGURES[name].title}) from its results; computes nothing."
    return f


plot_fig3, plot_fig4, plot_fig5, plot_fig6 = (_plotter(n) for n in ("fig3", "fig4", "fig5", "fig6"))
plot_fig7, plot_fig8, plot_fig9, plot_fig10, plot_fig11 = (_plotter(n) for n in ("fig7", "fig8", "fig9", "fig10", "fig11"))
plot_fig12, plot_fused_ln = _plotter("fig12"), _plotter("fused_ln")

__all__ = [
    "Context", "FIGURES", "FIGURE_NAMES", "Result", "ResultStore", "StaleResultWarning", "load_results",
    "config_hash_of", "plot", "render", "spec", "plot_fig3", "plot_fig4", "plot_fig5", "plot_fig6", "plot_fig7",
    "plot_fig8", "plot_fig9", "plot_fig10", "plot_fig11", "plot_fig12", "plot_fused_ln",
]
