"""curvature_gap.findings: one verdict per result of the paper, from the rows of ``curvature-gap verify``."""
from __future__ import annotations

import pytest

from curvature_gap import findings as fd
from curvature_gap.row import Row


def _find(rows, key):
    return fd.finding_of(key, rows)


def test_verdicts_on_the_quick_rows(quick_rows):
    t1 = _find(quick_rows, "thm1")
    assert t1.verdict == "fails; repaired version holds" and t1.css == "repaired"
    # the headline counter-example satisfies every assumption in force (loss 0, uniform attention)
    assert "counter-example at an exact minimiser with uniform attention" in t1.evidence
    assert t1.numbers["worst"][0] == "bounds.thm1.printed.admissible" and t1.numbers["repaired"][0] == "bounds.thm1.repaired"
    assert "bounds." not in t1.evidence, "the evidence is in words: no check ids"
    l4 = _find(quick_rows, "lemma4")
    assert l4.verdict == "holds as corrected" and l4.css == "corrected"
    t6 = _find(quick_rows, "thm6")
    # the displayed inequalities hold (by construction); the proof's explicit per-block constant fails at block
    # (2,1), small W_2, and the mirror estimate repairs it; the explicit whole-Hessian constant holds, unproved
    assert t6.verdict == "holds; proof has a gap" and t6.css != "bad"
    assert t6.evidence.startswith("holds as displayed") and "hold, as they must" in t6.evidence
    assert "the explicit bound on each block" in t6.evidence and "block (2,1)" in t6.evidence
    assert "estimated as the proof estimates its mirror (1,2) holds" in t6.evidence and "but is unproved" in t6.evidence
    assert "of the proof fail" in t6.evidence and "fail only through a misprint" in t6.evidence
    assert r"bound on $\boldsymbol\Phi_{QQ}$" in t6.evidence and r"bound on $\boldsymbol\Phi_{QK}$" in t6.evidence
    assert _find(quick_rows, "thm2").verdict == "holds"
    assert _find(quick_rows, "thm3").verdict.startswith("holds")
    assert _find(quick_rows, "figs7_11").verdict == "no claim made"
    for key in ("fig6", "fig12"):  # CIFAR-100 at paper scale: the MNIST stand-ins carry no verdict
        assert _find(quick_rows, key).verdict == "not run at paper scale", key
    for key in ("fig3", "fig4", "fig5", "assumption1"):
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
    assert paper.verdict == "partly reproduced" and paper.evidence == "W_V leads" and paper.css == "notrepro"


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
    assert _find([ok, detail], "thm3").verdict == "holds; misprints in the appendix corrected"
    nr = Row(id="thm7.vit.exact", result="thm7", kind="bound", what="w", verdict="not run", command="cmd")
    assert _find([nr], "thm7").verdict == "not run" and "cmd" in _find([nr], "thm7").evidence
    assert _find([], "thm2").verdict == "not run"
    with pytest.raises(KeyError, match="no result 'thm99'"):
        fd.finding_of("thm99", [])


def test_summary_sentences_carry_the_numbers(quick_rows):
    s = fd.summary_sentences(quick_rows)
    worst = next(r.min_ratio for r in quick_rows if r.id == "bounds.thm1.printed.admissible")
    repaired = next(r for r in quick_rows if r.id == "bounds.thm1.repaired")
    assert any(f"{worst:.2g}" in x and f"{repaired.min_ratio:.3g}" in x and "Theorem 1" in x for x in s)
    assert any("Lemma 4 holds as corrected" in x for x in s)
    assert s[-2].startswith("The figures' claims, from the paper-profile results: ")
    for fig in ("Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6", "Fig. 12"):  # one verdict per model, each named
        part = s[-2].split(f"{fig}: ")[1].split(";")[0]
        assert "on the authors' model" in part and "on the theorem's block" in part, part
    assert "implications for scaling laws" in s[-1] and "**not supported**" in s[-1]
    assert not any("Theorem 7 holds wherever tested" in x for x in s), "no sentence from rows that did not run"


def _bound(rid, verdict, role="statement", res="thm1", ratio=0.5, **details):
    return Row(id=rid, result=res, kind="bound", role=role, what="w", verdict=verdict, min_ratio=ratio,
               claim=None if role in ("repair", "reference") else "holds", details=details)


def test_a_bound_looser_than_a_thousandfold_everywhere_is_vacuous():
    assert _find([_bound("a", "holds", ratio=1.01e3)], "thm1").verdict == "holds, vacuous"
    assert _find([_bound("a", "holds", ratio=0.99e3)], "thm1").verdict == "holds"
    f = _find([_bound("a", "holds", ratio=1.4e14, res="ce")], "ce")
    assert f.verdict == "holds, vacuous" and f.css == "vacuous"


