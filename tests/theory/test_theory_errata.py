"""curvature_gap.theory.errata: every erratum names the check that measures the printed and the corrected form."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from curvature_gap.row import Row
from curvature_gap.theory.errata import ERRATA, ResultMisprints, label, misprint_counts

ROOT = Path(__file__).resolve().parents[2]

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


def _formula(rid, result, verdict, role="statement", errata=()):
    return Row(id=rid, result=result, kind="formula", role=role, what="w", verdict=verdict, rel_err=0.0,
               tolerance=1e-10, errata=list(errata))


def test_misprint_counts_count_errata_once_and_notation_apart():
    """One erratum on several rows is one misprinted formula; a notation-only erratum is listed, not counted;
    only the erratum's own evidence row decides (its result, its role, its verdict)."""
    by = {e["id"]: e for e in ERRATA}
    loss, ident, sym = by["lemma2-phi-loss-factor"], by["lemma2-phiQK-identity"], by["mixed-block-symmetry"]
    xi = by["xi12-is-xi21"]
    rows = [_formula(loss["evidence"], "lem2", "corrected", errata=[loss["id"]]),
            *[_formula(r, "lem2", "corrected", errata=[loss["id"]]) for r in loss["related"]],
            _formula(ident["evidence"], "lem2", "corrected", errata=[ident["id"]]),
            _formula(sym["evidence"], "thm5", "notation", role="detail", errata=[sym["id"]]),
            _formula(xi["evidence"], "thm5", "corrected", role="detail", errata=[xi["id"]]),
            _formula("thm5.xi.12", "thm5", "verified", errata=[xi["id"]]),       # a related row that verifies
            _formula("thm2.layernorm.jacobian", "thm2", "verified")]
    c = misprint_counts(rows)
    assert (c.formulas, c.notation, c.listed, c.rows) == (3, (label(sym["id"]),), 4, 6)
    assert c.of("lem2") == ResultMisprints(statement=2) and c.of("lem2").formulas == 2
    assert c.of("thm5") == ResultMisprints(proof=1, notation=1) and c.of("thm5").formulas == 1
    assert c.of("thm2") == ResultMisprints() and c.of("nothing").formulas == 0
    assert sum(x.formulas for x in c.by_result.values()) == c.formulas
    # an erratum whose evidence row verifies the printed form, or is missing, is not counted
    rows[0] = _formula(loss["evidence"], "lem2", "verified", errata=[loss["id"]])
    assert misprint_counts(rows).of("lem2") == ResultMisprints(statement=1)
    assert misprint_counts([]).formulas == 0 and misprint_counts([]).notation == ()
    assert label(ERRATA[0]["id"]) == "E1" and label(ERRATA[-1]["id"]) == f"E{len(ERRATA)}"
    with pytest.raises(KeyError):
        label("no-such-erratum")


def test_misprint_counts_of_the_published_rows():
    """The published rows: 17 entries, 16 misprinted formulas (E16, mixed-block symmetry, is notation-only), on
    19 rows (E9 spans three); the per-result counts add up to 16 (Lemma 2: 2, not 4)."""
    path = ROOT / "published" / "paper" / "verify.json"
    if not path.is_file():
        pytest.skip("no published rows")
    rows = [Row.from_json(d) for d in json.loads(path.read_text())["rows"]]
    by = {r.id: r for r in rows}
    wrong = [e for e in ERRATA if by[e["evidence"]].verdict in ("corrected", "notation")]
    notation = [label(e["id"]) for e in wrong if by[e["evidence"]].verdict == "notation"]
    c = misprint_counts(rows)
    assert c.formulas == len(wrong) - len(notation) and c.notation == tuple(notation) and c.listed == len(wrong)
    assert sum(x.formulas for x in c.by_result.values()) == c.formulas
    assert label("mixed-block-symmetry") in c.notation
    assert c.of("lem2") == ResultMisprints(statement=2), "the loss factor of Lemma 2 is one misprint on three rows"
    assert c.rows == len([r for r in rows if r.kind == "formula" and r.verdict in ("corrected", "notation")])


def test_where_and_what_the_entries_say():
    by = {e["id"]: e for e in ERRATA}
    e1 = by["layernorm-definition-index"]
    assert "§3.2" in e1["where"] and r"§3.2: $\gamma, \beta \in \R^m$" in e1["printed"], "γ, β ∈ R^m is printed in §3.2"
    assert "§2" in e1["where"] and "§2" in e1["printed"].split(";")[0], "the 1/m sums are printed in §2"
    e3 = by["uniform-attention-1-over-n"]
    assert "undefined symbol" in e3["holds"] and "undefined symbol" in e3["as_printed"]
    assert "ill-dimensioned" not in e3["holds"] + e3["as_printed"], "E3's shapes are right; its n is undefined"
    for e in ERRATA:
        assert "|" not in e.get("as_printed", "")
