"""Sweeps that expose the dependences the bounds predict, their tables, summary and counter-examples.

Synthetic sweeps (:func:`definitions`), all on seeded :func:`~curvature_gap.exact.instances.random_instance` draws with a
``N(0,1)`` target (named choice ``"random"``):

=============  ==========================================  ========================================
sweep          swept factor                                 shapes / parts
=============  ==========================================  ========================================
``sigma``      input scale σ, 10^-2 … 10^1 (log-spaced)     L=8, d_V=d_K=4, d_ff=16; all parts
``sharpness``  β (``T ← β T``; β = 0 is uniform attention)  as ``sigma``; SA and block
``balance``    a (``W_Q ← a W_Q, W_K ← W_K/a``; F unchanged)  as ``sigma``; SA and block
``minimiser``  a, with Target = F (loss 0: an exact global       as ``sigma``; SA
               minimiser, the w* of Theorem 1)
``uniform``    a, with W_Q W_Kᵀ = 0 (exactly uniform attention,  as ``sigma``; SA
               W_Q and W_K non-zero on disjoint columns)
``width``      d_V = d_K (d_ff = 4 d_V)                     L=8; block for d_V ≤ 8 (quick: ≤ 4)
``length``     L                                            d_V=4; block for L ≤ 32 (quick: ≤ 8)
``w2_scale``   s (``W_2 ← s W_2``), 1 … 10^-5                as ``sigma``; block (ξ₂₁ → 0 with ‖W₂‖)
``admissible`` a, with Target = F **and** W_Q W_Kᵀ = 0: every    as ``sigma``; SA
               assumption of Theorem 1 in force at once
``ln_rows``    rows m of a LayerNorm input                  n = 16 (MNIST width); Lemma 4 only
``ln_width``   columns n of a LayerNorm input               m = 4; Lemma 4 only
=============  ==========================================  ========================================

The training-time sweep (init vs trained MNIST model) lives in :mod:`.training`.

Slopes: for each check and sweep the per-instance values are aggregated over ``sub`` (max of the
exact values, max of the bounds), the median over seeds is taken at each swept value, and a
least-squares line is fitted to ``log value`` against ``log x`` (x > 0): ``slope_exact`` is the
measured growth exponent, ``slope_bound`` the exponent the bound predicts on the same range.  For
sweeps with ≥ 5 points the first and last three points give ``low``/``high`` end slopes as well.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from ..exact.forward import attention_matrix, sa_loss
from ..exact.instances import Instance, random_instance, refit
from ..io import atomic_write_json, atomic_write_text
from . import registry
from .bound import SYNTHETIC_PARTS

__all__ = ["Sweep", "definitions", "run_sweep", "summarize", "slopes", "pick_counterexamples",
           "write_csv", "counterexample_json", "replay", "CSV_FIELDS", "theorem1_sweeps",
           "named_theorem1", "THEOREM1_SETTINGS", "minimiser_instance", "instance"]

CSV_FIELDS = ["sweep", "x", "seed", "L", "d_V", "d_K", "d_ff", "sigma", "sharpness", "balance",
              "attn_max", "target", "check", "sub", "bound", "exact", "ratio", "family", "d", "h", "minimiser"]


@dataclass
class Sweep:
    """A named sweep: ``make(x, seed) -> Instance`` and ``parts(x)`` to evaluate there."""
    name: str
    var: str
    values: list
    seeds: tuple
    make: Callable[[object, int], Instance]
    parts: Callable[[object], tuple]
    ln_input: str = "block"


ALL = SYNTHETIC_PARTS
# the scales of W₂ swept: down to 10⁻⁵, where the local slopes of a bound that vanishes with ‖W₂‖ have settled (a law
# is read only there: :func:`law_of`)
W2_SCALES = [1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5]
BASE = dict(L=8, d_V=4, d_K=4, d_ff=16)


def minimiser_instance(base: dict, seed: int, balance: float) -> Instance:
    """Rebalanced instance at an exact global minimiser of the attention loss (Target = F, loss 0)."""
    return random_instance(**base, seed=seed, balance=balance, target="fit", target_output="attention")


def _draw(var: str, **fixed) -> Callable[[object, int], Instance]:
    """``make(x, seed)`` of a sweep: a seeded draw of :data:`BASE` with ``var = x`` and the options ``fixed``
    (``uniform="orthogonal"``: W_Q W_Kᵀ = 0, both non-zero, attention exactly uniform; ``target="fit"``: Target = F)."""
    return lambda x, s: random_instance(**BASE, seed=s, **{var: x}, **fixed)


def _w2_scaled(base: dict, seed: int, scale: float) -> Instance:
    """A random instance with ``W_2`` scaled by ``scale``: ∂B₁/∂W₂ does not depend on W₂, so ratios of
    bounds that carry ‖W₂‖ (ξ₂₁) fall with it."""
    inst = random_instance(**base, seed=seed)
    inst.W_2 = scale * inst.W_2
    inst.meta.update(w2_scale=float(scale))
    return inst


def definitions(quick: bool = False, mini: bool = False) -> list[Sweep]:
    """The synthetic sweeps (see module doc); ``quick`` uses fewer points and one seed, ``mini``
    (for ``curvature-gap verify --quick``) two or three points per sweep and small shapes only."""
    pick = lambda full, short, tiny: tiny if mini else short if quick else full  # noqa: E731
    seeds = (0,) if quick or mini else (0, 1, 2)
    bal = pick([1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0], [1.0, 64.0, 4096.0], [1.0, 4096.0])
    wmax_block, lmax_block = pick((8, 32), (4, 8), (0, 0))  # the block is evaluated up to this width, length
    sa = lambda x: ("sa",)  # noqa: E731
    out = [
        Sweep("sigma", "sigma", pick(list(np.logspace(-2, 1, 13)), list(np.logspace(-2, 1, 7)), [0.1, 1.0, 10.0]),
              seeds, _draw("sigma"), lambda x: ALL),
        Sweep("sharpness", "sharpness", pick([0.0, 0.25, 1.0, 4.0, 16.0, 64.0], [0.0, 1.0, 16.0], [0.0, 16.0]), seeds,
              _draw("sharpness"), lambda x: ("sa", "block")),
        Sweep("balance", "balance", bal, seeds, _draw("balance"), sa if mini else (lambda x: ("sa", "block"))),
        Sweep("minimiser", "balance", bal, seeds, lambda x, s: minimiser_instance(BASE, s, x), sa),
        Sweep("uniform", "balance", bal, seeds, _draw("balance", uniform="orthogonal"), sa),
        Sweep("admissible", "balance", bal, seeds, _draw("balance", uniform="orthogonal", target="fit",
                                                         target_output="attention"), sa),
        Sweep("w2_scale", "w2_scale", pick(W2_SCALES, W2_SCALES, [1.0, 1e-3]), seeds,
              lambda x, s: _w2_scaled(BASE, s, x), lambda x: ("block",)),
        Sweep("width", "d_V", pick([2, 4, 8, 16, 32], [4, 8, 16], [4, 16]), seeds,
              lambda x, s: random_instance(L=8, d_V=x, seed=s), lambda x: ALL if x <= wmax_block else ("sa",)),
        Sweep("length", "L", pick([2, 4, 8, 16, 32, 64], [2, 8, 32], [2, 32]), seeds,
              lambda x, s: random_instance(L=x, d_V=4, seed=s), lambda x: ALL if x <= lmax_block else ("sa",)),
        Sweep("ln_rows", "m", pick([1, 2, 3, 4, 8, 16, 49], [1, 2, 4, 16], [1, 16]), seeds,
              lambda x, s: random_instance(L=x, d_V=16, seed=s), lambda x: ("ln",), ln_input="X"),
        Sweep("ln_width", "n", pick([2, 4, 8, 16, 32], [4, 16], None), seeds,
              lambda x, s: random_instance(L=4, d_V=x, seed=s), lambda x: ("ln",), ln_input="X"),
    ]
    return out[:-1] if mini else out


def instance_row(sweep: str, x, seed: int, inst: Instance) -> dict:
    """The columns of a record that describe its instance (shape, how it was drawn, the mean largest attention)."""
    m = inst.meta
    return {"sweep": sweep, "x": x, "seed": seed, "L": inst.L, "d_V": inst.d_V, "d_K": inst.d_K, "d_ff": inst.d_ff,
            **{k: m.get(k, "") for k in ("sigma", "sharpness", "balance")},
            "attn_max": float(attention_matrix(inst.X, inst.W_Q, inst.W_K).max(dim=1).values.mean()),
            "target": m.get("target", "")}


def run_sweep(sw: Sweep, log: Callable[[str], None] | None = None) -> tuple[list[dict], dict]:
    """Evaluate every (value, seed) of ``sw``; returns (records, {inst_key: Instance})."""
    rows, insts = [], {}
    for x in sw.values:
        for seed in sw.seeds:
            t0 = time.perf_counter()
            inst = sw.make(x, seed)
            inst.meta.update(sweep=sw.name, x=x)
            key = f"{sw.name}|{x}|{seed}"
            insts[key] = inst
            base = instance_row(sw.name, x, seed, inst)
            parts = sw.parts(x)
            recs = registry.evaluate(inst, parts=parts, ln_input=sw.ln_input)
            rows += [{**base, **r, "parts": ",".join(parts), "tensors": True, "ln_input": sw.ln_input,
                      "inst_key": key} for r in recs]
            if log:
                log(f"  {sw.name} {sw.var}={x:.4g} seed={seed}: {len(recs)} records, {time.perf_counter() - t0:.1f}s")
    return rows, insts


def write_csv(path: Path, rows: Iterable[dict], fields=CSV_FIELDS) -> None:
    """Write ``rows`` (the columns ``fields``, floats with 17 significant digits) as CSV, atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.17g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


