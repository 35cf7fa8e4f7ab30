"""Fig. 5: parameter-block and Hessian-block norms, on either model, and the sentence it supports.

On the theorem's model (``fig5``): the norms of every parameter unit at initialisation and trained (the Hessians of
Figs. 3 and 4) and of the block's groups over the first training steps. On the authors' model (``fig5_authors``,
``fig5_authors_exact``): their figure, the parameter and Hessian norms of their five parameter lists against the step
(:mod:`.trajectory`). One claim rule reads both (:func:`keys_values`). Norms are Frobenius unless marked spectral.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib
import numpy as np

from .. import captions
from ..params import param_groups
from ..plotting import WIDTH, new_axes, short_label
from ..row import Row
from .claims import claim_row, not_run
from .context import Context
from .hessians import SETS, STATISTICS, units_of
from .settings import Variant
from .spec import FigureSpec, Finding, Point, claimed
from .trajectory import AUTHORS_EXACT_SETTINGS, AUTHORS_NEEDS, AUTHORS_SETTINGS, LISTS, PLOTTED, flat_weights, lists_of

__all__ = ["compute_norms", "plot_parameters", "plot_hessians", "plot_parameters_over_training",
           "plot_hessians_over_training", "plot_lists", "lists_message", "arithmetic_comparison", "UNIT_ORDER",
           "NormsSettings", "keys_values", "MUCH_SMALLER", "FIG5", "SPECS"]


@dataclass(frozen=True)
class NormsSettings(Variant):
    """Fig. 5 on the theorem's block: parameter-block and Hessian-block norms at init and trained (the Hessians of
    Figs. 3 and 4) and over the first training steps (the trajectory). On the authors' model Fig. 5 is cut from
    their trajectory, whose settings it takes (:class:`.trajectory.AuthorsTrajectorySettings`)."""


SETTINGS = {"paper": NormsSettings(), "smoke": NormsSettings()}


UNIT_ORDER = ("W_Q", "W_K", "W_V", "W_1", "W_2", "LN1", "LN2", "b_1", "b_2", "embed", "pos", "head")
_UNIT_LABEL = {u: f"${u}$" if u[:2] in ("W_", "b_") else u for u in UNIT_ORDER}


# -------------------------------------------------------------------- the theorem's model
def param_unit_norms(w: np.ndarray, units: dict) -> dict[str, dict[str, float]]:
    """``{unit: {"fro": ‖W_u‖_F, "rms": ‖W_u‖_F/√n_u}}`` of a flat parameter vector."""
    w = np.asarray(w, dtype=np.float64)
    return {u: {"fro": float(np.linalg.norm(w[idx])), "rms": float(np.linalg.norm(w[idx]) / math.sqrt(len(idx)))}
            for u, idx in units.items()}


def compute_norms(ctx: Context, s, deps: dict) -> tuple[dict, dict]:
    """Fig. 5 on ``s``'s model: on the theorem's block the parameter-unit and Hessian-unit norms at init and
    trained (the Hessians of Figs. 3 and 4) and the followed block norms over the trajectory; on the authors'
    model their figure's lists, from their trajectory (:func:`list_norms`)."""
    t = deps["trajectory"]
    if s.model == "authors":
        return list_norms(t)
    init = ctx.model(s, 0)[0]
    trained, _ = ctx.model(s)
    units = units_of(init)
    meta = dict(profile=ctx.profile, model=s.model_key, batch_size=deps["fig3"].meta["batch_size"],
                units=[u for u in UNIT_ORDER if u in units], groups=t.meta["groups"],
                param_norms={"init": param_unit_norms(flat_weights(init), units), "trained": param_unit_norms(flat_weights(trained), units)},
                hessian_stats={"init": deps["fig3"].meta["unit_stats"], "trained": deps["fig4"].meta["unit_stats"]},
                checkpoint_trained=deps["fig4"].meta["checkpoint"], trajectory_steps=int(t.arrays["steps"][-1]),
                hessian_method="curvature_gap.hessian.hessian (exact); over training, the followed blocks only")
    gidx = {g.name: g for g in param_groups(init)}
    W = t.arrays["w"].astype(np.float64)
    arrays = dict(steps=t.arrays["steps"], diag_spec_steps=t.arrays["diag_spec"], diag_fro_steps=t.arrays["diag_fro"],
                  param_fro_steps=np.stack([np.linalg.norm(W[:, gidx[g].slice], axis=1) for g in t.meta["groups"]], 1))
    return arrays, meta


