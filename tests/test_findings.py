"""curvature_gap.findings: one verdict per result of the paper, from the rows of ``curvature-gap verify``."""
from __future__ import annotations

import pytest

from curvature_gap import findings as fd
from curvature_gap.checks.row import Row


def _find(rows, key):
    return fd.finding_of(key, rows)


def test_verdicts_on_the_quick_rows(quick_rows):
    t1 = _find(quick_rows, "thm1")
    assert t1.verdict == "fails; repaired version holds" and t1.css == "mixed"
    assert "counter-example: bound/exact" in t1.evidence and "bounds.thm1.repaired" in t1.evidence
    l4 = _find(quick_rows, "lemma4")
    assert l4.verdict == "fails; repaired version holds"
    t6 = _find(quick_rows, "thm6")
    assert t6.verdict == "holds; proof has a gap" and t6.css == "ok"
    assert "of the proof fail" in t6.evidence
    assert _find(quick_rows, "thm2").verdict == "holds"
    assert _find(quick_rows, "thm3").verdict.startswith("holds")
    assert _find(quick_rows, "figs7_11").verdict == "no claim made"
    assert _find(quick_rows, "fig6").verdict == "not run at paper scale"
    for key in ("fig3", "fig4", "fig5", "fig12", "assumption1"):
        f = _find(quick_rows, key)
        assert f.verdict == "not run" and "curvature-gap reproduce --only" in f.evidence, key
    assert [f.key for f in fd.findings(quick_rows)] == [k for k, *_ in fd.RESULTS]


def _claim(profile, verdict="reproduced", key="fig3"):
    return Row(id=f"{key}.values_largest", result=key, kind="claim", what="w", verdict=verdict, claim="reproduced",
               profile=profile, note="W_V leads — details")


def test_an_experiment_row_of_the_smoke_profile_never_yields_a_verdict():
    for v in ("reproduced", "partly reproduced", "not reproduced"):
        f = _find([_claim("smoke", v)], "fig3")
        assert f.verdict == "not run" and "only a smoke-profile result" in f.evidence
    paper = _find([_claim("paper", "partly reproduced")], "fig3")
    assert paper.verdict == "partly reproduced" and paper.evidence == "W_V leads" and paper.css == "mixed"


def test_theory_vocabulary():
    def bound(rid, verdict, role="statement", res="thm1", ratio=0.5):
        return Row(id=rid, result=res, kind="bound", role=role, what="w", verdict=verdict, min_ratio=ratio,
                   claim=None if role == "repair" else "holds")

    assert _find([bound("a", "fails")], "thm1").verdict == "fails"
    assert _find([bound("a", "holds", ratio=2.0)], "thm1").verdict == "holds"
    assert _find([bound("a", "holds", ratio=2.0), bound("b", "fails", "proof")], "thm1").verdict == "holds; proof has a gap"
    corr = Row(id="thm3.x", result="thm3", kind="formula", what="w", verdict="corrected", rel_err=1e-16, tolerance=1e-10)
    assert _find([corr], "thm3").verdict == "holds as corrected"
    detail = Row(id="thm3.y", result="thm3", kind="formula", role="detail", what="w", verdict="notation", rel_err=0.0,
                 tolerance=1e-10)
    ok = Row(id="thm3.z", result="thm3", kind="formula", what="w", verdict="verified", rel_err=0.0, tolerance=1e-10)
    assert _find([ok, detail], "thm3").verdict == "holds; misprints in the detailed version or proof corrected"
    nr = Row(id="thm7.vit.exact", result="thm7", kind="bound", what="w", verdict="not run", command="cmd")
    assert _find([nr], "thm7").verdict == "not run" and "cmd" in _find([nr], "thm7").evidence
    assert _find([], "thm2").verdict == "not run"
    with pytest.raises(KeyError, match="no result 'thm99'"):
        fd.finding_of("thm99", [])


def test_summary_sentences_carry_the_numbers(quick_rows):
    s = fd.summary_sentences(quick_rows)
    worst = min(r.min_ratio for r in quick_rows if r.result == "thm1" and r.role == "statement" and r.kind == "bound"
                and r.verdict == "fails")
    repaired = next(r for r in quick_rows if r.id == "bounds.thm1.repaired")
    assert any(f"{worst:.2g}" in x and f"{repaired.min_ratio:.3g}" in x and "Theorem 1" in x for x in s)
    assert any("Lemma 4 fails as stated" in x for x in s)
    assert s[-1].startswith("At paper scale, the figures' claims are: ")
    assert not any("Theorem 7 holds wherever tested" in x for x in s), "no sentence from rows that did not run"
