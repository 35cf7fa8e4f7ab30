"""The paper's figures and the checks that need a trained model: compute -> results cache -> plot.

``load_results(name, profile)`` returns a result's numbers (:mod:`.spec` declares them), computing them only when
neither the cache (``results/<name>/<config-hash>``) nor the published results hold an intact result for the
current configuration: its settings, its model's training configuration, the configurations of the results it
depends on and the hash of the code that computes it (:func:`curvature_gap.codehash.code_hash`), so a changed
setting or computation is never served from an old result. ``find_result`` never computes. The runner trains the
runs a result declares (``FigureSpec.runs``) before its computation starts; ``render`` draws its figures.
"""
from __future__ import annotations

import importlib
import pkgutil
import time
import warnings
from pathlib import Path

from ..config import ConfigError, config_hash
from ..codehash import code_hash
from ..provenance import checkout_root, git_commit, host, software
from ..train import run_key
from .context import Context
from ..plotting import save_figure
from .settings import OWN_ARITHMETIC, Variant, as_dict, replace
from .spec import FigureSpec, Finding, Job, Point, ResultSpec, sort_key
from .store import PublishedStore, Result, ResultStore, StaleResultWarning, UnusableResult

__all__ = ["Context", "FigureSpec", "Point", "ResultSpec", "Finding", "Job", "Variant", "register", "SPECS",
           "INTERNAL", "FIGURES", "FIGURE_NAMES", "RESULT_NAMES", "Result", "ResultStore", "PublishedStore",
           "StaleResultWarning", "UnusableResult", "load_results", "find_result", "config_of", "config_hash_of",
           "spec", "on_model", "compared_model", "runs_of", "furthest", "train_runs", "plot", "message", "render",
           "published_check", "default_published_dir", "cached_result", "settings_of", "warn_if_damaged"]


def _discover() -> tuple[dict, dict]:
    """The results declared by this package's modules: the results of each module's ``SPECS`` (figures,
    :mod:`.spec`), in book order (:func:`.spec.sort_key`); internal ones (computed for others only) apart."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += list(getattr(module, "SPECS", ()))
    return register(found)


def register(figures, into: tuple[dict, dict] | None = None) -> tuple[dict, dict]:
    """Add the results of ``figures`` (:class:`FigureSpec` s) to the registries ``into`` (default: this package's
    ``SPECS`` and ``INTERNAL``, and ``FIGURES``) and return them; an id declared twice is an error naming both
    modules. The CONTRIBUTING recipe's test registers a toy result through this."""
    public, internal = into if into is not None else (SPECS, INTERNAL)
    for f in figures:
        for s in f.results:
            if s.name in public or s.name in internal:
                raise ConfigError(f"result {s.name!r} is declared twice (by {s.compute.__module__} and "
                                  f"{(public.get(s.name) or internal[s.name]).compute.__module__})")
            (internal if s.internal else public)[s.name] = s
        if into is None:
            FIGURES[f.name] = f
    ordered = dict(sorted(public.items(), key=lambda kv: sort_key(kv[1])))
    public.clear()
    public.update(ordered)
    return public, internal


SPECS: dict[str, ResultSpec] = {}
INTERNAL: dict[str, ResultSpec] = {}
FIGURES: dict[str, FigureSpec] = {}  # each figure by its name (its results are in SPECS, INTERNAL)
_discover()
RESULT_NAMES = tuple(SPECS)
FIGURE_NAMES = tuple(n for n, s in SPECS.items() if s.plots)


def spec(name: str) -> ResultSpec:
    s = SPECS.get(name) or INTERNAL.get(name)
    if s is not None:
        return s
    raise ConfigError(f"unknown figure {name!r}; valid names: {', '.join(RESULT_NAMES)}")


def on_model(name: str, model: str) -> str | None:
    """The id of the result of ``name``'s figure on ``model`` (``settings.MODELS``), in that model's own arithmetic
    and on the figure's dataset: ``on_model("fig4", "authors") == "fig4_authors"``; None where the figure has no such
    result (Figs. 3-6 and 12 have both)."""
    r = spec(name).spec.result(model=model, arithmetic=OWN_ARITHMETIC[model])
    return None if r is None else r.name


