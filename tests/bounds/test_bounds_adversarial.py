"""curvature_gap.bounds.adversarial: the search proposes instances; the records are plain re-evaluations."""
from __future__ import annotations

import pytest
import torch

from curvature_gap.bounds import adversarial as adv
from curvature_gap.bounds import checks as ck
from curvature_gap.exact.instances import random_instance

pytestmark = pytest.mark.usefixtures("one_thread")


def _ratio(inst, check, **kw):
    return min(r["ratio"] for r in ck.evaluate(inst, parts=(ck.part_of(check),), tensors=False, **kw)
               if r["check"] == check)


@pytest.mark.parametrize("check, kw", [("sa.Z1", {}), ("lemma4.J.std", {"ln_input": "X"})])
def test_search_lowers_the_exactly_evaluated_ratio(check, kw):
    start = random_instance(L=4, d_V=3, d_ff=6, seed=0)
    found = adv.search(check, L=4, d=3, seed=0, steps=30)
    assert found.meta["source"] == "adversarial" and found.meta["check"] == check
    assert found.shape == start.shape
    assert _ratio(found, check, **kw) < _ratio(start, check, **kw)
    if check.startswith("lemma4"):   # only X is optimised for Lemma 4
        assert all(torch.equal(a, b) for a, b in zip(found.weights, start.weights))
        assert not torch.equal(found.X, start.X)


def test_quick_checks_are_supported():
    assert set(adv.QUICK) <= set(adv.SUPPORTED) <= set(ck.CHECKS)


def test_run_records_are_reevaluations_of_plain_instances(monkeypatch):
    monkeypatch.setattr(adv, "QUICK", ["sa.Z1"])
    real = adv.search
    monkeypatch.setattr(adv, "search", lambda check, L, d, seed, steps=150, lr=0.05: real(check, L, d, seed, 10, lr))
    rows, insts = adv.run(quick=True)
    assert {r["check"] for r in rows} == {"sa.Z1"} and {r["sweep"] for r in rows} == {"adversarial"}
    (key,) = insts
    assert all(r["inst_key"] == key for r in rows) and rows[0]["x"] == "sa.Z1@L=4,d=3,seed=0"
    assert min(r["ratio"] for r in rows) == _ratio(insts[key], "sa.Z1")
