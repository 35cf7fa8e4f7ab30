"""The bounds of the paper, and the companion's own, each declared once as a :class:`~.bound.Bound`.

A declaration holds everything about its bound: the inequality in words, where the paper states it, the two
sides (``terms``: the formula of :mod:`.formulas` against the exact quantity of :mod:`.quantities`), the expected
verdict (a known failure says why), what it repairs (a companion's repair), and its title and TeX for the errata
page. Each group of bounds is one tuple; :data:`BOUNDS` (read by :mod:`.registry`) is all of them, keyed by id, in
the order of the rows. The code hash of whatever evaluates the bounds reaches every declaration through it.
"""
from __future__ import annotations

import math

from . import formulas
from ..row import by_id
from .bound import Bound

__all__ = ["BOUNDS", "admissible", "ADMISSIBLE_TOL"]

T1 = "Theorem 1 (§3.1)"
C1 = "Theorem 1 proof (App. C.1)"
R1 = "Theorem 1, repaired (this companion)"
R6 = "Theorem 6 proof, block (2,1) repaired (this companion)"
C6 = "Theorem 6 proof (App. C.6)"
L4 = "Lemma 4 (App. D)"
PROP = "Proposition (App. D)"
UNIFORM = "uniform-attention-1-over-n"  # the erratum behind every "‖∂A/∂T‖ ≤ 1/L" step
LOSS_FACTOR = "lemma2-phi-loss-factor"

# why the steps that use ‖∂A/∂T‖ ≤ 1/L fail (the reason of several known failures)
ONE_OVER_L = ("it uses ‖∂A/∂T‖ ≤ 1/L, the value at exactly uniform attention (Noci et al., Lemma A.3), for every "
              "attention; for general softmax rows the valid bound is 1/2 (Gershgorin)")
MISSING_KK = ("no row bounds the K–K and V–K blocks: rebalancing W_Q → a W_Q, W_K → W_K/a leaves the attention and the "
              "loss unchanged and makes the K–K block grow like a²")


# ----------------------------------------------------------------------------- TeX of the errata page
def _n(x: str) -> str:
    return r"\lVert{}\rVert_2".format(x)  # ‖x‖₂


X, WQ, WK, WV, W2 = _n(r"\mathbf X"), _n(r"\mathbf W_Q"), _n(r"\mathbf W_K"), _n(r"\mathbf W_V"), _n(r"\mathbf W_2")
SIGMA = r"\sigma_{\min}"


# ----------------------------------------------------------------------------- Theorem 1 and its proof
def _against(rhs, key: str, exact: str | None = None, sub: str = ""):
    """The terms of a bound with one entry: the right-hand side ``rhs(q)[key]`` (a formula of :mod:`.formulas` at
    the quantities ``q``) against the exact quantity ``q[exact]`` (default: ``q[key]``)."""
    return lambda q: [(sub, rhs(q)[key], q[key if exact is None else exact])]


def _sa_args(q):
    return q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["norm_T"], q["L"], q["d_V"], q["d_K"]


def _theorem1(variant: str, rank: bool):
    """``q -> `` Theorem 1's M and rows as ``variant`` (``rank``: with the proof's √rank(F − Target))."""
    return lambda q: formulas.theorem1(*_sa_args(q), variant=variant, **({"rank": q["rank_FT"]} if rank else {}))


def _thm1_whole(variant: str):
    return _against(_theorem1(variant, variant != "printed"), "M", "H")


def _thm1_row(variant: str, b: str):
    return _against(_theorem1(variant, variant != "repaired"), b, f"H_{b}", b)


def _thm1_maxblock(variant: str):
    """The largest of the four rows against each of the nine blocks: the smallest ratio is the bound's, at the
    largest block (the sub it names)."""
    def terms(q):
        rows = _theorem1(variant, variant != "printed")(q)
        top = formulas.largest(rows[b] for b in ("VV", "QQ", "VQ", "QK"))
        return [(p + r, top, q[f"H_{p}{r}"]) for p in "QKV" for r in "QKV"]
    return terms


ADMISSIBLE_TOL = 1e-12  # loss and attention deviation counted as exactly 0 (float64 round-off)


def admissible(q: dict) -> bool:
    """Whether the instance behind :func:`.quantities.sa_exact` output ``q`` satisfies every assumption in force
    for Theorem 1: an exact minimiser (‖F − Target‖_F = 0, loss 0) with exactly uniform attention (every entry of
    A equal to 1/L, which the proof's ‖∂A/∂T‖ ≤ 1/L needs)."""
    return q["R"] <= ADMISSIBLE_TOL * max(1.0, q["norm_T"]) and q["attn_uniform_dev"] <= ADMISSIBLE_TOL