# ----------------------------------------------------------------------------- slopes / summary
def _fit(xs, ys) -> float | None:
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    a = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(a[0])


def slopes(rows: list[dict], check: str, sweep: str) -> dict | None:
    """Fitted log-log slopes of exact and bound against the swept value (see module doc)."""
    per = {}
    for r in rows:
        if r["check"] != check or r["sweep"] != sweep:
            continue
        try:
            x = float(r["x"])
        except (TypeError, ValueError):
            return None
        if x <= 0 or not math.isfinite(r["bound"]) or r["exact"] <= registry.ZERO or r["bound"] <= 0:
            continue
        e, b = per.setdefault((x, r["seed"]), [0.0, 0.0])
        per[(x, r["seed"])] = [max(e, r["exact"]), max(b, r["bound"])]
    byx = {}
    for (x, _), (e, b) in per.items():
        byx.setdefault(x, []).append((math.log(e), math.log(b)))
    xs = sorted(byx)
    if len(xs) < 2:
        return None
    e = [math.exp(statistics.median(v[0] for v in byx[x])) for x in xs]
    b = [math.exp(statistics.median(v[1] for v in byx[x])) for x in xs]
    out = {"sweep": sweep, "n_x": len(xs), "x_min": xs[0], "x_max": xs[-1],
           "slope_exact": _fit(xs, e), "slope_bound": _fit(xs, b)}
    if len(xs) >= 5:
        out.update(slope_exact_low=_fit(xs[:3], e[:3]), slope_bound_low=_fit(xs[:3], b[:3]),
                   slope_exact_high=_fit(xs[-3:], e[-3:]), slope_bound_high=_fit(xs[-3:], b[-3:]))
    return out


