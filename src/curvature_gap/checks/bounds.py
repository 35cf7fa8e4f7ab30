"""Rows for every bound of the paper: the smallest ratio bound/exact over the instances evaluated.

Instances: the synthetic sweeps of :mod:`curvature_gap.bounds.sweeps` (``quick``: the ``mini`` set; else the ``quick``
set and the worst-case search of every bound, :func:`curvature_gap.bounds.search.search_all`), and always the replay of
every committed counter-example, which must recompute to its recorded ratio (1e-6) and still fail. With a
``trained_bounds`` result, the key bounds are also reported on block 0 of the MNIST ViT (``bounds.mnist.*``).
"""
from __future__ import annotations

from pathlib import Path

from ..bounds import registry
from ..bounds import search
from ..bounds import sweeps
from ..row import Declared, Row
from .battery import Inputs, Topic

__all__ = ["COUNTEREXAMPLES", "run", "TOPIC", "REPLAY", "replay_committed", "rows_from_summary", "trained_rows",
           "trained_checks", "REPLAY_RTOL"]

COUNTEREXAMPLES = sweeps.COMMITTED
REPLAY_RTOL = 1e-6
REPLAY = Declared("bounds.counterexamples.replay", "software", "software", role="reference", expected="holds")


def trained_checks() -> tuple[str, ...]:
    """The bounds also reported at the trained MNIST block (declared ``trained=True``)."""
    return tuple(c for c, b in registry.BOUNDS.items() if b.trained)


def replay_committed(directory: Path = COUNTEREXAMPLES) -> tuple[list[dict], Row]:
    """Replay every committed counter-example: (records tagged ``sweep = "replay"``, status row)."""
    recs, _ = sweeps.replayed(directory)
    bad = [f"{r['file']}: recorded {r['recorded']:.6g}, replayed {r['ratio']:.6g}" for r in recs
           if abs(r["ratio"] - r["recorded"]) / abs(r["recorded"]) > REPLAY_RTOL or not r["ratio"] < 1]
    n = len(recs)
    row = REPLAY.row(what="every committed counter-example recomputes to its recorded ratio (rel. 1e-6) and still fails",
                     verdict="holds" if not bad else "fails", value=float(n), tolerance=REPLAY_RTOL,
                     instances=f"{n} files in curvature_gap/bounds/counterexamples", note="; ".join(bad) or "all replayed")
    return recs, row


def rows_from_summary(summary: list[dict], replayed: list[dict], profile: str = "synthetic",
                      prefix: str = "bounds.", expected: bool = True) -> list[Row]:
    """One bound row per summary entry of :func:`curvature_gap.bounds.sweeps.summarize`."""
    out = []
    for s in summary:
        w = s.get("worst") or {}
        shapes = ", ".join(f"{k}={w[k]}" for k in ("L", "d_V", "d_K", "d_ff") if w.get(k) not in (None, ""))
        sl = "; ".join(f"{d['sweep']}: slope {d['slope_exact']:.2f} (bound {d['slope_bound']:.2f})"
                       for d in s["slopes"] if d.get("slope_exact") is not None and d.get("slope_bound") is not None)
        where = ", ".join(f"{k}={v}" for k, v in w.items() if k in ("sweep", "x", "seed", "sub") and v not in (None, ""))
        note = (f"{s['ref']}; {s['n_fail']}/{s['n_records']} instances fail; worst at {where}"
                + (f"; log-log slopes {sl}" if sl else ""))
        law = "; ".join(f"as {t['var']} {'grows' if t['var'] == 'L' else 'falls'}: {t['law']} on "
                        f"[{t['range'][0]:g}, {t['range'][1]:g}]" for t in s.get("scaling", []) if t["law"])
        if law:
            note += f"; bound/exact {law}"
        details = {"scaling": s["scaling"]} if s.get("scaling") else {}
        if s.get("n_searched"):
            details["searched"] = search.extent(space=search.objective(s["id"]).space.name)
        if w.get("sub") not in (None, ""):
            details["worst_sub"] = w["sub"]
        why = registry.BOUNDS[s["id"]].by_construction if s["id"] in registry.BOUNDS else None
        if why:
            details["by_construction"] = why
        for k in ("degenerate", "at_minimiser", "searched_by_L", "searched_by_width", "won_by"):
            if s.get(k):
                details[k] = s[k]
        if s.get("won_by"):
            wb = s["won_by"]
            note += f"; the search's minimum from the {wb['family']} start at L = {wb['L']}, d = {wb['d']}"
        if s.get("degenerate"):
            note += (f"; at the degenerate L = {', '.join(map(str, s['degenerate']['L']))} (A ≡ 1), reported apart: "
                     f"bound/exact {s['degenerate']['min_ratio']:.4g}")
        if s.get("at_minimiser"):
            note += f"; at an exact minimiser (loss 0): {s['at_minimiser']['min_ratio']:.4g}"
        out.append(Row(id=prefix + s["id"], result=s["result"], kind="bound", role=s["role"], what=s["what"],
                       verdict=s["verdict"], expected=s["expect"] if expected else None, claim=s["claim"],
                       min_ratio=s["min_ratio"], median_ratio=s["median_ratio"], tolerance=registry.RTOL,
                       errata=list(s["errata"]), profile=profile,
                       evidence=[f"curvature_gap/bounds/counterexamples/{r['file']}" for r in replayed
                                 if r["check"] == s["id"] and "file" in r],
                       instances=f"{s['n_records']} records; worst {shapes}" if shapes else f"{s['n_records']} records",
                       note=note, details=details))
    return out


def trained_rows(result) -> list[Row]:
    """``bounds.mnist.*`` rows from a ``trained_bounds`` result; ``not run`` rows (with the command) without."""
    trained = trained_checks()
    if result is None:
        return [Row(id=f"bounds.mnist.{c}", result=b.result, kind="bound", role=b.role,
                    what=b.what + " — at block 0 of the MNIST ViT", verdict="not run", claim=b.claim, profile="paper",
                    command="curvature-gap reproduce --only trained_bounds (needs MNIST; trains the model if needed)")
                for c, b in ((c, registry.BOUNDS[c]) for c in trained)]
    recs = [r for r in result.meta["records"] if r["check"] in trained]
    summary = sweeps.summarize(recs, trained)
    rows = rows_from_summary(summary, [], profile=result.config["profile"], prefix="bounds.mnist.", expected=False)
    for r in rows:
        r.what += " — at block 0 of the MNIST ViT, initialised and trained"
        r.evidence = [str(result.json_path)]
    return rows


def run(inputs: Inputs) -> list[Row]:
    """The bound rows (see module doc): of the synthetic sweeps and, unless ``quick``, the worst-case search of every
    bound; the trained model's from ``inputs.results["trained_bounds"]`` (or not run)."""
    quick, log = inputs.quick, inputs.log
    recs = [r for s in sweeps.definitions(quick=True, mini=quick) for r in sweeps.run_sweep(s, log=log)[0]]
    if not quick:
        recs += search.records_of(search.search_all(search.objectives(), log=log))[0]
    rep, status = replay_committed()
    summary = sweeps.summarize(recs + rep)
    return rows_from_summary(summary, rep) + trained_rows(inputs.results.get("trained_bounds")) + [status]


TOPIC = Topic("bounds", run, checks=lambda: (*registry.BOUNDS.values(), REPLAY), reads=lambda: ("trained_bounds",))