def _plot_unit_bars(result, key: str, statistic: str, ylabel: str, title: str):
    """Bars of ``meta[key][state][unit][statistic]`` per parameter unit, initialised beside trained."""
    meta = result.meta
    u = meta["units"]
    fig, ax = new_axes(WIDTH, 4.2)
    x = np.arange(len(u))
    ax.bar(x - 0.2, [meta[key]["init"][v][statistic] for v in u], 0.4, label="initialisation", color="tab:blue")
    ax.bar(x + 0.2, [meta[key]["trained"][v][statistic] for v in u], 0.4, label="trained", color="tab:orange")
    ax.set_yscale("log")
    ax.set_xticks(x, [_UNIT_LABEL[v] for v in u], rotation=45, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))  # below the axis: never over a bar
    ax.set_title(title)
    return fig


def plot_parameters(result):
    """Frobenius norm of every parameter unit, initialised and trained."""
    return _plot_unit_bars(result, "param_norms", "fro", r"$\|W_u\|_F$", "Parameter norms")


def plot_hessians(result):
    """Spectral norm of the diagonal Hessian block of every parameter unit, initialised and trained."""
    return _plot_unit_bars(result, "hessian_stats", "spectral", r"$\|H_{uu}\|_2$", "Hessian-block norms (spectral)")


def _plot_group_lines(result, key: str, ylabel: str, title: str):
    """One line per group of the block (and the head) of ``arrays[key]`` (steps, groups) over training."""
    a, meta = result.arrays, result.meta
    fig, ax = new_axes(WIDTH, 4.4)
    cmap = matplotlib.colormaps["tab10"]
    for i, g in enumerate(meta["groups"]):
        ax.plot(a["steps"], a[key][:, i], color=cmap(i % 10), lw=1.4, marker="o", ms=3, label=short_label(g))
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title(f"{title}, first {meta['trajectory_steps']} steps")
    return fig


def plot_parameters_over_training(result):
    """Parameter norms of the transformer block's groups and the head over the first training steps."""
    return _plot_group_lines(result, "param_fro_steps", r"$\|W_g\|_F$", "Parameter norms")


def plot_hessians_over_training(result):
    """Spectral norms of the diagonal Hessian blocks over the first training steps."""
    return _plot_group_lines(result, "diag_spec_steps", r"$\|H_{gg}\|_2$", "Hessian-block norms (spectral)")


# -------------------------------------------------------------------- the authors' model (draw results; compute nothing)
def plot_lists(result):
    """Their Fig. 5: the lists' parameter norms (left) and Hessian spectral norms (right) against the step;
    their five lines solid, the feed-forward weights (not in their figure) dashed."""
    a, meta = result.arrays, result.meta
    fig, axs = new_axes(WIDTH, 4.4, 1, 2)
    for ax, key, title, ylabel in ((axs[0], "param", "Parameters' norm", r"$\|W\|_F$"),
                                   (axs[1], "spec", "Hessians' norm", r"$\|H\|_2$")):
        for g in (g for g in LISTS if g in meta["lists"]):  # their legend's order (a stored meta is key-sorted)
            extra = g not in PLOTTED
            ax.plot(a["steps"], a[f"{key}_{g}"], marker="o", ms=3, lw=1.2 if extra else 1.6, ls="--" if extra else "-",
                    color="0.45" if extra else None, label=meta["lists"][g]["label"] + (" (not in their figure)" if extra else ""))
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    fig.legend(*axs[0].get_legend_handles_labels(), loc="outside lower center", ncol=3)  # never over a curve
    return fig


def lists_message(result) -> str:
    """The caption's message of the authors' figure: the two highest Hessian norms at the last step."""
    a, meta = result.arrays, result.meta
    last = {g: float(a[f"spec_{g}"][-1]) for g in PLOTTED}
    top = sorted(last, key=lambda g: -last[g])
    lab = {g: meta["lists"][g]["label"] for g in meta["lists"]}
    return (f"At step {int(a['steps'][-1])} the largest Hessian spectral norms are {lab[top[0]]} and {lab[top[1]]}; "
            f"their 'FeedForward' line is the second LayerNorm's (the feed-forward weights: "
            f"{float(a['spec_ffn_weights'][-1]):.3g}).")