# how a ratio scales: the search's smallest ratio at each L (L ≥ 2), and the W₂ sweep; the direction each
# approaches its asymptote (L → ∞, ‖W₂‖ → 0), which decides which local slopes are "the last"
SCALING_VARS = {"L": ("L", +1), "w2_scale": ("‖W₂‖ scale s", -1)}
CONVERGED = 0.05  # a law is stated only where the last two local slopes agree to this (issue: "law" words)


def law_of(points: list[tuple[float, float]], var: str, toward: int) -> dict:
    """A power law read off ``points`` (x, smallest ratio), or why none is stated.

    The points are ordered toward the asymptote (``toward`` = +1: x → ∞, −1: x → 0) and the local log-log slopes
    between neighbours are taken. A law is stated only when the last two local slopes agree within
    :data:`CONVERGED`; it is then fitted over the tail of points whose local slopes all agree with the last within
    that tolerance (``range``), and said in words: ``"≈ c/L"`` (slope −1), ``"≈ c/L^2"`` (−2), ``"≈ c, flat in L"``
    (0), ``"∝ s"`` (+1 in s), else ``"≈ c·x^p"``. Returns ``{"points", "local_slopes", "converged", "slope",
    "range", "law"}`` (``law`` None when the slopes have not converged)."""
    pts = sorted(points, key=lambda p: p[0] * toward)
    loc = [math.log(y2 / y1) / math.log(x2 / x1) for (x1, y1), (x2, y2) in zip(pts, pts[1:])]
    out = {"points": [[x, y] for x, y in pts], "local_slopes": loc, "converged": False, "slope": None,
           "range": None, "law": None}
    if len(loc) < 2 or abs(loc[-1] - loc[-2]) > CONVERGED:
        return out
    a = len(loc) - 1
    while a > 0 and abs(loc[a - 1] - loc[-1]) <= CONVERGED:
        a -= 1
    tail = pts[a:]
    p = _fit([x for x, _ in tail], [y for _, y in tail])
    c = lambda k: math.exp(statistics.mean(math.log(y) + k * math.log(x) for x, y in tail))  # noqa: E731  y ≈ c/x^k
    lo, hi = sorted((tail[0][0], tail[-1][0]))
    name = "L" if var == "L" else "s"
    if abs(p + 1) <= CONVERGED and var == "L":
        law = f"≈ {c(1):.2g}/L"
    elif abs(p + 2) <= CONVERGED and var == "L":
        law = f"≈ {c(2):.2g}/L^2"
    elif abs(p) <= CONVERGED:
        law = f"≈ {c(0):.3g}, flat in {name}"
    elif abs(p - 1) <= CONVERGED and var != "L":
        law = "∝ s (→ 0 as ‖W₂‖ → 0)"
    else:
        law = f"≈ {c(-p):.2g}·{name}^{p:.2f}"
    out.update(converged=True, slope=p, range=[lo, hi], law=law)
    return out