def test_a_bound_the_check_guarantees_cannot_fail_and_names_the_informative_row():
    rows = [_bound("thm7.vit.thm6_ce", "holds", res="thm7", ratio=2.03, cannot_fail="by the lemma"),
            _bound("thm7.vit.exact", "holds", role="reference", res="thm7", ratio=1.40)]
    f = _find(rows, "thm7")
    assert f.verdict == "holds, cannot fail as checked" and f.css == "vacuous"
    assert "by the lemma" in f.evidence and "smallest ratio 1.4" in f.evidence and "thm7.vit" not in f.evidence
    assert f.numbers["informative"] == ("thm7.vit.exact", 1.4)
    # one statement row that could fail: the ordinary verdict
    rows.append(_bound("thm7.sa.printed", "holds", res="thm7", ratio=4.5))
    assert _find(rows, "thm7").verdict == "holds"


def test_the_theorem7_statement_rows_are_marked_guaranteed_from_the_size_of_M():
    from curvature_gap.landscape.theorem7 import GUARANTEED_FACTOR, cannot_fail
    assert cannot_fail(GUARANTEED_FACTOR * 2.0, 2.0) and not cannot_fail(GUARANTEED_FACTOR * 1.9, 2.0)


def test_the_papers_validated_ce_claim_is_not_supported_and_the_companions_ce_is_its_own_result():
    f = _find([], "ce_validated")
    assert f.verdict == "not supported" and f.css == "bad" and "evaluate none" in f.evidence
    assert "companion" in dict((k, t) for k, t, *_ in fd.RESULTS)["ce"]


def test_a_proof_step_counts_as_a_misprint_only_when_its_variant_survives():
    step = _bound("bounds.thm6.Phi.VQ", "fails", role="proof", res="thm6")
    st = _bound("bounds.thm6.full.exact", "holds", res="thm6", ratio=20.0)
    held = _bound("bounds.thm6.Phi.VQ.no_loss_factor", "holds", role="proof", res="thm6", ratio=1.1)
    failed = _bound("bounds.thm6.Phi.VQ.no_loss_factor", "fails", role="proof", res="thm6", ratio=0.8)
    f = _find([st, step, held], "thm6")
    assert "proof_failures" not in f.numbers and "survive the same search" in f.evidence
    f = _find([st, step, failed], "thm6")
    assert f.numbers["proof_failures"] == 1 and f.verdict == "holds; proof has a gap"


def test_a_failing_step_reports_how_it_scales():
    """A law with the range it was read on, only where the local slopes settled; else the smallest ratio."""
    from curvature_gap.bounds.sweeps import law_of
    scaling = [{"var": "L", **law_of([(4, 0.5), (8, 0.25), (16, 0.125)], "L", +1)}]
    rows = [_bound("bounds.thm6.full.exact", "holds", res="thm6", ratio=20.0),
            _bound("bounds.thm6.GQ", "fails", role="proof", res="thm6", ratio=0.125, scaling=scaling)]
    assert ("1 step of the proof fails: the bound on $\\mathbf G_{Q}$ (bound/exact ≈ 2/L for L from 4 to 16)"
            in _find(rows, "thm6").evidence)
    unsettled = [{"var": "L", **law_of([(4, 0.5), (8, 0.3), (16, 0.125)], "L", +1)}]
    rows[1] = _bound("bounds.thm6.GQ", "fails", role="proof", res="thm6", ratio=0.125, scaling=unsettled)
    assert "the bound on $\\mathbf G_{Q}$ (bound/exact 0.125)" in _find(rows, "thm6").evidence


def test_every_verdict_has_its_own_class():
    assert set(fd.VERDICT_CLASSES.values()) == {"ok", "corrected", "vacuous", "repaired", "bad", "notrepro", "none"}
    with pytest.raises(KeyError, match="no class"):
        fd.Verdict("x", "t", "p", "theory", "holds mostly", "").css


def test_the_landing_counts_misprinted_formulas_as_the_errata_page_does(quick_rows):
    """The landing's count is misprint_counts(): errata, not rows (E9 spans three rows), and without the
    notation-only E16, which is named as listed but not counted."""
    from curvature_gap.theory.errata import ERRATA, misprint_counts

    mc = misprint_counts(quick_rows)
    assert mc.notation == ("E16",) and mc.formulas == len(ERRATA) - 1 and mc.rows > mc.listed
    first = fd.summary_sentences(quick_rows)[0]
    assert (f"once the {mc.formulas} misprinted formulas of the errata list are corrected (E16, a notational slip, "
            "is listed there too but not counted); the statements themselves hold.") in first