def arithmetic_comparison(authors, exact) -> dict:
    """What their bf16 arithmetic changes on Fig. 5, from the two results (``fig5_authors``: their bf16 run,
    ``fig5_authors_exact``: the float32 run of the same recipe, seed and batch): the LayerNorm γ entries still
    exactly 1.0 at each step, and each list's parameter and Hessian norms at the last step in both."""
    a, e = authors.arrays, exact.arrays
    last = int(a["steps"][-1])
    lists = {g: dict(label=authors.meta["lists"][g]["label"],
                     param=(float(a[f"param_{g}"][-1]), float(e[f"param_{g}"][-1])),
                     spec=(float(a[f"spec_{g}"][-1]), float(e[f"spec_{g}"][-1])),
                     param_start=float(a[f"param_{g}"][0]))
             for g in LISTS if g in authors.meta["lists"] and f"param_{g}" in e}  # their legend's order
    return dict(step=last, steps=[int(x) for x in a["steps"]], gamma_total=authors.meta["gamma_total"],
                gamma_at_one=([int(x) for x in a["gamma_at_one"]], [int(x) for x in e["gamma_at_one"]]), lists=lists)


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


def kv_reading(values: dict, keys: tuple) -> tuple[list, bool, float, bool]:
    """One reading of Fig. 5's sentence, ``values`` a line or bar per block (the five weight matrices, or the
    authors' five lists) and ``keys`` the Keys and Values among them: (the blocks ordered largest first, whether
    the two largest are ``keys``, the largest other over the smaller of ``keys``, whether the sentence holds: the
    two largest are ``keys`` and every other is at most :data:`MUCH_SMALLER` × the smaller of them)."""
    order = sorted(values, key=lambda u: -values[u])
    others = [u for u in values if u not in keys]
    ratio = max(values[u] for u in others) / min(values[k] for k in keys)
    top_two = set(order[:2]) == set(keys)
    return order, top_two, ratio, top_two and ratio <= MUCH_SMALLER


def kv_verdict(groups: dict) -> tuple[str, float, list]:
    """Fig. 5's verdict by one rule on either model, from ``groups``: (run, panel) -> {reading: whether the sentence
    holds in it} (:func:`_kv_units`, :func:`_kv_lists`). Reproduced when the sentence holds in every reading of every
    run; partly reproduced when it holds throughout at least one panel of one run (a panel of a figure that shows
    it); not reproduced otherwise, however many isolated readings support it. Returns (verdict, the fraction of
    readings in which it holds, the (run, panel) groups in which it holds throughout)."""
    n = sum(len(g) for g in groups.values())
    held = sum(sum(g.values()) for g in groups.values())
    whole = [k for k, g in groups.items() if all(g.values())]
    verdict = "reproduced" if held == n else "partly reproduced" if whole else "not reproduced"
    return verdict, held / n, whole


def _count_sentence(groups: dict, whole: list, runs: str) -> str:
    """The one rule's count in words: readings where the sentence holds over all, per run where there are several,
    and the panels it holds throughout."""
    n = sum(len(g) for g in groups.values())
    held = sum(sum(g.values()) for g in groups.values())
    seeds = list(dict.fromkeys(run for run, _ in groups))
    per_run = ("" if len(seeds) == 1 else "; " + ", ".join(
        f"seed {s}: {sum(sum(g.values()) for (r, _), g in groups.items() if r == s)}/"
        f"{sum(len(g) for (r, _), g in groups.items() if r == s)}" for s in seeds))
    panels = ("; throughout no panel of " + ("any run" if len(seeds) > 1 else "the figure") if not whole else
              "; throughout " + ", ".join(f"the {_PANEL[p]} panel" + (f" of seed {r}" if len(seeds) > 1 else "")
                                          for r, p in whole))
    return f"The sentence holds in {held}/{n} readings ({runs}{per_run}){panels}"


