"""Fig. 5 (parameter-block and Hessian-block norms) and the trajectory of the first training steps behind
Figs. 5 and 7-11.

The trajectory follows the very training run the trained model comes from: the weights after each
snapshot step are saved while it trains (``train.train(snapshot_steps=...)``), so snapshot ``s`` is the
model after ``s`` optimiser steps; a run trained without them is replayed exactly instead. At each
snapshot the followed Hessian blocks of the fixed batch (the first training images) are computed
(:mod:`.dynamics_blocks`); step 0 is Fig. 3's Hessian. Norms are Frobenius unless marked spectral.
"""
from __future__ import annotations

from dataclasses import dataclass

import math
import shutil
import time

import matplotlib
import numpy as np
import torch
from tqdm.auto import tqdm

from ..hessian import hessian
from ..io import save_npz_atomic
from ..model import param_groups
from ..train import run_key
from .context import Context
from .dynamics_blocks import TYPES, snapshot_record, trajectory_groups, trajectory_pairs
from .heatmaps import group_table
from .hessians import units_of
from ..plotting import WIDTH, new_figure, short_label
from ..row import Row
from .. import captions
from .claims import claim_verdict, not_run
from .hessians import SETS, STATISTICS
from .settings import TRAJECTORY, TrajectorySettings
from .spec import FigureSpec, Finding

__all__ = ["snapshot_steps", "compute_trajectory", "compute_norms", "plot_parameters", "plot_hessians",
           "plot_parameters_over_training", "plot_hessians_over_training", "UNIT_ORDER", "NormsSettings", "keys_values", "MUCH_SMALLER", "SPECS"]


@dataclass(frozen=True)
class NormsSettings:
    """Fig. 5: parameter-block and Hessian-block norms at init and trained (the Hessians of Figs. 3 and 4)
    and over the first training steps (the trajectory)."""

    model: str = "mnist"


SETTINGS = {"paper": NormsSettings(), "smoke": NormsSettings()}


UNIT_ORDER = ("W_Q", "W_K", "W_V", "W_1", "W_2", "LN1", "LN2", "b_1", "b_2", "embed", "pos", "head")
_UNIT_LABEL = {"W_Q": "$W_Q$", "W_K": "$W_K$", "W_V": "$W_V$", "W_1": "$W_1$", "W_2": "$W_2$", "LN1": "LN1",
               "LN2": "LN2", "b_1": "$b_1$", "b_2": "$b_2$", "embed": "embed", "pos": "pos", "head": "head"}


def snapshot_steps(s: TrajectorySettings, total_steps: int) -> list[int]:
    n = min(s.n_steps, total_steps)
    return sorted({st for st in s.steps if st <= n} | {0, n} | {d for d in s.display_steps if d <= n})


def _flat(model) -> np.ndarray:
    """The parameters as one NumPy vector (a copy to the CPU for storage, whatever the model's device)."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).numpy()


def _model_at_step(ctx: Context, s: TrajectorySettings, step: int):
    """The training run's model after ``step`` steps (``Context.model``: its saved snapshot, else an exact replay)."""
    return ctx.model(s.model, step)[0]


