"""curvature_gap.checks.encoder_layer: the rows of the multi-head Theorem 1 (beyond the paper), and the result's
finding on the quick rows."""
from __future__ import annotations

import pytest

from curvature_gap import findings
from curvature_gap.checks import encoder_layer as el_rows
from curvature_gap.checks.theory import quiet_single_thread
from curvature_gap.exact import encoder_layer as ref


def test_configuration_rows_and_the_exact_quantity_against_pytorch():
    """Two configuration rows (the family's first and last) and ``.exact_vs_pytorch``: seconds (``make test-fast``)."""
    with quiet_single_thread():
        rows = [c.row(True) for c in (el_rows.LAYERS[0], el_rows.LAYERS[-1])] + [el_rows._pytorch_row()]
    assert [r.id for r in rows] == [f"{el_rows.RESULT}.{ref.config_id(c)}" for c in (ref.CONFIGS[0], ref.CONFIGS[-1])] + [
        f"{el_rows.MH}.exact_vs_pytorch"]
    for r in rows:
        assert r.result == el_rows.RESULT and r.verdict == r.expected == "verified" and r.rel_err <= r.tolerance, r


def test_the_layer_grid_is_the_family_of_configurations():
    assert [c.cfg for c in el_rows.LAYERS] == list(ref.CONFIGS)
    assert all(c.row_ids == (c.id,) and c.kind == "formula" for c in el_rows.LAYERS)


def test_the_multihead_bound_rows_quick(quick_rows):
    """The rows of ``_mh_rows(quick=True)``, as ``verify --quick`` (quick_rows) computed them."""
    rows = {r.id: r for r in quick_rows if r.id == el_rows.MH or r.id.startswith(el_rows.MH + ".")}
    assert set(rows) == {el_rows.MH, f"{el_rows.MH}.blocks", f"{el_rows.MH}.softmax_d2", f"{el_rows.MH}.exact_vs_pytorch"}
    for r in rows.values():
        assert r.result == el_rows.RESULT and r.verdict == r.expected, r
    top = rows[el_rows.MH]
    assert top.kind == "bound" and top.role == "statement" and top.claim is None and top.min_ratio >= 1
    # the one worst-case search: its extent, the start that won, the minimum by L
    assert "Adam steps on log(bound/exact)" in top.details["searched"] and "worst at" in top.note
    assert top.details["won_by"]["family"] and top.details["won_by"]["ratio"] == pytest.approx(top.min_ratio)
    assert min(top.details["searched_by_L"].values()) == pytest.approx(top.min_ratio)
    assert rows[f"{el_rows.MH}.blocks"].role == "proof" and rows[f"{el_rows.MH}.blocks"].min_ratio >= 1
    assert rows[f"{el_rows.MH}.exact_vs_pytorch"].rel_err < 1e-12


def test_the_finding_of_the_page(quick_rows):
    f = findings.finding_of("encoder_layer", quick_rows)
    assert f.page == "notebooks/encoder_layer" and f.kind == "theory"
    assert f.verdict == "holds" and "against autograd" in f.evidence and "smallest bound/exact" in f.evidence
    assert any(r.startswith("encoder_layer.mh_bound") for r in f.rows)