THEOREM1 = (
    Bound("thm1.printed", "sa", T1, "‖H_i‖_2 ≤ M with M as printed in the statement (per-sample Hessian of the SA "
          "MSE w.r.t. W_Q, W_K, W_V), at every instance evaluated (the statement's w* is not enforced)", "thm1",
          _thm1_whole("printed"), role="statement", fails=MISSING_KK, trained=True,
          title="Theorem 1 as printed, on the instances evaluated",
          tex=_n(r"\mathbf H_i") + r"\le M\quad\text{(}M\text{ as printed in the statement)}"),
    Bound("thm1.printed.admissible", "sa", T1, "‖H_i‖_2 ≤ M as printed, only at instances that satisfy every "
          "assumption in force: an exact minimiser (Target = F, loss 0, the w* of the statement) with exactly uniform "
          "attention (the proof's ‖∂A/∂T‖ = 1/L)", "thm1", _thm1_whole("printed"), role="statement",
          applies=admissible, fails=MISSING_KK + "; at uniform attention and loss 0 the K–K block alone exceeds M",
          title="Theorem 1 as printed, at a minimiser that satisfies every assumption",
          tex=_n(r"\mathbf H_i(\mathbf w^*)") + r"\le M\quad\text{at loss }0\text{ and uniform attention }"
          r"\mathbf A=\tfrac1L\mathbf 1\mathbf 1^\top"),
    Bound("thm1.proof", "sa", C1, "‖H_i‖_2 ≤ M with M as at the end of the proof (constants 2, √rank(F−Target))",
          "thm1", _thm1_whole("proof"), fails=MISSING_KK,
          title="Theorem 1, proof: the constant the proof ends with",
          tex=_n(r"\mathbf H_i") + r"\le M_{\text{proof}}\quad\text{(constants }2\text{ and }"
          r"\sqrt{\operatorname{rank}(\mathbf F-\mathbf{Target})}\text{)}"),
    *(Bound(f"thm1.proof.{b}", "sa", C1, f"‖H({b[0]},{b[1]})‖_2 ≤ row {b} of the proof's final expression", "thm1",
            _thm1_row("proof", b), **({} if b == "VV" else dict(
                errata=(UNIFORM,), fails=ONE_OVER_L + " (the row's terms carry it: the Theorem 1 proof's terms below)",
                title=f"Theorem 1, proof: row {b} of the final expression",
                tex=_n(rf"\mathbf H(\mathbf W_{b[0]},\mathbf W_{b[1]})") + rf"\le r^{{\text{{proof}}}}_{{{b}}}")))
      for b in ("VV", "QQ", "VQ", "QK")),
    Bound("thm1.printed.maxblock", "sa", T1, "max over all 9 blocks of ‖H(W_i,W_j)‖ ≤ max of the 4 printed rows "
          "(the step '3 max_ij' needs it; no row bounds the K–K and V–K blocks)", "thm1", _thm1_maxblock("printed"),
          fails=MISSING_KK, title="Theorem 1, proof: the step “3 max” over the four printed rows",
          tex=r"\begin{aligned}&\max_{i,j\in\{Q,K,V\}}" + _n(r"\mathbf H(\mathbf W_i,\mathbf W_j)")
          + r"\le\max\big(r_{VV},r_{QQ},r_{VQ},r_{QK}\big)"
          r"\\&\text{(no row bounds the }K\text{–}K\text{ and }V\text{–}K\text{ blocks)}\end{aligned}"),
    Bound("thm1.proof.maxblock", "sa", C1, "max over all 9 blocks of ‖H(W_i,W_j)‖ ≤ max of the 4 rows of the proof",
          "thm1", _thm1_maxblock("proof"), fails=MISSING_KK,
          title="Theorem 1, proof: the same step over the proof's four rows",
          tex=r"\max_{i,j\in\{Q,K,V\}}" + _n(r"\mathbf H(\mathbf W_i,\mathbf W_j)") + r"\le\max\big(r^{\text{proof}}_{VV},"
          r"r^{\text{proof}}_{QQ},r^{\text{proof}}_{VQ},r^{\text{proof}}_{QK}\big)"),
    Bound("thm1.repaired", "sa", R1, "‖H_i‖_2 ≤ M_rep = 3 max(VV, QQ, KK, VQ, VK, QK): the printed rows with "
          "‖∂A/∂T‖ ≤ 1/2 in place of 1/L and the K–K, V–K rows added by the Q ↔ K symmetry", "thm1",
          _thm1_whole("repaired"), role="repair", claim=None, trained=True),
    *(Bound(f"thm1.repaired.{b}", "sa", R1, f"‖H({b[0]},{b[1]})‖_2 ≤ row {b} of the repaired bound", "thm1",
            _thm1_row("repaired", b), role="repair", claim=None, twin_of="thm1.proof.VV" if b == "VV" else None)
      for b in ("VV", "QQ", "KK", "VQ", "VK", "QK")),
)