def scaling(rs: list[dict]) -> list[dict]:
    """How one check's smallest ratio moves with L (the search, L ≥ 2, every width) and with the scale of W₂ (the
    ``w2_scale`` sweep): ``[{"var", **law_of(…)}]`` for each with at least three points."""
    out = []
    for var, (label, toward) in SCALING_VARS.items():
        per = _by([r for r in rs if (r["sweep"] == "search" and int(r["L"]) >= 2 if var == "L" else r["sweep"] == var)
                   and math.isfinite(r["ratio"]) and r["ratio"] > 0], lambda r: float(r["L" if var == "L" else "x"]))
        if len(per) >= 3:
            out.append({"var": label, **law_of(list(per.items()), var, toward)})
    return out


def summarize(rows: list[dict], checks: Iterable[str] | None = None) -> list[dict]:
    """One row per check: verdict, min ratio over everything (sweeps, training, the worst-case search,
    :mod:`.search`), min and median over the natural sweeps (all but the search), the worst instance (and, when
    the search found it, the family, L, width, heads and seed of the start that won), slopes per sweep, how the
    smallest ratio scales (:func:`scaling`), and what is reported apart: the degenerate L = 1 (A ≡ 1) and the
    exact minimisers (Target = F), each by L."""
    by = {}
    for r in rows:
        by.setdefault(r["check"], []).append(r)
    out = []
    for cid in (checks or registry.CHECKS):
        rs = by.get(cid, [])
        if not rs:
            continue
        degenerate = [r for r in rs if r.get("degenerate") is True]
        rs = [r for r in rs if r.get("degenerate") is not True] or rs
        natural = [r for r in rs if r["sweep"] != "search"]
        searched = [r for r in rs if r["sweep"] == "search"]
        finite = [r["ratio"] for r in natural if math.isfinite(r["ratio"])]
        worst = min(rs, key=lambda r: r["ratio"])
        mn = worst["ratio"]
        apart = {}
        if degenerate:
            apart["degenerate"] = {"min_ratio": min(r["ratio"] for r in degenerate),
                                   "L": sorted({int(r["L"]) for r in degenerate})}
        at_min = [r for r in searched if r.get("minimiser") is True]
        if at_min:
            apart["at_minimiser"] = {"min_ratio": min(r["ratio"] for r in at_min), "by_L": _by(at_min)}
        if searched:
            apart["searched_by_L"] = _by(searched)
            widths = sorted({int(r["d"]) for r in searched})
            if len(widths) > 1:
                apart["searched_by_width"] = {d: _by([r for r in searched if int(r["d"]) == d]) for d in widths}
            won = min(searched, key=lambda r: r["ratio"])
            apart["won_by"] = {k: won[k] for k in ("family", "L", "d", "h", "seed", "ratio")}
        meta = registry.CHECKS.get(cid, {})
        sweeps = sorted({r["sweep"] for r in rs})
        sl = [s for s in (slopes(rs, cid, sw) for sw in sweeps if sw != "search") if s]
        out.append({
            "id": cid, "ref": meta.get("ref", ""), "what": meta.get("what", ""),
            **{k: meta.get(k) for k in ("result", "role", "claim", "expect")},
            "errata": meta.get("errata", []), "verdict": "holds" if registry.holds(mn) else "fails",
            "min_ratio": mn, "min_ratio_sweeps": min((r["ratio"] for r in natural), default=math.inf),
            "median_ratio": statistics.median(finite) if finite else math.inf,
            "n_records": len(rs), "n_fail": sum(1 for r in rs if not registry.holds(r["ratio"])),
            "n_searched": len(searched),
            "worst": {k: worst.get(k) for k in ("sweep", "x", "seed", "sub", "bound", "exact", "L", "d_V", "d_K", "d_ff")},
            "sweeps": sweeps, "slopes": sl, "scaling": scaling(rs), **apart,
        })
    return out


