"""``curvature-gap bounds``: run the sweeps, Theorem 7 and Assumption 1, write the tables.

Outputs under ``out`` (default ``results/bounds``):

* ``sweep_<name>.csv`` — one row per (swept value, seed, check, sub): bound, exact, ratio
  (columns :data:`~.sweeps.CSV_FIELDS`); ``sweep_training.csv`` for init vs trained MNIST;
* ``summary.json`` / ``summary.csv`` — one row per bound and intermediate lemma: verdict, min and
  median ratio, worst instance, fitted log-log slopes (exact and bound) per sweep;
* ``slopes.csv`` — the slopes, one row per (check, sweep);
* ``theorem7.json`` / ``theorem7.csv`` and ``assumption1.json`` / ``assumption1.csv``;
* ``counterexamples/<check>.json`` — the worst failing instance of every failing check, replayable
  with :func:`~.sweeps.replay`; ``--commit-counterexamples`` also writes the smallest failing
  instance of each into the package (``bounds/counterexamples/``) for the tests;
* ``timings.json``.
"""
from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Callable

import torch

from . import checks as ck
from . import sweeps as sw

__all__ = ["run_all", "verify_rows", "COMMITTED_DIR", "special_rows"]

COMMITTED_DIR = Path(__file__).parent / "counterexamples"


def _jsonable(o):
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if hasattr(o, "item") and getattr(o, "ndim", 1) == 0:
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return o


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(obj), indent=1))
    tmp.replace(path)


