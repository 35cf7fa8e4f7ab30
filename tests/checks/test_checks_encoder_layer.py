"""curvature_gap.checks.encoder_layer: the rows of the multi-head Theorem 1 (beyond the paper), and the result's
finding on the quick rows."""
from __future__ import annotations

from curvature_gap import findings
from curvature_gap.checks import encoder_layer as el
from curvature_gap.checks.theory import _quiet_single_thread


def test_the_multihead_bound_rows_quick():
    with _quiet_single_thread():
        rows = {r.id: r for r in el._mh_rows(quick=True)}
    assert set(rows) == {el.MH, f"{el.MH}.blocks", f"{el.MH}.softmax_d2", f"{el.MH}.exact_vs_pytorch"}
    for r in rows.values():
        assert r.result == el.RESULT and r.verdict == r.expected, r
    top = rows[el.MH]
    assert top.kind == "bound" and top.role == "statement" and top.claim is None and top.min_ratio >= 1
    assert top.details["min_ratio_searched"] <= top.details["min_ratio_start"], "the search lowers the ratio"
    assert "Adam starts" in top.details["searched"] and "worst at" in top.note
    assert rows[f"{el.MH}.blocks"].role == "proof" and rows[f"{el.MH}.blocks"].min_ratio >= 1
    assert rows[f"{el.MH}.exact_vs_pytorch"].rel_err < 1e-12


def test_the_finding_of_the_page(quick_rows):
    f = findings.finding_of("encoder_layer", quick_rows)
    assert f.page == "notebooks/encoder_layer" and f.kind == "theory"
    assert f.verdict == "holds" and "against autograd" in f.evidence and "smallest bound/exact" in f.evidence
    assert any(r.startswith("encoder_layer.mh_bound") for r in f.rows)