def _thm1_term(t: str):
    return lambda q: [(t[3:], formulas.theorem1_terms(*_sa_args(q), rank=q["rank_FT"])[t], q[t])]


# term -> (the inequality in words, known failure, title, TeX)
_HO_TEX = r"\le\frac{2}{L^3d_Vd_K}"
_THM1_TERMS = {
    "Ho_VV": ("‖H_o(V,V)‖ ≤ 2L/d_V ‖X‖²", None, None, None),
    "Ho_QQ": ("‖H_o(Q,Q)‖ ≤ 2/(L³d_Vd_K)‖W_K‖²‖W_V‖²‖X‖⁶", ONE_OVER_L, "Theorem 1, proof: the Q–Q term",
              _n(r"\mathbf H_o(\mathbf W_Q,\mathbf W_Q)") + _HO_TEX + WK + "^2" + WV + "^2" + X + "^6"),
    "Ho_VQ": ("‖H_o(V,Q)‖ ≤ 2/(L d_V√d_K)‖W_V‖‖W_K‖‖X‖⁴", ONE_OVER_L + " (through ‖Z_1‖ ≤ ‖X‖³/L)",
              "Theorem 1, proof: the V–Q outer-product term",
              _n(r"\mathbf H_o(\mathbf W_V,\mathbf W_Q)") + r"\le\frac{2}{Ld_V\sqrt{d_K}}" + WV + WK + X + "^4"),
    "Ho_QK": ("‖H_o(Q,K)‖ ≤ 2/(L³d_Vd_K)‖W_K‖‖W_Q‖‖W_V‖²‖X‖⁶", ONE_OVER_L, "Theorem 1, proof: the Q–K term",
              _n(r"\mathbf H_o(\mathbf W_Q,\mathbf W_K)") + _HO_TEX + WK + WQ + WV + "^2" + X + "^6"),
    "Hf_QQ": ("‖H_f(Q,Q)‖ ≤ 12/(d_Vd_K)√r(L‖X‖‖W_V‖+‖T‖)‖W_V‖‖W_K‖²‖X‖⁵", None, None, None),
    "Hf_VQ": ("‖H_f(V,Q)‖ ≤ 2√r/(L²√(d_Vd_K))(L‖X‖‖W_V‖+‖T‖)‖W_K‖‖X‖³", ONE_OVER_L + " (one of its two 1/L)",
              "Theorem 1, proof: the V–Q functional term",
              _n(r"\mathbf H_f(\mathbf W_V,\mathbf W_Q)") + r"\le\frac{2\sqrt r}{L^2\sqrt{d_Vd_K}}\big(L" + X + WV
              + r"+\lVert\mathbf T\rVert_2\big)" + WK + X + "^3"),
    "Hf_QK": ("‖H_f(Q,K)‖ ≤ sum of the two derived terms (12/(Ld_Vd_K)… + 2√d_V/(L²d_V√d_K)…)", None, None, None),
}
THEOREM1_TERMS = tuple(
    Bound(f"thm1.term.{t}", "sa", C1, w, "thm1", _thm1_term(t), errata=(UNIFORM,) if fails else (), fails=fails,
          title=title, tex=tex, twin_of="thm1.proof.VV" if t == "Ho_VV" else None)
    for t, (w, fails, title, tex) in _THM1_TERMS.items())


def _sa_lemmas(q) -> dict:
    """The right-hand sides of the proof's lemmas (:func:`.formulas.sa_lemmas`) at the quantities ``q``."""
    return formulas.sa_lemmas(q["norm_X"], q["norm_V"], q["norm_T"], q["L"], q["d_V"], q["rank_FT"])


