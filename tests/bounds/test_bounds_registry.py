"""curvature_gap.bounds.registry: one declaration per bound, the views read from them, and the evaluation of the
bounds on instances."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from cases import randn
from curvature_gap.bounds import quantities as qt
from curvature_gap.bounds import registry
from curvature_gap.bounds.bound import Bound
from curvature_gap.row import by_id
from curvature_gap.bounds.titles import INEQUALITIES, shown
from curvature_gap.checks import bounds as cb
from curvature_gap.codehash import reached
from curvature_gap.exact.instances import random_instance
from curvature_gap.theory.errata import ERRATA

pytestmark = pytest.mark.usefixtures("one_thread")
ck = registry


def test_registry_is_consistent():
    assert ck.known_failures() <= set(ck.CHECKS) and len(ck.CHECKS) == len(ck.BOUNDS) == 81
    errata = {e["id"] for e in ERRATA}
    for cid, c in ck.CHECKS.items():
        b = ck.BOUNDS[cid]
        assert c["part"] in ("sa", "ln", "prop", "block", "ce", "batch"), cid
        assert c["role"] in ("statement", "proof", "repair", "reference"), cid
        assert c["expect"] == ("fails" if cid in ck.known_failures() else "holds") == b.expect, cid
        assert c["claim"] in ("holds", None) and c["what"] and c["ref"], cid
        if c["role"] in ("repair", "reference"):
            assert c["claim"] is None, f"{cid}: the companion's own checks make no claim about the paper"
        assert set(b.errata) <= errata, f"{cid}: an erratum id that theory.errata does not list"
        if b.fails is not None and b.claim is not None:
            assert f"bounds.{cid}" in INEQUALITIES, f"{cid}: a failing bound needs a title and TeX for the errata page"
    for cid in ck.CHECKS:
        if cid.endswith(".no_loss_factor"):
            assert cid.removesuffix(".no_loss_factor") in ck.CHECKS
    assert ck.BOUNDS["thm6.xi12"].tensors and not ck.BOUNDS["thm6.GQ"].tensors
    # the views are read from the declarations: the same bounds, in declaration order
    assert list(ck.CHECKS) == list(ck.BOUNDS) and ck.CHECKS["sa.A"] == ck.BOUNDS["sa.A"].meta
    assert set(INEQUALITIES) == {f"bounds.{c}" for c, b in ck.BOUNDS.items() if b.title}
    assert INEQUALITIES["bounds.sa.Z1"] == (ck.BOUNDS["sa.Z1"].title, ck.BOUNDS["sa.Z1"].tex)
    assert set(cb.trained_checks()) == {"thm1.printed", "thm1.repaired", "thm6.full.explicit", "thm6.full.explicit.ce",
                                        "ce.output_factor", "lemma4.J.stated", "lemma4.J.std", "lemma4.H.stated",
                                        "lemma4.H.std", "prop.S", "thm1.printed.batch", "thm6.full.explicit.batch"}


def test_a_declaration_is_refused_when_it_is_incomplete_or_declared_twice():
    b = Bound("toy.twice", "sa", "nowhere", "a ≤ b", "thm1", lambda q: [("", 1.0, 1.0)])
    with pytest.raises(ValueError, match="declared twice"):
        by_id(b, b)
    with pytest.raises(ValueError, match="declared twice"):
        ck.register(ck.BOUNDS["sa.A"])
    with pytest.raises(ValueError, match="make no claim"):
        dataclasses.replace(b, role="repair")
    with pytest.raises(ValueError, match="both title and tex"):
        dataclasses.replace(b, title="Toy")
    with pytest.raises(ValueError, match="says why it fails"):
        dataclasses.replace(b, fails=" ")
    with pytest.raises(ValueError, match="part 'nowhere'"):
        dataclasses.replace(b, part="nowhere")
    with pytest.raises(KeyError, match="bounds.sa.A.*declarations.py"):
        shown("bounds.sa.A")  # it holds: no title, and the error names where to give one
    assert b.evaluate_options()["hessian"]
    with pytest.raises(ValueError, match="only a repair"):
        dataclasses.replace(b, repairs="sa.Z1")


def test_the_code_hash_of_the_evaluation_reaches_every_declaration():
    """The declarations are data the evaluation reads at run time: the code hash must still see them (a changed
    formula is a new result), through BOUNDS to each group of declarations, its helpers and the formulas."""
    got = reached(ck.evaluate)
    assert "curvature_gap.bounds.declarations:BOUNDS" in got
    groups = {k.rpartition(":")[2] for k in got if k.startswith("curvature_gap.bounds.declarations:")}
    assert {"THEOREM1", "THEOREM1_TERMS", "THEOREM1_LEMMAS", "LEMMA4", "PROPOSITION", "THEOREM6", "THEOREM6_JACOBIANS",
            "THEOREM6_PHI", "THEOREM6_XI", "CROSS_ENTROPY_AND_BATCH", "_thm1_whole", "_phi", "admissible"} <= groups
    assert {f"curvature_gap.bounds.formulas:{f}" for f in ("theorem1", "theorem1_terms", "sa_lemmas", "lemma4",
                                                          "proposition", "theorem6_explicit", "phi_bounds")} <= set(got)


def test_ratio_and_holds():
    assert ck.ratio(2.0, 1.0) == 2.0
    assert ck.ratio(1.0, 1e-13) == math.inf                  # an exact value of 0 cannot be violated
    assert ck.holds(1 - 0.5 * ck.RTOL) and not ck.holds(1 - 2 * ck.RTOL)


def test_lemma4_stated_reading_fails_on_one_centred_row():
    # m = 1, centred row: ‖X‖ = ‖m_1‖ = ρ, exact ‖J‖ = √n/ρ, stated bound 1/ρ + ρ²/(√n ρ³)
    n = 16
    x = randn(1, n, seed=0)
    x = x - x.mean()
    q = qt.layernorm_exact(x)
    assert q["J"] == pytest.approx(math.sqrt(n) / float(x.norm()), rel=1e-12)
    recs = {r["check"]: r for r in ck.records("ln", q, "X")}
    assert recs["lemma4.J.stated"]["ratio"] == pytest.approx(1 / math.sqrt(n) + 1 / n, rel=1e-12)
    assert recs["lemma4.J.std"]["ratio"] >= 1
    assert {r["sub"] for r in recs.values()} == {"X"}


@pytest.mark.parametrize("seed", [0, 1])
def test_bounds_that_should_hold_hold_on_random_instances(seed):
    inst = random_instance(L=4, d_V=3, d_ff=6, seed=seed, sigma=0.7, sharpness=2.0)
    recs = ck.evaluate(inst)
    must = {"thm1.printed", "thm1.proof", "thm1.repaired", "thm6.block.exact", "thm6.full.exact", "thm6.full.explicit",
            "sa.dA_dT_general", "sa.A", "sa.A_sqrtL", "sa.R", "sa.S", "sa.d2A_dT2", "sa.Z2", "prop.Y",
            "prop.FFN", "prop.S", "lemma4.J.std", "lemma4.H.std", "thm6.B1", "thm6.B2", "thm6.JSY", "thm6.Bk"}
    seen = set()
    for r in recs:
        assert set(r) >= {"check", "sub", "bound", "exact", "ratio"}
        if r["check"] in must:
            seen.add(r["check"])
            assert ck.holds(r["ratio"]), (r["check"], r["sub"], r["ratio"])
    assert seen == must
    assert {r["sub"] for r in recs if r["check"] == "lemma4.J.std"} == {"U", "S"}
    # at uniform attention (W_Q W_Kᵀ = 0) the proof's ‖∂A/∂T‖ = 1/L is an equality
    uni = random_instance(L=4, d_V=3, d_ff=6, seed=seed, sharpness=0.0)
    r = [x for x in ck.evaluate(uni, parts=("sa",)) if x["check"] == "sa.dA_dT"][0]
    assert r["ratio"] == pytest.approx(1.0, abs=1e-12) and ck.holds(r["ratio"])


def test_evaluate_returns_only_the_parts_asked_for():
    inst = random_instance(L=3, d_V=2, d_ff=4, seed=3)
    sa = ck.evaluate(inst, parts=("sa",))
    assert sa and {ck.BOUNDS[r["check"]].part for r in sa} == {"sa"}
    ln = ck.evaluate(inst, parts=("ln",), ln_input="X")
    assert {r["check"].split(".")[0] for r in ln} == {"lemma4"} and {r["sub"] for r in ln} == {"X"}
    light = ck.evaluate(inst, parts=("block",), tensors=False, hessian=False)
    assert not any(ck.BOUNDS[r["check"]].tensors for r in light) \
        and "thm6.full.explicit" not in {r["check"] for r in light}


def test_balance_rescaling_breaks_theorem1():
    # W_Q → a W_Q, W_K → W_K/a leaves F unchanged; the K–K block grows like a², M does not.
    rat = []
    for a in (1.0, 64.0, 4096.0):
        recs = ck.evaluate(random_instance(L=8, d_V=4, seed=0, balance=a), parts=("sa",))
        worst: dict = {}
        for r in recs:  # a bound's smallest ratio over its entries (the maxblock rows have one per block)
            worst[r["check"]] = min(worst.get(r["check"], float("inf")), r["ratio"])
        rat.append(worst)
    assert rat[0]["thm1.printed"] > 1e3 and rat[0]["thm1.proof"] > 1e3
    assert rat[2]["thm1.printed"] < 1 and rat[2]["thm1.proof"] < 1
    assert rat[1]["thm1.proof"] / rat[2]["thm1.proof"] > 100      # ≈ a^{-2} once the K–K block dominates
    assert all(r["thm1.repaired"] >= 1 for r in rat), "the repaired bound has the K–K row"
    assert rat[2]["thm1.printed.maxblock"] < 1 and torch.tensor(rat[2]["thm1.repaired.KK"]) >= 1
