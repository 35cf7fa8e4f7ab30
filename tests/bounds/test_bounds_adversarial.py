"""curvature_gap.bounds.adversarial: the search proposes instances; the records are plain re-evaluations; the search
ranks by the rows' own terms (each bound's ``terms``, :func:`curvature_gap.bounds.registry.term`): its ratio equals the
row's ratio at the same instance; which bounds are searched, and how, is read from their declarations."""
from __future__ import annotations

import pytest
import torch

from cases import tiny_instance
from curvature_gap.bounds import adversarial as adv
from curvature_gap.bounds import registry as ck
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


def test_the_searched_bounds_are_read_from_their_declarations():
    quick, full = adv.one_start_checks(quick=True), adv.one_start_checks()
    assert set(quick) == {"sa.Z1", "thm6.GQ", "thm1.term.Ho_QQ", "thm1.repaired"} and set(quick) <= set(full)
    assert set(full) == {c for c, b in ck.BOUNDS.items() if b.search and b.search.steps}
    assert len(full) == 14 and "lemma4.J.std" in full and "thm6.Phi.QK" not in full   # Φ: only the L-scaling search
    searched = {c for c in adv.thm6_steps() if ck.BOUNDS[c].search}
    assert searched == {"thm6.GQ", "thm6.GK", *(f"thm6.Phi.{kl}{v}" for kl in ("QQ", "VQ", "QK")
                                                for v in ("", ".no_loss_factor"))}
    with pytest.raises(KeyError, match="thm6.xikl has no search support"):
        adv.search("thm6.xikl", 4, 3, 0, steps=1)


def test_run_records_are_reevaluations_of_plain_instances(monkeypatch):
    monkeypatch.setattr(adv, "one_start_checks", lambda quick=False: ["sa.Z1"])
    real = adv.search
    monkeypatch.setattr(adv, "search", lambda check, L, d, seed, steps=150, lr=0.05: real(check, L, d, seed, 10, lr))
    rows, insts = adv.run(quick=True)
    assert {r["check"] for r in rows} == {"sa.Z1"} and {r["sweep"] for r in rows} == {"adversarial"}
    (key,) = insts
    assert all(r["inst_key"] == key for r in rows) and rows[0]["x"] == "sa.Z1@L=4,d=3,seed=0"
    assert min(r["ratio"] for r in rows) == _ratio(insts[key], "sa.Z1")


@pytest.mark.parametrize("check", [c for c, b in ck.BOUNDS.items() if b.search and b.part == "ln" or
                                   c in adv.one_start_checks() or (b.search and b.search.need[0].startswith("Phi_"))])
def test_the_search_ranks_by_the_rows_own_ratio(check):
    """The differentiable ratio the search descends equals the ratio of the row at the same instance."""
    inst = adv.start_instance(4, 3, 0)
    got = float(adv.search_ratio(check, inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target))
    assert got == pytest.approx(adv.row_ratio(check, inst), rel=1e-9)


def test_term_reads_one_entry_of_a_bounds_terms(monkeypatch):
    q = qt.sa_exact(tiny_instance(L=3, d=2))
    b, e = ck.term("thm1.proof.VV", q)
    assert (b, e) == (ck.BOUNDS["thm1.proof.VV"].terms(q)[0][1], q["H_VV"])
    two = ck.Bound("two.entries", "sa", "nowhere", "two", "thm1", lambda q: [("a", 1.0, 1.0), ("b", 2.0, 1.0)])
    monkeypatch.setitem(ck.BOUNDS, "two.entries", two)
    with pytest.raises(ValueError, match="single-entry"):
        ck.term("two.entries", q)