_REFERENCE = dict(role="reference", claim=None)
_SA_LEMMAS = {  # lemma -> (the inequality in words, the exact quantity it bounds, the rest of its declaration)
    "dA_dT": ("‖∂A/∂T‖_2 ≤ 1/L (uniform attention, Noci et al. Lemma A.3, used for all attention)", "dA_dT",
              dict(errata=(UNIFORM,), fails=ONE_OVER_L, title="Theorem 1, proof: the softmax Jacobian at any attention",
                   tex=_n(r"\partial\mathbf A/\partial\mathbf T") + r"\le\frac1L\quad\text{(its value at uniform "
                   r"attention, used for every attention)}")),
    "dA_dT_general": ("‖∂A/∂T‖_2 ≤ 1/2 (general softmax rows, by Gershgorin)", "dA_dT", _REFERENCE),
    "Z1": ("‖Z_1‖_2 ≤ ‖X‖³/L", "Z1", dict(errata=(UNIFORM,), fails=ONE_OVER_L + " (‖Z_1‖ carries ‖∂A/∂T‖)",
                                          title="Theorem 1, proof: the norm of Z₁",
                                          tex=_n(r"\mathbf Z_1") + r"\le\frac{" + X + "^3}{L}")),
    "A": ("‖A‖_2 ≤ L", "A", {}),
    "A_sqrtL": ("‖A‖_2 ≤ √L (row-stochastic A: ‖A‖_1 = 1, ‖A‖_∞ ≤ L)", "A", _REFERENCE),
    "M1": ("‖M_1‖_2 = ‖A X‖_2 ≤ L‖X‖", "M1", {}),
    "R": ("‖R_m‖_2 = ‖F − Target‖_F ≤ √rank(F−T)(L‖X‖‖W_V‖ + ‖Target‖)", "R", {}),
    "S": ("‖S‖_2 ≤ √d_V (S = (I⊗K)(vec_r I ⊗ I), as written d_V³ × d_V)", "S", {}),
    "d2A_dT2": ("‖∂²A/∂T²‖_2 ≤ 6", "d2A_dT2", {}),
    "Z2": ("‖Z_2‖_2 ≤ 6‖X‖⁵", "Z2", {}),
}
THEOREM1_LEMMAS = tuple(Bound(f"sa.{k}", "sa", C1, w, "thm1", _against(_sa_lemmas, k, exact), **kw)
                        for k, (w, exact, kw) in _SA_LEMMAS.items())


# ----------------------------------------------------------------------------- Lemma 4 (LayerNorm)
def _lemma4(reading: str):
    """Lemma 4's bounds with σ_min read as ``reading``: "stated" (min_i ‖M_i‖_2, as the lemma defines it) or
    "std" (min_i ‖M_i‖_2/√n, the σ of P = diag⁻¹(σ) the proof uses)."""
    return lambda ln: formulas.lemma4(ln["norm"], ln["row_norm_min" if reading == "stated" else "std_min"], ln["m"],
                                      ln["n"])


SIGMA_AS_ROW_NORM = ("the lemma defines σ_min as the smallest centred row norm, where its proof needs the smallest row "
                     "standard deviation (a factor √n): every 1/σ_min is √n times too small")
_LEMMA4 = {  # k -> (the inequality in words, title, TeX of the stated reading)
    "J": ("‖J_LN‖ ≤ 1/σ_min + ‖X‖²/(√n σ_min³)", "Lemma 4: the bound on LayerNorm's Jacobian",
          _n(r"\mathbf J_{\LN}") + r"\le\frac1{" + SIGMA + r"}+\frac{" + X + r"^2}{\sqrt n\," + SIGMA + "^3}"),
    "H": ("‖H_LN‖ ≤ ‖X‖/σ_min³(1+√(m/n)) + ‖X‖²/(√n σ_min³) + 3‖X‖³/(n σ_min⁵)",
          "Lemma 4: the bound on LayerNorm's Hessian",
          _n(r"\mathbf H_{\LN}") + r"\le\frac{" + X + "}{" + SIGMA + r"^3}\Big(1+\sqrt{\tfrac mn}\Big)+\frac{" + X
          + r"^2}{\sqrt n\," + SIGMA + r"^3}+\frac{3" + X + r"^3}{n\," + SIGMA + "^5}"),
    "dP": ("‖∂P/∂X‖ ≤ ‖X‖/(√n σ_min³) (proof step)", "Lemma 4, proof: the bound on ∂P/∂X",
           _n(r"\partial\mathbf P/\partial\mathbf X") + r"\le\frac{" + X + r"}{\sqrt n\," + SIGMA + "^3}"),
    "d2P": ("‖∂²P/∂X²‖ ≤ ‖X‖/(√n σ_min³) + 3‖X‖²/(n σ_min⁵) (proof step)", "Lemma 4, proof: the bound on ∂²P/∂X²",
            _n(r"\partial^2\mathbf P/\partial\mathbf X^2") + r"\le\frac{" + X + r"}{\sqrt n\," + SIGMA + r"^3}+\frac{3"
            + X + r"^2}{n\," + SIGMA + "^5}"),
}
LEMMA4 = tuple(b for k, (w, title, tex) in _LEMMA4.items() for b in (
    Bound(f"lemma4.{k}.stated", "ln", L4, w + ", σ_min = min_i ‖M_i‖_2 as the lemma defines it", "lemma4",
          _against(_lemma4("stated"), k), role="statement" if k in ("J", "H") else "proof", fails=SIGMA_AS_ROW_NORM,
          trained=k in ("J", "H"), title=title, tex=tex),
    Bound(f"lemma4.{k}.std", "ln", L4, w + ", σ_min = min_i ‖M_i‖_2/√n (the σ of P = diag⁻¹(σ) the proof uses)",
          "lemma4", _against(_lemma4("std"), k), role="repair", claim=None, trained=k in ("J", "H"),
)))


