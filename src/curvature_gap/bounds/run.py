"""``curvature-gap bounds``: run the sweeps and the worst-case search, write the tables and counter-examples.

Outputs under ``out`` (default ``results/bounds``): ``sweep_<name>.csv`` (one row per swept value, seed, check and
sub: bound, exact, ratio; :data:`~.sweeps.CSV_FIELDS`), ``sweep_search.csv`` and ``search_starts.csv`` (every start of
every cell, its family and the smallest ratio its descent saw); ``summary.json`` / ``summary.csv`` (one row per bound:
verdict, min and median ratio, worst instance, log-log slopes per sweep); ``counterexamples/<check>.json`` (the worst
failing instance of every failing check and the named Theorem 1 counter-examples, ``thm1.printed@<sweep>``, each
replayable with :func:`~.sweeps.replay`); ``timings.json``.

``save_counterexamples=DIR`` also writes the smallest failing instance of each check and the named counter-examples
into ``DIR``: the committed set that the tests and ``curvature-gap verify`` replay is
``src/curvature_gap/bounds/counterexamples`` of a checkout (the installed package is never written).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..io import atomic_write_json
from ..provenance import software
from . import registry
from . import search
from . import sweeps

__all__ = ["run_all"]

_SUMMARY_FIELDS = ["id", "verdict", "expect", "claim", "min_ratio", "min_ratio_sweeps", "median_ratio", "n_records",
                   "n_fail", "worst", "ref", "what"]


def run_all(out="results/bounds", quick: bool = False, save_counterexamples=None,
            log: Callable[[str], None] | None = print, committed=sweeps.COMMITTED) -> dict:
    """Run the sweeps and the worst-case search, with the counter-examples of ``committed`` replayed among the records
    (see module doc); returns ``{"summary", "timings", ...}``."""
    out = Path(out)
    log = log or (lambda s: None)
    t_all = time.perf_counter()
    timings, rows, insts = {}, [], {}
    for s in sweeps.definitions(quick):
        t0 = time.perf_counter()
        log(f"sweep {s.name} ({len(s.values)} values x {len(s.seeds)} seeds)")
        r, i = sweeps.run_sweep(s, log=log)
        sweeps.write_csv(out / f"sweep_{s.name}.csv", r)
        rows += r
        insts.update(i)
        timings[f"sweep_{s.name}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    log("worst-case search")
    cells = search.search_all(search.objectives(), search.QUICK_BUDGET if quick else search.THOROUGH, log=log)
    r, i = search.records_of(cells)
    sweeps.write_csv(out / "sweep_search.csv", r)
    sweeps.write_csv(out / "search_starts.csv", [dict(check=c, L=cell.L, d=cell.d, h=cell.h, **st)
                                                 for c, cs in cells.items() for cell in cs for st in cell.starts],
                     fields=["check", "L", "d", "h", "family", "seed", "ratio", "kept"])
    rows += r
    insts.update(i)
    timings["search"] = time.perf_counter() - t0
    # the committed counter-examples count too: a failure found once stays found (the smallest instance is kept)
    r, i = sweeps.replayed(committed)
    rows += r
    insts.update(i)
    summary = sweeps.summarize(rows)
    worst, small = sweeps.pick_counterexamples(rows, insts)
    named = sweeps.named_counterexamples(rows, insts)
    sweeps.save_counterexamples({**worst, **named}, out / "counterexamples")
    if save_counterexamples:
        # the smallest failing instance of each check, and its worst one where that is another (a worst found only
        # by this run's thorough search, e.g. at L = 16, is then replayed by every verify: found once, kept)
        worse = {f"{c}.worst": w for c, w in worst.items() if c in small and w["ratio"] < small[c]["ratio"]}
        sweeps.save_counterexamples({**small, **worse, **named}, Path(save_counterexamples))
    timings["total"] = time.perf_counter() - t_all
    atomic_write_json(out / "summary.json", {"quick": quick, "summary": summary, "counterexamples": sorted(worst),
                                             "named_counterexamples": sorted(named), "rtol": registry.RTOL,
                                             "software": software()})
    sweeps.write_csv(out / "summary.csv", [dict(s, worst=" ".join(f"{k}={v}" for k, v in (s.get("worst") or {}).items()
                                                                  if v not in (None, "")))
                                       for s in summary], fields=_SUMMARY_FIELDS)
    atomic_write_json(out / "timings.json", {"quick": quick, "seconds": timings})
    return {"summary": summary, "timings": timings, "counterexamples": worst, "committed": small, "named": named}