def compute_trajectory(ctx: Context, s: TrajectorySettings, fig3, chash: str, store) -> tuple[dict, dict]:
    cfg = ctx.recipe(s.model)
    ds = ctx.data(s.model)
    steps = snapshot_steps(s, math.ceil(len(ds.train) / cfg.batch_size) * cfg.epochs)
    ctx.model(s.model)  # trains (saving the snapshots) if it has not been trained yet
    partial = store.partial_dir("trajectory", chash)
    partial.mkdir(parents=True, exist_ok=True)
    batch = ctx.first_images(s.model, s.batch_size)
    init = ctx.model(s.model, 0)[0]
    pairs = trajectory_pairs(init)
    ctx.log(f"trajectory: {len(steps)} snapshots over the first {steps[-1]} steps, {len(pairs)} Hessian blocks each")
    for step in tqdm(steps, desc="trajectory snapshots", unit="snap", disable=not ctx.progress):
        f = partial / f"step_{step:07d}.npz"
        if f.exists():
            with np.load(f, allow_pickle=False) as z:
                if "step" in z.files and int(z["step"]) == step:
                    continue
        m = _model_at_step(ctx, s, step)
        if step == 0:  # Fig. 3's Hessian: the same model and batch
            rec = {k[4:]: fig3.arrays[k] for k in fig3.arrays if k.startswith("dyn_")}
            rec["seconds"] = 0.0
        else:
            t0 = time.perf_counter()
            with ctx.phase("hessian"):
                blocks = (hessian(m, batch, blocks=pairs, chunk=s.fast_chunk) if s.fast_chunk
                          else hessian(m, batch, blocks=pairs))
            # computed on ctx's device; to the CPU only to store them (NumPy)
            blocks = {k: v.cpu().numpy().astype(np.float64) for k, v in blocks.items()}
            rec = snapshot_record(blocks, m, step in s.display_steps, s.eps, s.display_cells)
            rec["seconds"] = time.perf_counter() - t0
        with torch.no_grad():
            rec["loss"] = float(torch.nn.functional.cross_entropy(m(batch[0]), batch[1]))
        rec["w"] = _flat(m)
        rec["step"] = step
        save_npz_atomic(f, rec)
    recs = []
    for step in steps:
        with np.load(partial / f"step_{step:07d}.npz", allow_pickle=False) as z:
            recs.append({k: z[k] for k in z.files})
    arrays = dict(steps=np.array(steps), w=np.stack([r["w"] for r in recs]).astype(np.float32),
                  diag_fro=np.stack([r["diag_fro"] for r in recs]), diag_spec=np.stack([r["diag_spec"] for r in recs]),
                  pair_fro=np.stack([r["pair_fro"] for r in recs]), loss=np.array([float(r["loss"]) for r in recs]),
                  hessian_seconds=np.array([float(r["seconds"]) for r in recs]))
    shown = [st for st in steps if st in s.display_steps]
    pools = {}
    for t, _ in TYPES.values():
        arrays[f"fro_{t}"] = np.array([float(r[f"fro_{t}"]) for r in recs])
        arrays[f"spec_{t}"] = np.array([float(r[f"spec_{t}"]) for r in recs])
        arrays[f"img_{t}"] = np.stack([r[f"img_{t}"] for r in recs if int(r["step"]) in s.display_steps])
        pools[t] = int(next(r[f"pool_{t}"] for r in recs if int(r["step"]) in s.display_steps))
    meta = dict(profile=ctx.profile, model=s.model, display_steps=shown, run_key=run_key(cfg),
                batch_size=s.batch_size, groups=trajectory_groups(init), pools=pools,
                hessian_method="curvature_gap.hessian.hessian, blocks (step 0: Fig. 3's dense Hessian)",
                **group_table(init))
    return arrays, meta


def finish_trajectory(ctx: Context, chash: str, store) -> None:
    """Remove the partial snapshots (and any replay run) once the trajectory result is saved."""
    shutil.rmtree(store.partial_dir("trajectory", chash), ignore_errors=True)
    for d in ctx.runs_dir.glob("*/replay"):
        shutil.rmtree(d, ignore_errors=True)


def param_unit_norms(w: np.ndarray, units: dict) -> dict[str, dict[str, float]]:
    """``{unit: {"fro": ‖W_u‖_F, "rms": ‖W_u‖_F/√n_u}}`` of a flat parameter vector."""
    w = np.asarray(w, dtype=np.float64)
    return {u: {"fro": float(np.linalg.norm(w[idx])), "rms": float(np.linalg.norm(w[idx]) / math.sqrt(len(idx)))}
            for u, idx in units.items()}


