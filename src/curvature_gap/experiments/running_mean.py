"""The authors' protocol for Figs. 6 and 12: one pass of their loader at fixed trained weights, which both figures read.

Their ``loss_landscape_convergence.py`` (Fig. 6) and ``assumption_1.py`` (Fig. 12) (``config.AUTHORS_CODE``) hold
w* fixed and run over their shuffled, augmented training loader (``train.loader``) batch by batch, k counting the
samples seen: Fig. 6 takes the running mean L_k of the per-sample loss and |L_{k+1} − L_k| at every batch; Fig. 12
the gradient of the running mean, ‖(1/k) Σ ∇ℓ_i(w*)‖₂, accumulated from each batch's summed-loss gradient and
logged every 16 batches. :func:`compute_loader_pass` computes both from one pass per run; the MNIST stand-ins of
both figures are cut from the two shared passes of :data:`LOADER_PASS`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from ..precision import arithmetic_for, frozen_at_one, precision_of
from ..train import loader
from .context import Context
from .settings import AUTHORS_RUN_SEEDS, Variant
from .spec import FigureSpec, Finding, Point

__all__ = ["LoaderPassSettings", "GradientSums", "loader_pass", "compute_loader_pass", "fit_loglog", "smooth",
           "accumulation_summary", "on_loader", "pass_title", "authors_pass", "figure_runs",
           "loader_figure", "MNIST_SETTINGS", "MNIST_EXACT_SETTINGS",
           "SMOKE", "ACCUM_TOL", "DRIFT_FROM", "MNIST_NEEDS", "CIFAR_NEEDS", "CIFAR_STANDIN", "LOADER_PASS", "SPECS"]


@dataclass(frozen=True)
class LoaderPassSettings(Variant):
    """One pass of the authors' loader at fixed trained weights (their loss_landscape_convergence.py, assumption_1.py).

    The defaults are their Fig. 12 configuration (``configs/experiments/vit_classification/assumption_1.yaml``)."""

    model: str = "authors"
    dataset: str = "cifar100"  # *.yaml: model.params (8 blocks, model_dim 128, CIFAR-100)
    # precision.ARITHMETICS: "authors" = their bf16 run, bf16 forward, gradients summed into bf16 buffers (beside a
    # float64 sum of the same gradients); "exact" = the float32 run, float32 forward, float64 sums
    arithmetic: str = "authors"
    # *.yaml: common.seed, which names the trained run (checkpoint_path .../vit_classification_seed_<seed>/) and
    # seeds their loader (data.seed); None: the recipe's own seed. Here it also seeds the run's initialisation.
    run_seed: int | None = 21
    step: int = 10_000  # *.yaml: model.checkpoint_path .../checkpoints/step_10000/model.pt
    epochs: int = 26  # *.yaml: trainer.num_epochs (10,166 batches of CIFAR-100)
    gradients: bool = True  # assumption_1.py (Fig. 12) takes the gradient; loss_landscape_convergence.py does not
    log_every: int = 16  # assumption_1.py: `if step % 16 == 0` (Fig. 12)
    # their notebooks/loss_landscape_convergence.ipynb: the curve is df["delta"].ewm(alpha=0.02, adjust=False)
    # over batches, drawn without its last 1000 rows (drop_last = 1000), with fixed k⁻¹ guide lines; the verdict's
    # slope is fitted on the raw points (our reading, not their figure's)
    ewm_alpha: float = 0.02
    drop_last: int = 1000
    fit_k_min: int = 4  # as ConvergenceSettings
    fit_points: int = 40  # as ConvergenceSettings
    # the trained runs (seeds of the recipe, each at ``step``), one loader pass each, its loader seeded by the run's
    # seed as their assumption_1.yaml seeds both with common.seed (empty: the run of ``run_seed`` alone). Their
    # Fig. 12 notebook (notebooks/assumption_1.ipynb) draws the mean ± std of three runs, seeds 307, 42 and 21.
    run_seeds: tuple = ()


# smoke: the authors' MNIST smoke run (3 steps of 128 images) and 8 passes over its training subset (24 batches);
# each figure's settings take it (Fig. 6 without the gradient)
SMOKE = LoaderPassSettings(dataset="mnist", run_seed=None, step=3, epochs=8, log_every=1)
# the stand-ins where CIFAR-100 cannot be had: their MNIST model at Fig. 4's checkpoint (step 20,000; their MNIST
# configuration has no Fig. 6/12 experiment), one pass each (``loader_pass_authors_mnist``) serving both figures, of
# the three bf16 runs Fig. 4's verdict counts over (settings.AUTHORS_RUN_SEEDS), so the mean ± std is over trained
# runs as their notebook's; 5 epochs (2,345 batches, k up to 300,000, ~1 min a pass) show the bf16 sum's stall at a
# quarter of their CIFAR pass's 10,166 batches. The float32 twin: the one float32 run (seed 37), one pass.
MNIST_SETTINGS = {"paper": LoaderPassSettings(dataset="mnist", run_seed=None, step=20_000, epochs=5,
                                              run_seeds=AUTHORS_RUN_SEEDS)}
MNIST_EXACT_SETTINGS = {p: replace(v, arithmetic="exact", run_seeds=()) for p, v in MNIST_SETTINGS.items()}


class GradientSums:
    """The running sum of per-batch gradients, kept twice: in float64 (``exact``) and in buffers of each
    parameter's dtype (``theirs``: ``zeros_like(p)`` and ``add_``, as their ``assumption_1.py``; bf16 for a bf16
    model, where a sum of a few hundred comparable terms stops growing)."""

    def __init__(self, params):
        self.theirs = [torch.zeros_like(p) for p in params]
        self.exact = [torch.zeros_like(p, dtype=torch.float64) for p in params]

    def add(self, grads) -> None:
        for a, e, g in zip(self.theirs, self.exact, grads, strict=True):
            a.add_(g)
            e.add_(g.double())

    def norms(self, seen: int) -> tuple[float, float]:
        """(‖exact / seen‖₂ in float64, ‖theirs / seen‖₂ as their code computes it: ``(g / seen)``, concatenated,
        ``norm(p=2)``, in the buffers' dtype)."""
        exact = float(torch.sqrt(sum(((e / seen) ** 2).sum() for e in self.exact)))
        theirs = float(torch.cat([(a / seen).reshape(-1) for a in self.theirs]).norm(p=2))
        return exact, theirs


def loader_pass(model, cfg, ds, epochs: int, log_every: int, gradients: bool, device, progress: bool = False,
                max_batches: int | None = None, arithmetic: str = "exact") -> dict:
    """One pass of ``epochs`` epochs over the authors' loader (``train.loader`` of ``cfg`` over ``ds``)
    at the fixed weights of ``model``: after every batch the number of samples seen and the running mean of
    the per-sample cross-entropy (a Python float, as their code sums it); with ``gradients``, every
    ``log_every`` batches also the norm of the gradient of that running mean, from each batch's summed-loss
    gradient accumulated twice (:class:`GradientSums`): ``grad_norm`` (float64, the quantity of Assumption 1)
    and ``grad_norm_theirs`` (the parameters' dtype, as their ``assumption_1.py`` sums it).

    ``arithmetic="authors"``: the model in bf16 (its weights are bf16 values: exact), forward and loss as CUDA's
    bf16 autocast computes them (``precision.arithmetic_for``), so the gradients and their buffers are bf16;
    ``"exact"``: as given (float32). ``max_batches`` stops early (timing)."""
    precision = precision_of(arithmetic)
    if precision == "bf16":
        model = copy.deepcopy(model).to(torch.bfloat16)
    logits, cross_entropy = arithmetic_for(precision)
    params = list(model.parameters())
    sums = GradientSums(params)
    loss_sum, seen = 0.0, 0
    n_seen, running, g_seen, g_norm, g_theirs = [], [], [], [], []
    total = -(-len(ds.train) // cfg.batch_size) * epochs
    for step, x, y in tqdm(loader(cfg, ds, epochs), total=total, desc="loader", unit="batch",
                           disable=not progress):
        if max_batches is not None and step >= max_batches:
            break
        x, y = x.to(device), y.to(device)
        with torch.set_grad_enabled(gradients):
            loss = cross_entropy(logits(model, x), y, reduction="sum")
        if gradients:
            sums.add(torch.autograd.grad(loss, params))
        loss_sum += loss.item()
        seen += len(y)
        n_seen.append(seen)
        running.append(loss_sum / seen)
        if gradients and step % log_every == 0:
            g_seen.append(seen)
            exact, theirs = sums.norms(seen)
            g_norm.append(exact)
            g_theirs.append(theirs)
    out = dict(n_seen=np.array(n_seen), running_loss=np.array(running, dtype=np.float64))
    if gradients:
        out.update(grad_samples=np.array(g_seen), grad_norm=np.array(g_norm, dtype=np.float64),
                   grad_norm_theirs=np.array(g_theirs, dtype=np.float64))
    return out


def compute_loader_pass(ctx: Context, s: LoaderPassSettings) -> tuple[dict, dict]:
    """The passes of :func:`loader_pass`, one per run of ``s.run_seeds`` (none given: the run of ``s.run_seed``), each
    at step ``s.step`` of its run trained in ``s.arithmetic`` and over its run's loader, with Fig. 6's |L_{k+1} − L_k|
    and its log-log trend (the first run), and (``s.gradients``) Fig. 12's gradient norms of every pass, both sums."""
    ds = ctx.data(s)
    passes, runs = [], []
    for run_seed in tuple(s.run_seeds) or (s.run_seed,):
        m, i = ctx.model(s, s.step, run_seed)
        c = ctx.recipe(s, run_seed)
        runs.append((m, i, c))
        n_batches = -(-len(ds.train) // c.batch_size) * s.epochs
        ctx.log(f"{n_batches} batches of the authors' loader (seed {c.seed}) at step {s.step} of the run of seed "
                f"{c.seed}, {s.arithmetic} arithmetic: running mean loss" + (" and gradient" if s.gradients else ""))
        passes.append(loader_pass(m, c, ds, s.epochs, s.log_every, s.gradients, ctx.torch_device, ctx.progress,
                                  arithmetic=s.arithmetic))
    model, info, cfg = runs[0]
    p = passes[0]
    running = p["running_loss"]
    delta = np.abs(np.diff(running))  # |L_{k+1} − L_k|, k = 1 .. batches − 1 (their first batch has no L_k)
    k = np.arange(1, len(delta) + 1)
    positive = np.maximum(delta, np.finfo(float).tiny)
    fit = fit_loglog(k, positive, s.fit_k_min, s.fit_points)
    # pandas' Series.ewm(alpha, adjust=False).mean(): y₀ = x₀, yₜ = (1 − α) yₜ₋₁ + α xₜ
    arrays = dict(n_samples=p["n_seen"][1:], k=k, delta=delta, running_loss=running,
                  ewm=smooth(delta, 1 - s.ewm_alpha, s.ewm_alpha))
    at_one, n_gamma, max_dev = frozen_at_one(model)
    meta = dict(profile=ctx.profile, model=s.model_key, seed=cfg.seed, run_seeds=[c.seed for _, _, c in runs], step=s.step,
                epochs=s.epochs, arithmetic=s.arithmetic, precision=cfg.precision,
                batch_size=cfg.batch_size, log_every=s.log_every if s.gradients else None, n_blocks=cfg.model_config().n_blocks, n_train=len(ds.train),
                n_batches=len(running), checkpoint=info, fit=fit, ewm_alpha=s.ewm_alpha,
                drop_last=min(s.drop_last, len(delta) // 2),
                layernorm_gamma=dict(exactly_one=at_one, total=n_gamma, max_abs_deviation=max_dev),
                loader="the authors' training loader: shuffled by their seed, augmented, normalised (train.loader)",
                quantities="L_k: running mean cross-entropy over the samples seen"
                           + ("; grad: ‖∇ of the running mean‖₂ at w*, summed in float64 (grad_norm) and in the "
                              "parameters' dtype as their code sums it (grad_norm_theirs)" if s.gradients else ""))
    if s.gradients:
        arrays.update(grad_samples=p["grad_samples"], grad_norm=np.stack([q["grad_norm"] for q in passes]),
                      grad_norm_theirs=np.stack([q["grad_norm_theirs"] for q in passes]))
        # the trend of the gradient norm against the samples seen: log-log least squares, equal weight per decade
        g = p["grad_samples"]
        for key, name in (("grad_norm", "grad"), ("grad_norm_theirs", "grad_theirs")):
            mean = arrays[key].mean(axis=0)
            meta[f"{name}_fit"] = fit_loglog(g, mean, int(g[0]), s.fit_points) if len(g) > 1 else None
            meta[f"{name}_slope"] = meta[f"{name}_fit"]["slope"] if len(g) > 1 else float("nan")
        meta.update(accumulation_summary(arrays))
    return arrays, meta


# the reading of "k ≈ 60k" in the drift of the exact curve: the first logged point at or past 60,000 samples
# (one MNIST epoch, where the running mean has seen every image once)
DRIFT_FROM = 60_000


# the two sums of the same gradients "agree" within this relative difference: the float64 curve's spread over
# three loader passes of one run is about 1 %, so 5 % is well outside it
ACCUM_TOL = 0.05


def accumulation_summary(arrays: dict) -> dict:
    """What the two sums of the same gradients say, over the runs' passes: the ratio of their norms at the largest
    k (mean and spread over the passes) and the exact norm's drift from k ≈ :data:`DRIFT_FROM` to the largest k."""
    g, exact, theirs = arrays["grad_samples"], arrays["grad_norm"], arrays["grad_norm_theirs"]
    ratio = theirs[:, -1] / exact[:, -1]
    i0 = int(np.searchsorted(g, DRIFT_FROM)) if g[-1] >= DRIFT_FROM else 0
    drift = exact[:, -1] / exact[:, i0]
    mean_ratio = (theirs / exact).mean(axis=0)
    off = np.flatnonzero(np.abs(mean_ratio - 1) > ACCUM_TOL)  # where the two sums first part by more than ACCUM_TOL
    return dict(bites_at_samples=int(g[off[0]]) if len(off) else None,
                theirs_over_exact=float(ratio.mean()), theirs_over_exact_spread=[float(ratio.min()), float(ratio.max())],
                exact_drift=float(drift.mean()), exact_drift_spread=[float(drift.min()), float(drift.max())],
                drift_from_samples=int(g[i0]), largest_k=int(g[-1]), n_passes=int(exact.shape[0]))


def fit_loglog(k: np.ndarray, y: np.ndarray, k_min: int, n_points: int) -> dict:
    """Least-squares line log10 y = a log10 k + b through log-spaced k >= k_min (``k`` increasing; where it skips
    values, the first k at or above each log-spaced target)."""
    k = np.asarray(k)
    k_hi = int(k.max())
    k_min = min(max(1, k_min), k_hi)
    ks = np.unique(np.round(np.geomspace(k_min, k_hi, n_points)).astype(int))
    sel = np.unique(np.searchsorted(k, ks))  # the first k >= each target, once each (k need not be consecutive)
    X, Y = np.log10(k[sel]), np.log10(y[sel])
    a, b = np.polyfit(X, Y, 1)
    resid = Y - (a * X + b)
    r2 = 1 - float(resid @ resid) / float(((Y - Y.mean()) ** 2).sum())
    return dict(slope=float(a), intercept=float(b), r2=r2, k_fit=k[sel].astype(int).tolist())


def smooth(x: np.ndarray, keep: float, take: float) -> np.ndarray:
    """y₀ = x₀, yₜ = keep · yₜ₋₁ + take · xₜ, in float64, one Python float step at a time."""
    y = np.empty(len(x))
    for t, v in enumerate(x):
        y[t] = float(v) if t == 0 else keep * y[t - 1] + take * float(v)
    return y


def pass_title(meta) -> str:
    """The run a pass was taken on, as a figure's title names it."""
    data = "MNIST" if meta["model"] == "authors_mnist" else "CIFAR-100"
    arith = "bf16 run" if meta.get("precision", "float32") == "bf16" else "float32 run"
    runs = meta.get("run_seeds") or [meta["seed"]]
    seeds = f"seed {runs[0]}, {arith}" if len(runs) == 1 else f"seeds {', '.join(map(str, runs))}, {arith}s"
    return f"The authors' {meta['n_blocks']}-block {data} model at step {meta['step']:,} ({seeds})"


def on_loader(result) -> bool:
    """Whether ``result`` is of this protocol (one pass of the authors' loader), not of the theorem's model's
    random orders of the data: its meta names the loader."""
    return "loader" in result.meta


def figure_runs(s, ctx: Context) -> list[tuple]:
    """The runs Figs. 6 and 12 read: the theorem's block's whole run, or those of the authors' loader pass: each of
    ``s.run_seeds`` (none: the run of ``s.run_seed``) at ``s.step``."""
    return [(None, None)] if s.model == "table1" else [(s.step, seed) for seed in tuple(s.run_seeds) or (s.run_seed,)]


def authors_pass(j, keys) -> tuple[dict, dict]:
    """Figs. 6 and 12 on the authors' model: the arrays ``keys`` and the meta of the shared MNIST pass where the
    result depends on one (:data:`LOADER_PASS`), else a pass of its own."""
    if "loader_pass" not in j.deps:
        return compute_loader_pass(j.ctx, j.settings)
    res = j.deps["loader_pass"]
    return {k: res.arrays[k] for k in keys}, dict(res.meta)


# ----------------------------------------------------------------------------- the results of this module
MNIST_NEEDS = "MNIST; the authors' recipe trained to step 20,000 (float32 about 6 min, bf16 about 9 min on a CPU)"
# what the authors' CIFAR-100 results of Figs. 6 and 12 need, and what a row without them says
CIFAR_NEEDS = "CIFAR-100, and the authors' recipe trained to step 10,000 (hours on a CPU: a GPU)"
CIFAR_STANDIN = ("Needs CIFAR-100 (not obtainable offline) and the 8-block model trained to step 10,000 of the "
                 "authors' recipe.")
LOADER_PASS = FigureSpec(
    "loader_pass", "Figs. 6, 12", "", "passes of the authors' loader at w*",
    (Point(MNIST_SETTINGS, needs=MNIST_NEEDS), Point(MNIST_EXACT_SETTINGS, needs=MNIST_NEEDS)),
    lambda j: compute_loader_pass(j.ctx, j.settings), runs=figure_runs, internal=True, dataset="cifar100")
SPECS = (LOADER_PASS,)


def loader_figure(name: str, paper: str, stem: str, title: str, *, claim: str, page: str, settings: tuple,
                  keys: tuple, compute, plot, message, key_numbers, rows) -> FigureSpec:
    """Fig. 6 or 12 on both models, each with its finding (``claim``, on the book page ``page``), from ``settings``:
    the authors' model (their CIFAR-100 configuration; its MNIST stand-ins, bf16 and float32 runs, cut from the
    shared passes of :data:`LOADER_PASS`), the theorem's block (CIFAR-100) and its MNIST stand-in, whose settings
    overrides are reached by ``keys``; one figure part, named by the first."""
    (authors, own, mnist), (key, mnist_key) = settings, keys
    needs = "CIFAR-100 (paper) / MNIST (smoke)"
    return FigureSpec(name, paper, stem, title, (
        Point(authors, Finding(f"{paper} on the authors' model: {claim} (CIFAR-100)", page), standin=True, needs=needs),
        *(Point(s, needs=MNIST_NEEDS, depends=("loader_pass",), trains=False)
          for s in (MNIST_SETTINGS, MNIST_EXACT_SETTINGS)),
        Point(own, Finding(f"{paper}: {claim} (CIFAR-100)", page), standin=True, needs=needs, override_key=key),
        Point(mnist, override_key=mnist_key)),
        compute, {key: plot}, {key: message}, runs=figure_runs, key_numbers=key_numbers, rows=rows, dataset="cifar100")
