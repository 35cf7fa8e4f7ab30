"""The trajectory of the first training steps behind Figs. 5 and 7-11, for either model (protocol: ``Recipe.source``).

**The theorem's model** (Table 1's runs). The trajectory follows the very training run the trained model comes
from: the weights after each snapshot step are saved while it trains (a run trained without them is replayed
exactly), and at each snapshot the followed Hessian blocks of the fixed batch (the first training images) are
computed (:mod:`.dynamics_blocks`); step 0 is Fig. 3's Hessian.

**The authors' model**, as their ``notebooks/sa_ln_ff_changing.ipynb`` (``config.AUTHORS_CODE``) computes it: at
steps 0, 200, …, 1000 of their seed-37 MNIST run, for each of five parameter lists (its sections Queries, Keys,
Values, LayerNorm, FeedForward), the exact Hessian of the mean cross-entropy over that list alone (the principal
sub-matrix on the list's parameters) on the first batch of their training loader, its spectral norm, and the
Frobenius norm of the list's entries (Fig. 5); Figs. 7–11 are each list's Hessian as log10 |H_ij|. Kept apart
from that notebook: its "FeedForward" list is the second LayerNorm's γ and β (so their Fig. 11 is a corner of
their Fig. 10); both it (``feedforward``) and the feed-forward weights the caption names (``ffn_weights``) are
computed. Step 0 is the run's own initialisation (their notebook builds a fresh, unseeded model), and the
LayerNorm is the hand-written one, whose second derivatives are exact (``layernorm_pitfall``).
"""
from __future__ import annotations

import collections
import math
import shutil
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from ..exact.linalg import sym_spectral_norm
from ..hessian import hessian
from ..io import save_npz_atomic
from ..params import authors_indices, param_groups
from ..plotting import pooled_log_image
from ..precision import frozen_at_one
from ..train import run_key
from .context import Context
from .dynamics_blocks import TYPES, snapshot_record, trajectory_groups, trajectory_pairs
from .heatmaps import group_table
from .hessians import dense
from .settings import AUTHORS_RUN_SEEDS, TRAJECTORY, TrajectorySettings, Variant
from .spec import FigureSpec, Point

__all__ = ["AuthorsTrajectorySettings", "AUTHORS_NEEDS", "AUTHORS_SETTINGS", "AUTHORS_EXACT_SETTINGS", "LISTS", "PLOTTED",
           "SECTION_PASS", "compute_trajectory", "trajectory_runs", "finish_trajectory", "flat_weights", "list_hessian",
           "lists_of", "snapshot_steps", "TRAJECTORY_FIGURE", "SPECS"]


# ----------------------------------------------------------------------------- the settings
@dataclass(frozen=True)
class AuthorsTrajectorySettings(Variant):
    """The trajectory of the authors' model, as their notebooks/sa_ln_ff_changing.ipynb takes it (Figs. 5 and 7–11)."""

    model: str = "authors"
    # precision.ARITHMETICS: the run, "authors" (their bf16 training: weights and AdamW state in bf16, so every
    # LayerNorm γ stays exactly 1.0) or "exact" (float32); the Hessians are float32 of its weights either way
    arithmetic: str = "authors"
    steps: tuple = (0, 200, 400, 600, 800, 1000)  # their notebook: steps = [0, 200, 400, 600, 800, 1000]
    batch_size: int = 128  # their notebook: the first batch of their training loader, all of it
    eps: float = 1e-6  # their notebook clips |H| at 1e-6 before log10; here log10(|H| + 1e-6), as for Figs. 3-4
    display_cells: int = 600  # as HeatmapSettings: the FFN weights' 2,048 rows are shown as cell means
    fast_chunk: int | None = None  # as HeatmapSettings.fast_chunk
    # other runs of the recipe besides the recipe's seed (37): their initialisation is unseeded, so the claim's
    # verdict is a count over runs (each run: 1,000 steps and six Hessians, about a minute on a CPU)
    run_seeds: tuple = ()


# smoke: the authors' smoke run has 3 steps (config.RECIPES); 4 images as Figs. 3-4's smoke
AUTHORS_SETTINGS = {"paper": AuthorsTrajectorySettings(run_seeds=AUTHORS_RUN_SEEDS[1:]),
            "smoke": AuthorsTrajectorySettings(steps=(0, 1, 2, 3), batch_size=4, fast_chunk=128)}
AUTHORS_EXACT_SETTINGS = {p: replace(v, arithmetic="exact", run_seeds=()) for p, v in AUTHORS_SETTINGS.items()}  # one run