def _readings_table(groups: dict, orders: dict, ratios: dict, labels: dict) -> list[dict]:
    """Every reading of ``groups`` as a row for the page: run, panel, the reading in words, the blocks largest first,
    the largest other over the smaller of Keys and Values, whether the sentence holds."""
    return [dict(run=run, panel=_PANEL[panel], reading=labels[(panel, r)], order=orders[(run, panel)][r],
                 ratio=ratios[(run, panel)][r], holds=h) for (run, panel), g in groups.items() for r, h in g.items()]


def keys_values(result, spec) -> Row:
    """Fig. 5's sentence on the result of ``spec`` (a :class:`~.spec.ResultSpec`: on the theorem's model its weight
    matrices in each panel and statistic; on the authors' model their figure, their five lists at each step, on
    each run), by one rule (:func:`kv_reading` in each reading, :func:`kv_verdict` over all readings of all runs)."""
    name, model = spec.name, spec.settings["paper"].model
    what = ("'the highest magnitude corresponds to the Keys and Values, while the other blocks exhibit much "
            "smaller absolute entries': W_K and W_V are the two largest of the weight matrices, and each of the "
            f"other three is at most {MUCH_SMALLER:g} × the smaller of them, in every reading of the parameter-norm "
            "panel and of the Hessian-norm panel (one rule for both models: kv_verdict)" if model == "table1" else
            "'the highest magnitude corresponds to the Keys and Values, while the other blocks exhibit much smaller "
            "absolute entries', on Fig. 5 as the authors' code draws it (their model, their five parameter lists, "
            f"steps 0–1000): at each step and in each panel, every other line is at most {MUCH_SMALLER:g} × the "
            "lower of Keys and Values, on every run of their recipe (one rule for both models: kv_verdict)")
    if result is None:
        return not_run(f"{name}.keys_values", name, what, name)
    verdict, value, note, details = (_kv_units if model == "table1" else _kv_lists)(result)
    return claim_row(result, id=f"{name}.keys_values", result=name, what=what, verdict=verdict, value=value,
                     tolerance=MUCH_SMALLER, note=note, details=details)