# ----------------------------------------------------------------------------- the Proposition and Theorem 6
def _proposition(q) -> dict:
    return formulas.proposition(q["L"], q["d_V"], q["d_ff"], q["norm_Y"], q["norm_1"], q["norm_2"])


def _explicit(q, mirror_21: bool = False) -> dict:
    """App. C.6's estimates at the block's quantities ``q`` (:func:`.formulas.theorem6_explicit`; ``mirror_21``:
    block (2,1) estimated as the proof estimates block (1,2))."""
    n = {k: q[f"norm_{k}"] for k in ("X", "Q", "K", "V", "1", "2")}
    return formulas.theorem6_explicit(n, q["L"], q["d_V"], q["d_K"], q["d_ff"], q["norm_relu"], q["R"], q["ln_U"],
                                      q["ln_S"]["row_norm_min"], mirror_21=mirror_21)


PROPOSITION = tuple(
    Bound(f"prop.{k}", "prop", PROP, what, "prop", _against(_proposition, k, f"norm_{k}"), role="statement",
          trained=k == "S")
    for k, what in (("Y", "‖Y‖_2 ≤ √(L d_V)"), ("FFN", "‖FFN(Y)‖_2 ≤ √min(L,d_ff) ‖Y‖‖W_1‖‖W_2‖"),
                    ("S", "‖S‖_2 ≤ √(L d_V)(1 + √min(L,d_ff)‖W_1‖‖W_2‖)")))

# statements that follow from their ingredients by the triangle inequality and sub-multiplicativity alone: with the
# exact ingredient norms they cannot fail (said on their rows)
TRIANGLE = ("they follow from Theorem 5 and the Gauss–Newton split by the triangle inequality, ‖AB‖₂ ≤ ‖A‖₂‖B‖₂ and "
            "the 5 × 5 block-matrix inequality")
_BLOCK_TEX = (_n(r"\mathbf H_{\rm tr}^{(i,j)}") + r"\le" + _n(r"\mathbf J_Z") + _n(r"\boldsymbol\xi_{ij}") + "+"
              + _n(r"\mathbf B_i") + _n(r"\mathbf H_Z") + _n(r"\mathbf B_j"))
XI21_SWAPPED = ("the proof's ξ_12 and ξ_21 are swapped and the printed ξ_21 is ill-dimensioned; ∂B_1/∂W_2 does not "
                "depend on W_2, so the bound's ratio falls with ‖W_2‖")