# -------------------------------------------------------------------- Fig. 5
def compute_norms(ctx: Context, s: NormsSettings, deps: dict) -> tuple[dict, dict]:
    """Parameter-unit and Hessian-unit norms at init and trained (the Hessians of Figs. 3 and 4) and the
    followed block norms over the trajectory."""
    t = deps["trajectory"]
    init = ctx.model(s.model, 0)[0]
    trained, _ = ctx.model(s.model)
    units = units_of(init)
    meta = dict(profile=ctx.profile, model=s.model, batch_size=deps["fig3"].meta["batch_size"],
                units=[u for u in UNIT_ORDER if u in units], groups=t.meta["groups"],
                param_norms={"init": param_unit_norms(_flat(init), units), "trained": param_unit_norms(_flat(trained), units)},
                hessian_stats={"init": deps["fig3"].meta["unit_stats"], "trained": deps["fig4"].meta["unit_stats"]},
                checkpoint_trained=deps["fig4"].meta["checkpoint"], trajectory_steps=int(t.arrays["steps"][-1]),
                hessian_method="curvature_gap.hessian.hessian (exact); over training, the followed blocks only")
    gidx = {g.name: g for g in param_groups(init)}
    W = t.arrays["w"].astype(np.float64)
    arrays = dict(steps=t.arrays["steps"], diag_spec_steps=t.arrays["diag_spec"], diag_fro_steps=t.arrays["diag_fro"],
                  param_fro_steps=np.stack([np.linalg.norm(W[:, gidx[g].slice], axis=1) for g in t.meta["groups"]], 1))
    return arrays, meta


def _bars(ax, labels, a, b, ylabel):
    x = np.arange(len(labels))
    ax.bar(x - 0.2, a, 0.4, label="initialisation", color="tab:blue")
    ax.bar(x + 0.2, b, 0.4, label="trained", color="tab:orange")
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=45, ha="right")
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)