def _by(rs: list[dict], key: Callable[[dict], float] = lambda r: int(r["L"])) -> dict:
    """The smallest ratio of ``rs`` for each value of ``key(r)`` (default: L), in order."""
    out: dict = {}
    for r in rs:
        k = key(r)
        out[k] = min(out.get(k, math.inf), r["ratio"])
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------- counter-examples
def counterexample_json(rec: dict, inst: Instance) -> dict:
    """A replayable counter-example: the record, what it checks, and the full instance."""
    b, tied = registry.BOUNDS[rec["check"]], _tied(inst)
    return {
        "check": rec["check"], "sub": rec["sub"], "ref": b.ref, "what": b.what,
        "bound": rec["bound"], "exact": rec["exact"], "ratio": rec["ratio"],
        "sweep": rec.get("sweep"), "x": rec.get("x"), "seed": rec.get("seed"),
        "part": b.part, "tensors": b.tensors,
        "ln_input": rec.get("ln_input", "block"), "shape": list(inst.shape), "instance": inst.to_json(),
        **({"tied": tied} if tied else {}), **(_sa_regime(inst) if b.part == "sa" else {}),
    }


def _tied(inst: Instance) -> str | None:
    """The output ("attention" or "block") that ``inst``'s Target equals bit for bit (an exact minimiser), if any."""
    return next((o for o in ("attention", "block") if torch.equal(inst.Target, refit(inst, o).Target)), None)