THEOREM6 = (
    Bound("thm6.block.exact", "block", "Theorem 6, per-block inequality", "‖H_tr^(i,j)‖ ≤ ‖J_Z‖‖ξ_ij‖ + "
          "‖B_i‖‖H_Z‖‖B_j‖ with exact ingredient norms (per pair)", "thm6",
          lambda q: [(i + j, formulas.theorem6_block(q, i, j), q[f"Htr_{i}{j}"]) for i, j in formulas.PAIRS],
          role="statement", tensors=True, by_construction=TRIANGLE,
          title="Theorem 6: the displayed per-block inequality", tex=_BLOCK_TEX),
    Bound("thm6.block.explicit", "block", C6, "‖H_tr^(i,j)‖ ≤ the same with every ingredient replaced by its App. C.6 "
          "estimate (per pair): the explicit per-block bound the statement refers to (\"Explicit expressions for each "
          "bound are stated in the proof\"); the proof writes out blocks (1,1), (1,2), (1,k), (k,l) and then \"etc.\"",
          "thm6", lambda q: [(i + j, _explicit(q)[f"pair_{i}{j}"], q[f"Htr_{i}{j}"]) for i, j in formulas.PAIRS],
          role="proof", tensors=True, fails="block (2,1), which the proof never writes out, takes the ξ_21 estimate; "
          + XI21_SWAPPED, title="Theorem 6, proof: the explicit bound on each block, instantiated from App. C.6",
          tex=r"\begin{aligned}&" + _BLOCK_TEX + r"\\&\text{with every factor replaced by its App. C.6 estimate}"
          r"\end{aligned}"),
    Bound("thm6.block.explicit.repaired", "block", R6, "the explicit per-block bound with block (2,1) estimated as the "
          "proof estimates its mirror (1,2): ‖ξ_21‖ = ‖∂B_2/∂W_1‖ ≤ √d_V‖Y‖ (the estimate App. C.6 prints as ξ_12's) in "
          "place of √d_ff‖W_2‖", "thm6",
          lambda q: [(i + j, _explicit(q, mirror_21=True)[f"pair_{i}{j}"], q[f"Htr_{i}{j}"]) for i, j in formulas.PAIRS],
          role="repair", claim=None, tensors=True, repairs="thm6.block.explicit",
          title="Theorem 6, proof: block (2,1) estimated as the proof estimates its mirror (1,2)",
          tex=_n(r"\mathbf H_{\rm tr}^{(2,1)}") + r"\le" + _n(r"\mathbf J_Z") + r"\sqrt{d_V}\," + _n(r"\mathbf Y")
          + "+" + _n(r"\mathbf B_2") + _n(r"\mathbf H_Z") + _n(r"\mathbf B_1")),
    Bound("thm6.full.exact", "block", "Theorem 6, whole-Hessian inequality", "‖H‖ ≤ M_tr = 5 max_ij(2/(Ld_V)"
          "‖∂Z/∂W_i‖‖∂Z/∂W_j‖ + ‖R^tr‖‖H_tr^(i,j)‖), exact ingredients", "thm6",
          lambda q: [("", formulas.theorem6_full(q, q["L"], q["d_V"])[0], q["H"])], role="statement",
          applies=lambda q: "H" in q, tensors=True, hessian=True, by_construction=TRIANGLE,
          title="Theorem 6: the displayed whole-Hessian inequality",
          tex=_n(r"\mathbf H") + r"\le M_{\rm tr}\quad\text{(exact ingredient norms)}"),
    Bound("thm6.full.explicit", "block", C6, "‖H‖ ≤ M_tr with all ingredients from App. C.6, Lemma 4 (stated σ_min) "
          "and the Proposition: the explicit whole-Hessian constant", "thm6",
          _against(_explicit, "M_tr", "H"), role="proof",
          applies=lambda q: "H" in q, hessian=True, trained=True, title="Theorem 6: the explicit whole-Hessian bound",
          tex=_n(r"\mathbf H") + r"\le M_{\rm tr}\quad\text{(every ingredient replaced by its App. C.6 estimate)}"),
    Bound("thm6.B1", "block", C6, "‖B_1‖ ≤ ‖W_2‖‖Y‖", "thm6", lambda q: [("", q["norm_2"] * q["norm_Y"], q["B_1"])]),
    Bound("thm6.B2", "block", C6, "‖B_2‖ = ‖σ(Y W_1)‖ (an equality; ratio 1 expected)", "thm6",
          lambda q: [("", q["norm_relu"], q["B_2"])]),
    Bound("thm6.Bk", "block", C6, "‖B_k‖ ≤ ‖J_SY‖‖J_Y‖‖G_k‖ (k = K, Q, V; exact factors)", "thm6",
          lambda q: [(k, q["J_SY"] * q["J_Y"] * q[f"G_{k}"], q[f"B_{k}"]) for k in formulas.ATT]),
    Bound("thm6.JSY", "block", C6, "‖J_SY‖ ≤ ‖W_2‖‖W_1‖ + 1", "thm6",
          lambda q: [("", q["norm_2"] * q["norm_1"] + 1, q["J_SY"])]),
)


def _jacobians(q) -> dict:
    return formulas.jacobian_bounds(q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["L"], q["d_K"])


THEOREM6_JACOBIANS = (
    Bound("thm6.GV", "block", C6, "‖G_V‖ = ‖∂F/∂W_V‖ ≤ L‖X‖", "thm6", _against(_jacobians, "G_V")),
    *(Bound(f"thm6.G{k}", "block", C6, f"‖G_{k}‖ ≤ ‖W_V‖‖W_{o}‖‖X‖³/(L√d_K)", "thm6", _against(_jacobians, f"G_{k}"),
            errata=(UNIFORM,), fails=ONE_OVER_L + f" (G_{k} carries ‖∂A/∂T‖; the ratio falls like 2/L)",
            title=f"Theorem 6, proof: the bound on G_{k}",
            tex=_n(rf"\mathbf G_{k}") + r"\le\frac{" + WV + (WK if k == "Q" else WQ) + X + r"^3}{L\sqrt{d_K}}")
      for k, o in (("Q", "K"), ("K", "Q"))),
)


def _phi(kl: str, loss_factor: bool):
    """A printed Φ bound (App. C.6, :func:`.formulas.phi_bounds`) against ``‖Φ_kl‖ = ‖∂²F/∂W_k∂W_l‖``; without the
    loss factor, the bound multiplied by ``L d_V/2`` (removes the loss factor 2/(L d_V))."""
    def terms(q):
        b = formulas.phi_bounds(q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["L"], q["d_V"], q["d_K"])[kl]
        if not loss_factor:
            b = q["L"] * q["d_V"] / 2 * b
        return [(kl, b, q[f"Phi_{kl}"])]
    return terms


WITH_LOSS_FACTOR = ("Φ is a second derivative of the attention output alone, yet the printed bound carries the loss "
                    "factor 2/(L d_V) (erratum lemma2-phi-loss-factor): too small by L d_V/2")
