"""The paper's figures and the checks that need a trained model: compute -> results cache -> plot.

``load_results(name, profile)`` returns a result's numbers, computing them only when neither the cache
(``results/<name>/<config-hash>``) nor the published results (committed to the repository) hold an
intact result for the current configuration; ``find_result`` never computes. A result's configuration
is its settings, the training configuration of its model, the configurations of the results it
depends on, and a hash of the code that computes it (:func:`curvature_gap.codehash.code_hash`), so a
changed setting or a changed computation is never served from an old result. The plot functions
(``FigureSpec.plots``) draw a result without computing anything; ``render`` writes them as PDF and PNG.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config import ConfigError, config_hash
from ..codehash import code_hash
from ..provenance import git_commit, host, software
from . import assumption, convergence, dynamics, encoder_family, fused_ln, heatmaps, landscape_checks, norms
from .context import Context
from .dynamics_blocks import TYPES
from ..plotting import save_figure
from .settings import BEYOND_PAPER_SETTINGS, as_dict, replace, settings_for
from .store import PublishedStore, Result, ResultStore, StaleResultWarning, UnusableResult

__all__ = ["Context", "FigureSpec", "SPECS", "FIGURE_NAMES", "RESULT_NAMES", "Result", "ResultStore", "PublishedStore",
           "StaleResultWarning", "UnusableResult", "load_results", "find_result", "config_of", "config_hash_of",
           "spec", "plot", "render", "published_check", "default_published_dir", "cached_result", "settings_of",
           "warn_if_damaged"]



@dataclass(frozen=True)
class Job:
    """What a compute function gets: the context, its settings, its dependencies' results."""

    name: str
    ctx: Context
    settings: object
    deps: dict
    config_hash: str
    store: ResultStore


@dataclass(frozen=True)
class FigureSpec:
    name: str
    paper: str  # the paper's figure number, "beyond the paper", or "check"
    stem: str  # output file stem under figures/ ("" for results without a figure)
    title: str
    settings_key: str  # field of settings.FigureSettings, or a key of settings.BEYOND_PAPER_SETTINGS
    compute: Callable[[Job], tuple]
    plots: dict = field(default_factory=dict)  # part -> function(result) -> matplotlib Figure
    depends: tuple = ()
    reads: tuple = ()  # settings of other results its computation reads (they enter its config)
    profiles: tuple = ("smoke", "paper")  # profiles the result exists under
    finish: Callable | None = None
    needs: str = "MNIST"  # what it needs to run, for reports


def _type_spec(fig: str, n: int) -> FigureSpec:
    t = TYPES[fig][0]
    return FigureSpec(fig, f"Fig. {n}", f"fig{n:02d}_{t}", f"{t}: entries and Hessian blocks over the first training steps",
                      "trajectory", lambda j: dynamics.compute_type(j.name, j.deps["trajectory"]),
                      {"entries": dynamics.plot_entries, "hessian": dynamics.plot_hessian_blocks,
                       "norms": dynamics.plot_norms},
                      depends=("trajectory",))