_B = "transformer_blocks.0."
# list -> (their parameter names, in their notebook's order; the label their Fig. 5 legend gives it)
LISTS = {
    "queries": ((_B + "self_attention.to_query.weight",), "Queries"),
    "keys": ((_B + "self_attention.to_key.weight",), "Keys"),
    "values": ((_B + "self_attention.to_value.weight",), "Values"),
    "layernorm": ((_B + "self_attention_norm.weight", _B + "self_attention_norm.bias",
                   _B + "feed_forward_norm.weight", _B + "feed_forward_norm.bias"), "LayerNorm"),
    # sic: their FeedForward section lists the second LayerNorm's parameters
    "feedforward": ((_B + "feed_forward_norm.weight", _B + "feed_forward_norm.bias"), "FeedForward"),
    # what the caption of Fig. 11 names: the feed-forward weights (their FFN has no biases)
    "ffn_weights": ((_B + "feed_forward.in_layer.weight", _B + "feed_forward.out_layer.weight"), "FFN weights W₁, W₂"),
}
PLOTTED = ("queries", "keys", "values", "layernorm", "feedforward")  # the five lines of their Fig. 5


# their notebook's sections, in order: section i calls next(iter(loader)) again and so gets pass i's first batch
SECTION_PASS = {g: i for i, g in enumerate(PLOTTED)}


def list_hessian(model, batch, flat: list[int], method_chunk=None) -> np.ndarray:
    """The exact Hessian of the mean cross-entropy on ``batch`` over the flat parameter indices ``flat`` (a list's
    principal sub-matrix), from the blocks of the parameter groups that hold them (``hessian.hessian(blocks=…)``):
    a fraction of the dense cost for the attention and LayerNorm lists."""
    groups = [g for g in param_groups(model) if any(g.start <= i < g.stop for i in flat)]
    pairs = [(a.name, b.name) for i, a in enumerate(groups) for b in groups[i:]]
    blocks = hessian(model, batch, blocks=pairs, chunk=method_chunk)
    n = sum(g.size for g in groups)
    off = {g.name: o for g, o in zip(groups, np.cumsum([0] + [g.size for g in groups]))}
    H = np.zeros((n, n))
    for (a, b), blk in blocks.items():
        B = blk.detach().cpu().double().numpy()
        H[off[a]:off[a] + B.shape[0], off[b]:off[b] + B.shape[1]] = B
        H[off[b]:off[b] + B.shape[1], off[a]:off[a] + B.shape[0]] = B.T
    local = [off[g.name] + i - g.start for i in flat for g in groups if g.start <= i < g.stop]
    return H[np.ix_(local, local)]


# ----------------------------------------------------------------------------- the computation
def compute_trajectory(job) -> tuple[dict, dict]:
    """The trajectory of the run of ``job.settings``, by its model's protocol: the theorem's block's groups on the
    fixed batch (:func:`_followed_blocks`), the authors' model by their notebook's parameter lists on their loader's
    batches (:func:`_their_lists`)."""
    s = job.settings
    if s.model == "authors":
        return _their_lists(job.ctx, s)
    return _followed_blocks(job.ctx, s, job.deps["fig3"], job.config_hash, job.store)


def _total_steps(ctx: Context, s: TrajectorySettings) -> int:
    """The optimiser steps of the whole run of ``s``'s variant."""
    return math.ceil(len(ctx.data(s).train) / ctx.recipe(s).batch_size) * ctx.recipe(s).epochs


def trajectory_runs(s, ctx: Context) -> list[tuple]:
    """The runs a trajectory reads: the theorem's block's whole run (which saves the snapshots) and each snapshot of
    :func:`snapshot_steps`; the authors' model at each of ``s.steps``, on the recipe's seed and each ``s.run_seeds``."""
    if s.model == "authors":
        return [(step, seed) for seed in (None, *s.run_seeds) for step in sorted(s.steps)]
    return [(None, None)] + [(step, None) for step in snapshot_steps(s, _total_steps(ctx, s))]


# ----------------------------------------------------------------------------- Table 1's runs: the followed blocks
def snapshot_steps(s: TrajectorySettings, total_steps: int) -> list[int]:
    n = min(s.n_steps, total_steps)
    return sorted({st for st in s.steps if st <= n} | {0, n} | {d for d in s.display_steps if d <= n})


