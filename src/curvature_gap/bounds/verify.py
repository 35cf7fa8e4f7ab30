"""Rows for ``curvature-gap verify``: the bounds, each with verdict ``holds`` or ``fails``.

``run_checks(quick)`` returns one dict per bound and intermediate lemma with the keys of the
closed-form rows (:mod:`curvature_gap.theory.verify`):

* ``id``          ``"bounds.<check>"`` (e.g. ``bounds.thm1.printed``, ``bounds.lemma4.J.stated``)
* ``what``        the inequality; for bounds ``max_rel_err`` holds the **minimum ratio bound/exact**
                  over all instances evaluated (≥ 1 means the bound holds everywhere tried)
* ``shapes``      the shapes of the worst instance
* ``max_rel_err`` that minimum ratio (for ``thm7.identity`` the float64 residual, for
                  ``assumption1.*`` the value named in ``what``)
* ``verdict``     ``"holds"`` or ``"fails"``
* ``expected``    what the paper claims (``"holds"``)
* ``note``        median ratio, number of failing records, worst instance, slopes
* ``finding``     ``True`` when the verdict differs from the paper's claim: an honest result about
                  the paper, not a software failure (the exit status ignores it)

Instances: the ``mini`` synthetic sweeps with ``quick=True`` (seconds to a minute), the ``quick``
sweeps plus the quick adversarial search otherwise; always the replay of every committed
counter-example (``bounds/counterexamples/*.json``), whose recomputed ratio must equal the recorded
one to 1e-6 (row ``bounds.counterexamples.replay``: a mismatch *is* a software failure).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from . import sweeps as sw
from .run import COMMITTED_DIR, verify_rows

__all__ = ["run_checks", "main", "replay_committed"]

REPLAY_RTOL = 1e-6


def replay_committed(directory: Path = COMMITTED_DIR) -> tuple[list[dict], dict]:
    """Replay every committed counter-example: (records tagged ``sweep = "replay"``, status row)."""
    recs, bad, n = [], [], 0
    for p in sorted(directory.glob("*.json")):
        ce = json.loads(p.read_text())
        r = sw.replay(ce)
        n += 1
        rel = abs(r["ratio"] - ce["ratio"]) / abs(ce["ratio"])
        if rel > REPLAY_RTOL or not r["ratio"] < 1:
            bad.append(f"{p.name}: recorded {ce['ratio']:.6g}, replayed {r['ratio']:.6g}")
        inst = ce["instance"]
        L, d_V, d_K, d_ff = inst["shape"]
        recs.append({**r, "sweep": "replay", "x": p.stem, "seed": ce.get("seed"), "L": L, "d_V": d_V,
                     "d_K": d_K, "d_ff": d_ff})
    row = {"id": "bounds.counterexamples.replay",
           "what": "every committed counter-example recomputes to its recorded ratio (rel. 1e-6) and still fails",
           "shapes": f"{n} files in bounds/counterexamples", "max_rel_err": 0.0 if not bad else 1.0,
           "verdict": "holds" if not bad else "fails", "expected": "holds",
           "note": "; ".join(bad) or "all replayed", "finding": False}
    return recs, row


def run_checks(quick: bool = False, data_root=None, runs_root="runs") -> list[dict]:
    """The bound rows (see module doc)."""
    rows = []
    for s in sw.definitions(quick=True, mini=quick):
        r, _ = sw.run_sweep(s)
        rows += r
    if not quick:
        from . import adversarial

        rows += adversarial.run(quick=True)[0]
    rep, status = replay_committed()
    rows += rep
    out = verify_rows(sw.summarize(rows))
    if not quick:
        out += _data_rows(data_root, runs_root)
    return out + [status]


def _data_rows(data_root, runs_root) -> list[dict]:
    """Theorem 7 and Assumption 1 rows when MNIST and a trained checkpoint are on disk."""
    from ..data import DataUnavailable, load
    from . import assumption1, theorem7, training
    from .run import special_rows

    if training.find_checkpoint(runs_root) is None:
        return []
    try:
        ds = load("mnist", data_root, train=True)
    except DataUnavailable:
        return []
    from ..train import load_model

    model, _ = load_model(training.find_checkpoint(runs_root))
    t7 = theorem7.run(model, ds, n=256, hessian_n=16)
    a1 = assumption1.gradient_norms(model, ds, n=512, n_perm=3)
    return verify_rows(special_rows(t7, a1))


def _fmt(rows: list[dict]) -> str:
    lines = [f"{'id':44s} {'verdict':7s} {'min ratio':>11s}  finding"]
    for r in rows:
        v = r["max_rel_err"]
        vs = f"{v:11.4g}" if isinstance(v, (int, float)) and math.isfinite(v) else f"{str(v):>11s}"
        lines.append(f"{r['id']:44s} {r['verdict']:7s} {vs}  {'yes' if r.get('finding') else ''}")
    return "\n".join(lines)


def main(json_path: str | None = None, quick: bool = False) -> int:
    """Print the rows, optionally write them as JSON; exit status 1 only for software failures
    (a row whose verdict differs from its expectation without being a finding)."""
    from .run import _write_json

    rows = run_checks(quick)
    print(_fmt(rows))
    if json_path:
        _write_json(Path(json_path), rows)
    bad = [r for r in rows if r["verdict"] != r["expected"] and not r.get("finding")]
    return 1 if bad else 0