def _kv_units(result) -> tuple:
    """The theorem's model: one run; each panel's readings are its statistics at initialisation and trained."""
    m = result.meta
    run = ((result.config.get("train") or {}).get(m.get("model")) or {}).get("seed")
    weights = [u for u in SETS["weights"][1] if u in m["param_norms"]["init"]]
    values = {panel: {f"{state}/{st}": {u: m[key][state][u][st] for u in weights}
                      for state in ("init", "trained") for st in stats}
              for key, panel, stats in (("param_norms", "parameters", _PARAM_STATS),
                                        ("hessian_stats", "hessians", _HESS_STATS))}
    read = {p: {k: kv_reading(v, ("W_K", "W_V")) for k, v in per.items()} for p, per in values.items()}
    panels, top_two, ratio, holds = ({p: {k: r[i] for k, r in per.items()} for p, per in read.items()}
                                     for i in range(4))
    much_smaller = {p: {k: r <= MUCH_SMALLER for k, r in per.items()} for p, per in ratio.items()}
    groups = {(run, panel): h for panel, h in holds.items()}
    verdict, value, whole = kv_verdict(groups)
    n = sum(len(v) for v in holds.values())
    n_top = sum(sum(v.values()) for v in top_two.values())
    n_small = sum(sum(v.values()) for v in much_smaller.values())
    per_panel = ", ".join(f"{_PANEL[p]} {sum(v.values())}/{len(v)}" for p, v in top_two.items())
    note = (_count_sentence(groups, whole, "both panels, each statistic at initialisation and trained")
            + f". W_K and W_V are the two largest weight matrices in {n_top}/{n} readings, and the other three much "
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
    if n_small == 0:
        note += (". The first clause (W_K and W_V on top) fails in every reading, and with it the second"
                 if n_top == 0 else ". The second clause ('much smaller') fails in every reading, so no reading "
                 "supports the sentence")
    low_p, low_k = min(((p, k) for p, per in ratio.items() for k in per), key=lambda pk: ratio[pk[0]][pk[1]])
    note += (f". — W_K and W_V on top: {per_panel}. The largest of the other three over the smaller of W_K, W_V is "
             f"at least {ratio[low_p][low_k]:.2f} ({_reading(low_p, low_k)}); 'much smaller' needs ≤ {MUCH_SMALLER:g}")
    labels = {(p, k): _reading(p, k) for p, per in holds.items() for k in per}
    return verdict, value, note, {"orders": panels, "top_two": top_two, "others_over_smaller_of_KV": ratio,
                                  "much_smaller": much_smaller, "holds": holds, "much_smaller_factor": MUCH_SMALLER,
                                  "parameter_statistics": _PARAM_STATS,
                                  "hessian_statistics": {k: STATISTICS[k][0] for k in _HESS_STATS},
                                  "readings": _readings_table(groups, {(run, p): v for p, v in panels.items()},
                                                              {(run, p): v for p, v in ratio.items()}, labels),
                                  "whole_panels": [list(k) for k in whole]}


def _list_readings(a, lists, run: int | None = None) -> dict:
    """The authors' figure: {"parameters/step N" | "hessians/step N": (order, top two, ratio, holds)} over the
    steps and both panels, of the lines ``lists`` of the figure's own run (``run`` None) or of the ``run``-th of its
    other runs (``runs_param_*``, ``runs_spec_*``)."""
    out = {}
    for key, panel in (("param", "parameters"), ("spec", "hessians")):
        line = {g: a[f"{key}_{g}"] if run is None else a[f"runs_{key}_{g}"][run] for g in lists}
        for i, st in enumerate(a["steps"]):
            out[f"{panel}/step {int(st)}"] = kv_reading({g: float(line[g][i]) for g in lists}, ("keys", "values"))
    return out


def _per_panel(readings: dict, pick) -> dict:
    """``{(seed, panel): {"step N": pick(order, top two, ratio, holds)}}`` of ``readings`` (seed ->
    :func:`_list_readings`)."""
    return {(seed, panel): {k.split("/", 1)[1]: pick(*v) for k, v in rs.items() if k.startswith(panel + "/")}
            for seed, rs in readings.items() for panel in ("parameters", "hessians")}


def _kv_lists(result) -> tuple:
    """The authors' model: their figure's readings (both panels at every step), on each run of their recipe."""
    a = result.arrays
    seeds = [result.meta.get("run_seed"), *(result.meta.get("run_seeds") or [])]
    readings = {seed: _list_readings(a, PLOTTED, None if i == 0 else i - 1) for i, seed in enumerate(seeds)}
    groups = _per_panel(readings, lambda o, t, r, h: h)
    verdict, value, whole = kv_verdict(groups)
    theirs = readings[seeds[0]]
    fixed = _list_readings(a, tuple(g for g in PLOTTED if g != "feedforward") + ("ffn_weights",))
    n = len(theirs)
    n_ok = sum(h for _, _, _, h in theirs.values())
    n_top = sum(t for _, t, _, _ in theirs.values())
    n_fixed = sum(h for _, _, _, h in fixed.values())
    low = min(theirs, key=lambda k: theirs[k][2])
    lab = {g: result.meta["lists"][g]["label"] for g in result.meta["lists"]}
    runs = (f"both panels at each of {len(a['steps'])} steps, " + (f"{len(seeds)} runs, seeds "
            f"{', '.join(map(str, seeds))}: their initialisation is unseeded" if len(seeds) > 1 else "one run"))
    note = (_count_sentence(groups, whole, runs) + f". The run of seed {seeds[0]}: Keys and Values are the two highest "
            f"lines in {n_top}/{n} readings, and the other three at most {MUCH_SMALLER:g} × the lower of them in "
            f"{n_ok}/{n}. The closest reading is {low}: the largest other line "
            f"({lab[next(g for g in theirs[low][0] if g not in ('keys', 'values'))]}) over the lower of Keys and "
            f"Values is {theirs[low][2]:.2f}. Their 'FeedForward' line is LN2's γ, β; with the feed-forward weights in "
            f"its place the sentence holds in {n_fixed}/{n} readings")
    spread = {g: a[f"spread_{g}"] for g in PLOTTED if f"spread_{g}" in a}
    if spread:
        worst = max(spread, key=lambda g: spread[g].max() / spread[g].min())
        note += (f". Their notebook gives each list its own batch (a fresh pass of the loader per section); at step "
                 f"{int(a['steps'][-1])} a list's Hessian norm varies across those five batches by up to "
                 f"{spread[worst].max() / spread[worst].min():.2f}× ({lab[worst]} {spread[worst].min():.3g}–"
                 f"{spread[worst].max():.3g})")
    per_run = [dict(seed=seed, holds=sum(sum(g.values()) for (r, _), g in groups.items() if r == seed),
                    of=sum(len(g) for (r, _), g in groups.items() if r == seed)) for seed in seeds]
    labels = {(p, k): k for (_, p), g in groups.items() for k in g}
    table = _readings_table(groups, _per_panel(readings, lambda o, t, r, h: [lab[g] for g in o]),
                            _per_panel(readings, lambda o, t, r, h: r), labels)
    for r, (panel, reading) in zip(table, [(p, k) for (_, p), g in groups.items() for k in g]):
        if r["run"] == seeds[0]:  # the figure's run: the sentence with the feed-forward weights for their FeedForward
            r["holds_with_ffn_weights"] = fixed[f"{panel}/{reading}"][3]
    return verdict, value, note, {"theirs": {k: dict(holds=h, ratio=r, order=o) for k, (o, _, r, h) in theirs.items()},
                                  "with_ffn_weights": {k: dict(holds=h, ratio=r, order=o)
                                                       for k, (o, _, r, h) in fixed.items()},
                                  "runs": per_run, "batch_spread": {g: v.tolist() for g, v in spread.items()},
                                  "much_smaller_factor": MUCH_SMALLER,
                                  "readings": table, "whole_panels": [list(k) for k in whole]}


def list_norms(trajectory) -> tuple[dict, dict]:
    """Fig. 5 on the authors' model: every list of their trajectory (:func:`~.trajectory.lists_of`) without the
    Hessian images, which Fig. 5 does not draw (Figs. 7–11 do, and store them): 4.3 MB less per published result."""
    arrays, meta = lists_of(trajectory, tuple(LISTS))
    return {k: v for k, v in arrays.items() if not k.startswith("img_")}, meta


def key_numbers(r) -> dict:
    m = r.meta
    out = {}
    for u in ("W_Q", "W_K", "W_V", "W_1", "W_2"):
        out[f"‖{u}‖_F trained"] = m["param_norms"]["trained"][u]["fro"]
        out[f"‖H_{u}‖_2 trained"] = m["hessian_stats"]["trained"][u]["spectral"]
    return out


def _lists_numbers(r) -> dict:
    a = r.arrays
    return {f"‖H‖_2 {g}, last step": float(a[f"spec_{g}"][-1]) for g in ("keys", "values", "feedforward", "ffn_weights")}


# ----------------------------------------------------------------------------- the results of this module
# the authors' model (their bf16 run, its float32 twin): their figure, cut from their trajectory
_LISTS_POINT = dict(needs=AUTHORS_NEEDS, depends=("trajectory",), plots={"norms": plot_lists},
                    messages={"norms": lists_message}, key_numbers=_lists_numbers)
FIG5 = FigureSpec(
    "fig5", "Fig. 5", "fig05_norms", "parameter and Hessian block norms",
    (Point(AUTHORS_SETTINGS, Finding("Fig. 5 on the authors' model: Keys and Values have the highest norms",
                                     "notebooks/fig05_block_norms"), **_LISTS_POINT),
     Point(AUTHORS_EXACT_SETTINGS, **_LISTS_POINT),
     Point(SETTINGS, Finding("Fig. 5: Keys and Values have the highest norms", "notebooks/fig05_block_norms"),
           depends=("fig3", "fig4", "trajectory"), override_key="norms")),
    lambda j: compute_norms(j.ctx, j.settings, j.deps),
    {"parameters": plot_parameters, "hessians": plot_hessians, "parameters_over_training": plot_parameters_over_training,
     "hessians_over_training": plot_hessians_over_training},
    {"parameters": captions.fig5_parameters, "hessians": captions.fig5_hessians,
     "parameters_over_training": captions.fig5_parameters_over_training,
     "hessians_over_training": captions.fig5_hessians_over_training},
    runs=lambda s, ctx: [(0, None), (None, None)] if s.model == "table1" else [], key_numbers=key_numbers,
    rows=lambda res: [keys_values(res.get(s.name), s) for s in claimed("fig5")])
SPECS = (FIG5,)