def flat_weights(model) -> np.ndarray:
    """The parameters as one NumPy vector (a copy to the CPU for storage, whatever the model's device)."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).numpy()


def _followed_blocks(ctx: Context, s: TrajectorySettings, fig3, chash: str, store) -> tuple[dict, dict]:
    """The theorem's protocol (Table 1's runs): at each snapshot of :func:`snapshot_steps`, the followed blocks of
    :mod:`.dynamics_blocks` on the fixed batch (the first training images); step 0 is Fig. 3's Hessian."""
    cfg = ctx.recipe(s)
    steps = snapshot_steps(s, _total_steps(ctx, s))
    partial = store.partial_dir("trajectory", chash)
    partial.mkdir(parents=True, exist_ok=True)
    batch = ctx.first_images(s, s.batch_size)
    init = ctx.model(s, 0)[0]
    pairs = trajectory_pairs(init)
    ctx.log(f"trajectory: {len(steps)} snapshots over the first {steps[-1]} steps, {len(pairs)} Hessian blocks each")
    for step in tqdm(steps, desc="trajectory snapshots", unit="snap", disable=not ctx.progress):
        f = partial / f"step_{step:07d}.npz"
        if f.exists():
            with np.load(f, allow_pickle=False) as z:
                if "step" in z.files and int(z["step"]) == step:
                    continue
        m = ctx.model(s, step)[0]  # its saved snapshot, or the exact replay the runner trained
        if step == 0:  # Fig. 3's Hessian: the same model and batch
            rec = {k[4:]: fig3.arrays[k] for k in fig3.arrays if k.startswith("dyn_")}
            rec["seconds"] = 0.0
        else:
            t0 = time.perf_counter()
            with ctx.phase("hessian"):
                blocks = hessian(m, batch, blocks=pairs, chunk=s.fast_chunk or None)
            # computed on ctx's device; to the CPU only to store them (NumPy)
            blocks = {k: v.cpu().numpy().astype(np.float64) for k, v in blocks.items()}
            rec = snapshot_record(blocks, m, step in s.display_steps, s.eps, s.display_cells)
            rec["seconds"] = time.perf_counter() - t0
        with torch.no_grad():
            rec["loss"] = float(torch.nn.functional.cross_entropy(m(batch[0]), batch[1]))
        rec["w"] = flat_weights(m)
        rec["step"] = step
        save_npz_atomic(f, rec)
    recs = []
    for step in steps:
        with np.load(partial / f"step_{step:07d}.npz", allow_pickle=False) as z:
            recs.append({k: z[k] for k in z.files})
    shown = [st for st in steps if st in s.display_steps]
    arrays = dict(steps=np.array(steps), w=np.stack([r["w"] for r in recs]).astype(np.float32),
                  **{k: np.stack([r[k] for r in recs]) for k in ("diag_fro", "diag_spec", "pair_fro")},
                  loss=np.array([float(r["loss"]) for r in recs]),
                  hessian_seconds=np.array([float(r["seconds"]) for r in recs]))
    pools = {}
    for t, _ in TYPES.values():
        arrays.update({f"{k}_{t}": np.array([float(r[f"{k}_{t}"]) for r in recs]) for k in ("fro", "spec")})
        arrays[f"img_{t}"] = np.stack([r[f"img_{t}"] for r in recs if int(r["step"]) in shown])
        pools[t] = int(next(r[f"pool_{t}"] for r in recs if int(r["step"]) in shown))
    meta = dict(profile=ctx.profile, model=s.model_key, display_steps=shown, run_key=run_key(cfg),
                batch_size=s.batch_size, groups=trajectory_groups(init), pools=pools,
                hessian_method="curvature_gap.hessian.hessian, blocks (step 0: Fig. 3's dense Hessian)",
                **group_table(init))
    return arrays, meta


def finish_trajectory(ctx: Context, chash: str, store) -> None:
    """Remove the partial snapshots (and any replay run) once the trajectory result is saved."""
    shutil.rmtree(store.partial_dir("trajectory", chash), ignore_errors=True)
    for d in ctx.runs_dir.glob("*/replay"):
        shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------------------------- the authors' runs: their lists