def special_rows(t7: dict | None, a1: dict | None) -> list[dict]:
    """Summary rows (same keys as :func:`.sweeps.summarize`) for Theorem 7 and Assumption 1."""
    rows = []
    base = dict(origin="paper", n_fail=0, sweeps=["theorem7"], slopes=[], worst={})
    if t7:
        res = max(p["identity_residual"] for p in t7["paths"])
        rows.append(dict(base, id="thm7.identity", ref="Theorem 7 proof / Kiselev & Grabovoy Eq. (difference)",
                         what="L_{k+1} − L_k = (l_{k+1} − L_k)/(k+1) in float64; value = max |residual| (≤ 1e-12 holds)",
                         expected="holds", verdict="holds" if res <= 1e-12 else "fails", min_ratio=res, median_ratio=res,
                         n_records=len(t7["paths"])))
        for name, label in (("exact", "M = max_i ‖∇²l_i(w*)‖ (exact, power iteration + Lanczos)"),
                            ("thm6", "M = max_i M_tr,i of Theorem 6 (explicit, Target = 0)")):
            rs = [p[f"min_ratio_{name}"] for p in t7["paths"]]
            worst = min(t7["paths"], key=lambda p: p[f"min_ratio_{name}"])
            mn = worst[f"min_ratio_{name}"]
            rows.append(dict(base, id=f"thm7.rhs.{name}", ref="Theorem 7 (§3.3)",
                             what=f"|L_{{k+1}}(w) − L_k(w)| ≤ 2ℓ_max/(k+1) + M t²/(k+1) along w = w* + t u, {label}; "
                                  "ratio = rhs/lhs, min over k, t, directions",
                             expected="holds", verdict="holds" if ck.holds(mn) else "fails", min_ratio=mn,
                             median_ratio=sorted(rs)[len(rs) // 2], n_records=len(rs),
                             n_fail=sum(1 for r in rs if not ck.holds(r)),
                             worst={"direction": worst["direction"], "t": worst["t"], "k": worst[f"argmin_k_{name}"]}))
    if a1:
        rows.append(dict(base, id="assumption1.zero", sweeps=["assumption1"], ref="Assumption 1 (§2)",
                         what="∇L_k(w*) = 0; value = min_k ‖∇L_k(w*)‖ / mean_i ‖∇l_i(w*)‖ (holds if ≤ 1e-6)",
                         expected="holds", verdict="holds" if a1["relative_gradient_min"] <= 1e-6 else "fails",
                         min_ratio=a1["relative_gradient_min"], median_ratio=a1["relative_gradient_min"],
                         n_records=len(a1["ks"])))
        rows.append(dict(base, id="assumption1.trend", sweeps=["assumption1"], ref="App. A.2 (Fig. 12)",
                         what="'validity increases with more samples': ‖∇L_k(w*)‖ decreases in k; value = log-log slope (k ≤ n/4)",
                         expected="holds", verdict="holds" if a1["claim_holds"] else "fails",
                         min_ratio=a1["slope"], median_ratio=a1["slope"], n_records=len(a1["ks"]),
                         slopes=[{"sweep": "k", "slope_exact": a1["slope"], "slope_bound": None}]))
    return rows


def _summary_csv_rows(summary: list[dict]) -> list[dict]:
    out = []
    for s in summary:
        sl = "; ".join(f"{d['sweep']}: {d['slope_exact']:.2f} vs {d['slope_bound']:.2f}" if d.get("slope_bound") is not None
                       else f"{d['sweep']}: {d['slope_exact']:.2f}" for d in s["slopes"] if d.get("slope_exact") is not None)
        w = s.get("worst") or {}
        out.append({"id": s["id"], "verdict": s["verdict"], "expected": s["expected"], "min_ratio": s["min_ratio"],
                    "min_ratio_sweeps": s.get("min_ratio_sweeps", s["min_ratio"]), "median_ratio": s["median_ratio"], "n_records": s["n_records"], "n_fail": s["n_fail"],
                    "worst": " ".join(f"{k}={v}" for k, v in w.items() if v not in (None, "")),
                    "slopes_exact_vs_bound": sl, "ref": s["ref"], "what": s["what"], "origin": s.get("origin", "paper")})
    return out


def verify_rows(summary: list[dict]) -> list[dict]:
    """Summary rows in the ``curvature-gap verify`` format
    ``{id, what, shapes, max_rel_err, verdict, expected, note, finding}`` (``max_rel_err`` holds the
    minimum ratio bound/exact — for ``thm7.identity`` the residual, for ``assumption1.*`` the value
    named in ``what``)."""
    rows = []
    for s in summary:
        w = s.get("worst") or {}
        shapes = ", ".join(f"{k}={w[k]}" for k in ("L", "d_V", "d_K", "d_ff") if w.get(k) not in (None, ""))
        sl = "; ".join(f"{d['sweep']} slope exact {d['slope_exact']:.2f} / bound {d['slope_bound']:.2f}"
                       for d in s["slopes"] if d.get("slope_exact") is not None and d.get("slope_bound") is not None)
        note = (f"{s['ref']}; min over natural sweeps {s.get('min_ratio_sweeps', s['min_ratio']):.4g}, median "
                f"{s['median_ratio']:.4g}; {s['n_fail']}/{s['n_records']} records fail; worst at "
                + ", ".join(f"{k}={v}" for k, v in w.items() if k in ("sweep", "x", "seed", "sub", "direction", "t", "k")
                            and v not in (None, "")) + (f"; {sl}" if sl else ""))
        is_ratio = not (s["id"].startswith("thm7.identity") or s["id"].startswith("assumption1"))
        rows.append({
            "id": f"bounds.{s['id']}",
            "what": s["what"] + (" [max_rel_err = min bound/exact over all instances; ≥ 1 means it holds]" if is_ratio else ""),
            "shapes": shapes or "see note", "max_rel_err": s["min_ratio"], "verdict": s["verdict"],
            "expected": s["expected"], "note": note, "finding": s["verdict"] != s["expected"],
        })
    return rows


def run_all(out: str | Path = "results/bounds", quick: bool = False, data_root=None, runs_root="runs",
            commit_counterexamples: bool = False, training: bool = True, theorem7: bool = True,
            log: Callable[[str], None] | None = print) -> dict:
    """Run everything (see module doc); returns ``{"summary", "verify_rows", "timings", ...}``."""
    out = Path(out)
    log = log or (lambda s: None)
    t_all = time.perf_counter()
    timings, rows, insts = {}, [], {}
    for s in sw.definitions(quick):
        t0 = time.perf_counter()
        log(f"sweep {s.name} ({len(s.values)} values x {len(s.seeds)} seeds)")
        r, i = sw.run_sweep(s, log=log)
        sw.write_csv(out / f"sweep_{s.name}.csv", r)
        rows += r
        insts.update(i)
        timings[f"sweep_{s.name}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log("adversarial search")
    from . import adversarial

    r, i = adversarial.run(quick, log=log)
    sw.write_csv(out / "sweep_adversarial.csv", r)
    rows += r
    insts.update(i)
    timings["adversarial"] = time.perf_counter() - t0
    t7 = a1 = None
    info = {}
    if training or theorem7:
        from ..data import DataUnavailable, load

        try:
            test = load("mnist", data_root, train=False)
            train_ds = load("mnist", data_root, train=True)
        except DataUnavailable as exc:
            log(f"MNIST unavailable ({exc}); skipping the training-time sweep, Theorem 7 and Assumption 1")
            test = train_ds = None
        if test is not None:
            from . import training as tr

            t0 = time.perf_counter()
            init, trained, info = tr.trained_model(runs_root, data_root, log=log)
            timings["load_or_train_model"] = time.perf_counter() - t0
            if training:
                t0 = time.perf_counter()
                log(f"sweep training (init vs trained; checkpoint {info.get('checkpoint')})")
                r, i = tr.training_sweep({"init": init, "trained": trained}, test.images,
                                         n_samples=1 if quick else 2, n_batch=8 if quick else 32,
                                         tensors=False, log=log)
                sw.write_csv(out / "sweep_training.csv", r)
                rows += r
                insts.update(i)
                timings["sweep_training"] = time.perf_counter() - t0
            if theorem7:
                from . import assumption1 as a1m
                from . import theorem7 as t7m

                n7 = 256 if quick else 2048
                t0 = time.perf_counter()
                log(f"theorem 7 (n={n7})")
                t7 = t7m.run(trained, train_ds, n=n7, hessian_n=32 if quick else 256, log=log,
                             iters=30 if quick else 40, refine=2 if quick else 4)
                t7["model"] = info
                _write_json(out / "theorem7.json", {k: v for k, v in t7.items() if k != "table"})
                sw.write_csv(out / "theorem7.csv", t7["table"],
                             fields=["direction", "t", "k", "lhs", "rhs_exact", "rhs_thm6"])
                timings["theorem7"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                n1 = 512 if quick else 4096
                log(f"assumption 1 (n={n1})")
                a1 = a1m.gradient_norms(trained, train_ds, n=n1, n_perm=3 if quick else 8)
                a1["model"] = info
                _write_json(out / "assumption1.json", a1)
                sw.write_csv(out / "assumption1.csv",
                             [{"k": k, "grad_norm_mean": m, "reference": r} for k, m, r in
                              zip(a1["ks"], a1["mean"], a1["reference"])], fields=["k", "grad_norm_mean", "reference"])
                timings["assumption1"] = time.perf_counter() - t0
    summary = sw.summarize(rows) + special_rows(t7, a1)
    worst, small = sw.pick_counterexamples(rows, insts)
    sw.save_counterexamples(worst, out / "counterexamples")
    if commit_counterexamples:
        sw.save_counterexamples(small, COMMITTED_DIR)
    slope_rows = [{"id": s["id"], **d} for s in summary for d in s["slopes"]]
    sw.write_csv(out / "slopes.csv", slope_rows,
                 fields=["id", "sweep", "n_x", "x_min", "x_max", "slope_exact", "slope_bound", "slope_exact_low",
                         "slope_bound_low", "slope_exact_high", "slope_bound_high"])
    vrows = verify_rows(summary)
    timings["total"] = time.perf_counter() - t_all
    _write_json(out / "summary.json", {"quick": quick, "model": info, "summary": summary, "verify_rows": vrows,
                                       "counterexamples": sorted(worst), "rtol": ck.RTOL,
                                       "torch": torch.__version__, "python": platform.python_version()})
    sw.write_csv(out / "summary.csv", _summary_csv_rows(summary),
                 fields=["id", "verdict", "expected", "min_ratio", "min_ratio_sweeps", "median_ratio", "n_records", "n_fail", "worst",
                         "slopes_exact_vs_bound", "ref", "what", "origin"])
    _write_json(out / "timings.json", {"quick": quick, "seconds": timings})
    return {"summary": summary, "verify_rows": vrows, "timings": timings, "counterexamples": worst,
            "committed": small, "theorem7": t7, "assumption1": a1}
