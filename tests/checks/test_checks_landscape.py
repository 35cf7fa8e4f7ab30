"""Theorem 7's rows: one attention layer (curvature_gap.checks.landscape) and the trained ViT (its figure's rows,
curvature_gap.experiments.landscape_checks)."""
from __future__ import annotations

from types import SimpleNamespace

from curvature_gap.experiments import landscape_checks as cl
from curvature_gap.landscape.theorem7 import IDENTITY_TOL


def _res(meta):
    return SimpleNamespace(meta=meta, config={"profile": "paper"}, json_path="results/x/h.json")


def test_theorem7_one_attention_layer_rows_of_the_quick_run(quick_rows):
    rows = {r.id: r for r in quick_rows if r.id.startswith("thm7.sa.") or r.id == "thm7.identity"}
    assert set(rows) == {"thm7.sa.printed", "thm7.sa.repaired", "thm7.sa.exact_at_w_star", "thm7.identity"}
    for r in rows.values():
        assert r.ran and r.verdict == r.expected == "holds", r
    assert rows["thm7.identity"].value <= IDENTITY_TOL
    assert "Assumption 1 fails here" in rows["thm7.sa.printed"].note


def test_rows_without_a_result_are_not_run_and_name_the_command():
    vit = cl.vit_rows(None)
    assert [r.id for r in vit] == ["thm7.vit.exact", "thm7.vit.thm6_ce"]
    assert all(not r.ran and "curvature-gap reproduce --only theorem7" in r.command for r in vit)


def test_vit_rows_from_a_result():
    paths = [dict(direction="random", t=0.0, identity_residual=1e-16, min_ratio_exact=3.0, min_ratio_thm6_ce=9.0,
                  argmin_k_exact=5, argmin_k_thm6_ce=5),
             dict(direction="max-grad", t=1.0, identity_residual=2e-16, min_ratio_exact=0.5, min_ratio_thm6_ce=4.0,
                  argmin_k_exact=7, argmin_k_thm6_ce=2)]
    meta = dict(paths=paths, M={"exact": 1.0, "thm6_ce": 100.0}, n=64, ts=[0.0, 1.0], ell_max=2.3)
    rows = {r.id: r for r in cl.vit_rows(_res(meta))}
    assert rows["thm7.vit.exact"].verdict == "fails" and rows["thm7.vit.exact"].min_ratio == 0.5
    assert "max-grad, t = 1.0, k = 7" in rows["thm7.vit.exact"].note and rows["thm7.vit.exact"].claim is None
    assert rows["thm7.vit.thm6_ce"].verdict == "holds" and rows["thm7.vit.identity"].verdict == "holds"
    assert rows["thm7.vit.identity"].value == 2e-16