_A, _B = r"\frac{12}{Ld_Vd_K}", r"\frac{2}{L^2\sqrt{d_Vd_K}}"
# kl -> (the inequality in words, known failure without the loss factor, TeX of the right-hand side). The last five
# are "by symmetry" (App. C.6 writes out QQ, VQ and QK and says the others follow): Q ↔ K exchanged in the bound.
_PHI = {
    "QQ": ("‖Φ_QQ‖ = ‖∂²F/∂W_Q²‖ ≤ 12/(L d_V d_K)‖W_V‖‖W_K‖²‖X‖⁵", None, _A + WV + WK + "^2" + X + "^5"),
    "VQ": ("‖Φ_VQ‖ ≤ 2/(L²√(d_Vd_K))‖W_K‖‖X‖³", ONE_OVER_L, _B + WK + X + "^3"),
    "QK": ("‖Φ_QK‖ ≤ 12/(Ld_Vd_K)‖W_V‖‖W_K‖‖W_Q‖‖X‖⁵ + 2/(L²√(d_Vd_K))‖W_V‖‖X‖³", None,
           _A + WV + WK + WQ + X + "^5+" + _B + WV + X + "^3"),
    "KK": ("‖Φ_KK‖ ≤ 12/(L d_V d_K)‖W_V‖‖W_Q‖²‖X‖⁵ (by symmetry: QQ with Q ↔ K)", None, _A + WV + WQ + "^2" + X + "^5"),
    "VK": ("‖Φ_VK‖ ≤ 2/(L²√(d_Vd_K))‖W_Q‖‖X‖³ (by symmetry: VQ with Q ↔ K)", ONE_OVER_L, _B + WQ + X + "^3"),
    "QV": ("‖Φ_QV‖ = ‖∂²F/∂W_Q∂W_V‖ ≤ 2/(L²√(d_Vd_K))‖W_K‖‖X‖³ (by symmetry: the bound of VQ)", ONE_OVER_L,
           _B + WK + X + "^3"),
    "KV": ("‖Φ_KV‖ ≤ 2/(L²√(d_Vd_K))‖W_Q‖‖X‖³ (by symmetry: the bound of VK)", ONE_OVER_L, _B + WQ + X + "^3"),
    "KQ": ("‖Φ_KQ‖ ≤ 12/(Ld_Vd_K)‖W_V‖‖W_K‖‖W_Q‖‖X‖⁵ + 2/(L²√(d_Vd_K))‖W_V‖‖X‖³ (by symmetry: QK with Q ↔ K)", None,
           _A + WV + WK + WQ + X + "^5+" + _B + WV + X + "^3"),
}
_PHI_AS = r"\quad\text{(}\boldsymbol\Phi\text{ with the loss factor }\tfrac{2}{Ld_V}\text{)}"
_PHI_WITHOUT = r"\quad\text{(}\boldsymbol\Phi=\partial^2\mathbf F/\partial\mathbf W_k\partial\mathbf W_l\text{)}"


def _phi_pair(kl: str) -> tuple[Bound, Bound]:
    """The Φ bound ``kl`` of :data:`_PHI` as printed, and without the loss factor."""
    w, fails, rhs = _PHI[kl]
    err = (LOSS_FACTOR,) + ((UNIFORM,) if fails else ())
    lhs = _n(rf"\boldsymbol\Phi_{{{kl}}}") + r"\le"
    sym = "" if kl in ("QQ", "VQ", "QK") else " (by symmetry)"
    return (Bound(f"thm6.Phi.{kl}", "block", C6, w + ", as printed (with the loss factor 2/(L d_V) of erratum "
                  "lemma2-phi-loss-factor)", "thm6", _phi(kl, True), errata=err, twin_of=f"thm6.Phi.{kl}.no_loss_factor",
                  fails=WITH_LOSS_FACTOR + (" (its ratio falls like 1/(L d_V))" if kl in ("QQ", "KK") else ""),
                  tensors=True, title=f"Theorem 6, proof: the bound on Φ_{kl}{sym}, as printed", tex=lhs + rhs + _PHI_AS),
            Bound(f"thm6.Phi.{kl}.no_loss_factor", "block", C6, w + " with the loss factor 2/(L d_V) removed: a "
                  "failure that remains is not the loss-factor erratum", "thm6", _phi(kl, False), errata=err[1:],
                  fails=fails, tensors=True,
                  **(dict(title=f"Theorem 6, proof: the bound on Φ_{kl}{sym}, without the loss factor",
                          tex=lhs + rhs + _PHI_WITHOUT) if fails else {})))


THEOREM6_PHI = tuple(b for kl in _PHI for b in _phi_pair(kl))


def _xi_k(row: str):
    """ξ_1k (row "1": √d_ff‖W_2‖‖J_Y‖‖G_k‖) or ξ_2k (row "2": √d_V‖W_1‖‖J_Y‖‖G_k‖), k = K, Q, V."""
    def terms(q):
        c = math.sqrt(q["d_ff"]) * q["norm_2"] if row == "1" else math.sqrt(q["d_V"]) * q["norm_1"]
        return [(k, c * q["J_Y"] * q[f"G_{k}"], q[f"xi_{row}{k}"]) for k in formulas.ATT]
    return terms