def compared_model(name: str) -> str | None:
    """The model (``settings.MODELS``) result ``name`` is computed on, where it carries a finding and its figure
    reads the same claim on the other model too (a result with a finding there, in that model's own arithmetic, on
    the figure's dataset); None otherwise (an unknown name, a result without a finding or of no trained model, a
    claim read on one model)."""
    s = SPECS.get(name)
    v = s.variant if s is not None and s.finding is not None else None
    if v is None:
        return None
    other = on_model(name, "table1" if v.model == "authors" else "authors")
    return v.model if other is not None and spec(other).finding is not None else None


def runs_of(name: str, ctx: Context) -> list[tuple]:
    """The training runs result ``name`` reads under ``ctx`` (its figure's ``runs``): ``(variant, step, seed)``
    each, ``step`` None for a whole run, 0 for an initialisation (nothing to train), ``seed`` None for the
    recipe's; empty for a result of no trained model."""
    s = spec(name)
    settings = settings_of(s, ctx)
    return [(settings, step, seed) for step, seed in (s.runs(settings, ctx) if s.runs is not None else ())]


def furthest(runs: list[tuple], ctx: Context) -> list[tuple]:
    """``runs`` (``(variant, step, seed)``, :func:`runs_of`) as one training per run (its recipe's key): ``(variant,
    step, seed, snapshots)`` with ``step`` the furthest any of them reads (None, the whole run, is the furthest) and
    ``snapshots`` the earlier steps (> 0) to save on the way, so that no step is trained twice."""
    by: dict[str, list] = {}
    for v, step, seed in runs:
        key = run_key(ctx.recipe(v, seed))
        by.setdefault(key, [v, seed, []])[2].append(step)
    out = []
    for v, seed, steps in by.values():
        ints = sorted({st for st in steps if st is not None})
        last = None if None in steps else ints[-1]
        out.append((v, last, seed, tuple(st for st in ints if st and st != last)))
    return out


def train_runs(runs: list[tuple], ctx: Context) -> None:
    """The runner: train ``runs`` (:func:`runs_of`), each run once to its furthest step with the snapshots of the
    others (:func:`furthest`), then make every step it reads available to ``Context.model``."""
    for v, step, seed, snapshots in furthest(runs, ctx):
        ctx.train(v, step, seed, snapshots)
    for v, step, seed in runs:
        ctx.train(v, step, seed)


def settings_of(s: ResultSpec, ctx: Context):
    """The settings of result ``s`` under the context's profile, with the context's overrides (by the
    result's name or its ``override_key``)."""
    if ctx.profile not in s.settings:
        raise ConfigError(f"{s.name} exists only under the profile(s) {', '.join(s.profiles)}")
    base = s.settings[ctx.profile]
    over = ctx.settings_overrides.get(s.name) or (ctx.settings_overrides.get(s.override_key) if s.override_key else None)
    return replace(base, **over) if over else base


def config_of(s: ResultSpec, ctx: Context, settings, dep_hashes: dict) -> dict:
    """Everything that determines a result's numbers; its hash names the result files."""
    recipe = ctx.run_recipe(settings)
    train = {}
    if recipe is not None:
        train[settings.model_key] = dict(run_key=run_key(recipe), **recipe.to_dict())
    config = dict(figure=s.name, profile=ctx.profile, settings=as_dict(settings), train=train,
                  depends=dict(dep_hashes), code=code_hash(*computation(s), via=CONTEXT_VIA))
    if s.reads:
        config["reads"] = {r: as_dict(settings_of(spec(r), ctx)) for r in s.reads}
    return config


# A computation's ``ctx.method`` calls (and a context method's ``self.method`` calls) reach those methods of Context
CONTEXT_VIA = (("ctx", Context), ("self", Context))


def computation(s: ResultSpec) -> tuple:
    """The roots of a result's code hash: its compute (and finish) functions; :mod:`curvature_gap.codehash`
    follows what they use, the :class:`Context` methods they call included (``CONTEXT_VIA``). The training code
    is not among them: a run's weights are named by its key (``train.run_key``: the recipe and the code that
    trains it), which the result's configuration records for the run it reads."""
    return (s.compute,) + ((s.finish,) if s.finish is not None else ())