def instance(ce: dict) -> Instance:
    """The instance of a saved counter-example, an exact minimiser again where it was one (``tied``: Target
    recomputed as the output it fits, so that a replay on another CPU has loss 0 and rank(F − Target) = 0 too)."""
    inst = Instance.from_json(ce["instance"])
    return refit(inst, ce["tied"]) if ce.get("tied") else inst


def _sa_regime(inst: Instance) -> dict:
    """What a self-attention counter-example's file shows of the assumptions: its loss (0 at an exact
    minimiser) and how far its attention is from uniform (max |A_ij − 1/L|)."""
    A = attention_matrix(inst.X, inst.W_Q, inst.W_K)
    return {"loss": float(sa_loss(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)),
            "attention_uniform_dev": float((A - 1.0 / inst.L).abs().max())}


NAMED = {"minimiser": "at an exact global minimiser (Target = F, loss 0: the w* of the statement), with a "
                      "non-uniform attention",
         "uniform": "under exactly uniform attention (W_Q W_Kᵀ = 0 with W_Q, W_K non-zero), with a random Target "
                    "(not a minimiser)",
         "admissible": "at an exact minimiser (Target = F, loss 0) with exactly uniform attention (W_Q W_Kᵀ = 0): "
                       "every assumption in force for Theorem 1 and its proof"}


def named_counterexamples(rows: list[dict], instances: dict, check: str = "thm1.printed") -> dict:
    """The worst failing instance of ``check`` in each of the sweeps of :data:`NAMED`, keyed
    ``"<check>@<sweep>"``: the counter-examples that rule out two readings under which Theorem 1 might
    still hold (it is stated at w*; its proof assumes uniform attention)."""
    out = {}
    for sweep, why in NAMED.items():
        bad = [r for r in rows if r["check"] == check and r["sweep"] == sweep and not registry.holds(r["ratio"])
               and r.get("inst_key") in instances]
        if bad:
            worst = min(bad, key=lambda r: r["ratio"])
            out[f"{check}@{sweep}"] = {**counterexample_json(worst, instances[worst["inst_key"]]), "why": why}
    return out


def pick_counterexamples(rows: list[dict], instances: dict) -> tuple[dict, dict]:
    """For every failing check: the worst record overall, and the smallest instance that fails
    (fewest stored numbers, then lowest ratio) for the committed copy.  ``instances`` maps each
    record's ``inst_key`` to its :class:`Instance`."""
    bad = [r for r in rows if not registry.holds(r["ratio"]) and r.get("inst_key") in instances]
    small = {}
    for r in bad:
        c, size = r["check"], instances[r["inst_key"]].n_values()
        if c not in small or (size, r["ratio"]) < (small[c][1], small[c][0]["ratio"]):
            small[c] = (r, size)
    return ({c: counterexample_json(r, instances[r["inst_key"]]) for c, r in _worst(bad).items()},
            {c: counterexample_json(r, instances[r["inst_key"]]) for c, (r, _) in small.items()})


def _worst(rs: list[dict]) -> dict:
    """The record of smallest ratio of each check of ``rs`` (the first of equals), in order of appearance."""
    out: dict = {}
    for r in rs:
        if r["check"] not in out or r["ratio"] < out[r["check"]]["ratio"]:
            out[r["check"]] = r
    return out


def replay(ce: dict) -> dict:
    """Recompute a saved counter-example: ``{"bound", "exact", "ratio"}`` of its check and sub."""
    inst = instance(ce)
    recs = registry.evaluate(inst, parts=(ce["part"],), tensors=ce["tensors"], ln_input=ce.get("ln_input", "block"))
    for r in recs:
        if r["check"] == ce["check"] and r["sub"] == ce["sub"]:
            return r
    raise KeyError(f"{ce['check']} [{ce['sub']}] not produced on replay")


COMMITTED = Path(__file__).resolve().parent / "counterexamples"  # the committed set (of a checkout, or installed)