def test_each_results_misprint_count_is_the_errata_pages_count(quick_rows):
    import re
    from curvature_gap.theory.errata import misprint_counts
    mc = misprint_counts(quick_rows)
    total = 0
    for f in fd.findings(quick_rows):
        st = re.search(r"(\d+) misprinted formulas? corrected", f.evidence)
        pf = re.search(r"(\d+) formulas? of the detailed version or proof corrected", f.evidence)
        got = (int(st.group(1)) if st else 0) + (int(pf.group(1)) if pf else 0)
        assert got == mc.of(f.key).formulas, f.key
        total += got
    assert total == mc.formulas


def test_a_theorem_that_holds_as_displayed_but_whose_proof_fails_says_so():
    """Theorem 6: the displayed inequalities hold by construction, so it holds ("fails" is kept for a displayed
    inequality that fails); the explicit (2,1) instantiation fails and the proof's own mirror estimate repairs it;
    the explicit whole-Hessian constant holds but is unproved; a misprint-only step gives its corrected minimum."""
    from curvature_gap.bounds.sweeps import law_of
    s_law = [{"var": "‖W₂‖ scale s", **law_of([(1.0, 1.0), (0.1, 0.05), (0.01, 0.005), (1e-3, 5e-4)], "w2_scale", -1)}]
    scaling = [{"var": "L", **law_of([(2, 1.0), (4, 0.5), (8, 0.25)], "L", +1)}]
    rows = [_bound("bounds.thm6.block.explicit", "fails", role="proof", res="thm6", ratio=0.035, scaling=s_law),
            _bound("bounds.thm6.block.explicit.repaired", "holds", role="repair", res="thm6", ratio=2.16),
            _bound("bounds.thm6.block.exact", "holds", res="thm6", ratio=1.01),
            _bound("bounds.thm6.full.exact", "holds", res="thm6", ratio=20.0),
            _bound("bounds.thm6.full.explicit", "holds", role="proof", res="thm6", ratio=8.4),
            _bound("bounds.thm6.GQ", "fails", role="proof", res="thm6", ratio=0.25, scaling=scaling),
            _bound("bounds.thm6.Phi.QK", "fails", role="proof", res="thm6", ratio=0.04),
            _bound("bounds.thm6.Phi.QK.no_loss_factor", "holds", role="proof", res="thm6", ratio=1.004)]
    rows[0].details["worst_sub"] = "21"
    for r in rows[2:4]:
        r.details["by_construction"] = "the triangle inequality"
    f = _find(rows, "thm6")
    assert f.verdict == "holds; proof has a gap"
    assert "holds as displayed" in f.evidence and "hold, as they must (the triangle inequality)" in f.evidence
    assert "for block (2,1) fails (bound/exact ∝ s (→ 0 as ‖W₂‖ → 0) for s from" in f.evidence
    assert "holds (smallest bound/exact 2.16 over the same search)" in f.evidence
    assert "the explicit whole-Hessian constant holds on every instance tried (smallest bound/exact 8.4) but is " \
           "unproved" in f.evidence
    assert "≈ 2/L for L from 2 to 8" in f.evidence and "without it smallest bound/exact 1.004, attained" in f.evidence
    assert f.numbers["repaired_steps"] == [("bounds.thm6.block.explicit", 0.035, "bounds.thm6.block.explicit.repaired",
                                            2.16)]
    landing = " ".join(fd.summary_sentences(rows))
    assert "Theorem 6 holds as displayed" in landing and "block (2,1)" in landing and "fails as stated" not in landing
    # declared as a displayed inequality instead, the same failure would make the theorem fail
    rows[0] = _bound("bounds.thm6.block.explicit", "fails", res="thm6", ratio=0.035, scaling=s_law)
    assert _find(rows, "thm6").verdict.startswith("fails")


def test_the_dataset_a_verdict_names_comes_from_the_model_of_its_settings_not_from_prose(monkeypatch):
    """findings.paper_dataset reads the paper profile's dataset (its settings' Variant.dataset); the free-text
    ``needs`` of a spec cannot change it."""
    import dataclasses

    from curvature_gap import findings as fd
    from curvature_gap.experiments import SPECS, ResultSpec

    assert fd.paper_dataset("fig12_authors") == "CIFAR-100" and fd.paper_dataset("fig4_authors") == "MNIST"
    assert fd.paper_dataset("encoder_family") is None and fd.model_words("encoder_family") == "synthetic data"
    assert fd.model_words("fig3_authors") == "MNIST, at initialisation"
    assert fd.model_words("fig4_authors_exact") == "MNIST, float32 runs"
    assert {"fig6", "fig12", "fig6_authors", "fig12_authors"} == fd._cifar()
    s = SPECS["fig4_authors"]
    monkeypatch.setitem(SPECS, "fig4_authors", ResultSpec(s.spec, dataclasses.replace(s.point, needs="CIFAR-100 (words)")))
    assert fd.paper_dataset("fig4_authors") == "MNIST" and "fig4_authors" not in fd._cifar()
