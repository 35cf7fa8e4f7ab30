"""curvature_gap.bounds.run (``curvature-gap bounds``): tables, summary and counter-examples on disk."""
from __future__ import annotations

import json

import pytest

from curvature_gap.bounds import search
from curvature_gap.bounds import run as br
from curvature_gap.bounds import sweeps as sw
from curvature_gap.exact.instances import random_instance

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny_sweeps(quick=False, mini=False):
    b = dict(L=8, d_V=4, d_K=4, d_ff=16)
    return [sw.Sweep("balance", "balance", [1.0, 4096.0], (0,), lambda x, s: random_instance(**b, seed=s, balance=x),
                     lambda x: ("sa",)),
            sw.Sweep("minimiser", "balance", [4096.0], (0,), lambda x, s: sw.minimiser_instance(b, s, x), lambda x: ("sa",))]


def test_run_all_writes_tables_summary_and_replayable_counterexamples(tmp_path, monkeypatch):
    monkeypatch.setattr(sw, "definitions", _tiny_sweeps)
    # the search has its own tests (test_bounds_search.py): here, what run_all does with the records
    monkeypatch.setattr(search, "search_all", lambda objs=None, budget=None, log=None: {})
    out, committed = tmp_path / "bounds", tmp_path / "committed"
    res = br.run_all(out, quick=True, save_counterexamples=committed, log=None, committed=tmp_path / "none")
    assert {p.name for p in out.glob("*.csv")} == {"sweep_balance.csv", "sweep_minimiser.csv",
                                                   "sweep_search.csv", "search_starts.csv", "summary.csv"}
    doc = json.loads((out / "summary.json").read_text())
    assert doc["quick"] is True and doc["named_counterexamples"] == ["thm1.printed@minimiser"]
    by = {s["id"]: s for s in res["summary"]}
    assert by["thm1.printed"]["verdict"] == "fails" and by["thm1.repaired"]["verdict"] == "holds"
    names = {p.stem for p in (out / "counterexamples").glob("*.json")}
    assert "thm1.printed" in names and "thm1.printed@minimiser" in names and "thm1.repaired" not in names
    assert {p.stem for p in committed.glob("*.json")} == names
    for p in committed.glob("*.json"):
        ce = json.loads(p.read_text())
        assert sw.replay(ce)["ratio"] == pytest.approx(ce["ratio"], rel=1e-12)
    secs = json.loads((out / "timings.json").read_text())["seconds"]
    assert secs["total"] >= max(v for k, v in secs.items() if k != "total") > 0  # the parts lie inside the total