def _plot_unit_bars(result, key: str, statistic: str, ylabel: str, title: str):
    """Bars of ``meta[key][state][unit][statistic]`` per parameter unit, initialised beside trained."""
    meta = result.meta
    u = meta["units"]
    fig = new_figure(WIDTH, 4.2)
    ax = fig.subplots()
    _bars(ax, [_UNIT_LABEL[x] for x in u], [meta[key]["init"][x][statistic] for x in u],
          [meta[key]["trained"][x][statistic] for x in u], ylabel)
    ax.legend(ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # below the axis: never over a bar
    ax.set_title(title)
    return fig


def plot_parameters(result):
    """Frobenius norm of every parameter unit, initialised and trained."""
    return _plot_unit_bars(result, "param_norms", "fro", r"$\|W_u\|_F$", "Parameter norms")


def plot_hessians(result):
    """Spectral norm of the diagonal Hessian block of every parameter unit, initialised and trained."""
    return _plot_unit_bars(result, "hessian_stats", "spectral", r"$\|H_{uu}\|_2$", "Hessian-block norms (spectral)")


def _lines(ax, steps, Y, labels, ylabel):
    cmap = matplotlib.colormaps["tab10"]
    for i, lab in enumerate(labels):
        ax.plot(steps, Y[:, i], color=cmap(i % 10), lw=1.4, marker="o", ms=3, label=lab)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _plot_group_lines(result, key: str, ylabel: str, title: str):
    """One line per group of the block (and the head) of ``arrays[key]`` (steps, groups) over training."""
    a, meta = result.arrays, result.meta
    fig = new_figure(WIDTH, 4.4)
    ax = fig.subplots()
    _lines(ax, a["steps"], a[key], [short_label(g) for g in meta["groups"]], ylabel)
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title(f"{title}, first {meta['trajectory_steps']} steps")
    return fig


def plot_parameters_over_training(result):
    """Parameter norms of the transformer block's groups and the head over the first training steps."""
    return _plot_group_lines(result, "param_fro_steps", r"$\|W_g\|_F$", "Parameter norms")


def plot_hessians_over_training(result):
    """Spectral norms of the diagonal Hessian blocks over the first training steps."""
    return _plot_group_lines(result, "diag_spec_steps", r"$\|H_{gg}\|_2$", "Hessian-block norms (spectral)")


# ----------------------------------------------------------------------------- the claim
# Fig. 5's "the other blocks exhibit much smaller absolute entries" names no factor. "Much smaller" is read
# as at most half the smaller of W_K and W_V: the most lenient reading that still says more than "smaller"
# (a block within a factor 2 of W_K is of the same size, not much smaller). "The other blocks" are the other
# three weight matrices, the set the first clause ranks.
MUCH_SMALLER = 0.5
_PARAM_STATS = {"fro": "Frobenius norm", "rms": "RMS entry (Frobenius/√n)"}
_HESS_STATS = ("fro", "rms", "spectral", "fro_sqrt_n")
_PANEL = {"parameters": "parameter norms", "hessians": "Hessian-block norms"}
_FIG5_LABELS = {"fro": "Frobenius norm", "rms": "RMS entry", "spectral": "spectral norm", "fro_sqrt_n": "‖H‖_F/√n"}


def _reading(panel: str, reading: str) -> str:
    """``("hessians", "trained/rms")`` -> "trained Hessian blocks, RMS entry"."""
    state, st = reading.split("/")
    what = "parameters" if panel == "parameters" else "Hessian blocks"
    return f"{'initialised' if state == 'init' else 'trained'} {what}, {_FIG5_LABELS[st]}"


def keys_values(result) -> Row:
    """Fig. 5: W_K and W_V are the two largest weight matrices, and the other three much smaller (see module doc)."""
    what = ("'the highest magnitude corresponds to the Keys and Values, while the other blocks exhibit much smaller "
            f"absolute entries': W_K and W_V are the two largest of the weight matrices, and each of the other three "
            f"is at most {MUCH_SMALLER:g} × the smaller of them, in the parameter-norm panel and in the Hessian-norm "
            "panel")
    if result is None:
        return not_run("fig5.keys_values", "fig5", what, "fig5")
    m = result.meta
    weights = [u for u in SETS["weights"][1] if u in m["param_norms"]["init"]]
    others = [u for u in weights if u not in ("W_K", "W_V")]
    panels, values = {"parameters": {}, "hessians": {}}, {"parameters": {}, "hessians": {}}
    for state in ("init", "trained"):
        for key, panel, stats in (("param_norms", "parameters", _PARAM_STATS), ("hessian_stats", "hessians", _HESS_STATS)):
            for st in stats:
                v = {u: m[key][state][u][st] for u in weights}
                values[panel][f"{state}/{st}"] = v
                panels[panel][f"{state}/{st}"] = sorted(weights, key=lambda u: -v[u])
    top_two = {p: {k: set(order[:2]) == {"W_K", "W_V"} for k, order in per.items()} for p, per in panels.items()}
    # the largest of the other three as a fraction of the smaller of W_K and W_V ("much smaller": ≤ MUCH_SMALLER)
    ratio = {p: {k: max(v[u] for u in others) / min(v["W_K"], v["W_V"]) for k, v in per.items()}
             for p, per in values.items()}
    much_smaller = {p: {k: r <= MUCH_SMALLER for k, r in per.items()} for p, per in ratio.items()}
    holds = {p: {k: top_two[p][k] and much_smaller[p][k] for k in per} for p, per in panels.items()}
    frac = {p: sum(v.values()) / len(v) for p, v in holds.items()}
    best = max(frac, key=frac.get)
    everywhere = frac[best] == 1.0
    n = sum(len(v) for v in holds.values())
    n_top = sum(sum(v.values()) for v in top_two.values())
    n_small = sum(sum(v.values()) for v in much_smaller.values())
    n_both = sum(sum(v.values()) for v in holds.values())
    per_panel = ", ".join(f"{_PANEL[p]} {sum(v.values())}/{len(v)}" for p, v in top_two.items())
    note = (f"W_K and W_V are the two largest weight matrices in {n_top}/{n} readings, and the other three much "
            f"smaller (each ≤ {MUCH_SMALLER:g} × the smaller of W_K, W_V) in {n_small}/{n}")
    # where W_K and W_V lead but the third is not much smaller: how close the third comes to the second
    close = [(p, k) for p, per in top_two.items() for k, ok in per.items() if ok and not much_smaller[p][k]]
    if close:
        pairs = {(panels[p][k][2], panels[p][k][1]) for p, k in close}
        gap = max(1 - values[p][k][panels[p][k][2]] / values[p][k][panels[p][k][1]] for p, k in close)
        (third, second), = pairs if len(pairs) == 1 else ((None, None),)
        who = (f"{third} is within {100 * gap:.0f} % of {second}" if third else
               f"the third-largest is within {100 * gap:.0f} % of the second")
        cases = "; ".join(f"{_reading(p, k)} {values[p][k][panels[p][k][2]]:.3g} vs {values[p][k][panels[p][k][1]]:.3g}"
                          for p, k in close)
        note += f": where W_K and W_V lead, {who} ({cases})"
    # with MUCH_SMALLER < 1 the second clause implies the first, so a reading supports the sentence exactly
    # when the second clause holds
    if n_both == 0:
        note += (". The first clause (W_K and W_V on top) fails in every reading, and with it the second"
                 if n_top == 0 else ". The second clause ('much smaller') fails in every reading, so no reading "
                 "supports the sentence")
    else:
        note += (f". Both clauses hold in {n_both}/{n} readings, best in the {_PANEL[best]} panel"
                 + (" (every reading)" if everywhere else f" ({sum(holds[best].values())}/{len(holds[best])})"))
    low_p, low_k = min(((p, k) for p, per in ratio.items() for k in per), key=lambda pk: ratio[pk[0]][pk[1]])
    note += (f". — W_K and W_V on top: {per_panel}. The largest of the other three over the smaller of W_K, W_V is "
             f"at least {ratio[low_p][low_k]:.2f} ({_reading(low_p, low_k)}); 'much smaller' needs ≤ {MUCH_SMALLER:g}")
    return Row(id="fig5.keys_values", result="fig5", kind="claim", claim="reproduced", expected=None, what=what,
               verdict=claim_verdict([n_both > 0], everywhere), value=frac[best], tolerance=MUCH_SMALLER,
               profile=result.config["profile"], evidence=[str(result.json_path)], note=note,
               details={"orders": panels, "top_two": top_two, "others_over_smaller_of_KV": ratio,
                        "much_smaller": much_smaller, "holds": holds, "much_smaller_factor": MUCH_SMALLER,
                        "parameter_statistics": _PARAM_STATS,
                        "hessian_statistics": {k: STATISTICS[k][0] for k in _HESS_STATS}})


def key_numbers(r) -> dict:
    """The numbers a reader would cite, for the reproduction report (published beside recomputed)."""
    m = r.meta
    out = {}
    for u in ("W_Q", "W_K", "W_V", "W_1", "W_2"):
        out[f"‖{u}‖_F trained"] = m["param_norms"]["trained"][u]["fro"]
        out[f"‖H_{u}‖_2 trained"] = m["hessian_stats"]["trained"][u]["spectral"]
    return out


# ----------------------------------------------------------------------------- the results of this module
SPECS = (
    FigureSpec("fig5", "Fig. 5", "fig05_norms", "parameter and Hessian block norms", SETTINGS,
               lambda j: compute_norms(j.ctx, j.settings, j.deps),
               {"parameters": plot_parameters, "hessians": plot_hessians,
                "parameters_over_training": plot_parameters_over_training,
                "hessians_over_training": plot_hessians_over_training},
               messages={"parameters": captions.fig5_parameters, "hessians": captions.fig5_hessians,
                         "parameters_over_training": captions.fig5_parameters_over_training,
                         "hessians_over_training": captions.fig5_hessians_over_training},
               depends=("fig3", "fig4", "trajectory"), override_key="norms", key_numbers=key_numbers,
               rows=lambda res: [keys_values(res.get("fig5"))],
               finding=Finding("fig5", "Fig. 5: Keys and Values have the highest norms", "notebooks/fig05_block_norms")),
    FigureSpec("trajectory", "Figs. 5, 7-11", "", "snapshots of the first training steps", TRAJECTORY,
               lambda j: compute_trajectory(j.ctx, j.settings, j.deps["fig3"], j.config_hash, j.store),
               depends=("fig3",), finish=lambda j: finish_trajectory(j.ctx, j.config_hash, j.store), internal=True),
)
