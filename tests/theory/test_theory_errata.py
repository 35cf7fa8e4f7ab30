"""curvature_gap.theory.errata: every erratum names the check that measures the printed and the corrected form."""
from __future__ import annotations

import json
import re

from curvature_gap.theory.errata import ERRATA, errata_as_json

PRINTED_WRONG = ("corrected", "notation")  # the verdicts of a formula whose printed form is wrong


def test_every_erratum_is_complete_and_unique():
    assert len(ERRATA) >= 10
    ids = [e["id"] for e in ERRATA]
    assert len(set(ids)) == len(ids)
    for e in ERRATA:
        assert set(e) >= {"id", "where", "printed", "holds", "evidence"}, e["id"]
        assert all(isinstance(e[k], str) and e[k].strip() for k in ("where", "printed", "holds", "evidence"))
        for k in ("where", "printed", "holds"):   # MyST Markdown for a table cell: no bar, balanced math
            assert "|" not in e[k] and e[k].count("$") % 2 == 0, (e["id"], k)
    for key in ("relu-mask", "uniform-attention-1-over-n", "dF-dWK-commutation", "thm3-IL-slip",
                "lemma2-phi-loss-factor"):
        assert key in ids


def test_each_erratum_is_evidenced_by_a_row_that_finds_the_printed_form_wrong(quick_rows):
    rows = {r.id: r for r in quick_rows}
    for e in ERRATA:
        ev = rows.get(e["evidence"])
        assert ev is not None, e["evidence"]
        assert ev.kind == "formula" and ev.verdict in PRINTED_WRONG, (e["id"], ev.verdict)
        assert ev.rel_err is not None and ev.rel_err <= ev.tolerance, e["id"]    # the corrected form is verified
        assert e["id"] in ev.errata, "checks.run links each erratum to its evidence row"
        for rel in e.get("related", []):
            assert rel in rows, rel
            assert e["id"] in rows[rel].errata


def test_errata_as_json_round_trips():
    doc = json.loads(errata_as_json())
    assert [d["id"] for d in doc] == [e["id"] for e in ERRATA]
    assert re.search(r"\n  ", errata_as_json()) and "\n" not in errata_as_json(indent=None)