THEOREM6_XI = (
    Bound("thm6.xi12", "block", C6, "‖ξ_12‖ ≤ √d_V‖Y‖, for the object the proof differentiates (B_2 w.r.t. W_1)",
          "thm6", lambda q: [("d(B_2)/dW_1", math.sqrt(q["d_V"]) * q["norm_Y"], q["xi_21"])], errata=("xi12-is-xi21",),
          tensors=True),
    Bound("thm6.xi21", "block", C6, "‖ξ_21‖ ≤ √d_ff‖W_2‖, for the object the proof differentiates (B_1 w.r.t. W_2)",
          "thm6", lambda q: [("d(B_1)/dW_2", math.sqrt(q["d_ff"]) * q["norm_2"], q["xi_12"])],
          errata=("xi12-is-xi21", "xi21-ill-dimensioned"), fails=XI21_SWAPPED, tensors=True,
          title="Theorem 6, proof: the bound on ξ₂₁", tex=_n(r"\boldsymbol\xi_{21}") + r"\le\sqrt{d_{\rm ff}}\," + W2),
    Bound("thm6.xi1k", "block", C6, "‖ξ_1k‖ = ‖∂B_1/∂W_k‖ ≤ √d_ff‖W_2‖‖J_Y‖‖G_k‖ (exact factors)", "thm6", _xi_k("1"),
          tensors=True),
    Bound("thm6.xi2k", "block", C6, "‖ξ_2k‖ = ‖∂B_2/∂W_k‖ ≤ √d_V‖W_1‖‖J_Y‖‖G_k‖ (exact factors)", "thm6", _xi_k("2"),
          tensors=True),
    Bound("thm6.xikl", "block", C6, "‖ξ_kl‖ ≤ ‖J_SY‖(‖G_k‖‖H_Y‖‖G_l‖ + ‖J_Y‖‖Φ_kl‖) (exact factors)", "thm6",
          lambda q: [(k + l, q["J_SY"] * (q[f"G_{k}"] * q["H_Y"] * q[f"G_{l}"] + q["J_Y"] * q[f"Phi_{k}{l}"]),
                      q[f"xi_{k}{l}"]) for k in formulas.ATT for l in formulas.ATT], tensors=True),
)

# ----------------------------------------------------------------------------- cross-entropy and the batch
# their quantities are made where their exact values are (bounds.ce.ce_records, bounds.training.batch_records)
CROSS_ENTROPY_AND_BATCH = (
    Bound("ce.output_factor", "ce", "§5 (cross-entropy) / this companion", "‖diag(p) − p pᵀ‖_2 ≤ 1/2 for the softmax "
          "probabilities p of the head (Gershgorin)", "ce", lambda q: [("", 0.5, q["softmax_factor"])],
          role="reference", claim=None, trained=True),
    Bound("thm6.full.explicit.ce", "ce", "§5 (cross-entropy) + Theorem 6 / App. C.6", "‖∇²_W CE(W_h mean(Z) + b_h, y)‖_2 "
          "≤ M_tr with 2/(L d_V) → ½‖P‖², ‖R^tr‖ → ‖∂l/∂Z‖ (P = ∂logits/∂Z), other ingredients from App. C.6; trained "
          "MNIST block and head", "ce", lambda q: [("", q["M_tr"], q["H"])], role="statement", trained=True),
    Bound("thm1.printed.batch", "batch", T1, "‖(1/n)Σ_i H_i‖_2 (curvlinops Hessian, Lanczos) ≤ max_i M_i (printed) over "
          "n MNIST samples", "thm1", lambda q: [(f"n={q['n']}", q["M_thm1"], q["H_sa"])], role="statement",
          trained=True),
    Bound("thm6.full.explicit.batch", "batch", "Theorem 6 / App. C.6", "‖(1/n)Σ_i H_i‖_2 (curvlinops Hessian, Lanczos) "
          "≤ max_i M_tr,i (explicit) over n MNIST samples", "thm6", lambda q: [(f"n={q['n']}", q["M_thm6"], q["H_block"])],
          role="statement", trained=True),
)

# every bound, keyed by id, in the order of the rows (the registry adds to it: registry.register)
BOUNDS: dict[str, Bound] = by_id(*THEOREM1, *THEOREM1_TERMS, *THEOREM1_LEMMAS, *LEMMA4, *PROPOSITION, *THEOREM6,
                                 *THEOREM6_JACOBIANS, *THEOREM6_PHI, *THEOREM6_XI, *CROSS_ENTROPY_AND_BATCH)