def _their_lists(ctx: Context, s: AuthorsTrajectorySettings) -> tuple[dict, dict]:
    """At each step of ``s.steps`` (in order: a missing snapshot trains the run on to it): the exact Hessian of
    the authors' model over each list of :data:`LISTS` on that list's batch (:data:`SECTION_PASS`; the
    feed-forward weights take their FeedForward section's), its spectral and Frobenius norms, its image, and the
    list's parameter norm. At the last step also every list's spectral norm on each of the five batches (the
    spread their per-section batches bring), and for each extra run of ``s.run_seeds`` the norms per step."""
    passes = ctx.loader_batches(s, len(SECTION_PASS), s.batch_size)
    batch_of = {g: passes[SECTION_PASS.get(g, SECTION_PASS["feedforward"])] for g in LISTS}
    steps = sorted(s.steps)
    rec = collections.defaultdict(list)
    infos, idx = [], None
    for seed in (None, *s.run_seeds):  # the recipe's run, then the other runs of the recipe: the norms per step
        own, pre = seed is None, "" if seed is None else "runs_"
        for step in tqdm(steps, desc="authors' snapshots", unit="snap", disable=not (ctx.progress and own)):
            model, info = ctx.model(s, step, seed)
            if idx is None:
                idx = {g: authors_indices(model, names) for g, (names, _) in LISTS.items()}
            w = flat_weights(model).astype(np.float64)
            if own:
                rec["gamma_at_one"].append(frozen_at_one(model)[0])
                ctx.log(f"step {step}: exact Hessian of each list of the authors' model on its batch "
                        f"({s.batch_size} images)")
                with torch.no_grad():
                    rec["loss"].append(float(torch.nn.functional.cross_entropy(model(passes[0][0]), passes[0][1])))
                infos.append(dict(step=step, weights_sha256=info.get("weights_sha256")))
            t0 = time.perf_counter()
            for g, ix in idx.items():
                with ctx.phase("hessian"):
                    Hg = list_hessian(model, batch_of[g], ix, s.fast_chunk)
                rec[f"{pre}spec_{g}"].append(sym_spectral_norm(Hg))
                rec[f"{pre}param_{g}"].append(float(np.linalg.norm(w[ix])))
                if own:
                    img, pool = pooled_log_image(Hg, s.eps, s.display_cells)
                    for k, v in (("fro", float(np.linalg.norm(Hg))), ("img", img.astype(np.float16)), ("pool", pool)):
                        rec[f"{k}_{g}"].append(v)
            if own:
                rec["seconds"].append(time.perf_counter() - t0)
                last = model
    arrays = dict(steps=np.array(steps), loss=np.array(rec["loss"]), hessian_seconds=np.array(rec["seconds"]),
                  gamma_at_one=np.array(rec["gamma_at_one"]))
    for g in LISTS:
        for k in ("spec", "fro", "param"):
            arrays[f"{k}_{g}"] = np.array(rec[f"{k}_{g}"], dtype=np.float64)
        arrays[f"img_{g}"] = np.stack(rec[f"img_{g}"])
    # the spread across their five batches, at the last step: each list on every batch
    ctx.log(f"step {steps[-1]}: every list on each of the {len(passes)} batches")
    with ctx.phase("hessian"):
        Hs = [dense(last, b, s.fast_chunk)[0].cpu().numpy().astype(np.float64) for b in passes]
    for g, ix in idx.items():
        arrays[f"spread_{g}"] = np.array([sym_spectral_norm(H[np.ix_(ix, ix)]) for H in Hs])
    for g in LISTS if s.run_seeds else ():
        for k in ("spec", "param"):
            arrays[f"runs_{k}_{g}"] = np.array(rec[f"runs_{k}_{g}"]).reshape(len(s.run_seeds), len(steps))
    meta = dict(profile=ctx.profile, model=s.model_key, batch_size=s.batch_size, snapshots=infos, arithmetic=s.arithmetic,
                precision=ctx.recipe(s).precision,
                gamma_total=frozen_at_one(last)[1], run_seed=ctx.recipe(s).seed, run_seeds=list(s.run_seeds),
                section_pass={g: SECTION_PASS.get(g, SECTION_PASS["feedforward"]) for g in LISTS},
                lists={g: dict(parameters=list(names), label=label, n=len(idx[g]), pool=int(rec[f"pool_{g}"][0]))
                       for g, (names, label) in LISTS.items()},
                batch="per list, the first images of the first batch of pass i of the authors' shuffled, augmented "
                      "training loader, i the list's section in their notebook (Queries 0, Keys 1, Values 2, "
                      "LayerNorm 3, FeedForward and the feed-forward weights 4)",
                hessian_method="curvature_gap.hessian.hessian (exact), blocks of each list's parameter groups")
    return arrays, meta


def lists_of(res, lists) -> tuple[dict, dict]:
    """The arrays and meta of the authors' trajectory ``res`` for the parameter lists ``lists`` (Figs. 5, 7-11)."""
    a = res.arrays
    arrays = {"steps": a["steps"], "gamma_at_one": a["gamma_at_one"]}
    for g in lists:
        for k in ("spec", "fro", "param", "img", "spread", "runs_spec", "runs_param"):
            if f"{k}_{g}" in a:
                arrays[f"{k}_{g}"] = a[f"{k}_{g}"]
    return arrays, dict(res.meta, lists={g: res.meta["lists"][g] for g in lists})


# ----------------------------------------------------------------------------- the results of this module
AUTHORS_NEEDS = "MNIST; trains the authors' recipe to step 1,000 (about 20 s on a CPU)"  # for reports

TRAJECTORY_FIGURE = FigureSpec(
    "trajectory", "Figs. 5, 7-11", "", "snapshots of the first training steps",
    (Point(TRAJECTORY, depends=("fig3",)),
     Point(AUTHORS_SETTINGS, needs=AUTHORS_NEEDS), Point(AUTHORS_EXACT_SETTINGS, needs=AUTHORS_NEEDS)),
    compute_trajectory, runs=trajectory_runs, internal=True,
    finish=lambda j: finish_trajectory(j.ctx, j.config_hash, j.store) if j.settings.model == "table1" else None)
SPECS = (TRAJECTORY_FIGURE,)
