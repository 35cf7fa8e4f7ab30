"""curvature_gap.checks.bounds: one row per bound (smallest bound/exact over the instances), the replay of the
committed counter-examples, and the rows of the trained model."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from curvature_gap.bounds import registry
from curvature_gap.bounds import sweeps as sw
from curvature_gap.checks import bounds as cb
from curvature_gap.exact.instances import random_instance

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rows_from_summary_format_and_findings():
    inst = random_instance(L=4, d_V=3, seed=0, sharpness=1.0)
    recs = [{**r, "sweep": "t", "x": 1.0, "seed": 0, "L": 4, "d_V": 3} for r in registry.evaluate(inst, parts=("sa",))]
    rows = {r.id: r for r in cb.rows_from_summary(sw.summarize(recs), [])}
    a, d = rows["bounds.sa.A"], rows["bounds.sa.dA_dT"]
    assert d.verdict == "fails" and d.finding and d.expected == "fails" and d.as_expected and d.min_ratio < 1
    assert a.verdict == "holds" and not a.finding and a.kind == "bound" and a.tolerance == registry.RTOL
    assert "uniform-attention-1-over-n" in d.errata and "1/1 instances fail" in d.note
    assert rows["bounds.thm1.repaired"].claim is None and rows["bounds.thm1.repaired"].role == "repair"
    assert all(r.profile == "synthetic" for r in rows.values())
    unexpected = cb.rows_from_summary(sw.summarize(recs), [], expected=False, prefix="bounds.mnist.")
    assert all(r.expected is None and r.id.startswith("bounds.mnist.") for r in unexpected)


def test_replay_row_fails_when_a_counterexample_no_longer_reproduces(tmp_path):
    src = cb.COUNTEREXAMPLES / "sa.dA_dT.json"
    shutil.copy(src, tmp_path / "sa.dA_dT.json")
    recs, row = cb.replay_committed(tmp_path)
    assert row.verdict == "holds" and row.value == 1.0 and recs[0]["sweep"] == "replay" and recs[0]["file"] == src.name
    ce = json.loads(src.read_text())
    (tmp_path / "sa.dA_dT.json").write_text(json.dumps(dict(ce, ratio=ce["ratio"] * 1.001)))   # recorded ≠ replayed
    _, bad = cb.replay_committed(tmp_path)
    assert bad.verdict == "fails" and not bad.as_expected and "sa.dA_dT.json: recorded" in bad.note
    # a counter-example that holds is no counter-example
    inst = random_instance(L=4, d_V=3, seed=0, sharpness=0.0)
    rec = next(r for r in registry.evaluate(inst, parts=("sa",)) if r["check"] == "sa.A")
    (tmp_path / "sa.dA_dT.json").unlink()
    (tmp_path / "sa.A.json").write_text(json.dumps(sw.counterexample_json(rec, inst)))
    _, holds = cb.replay_committed(tmp_path)
    assert holds.verdict == "fails"


def test_trained_rows_not_run_and_from_a_result():
    nr = cb.trained_rows(None)
    assert [r.id for r in nr] == [f"bounds.mnist.{c}" for c in cb.trained_checks()]
    assert all(r.verdict == "not run" and "--only trained_bounds" in r.command for r in nr)
    recs = [{"check": "thm1.printed", "sub": "", "bound": 1.0, "exact": 4.0, "ratio": 0.25, "sweep": "training",
             "x": "trained", "seed": 0},
            {"check": "thm1.repaired", "sub": "", "bound": 8.0, "exact": 4.0, "ratio": 2.0, "sweep": "training",
             "x": "trained", "seed": 0}]
    res = SimpleNamespace(meta={"records": recs}, config={"profile": "paper"}, json_path="results/trained_bounds/h.json")
    rows = {r.id: r for r in cb.trained_rows(res)}
    assert set(rows) == {"bounds.mnist.thm1.printed", "bounds.mnist.thm1.repaired"}
    assert rows["bounds.mnist.thm1.printed"].verdict == "fails" and rows["bounds.mnist.thm1.printed"].finding
    assert rows["bounds.mnist.thm1.repaired"].verdict == "holds" and rows["bounds.mnist.thm1.repaired"].profile == "paper"
    assert rows["bounds.mnist.thm1.printed"].evidence == ["results/trained_bounds/h.json"]


def test_every_bound_row_of_the_quick_run_has_its_expected_verdict(quick_rows):
    rows = [r for r in quick_rows if r.kind == "bound" and r.id.startswith("bounds.") and r.ran]
    ids = {r.id.removeprefix("bounds.") for r in rows}
    assert ids == {c for c, v in registry.CHECKS.items() if v["part"] not in ("ce", "batch")}
    for r in rows:
        assert r.verdict == r.expected, r
        assert (r.verdict == "fails") == (r.id.removeprefix("bounds.") in registry.known_failures()), r
        if r.verdict == "fails":
            assert r.evidence, f"{r.id}: a failing bound names its committed counter-example"