def _context(profile: str | None, ctx: Context | None, kwargs: dict) -> Context:
    if ctx is None:
        return Context(profile=profile or "smoke", **kwargs)
    if kwargs:
        raise TypeError("pass either ctx or context keyword arguments, not both")
    if profile is not None and profile != ctx.profile:
        raise ValueError(f"profile {profile!r} differs from the context's {ctx.profile!r}")
    return ctx


def _config(name: str, ctx: Context) -> tuple[ResultSpec, object, dict, str]:
    s = spec(name)
    settings = settings_of(s, ctx)  # ConfigError where the result does not exist under the profile
    config = config_of(s, ctx, settings, {d: _config(d, ctx)[3] for d in s.depends})
    return s, settings, config, config_hash(config)


def config_hash_of(name: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> str:
    """The config hash a result has (or would have), without computing anything."""
    return _config(name, _context(profile, ctx, kwargs))[3]


def default_published_dir(start=None) -> Path | None:
    """``published/`` of the checkout containing ``start`` (default: the current directory), if any."""
    root = checkout_root(start)
    return root / "published" if root is not None and (root / "published").is_dir() else None


def _published(ctx: Context) -> PublishedStore | None:
    return PublishedStore(Path(ctx.published_dir) / ctx.profile) if ctx.published_dir is not None else None


def published_check(name: str, ctx: Context) -> Result:
    """The published result of ``name`` for the current configuration, or :class:`UnusableResult` saying why
    (none published, damaged, or computed by another configuration or other code)."""
    store = _published(ctx)
    if store is None:
        raise UnusableResult("no published results directory")
    _, _, config, chash = _config(name, ctx)
    return store.check(name, chash, config)


def cached_result(name: str, ctx: Context) -> Result | None:
    """The cached result of ``name`` for the current configuration (never the published one), or None."""
    _, _, config, chash = _config(name, ctx)
    return ResultStore(ctx.results_dir).load(name, chash, config)


def find_result(name: str, profile: str | None = None, ctx: Context | None = None, **kwargs) -> Result | None:
    """The result of ``name`` from the cache or the published results when one matches the current
    configuration; None otherwise. Never computes."""
    ctx = _context(profile, ctx, kwargs)
    r = cached_result(name, ctx)
    if r is None:
        try:
            r = published_check(name, ctx)
        except UnusableResult:
            # none published, or published by other code or settings: a normal state, reported by the callers
            # (verify's rows are "not run" and name the command). A published file that is there but cannot be
            # read is damage, and is said here.
            warn_if_damaged(_published(ctx), name)
    return r


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
    (or computed) only when this one must be computed. Safe to call from several processes at once."""
    ctx = _context(profile, ctx, kwargs)
    s, settings, config, chash = _config(name, ctx)
    store = ResultStore(ctx.results_dir)
    r = None if ctx.recompute else find_result(name, ctx=ctx)
    if r is not None:
        return r
    with store.lock(name, chash):
        if not ctx.recompute:  # another process may have finished it while we waited
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", StaleResultWarning)
                r = store.load(name, chash, config)
            if r is not None:
                return r
        deps = {figure: load_results(d, ctx=ctx) for d, figure in s.dep_figures.items()}
        t0, p0 = time.perf_counter(), dict(ctx.phases)
        train_runs(runs_of(name, ctx), ctx)  # the runner trains; the computation only loads (Context.model)
        ctx.log(f"[{name}] computing ({ctx.profile}, config {chash})")
        job = Job(name, ctx, settings, deps, chash, store,
                  {figure: settings_of(spec(r), ctx) for r, figure in s.read_figures.items()})
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


def message(name: str, part: str, result) -> str:
    """The message its caption opens with, for part ``part`` of result ``name``'s figure (the result's
    ``FigureSpec.messages``); KeyError, naming where to add it, when it has none."""
    s = spec(name)
    if part not in s.messages:
        raise KeyError(f"no caption message for {name}/{part}: add one to SPECS[{name!r}].messages in "
                       f"{s.compute.__module__}") from None
    return s.messages[part](result)


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
    stem = spec(name).stem
    return [p for part, fig in plot(name, result).items()
            for p in save_figure(fig, Path(figures_dir) / f"{stem}_{part}")]