_HEAT = {"hessian": heatmaps.plot_hessian, "attention": heatmaps.plot_attention, "block_means": heatmaps.plot_block_means}
_SPECS = [
    FigureSpec("fig3", "Fig. 3", "fig03_hessian_init", "Hessian entries at initialisation", "init_heatmap",
               lambda j: heatmaps.compute_heatmap(j.ctx, j.settings, settings_of(spec("trajectory"), j.ctx)), _HEAT, reads=("trajectory",)),
    FigureSpec("fig4", "Fig. 4", "fig04_hessian_trained", "Hessian entries after training", "trained_heatmap",
               lambda j: heatmaps.compute_heatmap(j.ctx, j.settings, settings_of(spec("trajectory"), j.ctx)), _HEAT, reads=("trajectory",)),
    FigureSpec("fig5", "Fig. 5", "fig05_norms", "parameter and Hessian block norms", "norms",
               lambda j: norms.compute_norms(j.ctx, j.settings, j.deps),
               {"parameters": norms.plot_parameters, "hessians": norms.plot_hessians,
                "parameters_over_training": norms.plot_parameters_over_training,
                "hessians_over_training": norms.plot_hessians_over_training},
               depends=("fig3", "fig4", "trajectory")),
    FigureSpec("fig6", "Fig. 6", "fig06_loss_convergence", "the loss difference |L(k+1) − L(k)| against k", "convergence",
               lambda j: convergence.compute_convergence(j.ctx, j.settings), {"convergence": convergence.plot_convergence}, needs="CIFAR-100 (paper) / MNIST (smoke)"),
    FigureSpec("fig6_mnist", "Fig. 6 (MNIST stand-in)", "fig06_loss_convergence_mnist",
               "the loss difference |L(k+1) − L(k)| against k, MNIST model", "convergence_mnist",
               lambda j: convergence.compute_convergence(j.ctx, j.settings), {"convergence": convergence.plot_convergence}, profiles=("paper",)),
    _type_spec("fig7", 7), _type_spec("fig8", 8), _type_spec("fig9", 9), _type_spec("fig10", 10), _type_spec("fig11", 11),
    FigureSpec("fig12", "Fig. 12", "fig12_assumption_1", "validation of Assumption 1", "assumption",
               lambda j: assumption.compute_assumption(j.ctx, j.settings), {"assumption": assumption.plot_assumption}),
    FigureSpec("fused_ln", "beyond the paper", "extra_fused_layernorm", "the fused LayerNorm's Hessian error", "fused",
               lambda j: fused_ln.compute_fused_ln(j.ctx, j.settings), {"error": fused_ln.plot_fused_error}),
    FigureSpec("encoder_family", "beyond the paper", "extra_encoder_family",
               "the diagonal Hessian blocks of nn.TransformerEncoderLayer, post/pre-norm, 1/4 heads", "encoder_family",
               lambda j: encoder_family.compute_encoder_family(j.ctx, j.settings),
               {"blocks": encoder_family.plot_encoder_family}, needs="nothing (synthetic data)"),
    FigureSpec("theorem7", "check", "check_theorem7", "Theorem 7 on the trained ViT", "theorem7",
               lambda j: landscape_checks.compute_theorem7(j.ctx, j.settings), {"ratios": landscape_checks.plot_theorem7}),
    FigureSpec("trained_bounds", "check", "", "the bounds at the trained ViT's block", "trained_bounds",
               lambda j: landscape_checks.compute_trained_bounds(j.ctx, j.settings)),
]
SPECS: dict[str, FigureSpec] = {s.name: s for s in _SPECS}
INTERNAL: dict[str, FigureSpec] = {
    "trajectory": FigureSpec(
        "trajectory", "Figs. 5, 7-11", "", "snapshots of the first training steps", "trajectory",
        lambda j: norms.compute_trajectory(j.ctx, j.settings, j.deps["fig3"], j.config_hash, j.store),
        depends=("fig3",),
        finish=lambda j: norms.finish_trajectory(j.ctx, j.config_hash, j.store)),
}
RESULT_NAMES = tuple(SPECS)
FIGURE_NAMES = tuple(n for n, s in SPECS.items() if s.plots)


def spec(name: str) -> FigureSpec:
    if name in SPECS:
        return SPECS[name]
    if name in INTERNAL:
        return INTERNAL[name]
    raise ConfigError(f"unknown figure {name!r}; valid names: {', '.join(RESULT_NAMES)}")


def settings_of(s: FigureSpec, ctx: Context):
    if s.settings_key in BEYOND_PAPER_SETTINGS:
        base = BEYOND_PAPER_SETTINGS[s.settings_key][ctx.profile]
    else:
        base = getattr(settings_for(ctx.profile), s.settings_key)
    over = ctx.settings_overrides.get(s.name) or ctx.settings_overrides.get(s.settings_key)
    return replace(base, **over) if over else base


def config_of(s: FigureSpec, ctx: Context, settings, dep_hashes: dict) -> dict:
    """Everything that determines a result's numbers; its hash names the result files."""
    model = getattr(settings, "model", None)
    train = {}
    if model is not None:
        cfg = ctx.train_cfg(model)
        train[model] = dict(config_hash=cfg.hash(), **cfg.to_dict())
    config = dict(figure=s.name, profile=ctx.profile, settings=as_dict(settings), train=train,
                  depends=dict(dep_hashes), code=code_hash(*computation(s)))
    if s.reads:
        config["reads"] = {r: as_dict(settings_of(spec(r), ctx)) for r in s.reads}
    return config


def computation(s: FigureSpec) -> tuple:
    """The roots of a result's code hash: its compute (and finish) functions and the context every
    computation runs in (data, models, training); :mod:`curvature_gap.codehash` follows what they use."""
    return (Context, s.compute) + ((s.finish,) if s.finish is not None else ())


def _context(profile: str | None, ctx: Context | None, kwargs: dict) -> Context:
    if ctx is None:
        return Context(profile=profile or "smoke", **kwargs)
    if kwargs:
        raise TypeError("pass either ctx or context keyword arguments, not both")
    if profile is not None and profile != ctx.profile:
        raise ValueError(f"profile {profile!r} differs from the context's {ctx.profile!r}")
    return ctx


def _config(name: str, ctx: Context) -> tuple[FigureSpec, object, dict, str]:
    s = spec(name)
    if ctx.profile not in s.profiles:
        raise ConfigError(f"{name} exists only under the profile(s) {', '.join(s.profiles)}")
    settings = settings_of(s, ctx)
    config = config_of(s, ctx, settings, {d: _config(d, ctx)[3] for d in s.depends})
    return s, settings, config, config_hash(config)


