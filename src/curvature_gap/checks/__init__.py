"""``curvature-gap verify``: every check of the package as one list of :class:`~.row.Row`, from one battery.

:data:`TOPICS` is the battery (:mod:`.battery`), in the order of the rows: the closed forms (:mod:`.theory`), the bounds
(:mod:`.bounds`), Theorem 7 on one attention layer (:mod:`.landscape`), the figures' claims (:mod:`.figures`) and
``nn.TransformerEncoderLayer`` (:mod:`.encoder_layer`). Rows that need a trained model are read from results (the cache,
else ``published/``), never computed here; without one they are ``not run`` and name the command that computes them.
"""
from __future__ import annotations

import hashlib
import json
import time
import warnings
from pathlib import Path

from ..findings import findings
from ..experiments import SPECS, Context, UnusableResult, config_hash_of, default_published_dir, find_result, spec
from ..io import atomic_write_json
from ..provenance import git_commit, software
from ..codehash import code_hash
from ..theory.errata import ERRATA
from . import bounds, encoder_layer, figures, landscape, theory
from .battery import Inputs, Topic
from ..row import Row, by_id, exit_status, format_table, summary_line

__all__ = ["Row", "TOPICS", "CHECKS", "Inputs", "Topic", "run", "main", "QUICK_NOTE", "quick_note", "DATA_RESULTS",
           "data_results", "rows_meta", "verify_code_hash", "published_rows", "write_rows", "run_cached"]

TOPICS: tuple[Topic, ...] = (theory.TOPIC, bounds.TOPIC, landscape.TOPIC, figures.TOPIC, encoder_layer.TOPIC)
# every declared check by id (the figures' claim rows are declared by the figures themselves)
CHECKS = by_id(*(c for t in TOPICS for c in t.checks()))


def data_results() -> tuple:
    """The results whose numbers rows are read from, as the topics declare it (``Topic.reads``; a figure's through
    ``ResultSpec.read_by_rows``), in book order."""
    read = {n for t in TOPICS for n in t.reads()}
    return tuple(n for n in SPECS if n in read)


DATA_RESULTS = data_results()


def rows_meta(quick: bool, results_dir="results", profile: str = "paper") -> dict:
    """What determines the rows: the code that computes them, ``quick``, and the config hash of each
    result they read (of ``profile``). Two verify runs with the same meta give the same rows (to rounding)."""
    ctx = Context(profile=profile, results_dir=results_dir, progress=False)  # a result not in it: its rows not run
    return {"code": verify_code_hash(), "quick": quick,
            "results": {n: config_hash_of(n, ctx=ctx) if profile in spec(n).profiles else None for n in data_results()}}


def verify_code_hash() -> str:
    """The hash of the code the rows are computed by (:mod:`curvature_gap.codehash`, from the row
    functions of each topic); the results they read enter :func:`rows_meta` by their config hashes."""
    return code_hash(*(t.run for t in TOPICS), *figures.row_functions(), _link_errata)


def _link_errata(rows: list[Row]) -> None:
    by_id = {r.id: r for r in rows}
    for e in ERRATA:
        for rid in [e["evidence"], *e.get("related", [])]:
            if rid in by_id and e["id"] not in by_id[rid].errata:
                by_id[rid].errata.append(e["id"])


def _found(results_dir, published_dir, profile: str) -> dict:
    """Each result the rows read: the cache's or the published one of ``profile``, else None."""
    ctx = Context(profile=profile, results_dir=results_dir, progress=False,
                  published_dir=published_dir if published_dir is not None else default_published_dir())
    return {n: find_result(n, ctx=ctx) if profile in spec(n).profiles else None for n in data_results()}


def run(quick: bool = False, results_dir="results", published_dir=None, log=None, profile: str = "paper",
        res: dict | None = None) -> list[Row]:
    """Every row (see module doc). ``quick``: fewer random instances and no adversarial search (same row ids);
    the trained model's rows read the results of ``profile`` (:data:`curvature_gap.config.PROFILES`), or
    ``res`` (name -> result or None, as :func:`run_cached` found them)."""
    res = res if res is not None else _found(results_dir, published_dir, profile)
    inputs = Inputs(quick=quick, results=res, log=log)
    rows = [row for t in TOPICS for row in t.run(inputs)]
    _link_errata(rows)
    return rows