def replayed(directory: Path = COMMITTED) -> tuple[list[dict], dict]:
    """Every counter-example in ``directory`` recomputed: records tagged ``sweep = "replay"`` (with its file's
    ``recorded`` ratio) and their instances, keyed by ``inst_key``."""
    recs, insts = [], {}
    for p in sorted(Path(directory).glob("*.json")):
        ce = json.loads(p.read_text())
        r = replay(ce)
        L, d_V, d_K, d_ff = ce["instance"]["shape"]
        key = f"replay|{p.stem}"
        recs.append({**r, "sweep": "replay", "x": p.stem, "seed": ce.get("seed"), "L": L, "d_V": d_V, "d_K": d_K,
                     "d_ff": d_ff, "file": p.name, "recorded": ce["ratio"], "inst_key": key,
                     "parts": ce["part"], "tensors": ce["tensors"], "ln_input": ce.get("ln_input", "block")})
        insts[key] = instance(ce)
    return recs, insts


def save_counterexamples(ces: dict, directory: Path, replace: bool = True) -> list[Path]:
    """Write one JSON file per key of ``ces`` into ``directory``; ``replace`` removes the old ``*.json``
    there first (a new set), else files of other keys are kept (adding to a set)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for p in directory.glob("*.json") if replace else ():
        p.unlink()
    paths = []
    for c, ce in sorted(ces.items()):
        p = directory / f"{c}.json"
        atomic_write_json(p, ce, indent=1)
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------- Theorem 1, printed vs repaired
THEOREM1_SETTINGS = {"balance": "random target", "minimiser": "at a minimiser (Target = F)",
                     "uniform": "uniform attention"}


def theorem1_sweeps(names: Iterable[str] = tuple(THEOREM1_SETTINGS), seed: int = 0) -> list[dict]:
    """Records of the self-attention checks (Theorem 1 printed, proof, repaired and the proof's lemmas)
    over the full-length synthetic sweeps ``names`` (:func:`definitions`), one ``seed``, the "sa" part
    only: a few seconds. By default the three sweeps of the Q/K balance ``a`` (``W_Q ← a W_Q``,
    ``W_K ← W_K/a``, attention and output unchanged): random target, exact minimiser, uniform attention."""
    wanted = list(names)
    return [r for s in definitions() if s.name in wanted
            for r in run_sweep(dataclasses.replace(s, seeds=(int(seed),), parts=lambda x: ("sa",)))[0]]


def named_theorem1(directory: Path, check: str = "thm1.printed") -> list[dict]:
    """The named counter-examples ``<check>@<sweep>.json`` of :func:`named_counterexamples` in ``directory``,
    re-evaluated: for each, ``{"name", "why", "shape", "loss", "attn_dev", "printed", "repaired", "worst_block",
    "printed_rows_max", "worst_block_norm"}`` — the loss ``l = ‖F − Target‖_F²/(L d_V)``, ``max |A − 1/L|``,
    bound/exact of Theorem 1 printed and repaired, and the largest of the nine blocks ``‖H(W_i, W_j)‖_2`` against
    the largest printed row (``max(VV, QQ, VQ, QK)``)."""
    out = []
    for p in sorted(Path(directory).glob(f"{check}@*.json")):
        ce = json.loads(p.read_text())
        inst = instance(ce)
        recs = _worst(registry.evaluate(inst, parts=("sa",)))  # maxblock: its worst block
        mb, regime = recs["thm1.printed.maxblock"], _sa_regime(inst)
        out.append({"name": p.stem, "why": ce.get("why", ""), "shape": tuple(inst.shape), "loss": regime["loss"],
                    "attn_dev": regime["attention_uniform_dev"],
                    "printed": recs["thm1.printed"]["ratio"], "repaired": recs["thm1.repaired"]["ratio"],
                    "worst_block": mb["sub"], "worst_block_norm": mb["exact"], "printed_rows_max": mb["bound"]})
    return out
