"""curvature_gap.bounds.adversarial: the search proposes instances; the records are plain re-evaluations; the search
ranks by the rows' own terms (``bounds.checks.TERMS``): its ratio equals the row's ratio at the same instance."""
from __future__ import annotations

import pytest
import torch

from cases import tiny_instance
from curvature_gap.bounds import adversarial as adv
from curvature_gap.bounds import checks as ck
from curvature_gap.bounds import quantities as qt
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


@pytest.mark.parametrize("check", adv.SUPPORTED)
def test_the_search_ranks_by_the_rows_own_ratio(check):
    """The differentiable ratio the search descends equals the ratio of the row at the same instance."""
    inst = adv.start_instance(4, 3, 0)
    if check.startswith("lemma4"):
        got = float(adv._ln_ratio(check, inst.X))
    else:
        got = float(adv._sa_ratio(check, adv._sa_q(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target,
                                                   need=adv._need(check))))
    assert got == pytest.approx(adv.row_ratio(check, inst), rel=1e-9)


def test_every_searched_check_has_one_term_and_a_missing_one_is_named(monkeypatch):
    assert set(adv.SUPPORTED) <= set(ck.TERMS)
    with pytest.raises(KeyError, match="thm6.xikl has no ratio"):
        ck.term("thm6.xikl", {})
    q = qt.sa_exact(tiny_instance(L=3, d=2))
    b, e = ck.term("thm1.proof.VV", q)
    assert (b, e) == (ck.TERMS["thm1.proof.VV"](q)[0][1], q["H_VV"])
    monkeypatch.setitem(ck.TERMS, "two.entries", lambda q: [("a", 1.0, 1.0), ("b", 2.0, 1.0)])
    with pytest.raises(ValueError, match="single-entry"):
        ck.term("two.entries", q)