def run_cached(quick: bool = True, results_dir="results", published_dir=None, profile: str = "paper") -> list[Row]:
    """:func:`run`, kept in ``<results_dir>/verify/`` under what determines the rows: :func:`rows_meta` (the
    code, ``quick``, each result's config hash) and which results were found, so a stale row is never returned
    (each notebook page outside the book build renders rows)."""
    res = _found(results_dir, published_dir, profile)
    meta = dict(rows_meta(quick, results_dir, profile), profile=profile,
                found=sorted(n for n, r in res.items() if r is not None))
    key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(results_dir) / "verify" / f"{'quick' if quick else 'full'}-{profile}-{key}.json"
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:  # a damaged cache file is recomputed, and said
            warnings.warn(f"{path} cannot be read ({exc}); the rows are computed again and the file rewritten")
        else:
            if doc.get("meta") == meta:
                return [Row.from_json(d) for d in doc["rows"]]
    rows = run(quick, results_dir, published_dir, profile=profile, res=res)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rows(path, rows, meta)
    return rows


def write_rows(path, rows: list[Row], meta: dict, seconds: float | None = None) -> None:
    """Write rows with what determined them (:func:`rows_meta`), where they were computed and, when given, how many
    seconds computing them took."""
    prov = dict(git=git_commit(ignore=("published",)), software=software(), created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **({"seconds": seconds} if seconds is not None else {}))
    atomic_write_json(path, {"meta": meta, "provenance": prov, "rows": [r.to_json() for r in rows]}, indent=1)


def published_rows(path) -> list[Row]:
    """The rows of a published ``verify.json`` if the current code computes the same rows from the current
    published results; else :class:`~curvature_gap.experiments.UnusableResult` saying what differs."""
    path = Path(path)
    if not path.is_file():
        raise UnusableResult(f"{path} is missing")
    doc = json.loads(path.read_text())
    want = rows_meta(False)
    diff = [k for k in want if doc.get("meta", {}).get(k) != want[k]]
    if diff:
        raise UnusableResult(f"{path} was computed by other code or from other results (differs in: {', '.join(diff)})")
    return [Row.from_json(d) for d in doc["rows"]]


QUICK_NOTE = ("--quick: fewer random instances and no worst-case search, so the smallest bound/exact each bound "
              "check finds is larger than the book's, and a failure only the search finds is missed. The book's numbers "
              "are the full run's (`curvature-gap verify`)")


def quick_note(published_dir=None) -> str:
    """:data:`QUICK_NOTE` with what the published full run says of itself (read from ``verify.json`` of the paper
    profile): how long it took and the smallest ratio of the repaired Theorem 1 it found; without it, the note alone."""
    root = Path(published_dir) if published_dir is not None else default_published_dir()
    if root is None or not (path := root / "paper" / "verify.json").is_file():
        return QUICK_NOTE + "."
    doc = json.loads(path.read_text())
    secs = doc.get("provenance", {}).get("seconds")
    rep = next((r for r in doc.get("rows", []) if r.get("id") == "bounds.thm1.repaired"), None)
    parts = ([f"it took {secs / 60:.1f} min when published"] if secs else []) + (
        [f"the repaired Theorem 1's smallest bound/exact found there is {rep['min_ratio']:.3g}"]
        if rep and rep.get("min_ratio") is not None else [])
    return QUICK_NOTE + (": " + "; ".join(parts) if parts else "") + "."


def main(json_path=None, quick: bool = False, results_dir="results", published_dir=None, profile: str = "paper",
         verdicts: bool = False) -> int:
    """Print the rows (``verdicts``: one verdict per result of the paper instead), optionally write them as JSON;
    exit status 1 when a row has a verdict the software does not expect (a regression), 0 otherwise (findings
    about the paper are results, not failures)."""
    rows = run(quick, results_dir, published_dir, profile=profile)
    if verdicts:
        for f in findings(rows):
            print(f"{f.title:58s} {f.verdict}\n{'':58s} {f.evidence}")
        if quick:
            print("\n" + quick_note(published_dir))
    else:
        print(f"{format_table(rows)}\n\n{summary_line(rows)}")
        if quick:
            print(quick_note(published_dir))
        not_run = [r for r in rows if not r.ran]
        if not_run:
            print(f"{len(not_run)} rows not run (they need results of the trained model); to compute them: "
                  + "; ".join(sorted({r.command for r in not_run if r.command})))
    if json_path:
        atomic_write_json(json_path, [r.to_json() for r in rows], indent=1)
    return exit_status(rows)