def config_hash_of(name: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> str:
    """The config hash a result has (or would have), without computing anything."""
    return _config(name, _context(profile, ctx, kwargs))[3]


def default_published_dir(start=None) -> Path | None:
    """``published/`` of the checkout containing ``start`` (default: the current directory), if any."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "published").is_dir() and (d / "pyproject.toml").is_file():
            return d / "published"
    return None


def published_check(name: str, ctx: Context) -> Result:
    """The published result of ``name`` for the current configuration, or :class:`UnusableResult` saying why
    (none published, damaged, or computed by another configuration or other code)."""
    if ctx.published_dir is None:
        raise UnusableResult("no published results directory")
    _, _, config, chash = _config(name, ctx)
    return PublishedStore(Path(ctx.published_dir) / ctx.profile).check(name, chash, config)


def cached_result(name: str, ctx: Context) -> Result | None:
    """The cached result of ``name`` for the current configuration (never the published one), or None."""
    _, _, config, chash = _config(name, ctx)
    return ResultStore(ctx.results_dir).load(name, chash, config)


def find_result(name: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> Result | None:
    """The result of ``name`` from the cache or the published results when one matches the current
    configuration; None otherwise. Never computes."""
    ctx = _context(profile, ctx, kwargs)
    s, _, config, chash = _config(name, ctx)
    r = ResultStore(ctx.results_dir).load(name, chash, config)
    if r is not None:
        return r
    try:
        return published_check(name, ctx)
    except UnusableResult:
        # none published, or published by other code or settings: a normal state, reported by the callers
        # (verify's rows are "not run" and name the command). A published file that is there but cannot be
        # read is damage, and is said here.
        warn_if_damaged(PublishedStore(Path(ctx.published_dir) / ctx.profile) if ctx.published_dir else None,
                        name)
        return None


def warn_if_damaged(store: PublishedStore | None, name: str, stacklevel: int = 3) -> None:
    """Warn (:class:`StaleResultWarning`) when the published result ``name`` of ``store`` exists but cannot be
    read (edited, truncated, its .npz missing), naming the file and the fix; silent when there is none."""
    if store is None or not store.json_path(name).exists():
        return
    try:
        store.read(name, "")
    except UnusableResult as damage:
        warnings.warn(f"the published result {name} cannot be used: {damage}. Restore {store.root}/{name}.json "
                      f"and .npz from git (git checkout -- {store.root}) or recompute and republish it "
                      f"(curvature-gap reproduce --profile {store.root.name} --only {name}, then "
                      f"curvature-gap publish --profile {store.root.name} --only {name})",
                      StaleResultWarning, stacklevel=stacklevel)


def load_results(name: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> Result:
    """A result's numbers: from the cache or the published results when intact, else computed and cached.

    ``profile`` is "smoke" or "paper"; other keywords build the ``Context`` (device, data_dir,
    results_dir, runs_dir, published_dir, progress, recompute, ...). Results it depends on are loaded
    (or computed) only when this one must be computed. Safe to call from several processes at once.
    """
    ctx = _context(profile, ctx, kwargs)
    s, settings, config, chash = _config(name, ctx)
    store = ResultStore(ctx.results_dir)
    if not ctx.recompute:
        r = find_result(name, ctx=ctx)
        if r is not None:
            return r
    with store.lock(name, chash):
        if not ctx.recompute:  # another process may have finished it while we waited
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", StaleResultWarning)
                r = store.load(name, chash, config)
            if r is not None:
                return r
        deps = {d: load_results(d, ctx=ctx) for d in s.depends}
        ctx.log(f"[{name}] computing ({ctx.profile}, config {chash})")
        t0, p0 = time.perf_counter(), dict(ctx.phases)
        job = Job(name, ctx, settings, deps, chash, store)
        arrays, meta = s.compute(job)
        seconds = time.perf_counter() - t0
        phases = {k: round(v - p0.get(k, 0.0), 2) for k, v in ctx.phases.items() if v - p0.get(k, 0.0) > 0}
        phases["other analysis"] = round(seconds - sum(phases.values()), 2)
        extra = dict(provenance=dict(git=git_commit(), software=software(), host=host(), device=str(ctx.torch_device),
                                     compute_seconds=round(seconds, 2), phases=phases))
        r = store.save(name, chash, config, arrays, meta, extra)
        if s.finish is not None:
            s.finish(job)
    ctx.log(f"[{name}] results written to {r.json_path} and {r.npz_path}")
    return r


def plot(name: str, result: Result, part: str | None = None):
    """The matplotlib Figure(s) of ``name`` drawn from ``result`` (nothing is computed): one part, or
    ``{part: Figure}`` for all of them."""
    s = spec(name)
    if not s.plots:
        raise ConfigError(f"{name} has no figure")
    if part is not None:
        if part not in s.plots:
            raise ConfigError(f"{name} has no part {part!r}; parts: {', '.join(s.plots)}")
        return s.plots[part](result)
    return {p: fn(result) for p, fn in s.plots.items()}


def render(name: str, result: Result, figures_dir="figures") -> list[str]:
    """Draw every part of ``name`` from ``result`` and write ``figures_dir/<stem>_<part>.pdf`` and ``.png``."""
    s = spec(name)
    out = []
    for part, fig in plot(name, result).items():
        out += save_figure(fig, Path(figures_dir) / f"{s.stem}_{part}")
    return out
