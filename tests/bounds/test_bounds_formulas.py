"""curvature_gap.bounds.formulas: the bounds' right-hand sides, checked on hand-computed values."""
from __future__ import annotations

import math

import pytest

from curvature_gap.bounds import formulas as fm

R2 = math.sqrt(2)


def test_theorem1_printed_and_proof_hand_values():
    # ‖X‖=2, ‖W_Q‖=‖W_K‖=‖W_V‖=‖Target‖=1, L=2, d_V=2, d_K=1, rank(F−Target)=1; (L‖X‖‖W_V‖+‖T‖)=5
    a = (2.0, 1.0, 1.0, 1.0, 1.0, 2, 2, 1)
    p = fm.theorem1(*a, variant="printed")
    assert p["VV"] == pytest.approx(8.0, rel=1e-14)                 # 2L/d_V ‖X‖²
    assert p["QQ"] == pytest.approx(32 + 960 * R2, rel=1e-14)       # 8/(L³d_Vd_K)·64 + 12/(d_Vd_K)√2·5·32
    assert p["VQ"] == pytest.approx(16 + 40 * R2, rel=1e-14)        # 4/(Ld_V√d_K)·16 + 4√2/(L²√d_K)·5·8
    assert p["QK"] == pytest.approx(32 + 1000 * R2, rel=1e-14)      # 8/16·64 + 4√2·5/(Ld_V√d_K)(3L·32 + d_V/L·8)
    assert p["M"] == pytest.approx(96 + 3000 * R2, rel=1e-14)
    q = fm.theorem1(*a, rank=1, variant="proof")
    assert q["VV"] == pytest.approx(8.0, rel=1e-14)
    assert q["QQ"] == pytest.approx(8 + 960, rel=1e-14)             # 2/(L³d_Vd_K)·64 + 12/(d_Vd_K)·1·5·32
    assert q["VQ"] == pytest.approx(8 + 10 * R2, rel=1e-14)         # 2/(Ld_V√d_K)·16 + 2/(L²√(d_Vd_K))·5·8
    assert q["QK"] == pytest.approx(8 + 250 * R2, rel=1e-14)        # 2/16·64 + 2·5/(Ld_V√(d_Vd_K))·200
    assert q["M"] == pytest.approx(3 * 968, rel=1e-14)
    # the proof variant with rank = min(L, d_V) is what "rank ≤ min(L, d_V)" simplifies to
    assert fm.theorem1(*a, variant="proof")["QQ"] == pytest.approx(8 + 960 * R2, rel=1e-14)


def test_theorem1_repaired_hand_values_and_the_Q_K_symmetry():
    # ‖X‖=2, ‖W_Q‖=1, ‖W_K‖=3, ‖W_V‖=‖Target‖=1, L=4, d_V=2, d_K=1: r = L‖X‖‖W_V‖+‖T‖ = 9, √min(L,d_V) = √2
    rp = fm.theorem1(2.0, 1.0, 3.0, 1.0, 1.0, 4, 2, 1, variant="repaired")
    assert rp["VV"] == pytest.approx(16.0, rel=1e-14)                # 2L/d_V ‖X‖²
    assert rp["QQ"] == pytest.approx(144 + 15552 * R2, rel=1e-14)    # 2/(Ld_Vd_K)·9·64 + 12/(d_Vd_K)√2·9·9·32
    assert rp["KK"] == pytest.approx(16 + 1728 * R2, rel=1e-14)      # QQ with ‖W_K‖ -> ‖W_Q‖
    assert rp["VQ"] == pytest.approx(48 + 108 * R2, rel=1e-14)       # 2/(d_V√d_K)·3·16 + 2√2/(L√d_K)·9·3·8
    assert rp["VK"] == pytest.approx(16 + 36 * R2, rel=1e-14)
    assert rp["QK"] == pytest.approx(48 + 5220 * R2, rel=1e-14)      # 2/8·3·64 + 4√2·9/(Ld_V)(3L·3·32 + d_V/2·8)
    assert rp["M"] == pytest.approx(3 * (144 + 15552 * R2), rel=1e-14)
    swapped = fm.theorem1(2.0, 3.0, 1.0, 1.0, 1.0, 4, 2, 1, variant="repaired")
    assert swapped["KK"] == pytest.approx(rp["QQ"], rel=1e-14) and swapped["VK"] == pytest.approx(rp["VQ"], rel=1e-14)
    with pytest.raises(ValueError, match="printed, proof or repaired"):
        fm.theorem1(*(1.0,) * 5, 2, 2, 2, variant="tight")


def test_proof_terms_lemmas_lemma4_and_proposition_hand_values():
    t = fm.theorem1_terms(2.0, 1.0, 1.0, 1.0, 1.0, 2, 2, 1, rank=1)
    assert t["Ho_VV"] == pytest.approx(8.0) and t["Ho_QQ"] == pytest.approx(8.0) and t["Hf_QQ"] == pytest.approx(960.0)
    lem = fm.sa_lemmas(2.0, 1.0, 1.0, 4, 3, rank=2)
    assert (lem["dA_dT"], lem["dA_dT_general"], lem["A"], lem["S"]) == (0.25, 0.5, 4.0, pytest.approx(math.sqrt(3)))
    assert lem["Z1"] == pytest.approx(2.0) and lem["Z2"] == pytest.approx(192.0)
    assert lem["R"] == pytest.approx(math.sqrt(2) * 9)
    l4 = fm.lemma4(2.0, 0.5, 4, 16)
    assert l4["J"] == pytest.approx(2 + 4 / (4 * 0.125))             # 1/σ + ‖X‖²/(√n σ³)
    assert l4["dP"] == pytest.approx(2 / (4 * 0.125))
    assert l4["d2P"] == pytest.approx(4 + 3 * 4 / (16 * 0.5 ** 5))
    p = fm.proposition(4, 2, 9, 3.0, 2.0, 0.5)
    assert p["Y"] == pytest.approx(math.sqrt(8)) and p["FFN"] == pytest.approx(2 * 3.0)
    assert p["S"] == pytest.approx(math.sqrt(8) * (1 + 2 * 1.0))


def test_theorem6_full_takes_five_times_the_largest_pair():
    q = {f"dZ_{i}": 1.0 for i in "12KQV"} | {"R": 2.0} | {f"Htr_{i}{j}": 0.0 for i, j in fm.PAIRS}
    q["Htr_QK"] = 3.0
    M, terms = fm.theorem6_full(q, 2, 2)
    assert terms[("Q", "K")] == pytest.approx(0.5 + 6.0) and M == pytest.approx(5 * 6.5)
    M_ce, _ = fm.theorem6_full(q, 2, 2, out_curv=0.25)
    assert M_ce == pytest.approx(5 * (0.25 + 6.0))
    assert fm.theorem6_block({"J_Z": 2.0, "xi_QK": 3.0, "B_Q": 1.0, "H_Z": 4.0, "B_K": 0.5}, "Q", "K") == 8.0
