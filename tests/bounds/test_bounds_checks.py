"""curvature_gap.bounds.checks: the registry of bounds and their evaluation on instances."""
from __future__ import annotations

import math

import pytest
import torch

from cases import randn
from curvature_gap.bounds import checks as ck
from curvature_gap.bounds import quantities as qt
from curvature_gap.exact.instances import random_instance

pytestmark = pytest.mark.usefixtures("one_thread")


def test_registry_is_consistent():
    assert ck.KNOWN_FAILURES <= set(ck.CHECKS)
    for cid, c in ck.CHECKS.items():
        assert c["part"] in ("sa", "ln", "prop", "block", "ce", "batch"), cid
        assert c["role"] in ("statement", "proof", "repair", "reference"), cid
        assert c["expect"] == ("fails" if cid in ck.KNOWN_FAILURES else "holds"), cid
        assert c["claim"] in ("holds", None) and c["what"] and c["ref"], cid
        if c["role"] in ("repair", "reference"):
            assert c["claim"] is None, f"{cid}: the companion's own checks make no claim about the paper"
    for cid in ck.CHECKS:
        if cid.endswith(".no_loss_factor"):
            assert cid.removesuffix(".no_loss_factor") in ck.CHECKS
    assert ck.needs_tensors("thm6.xi12") and not ck.needs_tensors("thm6.GQ")


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
    recs = {r["check"]: r for r in ck.records_ln(q, "X")}
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
    assert sa and {ck.part_of(r["check"]) for r in sa} == {"sa"}
    ln = ck.evaluate(inst, parts=("ln",), ln_input="X")
    assert {r["check"].split(".")[0] for r in ln} == {"lemma4"} and {r["sub"] for r in ln} == {"X"}
    light = ck.evaluate(inst, parts=("block",), tensors=False, hessian=False)
    assert not any(ck.needs_tensors(r["check"]) for r in light) and "thm6.full.explicit" not in {r["check"] for r in light}


def test_balance_rescaling_breaks_theorem1():
    # W_Q → a W_Q, W_K → W_K/a leaves F unchanged; the K–K block grows like a², M does not.
    rat = []
    for a in (1.0, 64.0, 4096.0):
        recs = ck.evaluate(random_instance(L=8, d_V=4, seed=0, balance=a), parts=("sa",))
        rat.append({r["check"]: r["ratio"] for r in recs})
    assert rat[0]["thm1.printed"] > 1e3 and rat[0]["thm1.proof"] > 1e3
    assert rat[2]["thm1.printed"] < 1 and rat[2]["thm1.proof"] < 1
    assert rat[1]["thm1.proof"] / rat[2]["thm1.proof"] > 100      # ≈ a^{-2} once the K–K block dominates
    assert all(r["thm1.repaired"] >= 1 for r in rat), "the repaired bound has the K–K row"
    assert rat[2]["thm1.printed.maxblock"] < 1 and torch.tensor(rat[2]["thm1.repaired.KK"]) >= 1
