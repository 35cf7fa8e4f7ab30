"""``curvature-gap verify``: every closed form (theory) and every bound (bounds), one table.

Exit status 0 when every theory row has its expected verdict (``verified``/``corrected``) and every
bound row either holds or is a recorded finding (a bound of the paper that fails, with its
counter-example). A bound that fails without being a recorded finding is a failure.
"""
from __future__ import annotations

import json

from .io import atomic_write_json


def rows(quick: bool = False) -> list[dict]:
    from .theory.verify import run_checks as theory_checks

    out = [dict(r, section="theory") for r in theory_checks(quick=quick)]
    try:
        from .bounds.verify import run_checks as bound_checks
    except ImportError:  # pragma: no cover - bounds not installed
        return out
    out += [dict(r, section="bounds") for r in bound_checks(quick=quick)]
    return out


def row_ok(r: dict) -> bool:
    if r["verdict"] == "fails":
        return bool(r.get("finding"))
    return r["verdict"] == r["expected"] or (r.get("section") == "bounds" and r["verdict"] == "holds")


def format_table(rows_: list[dict]) -> str:
    head = f"{'id':40s} {'verdict':9s} {'value':>10s}  {'shapes':40s} what"
    lines = [head, "-" * len(head)]
    for r in rows_:
        val = r.get("max_rel_err")
        val = f"{val:10.2e}" if isinstance(val, (int, float)) and val is not None else f"{'-':>10s}"
        flag = " (finding)" if r.get("finding") and r["verdict"] == "fails" else ""
        lines.append(f"{r['id']:40s} {r['verdict'] + flag:9s} {val}  {str(r.get('shapes', ''))[:40]:40s} {r.get('what', '')}")
    return "\n".join(lines)


def main(json_path: str | None = None, quick: bool = False) -> int:
    rs = rows(quick=quick)
    print(format_table(rs))
    counts: dict[str, int] = {}
    for r in rs:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    bad = [r["id"] for r in rs if not row_ok(r)]
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    print(f"\n{len(rs)} rows: {summary} -> {'OK' if not bad else 'FAILED: ' + ', '.join(bad)}")
    if json_path:
        atomic_write_json(json_path, json.loads(json.dumps(rs, default=str)))
    return 0 if not bad else 1
