"""The registry of checks: one entry per bound or intermediate lemma, and their evaluation.

Every check compares a right-hand side ("bound", :mod:`.formulas`) with the exact left-hand side
("exact", :mod:`.quantities`) on an :class:`~curvature_gap.exact.instances.Instance`; ``ratio = bound / exact`` (≥ 1 means the
inequality holds there).  A check holds on a set of instances when its smallest ratio is at least
``1 − RTOL``; ``RTOL = 1e-9`` absorbs floating-point rounding in inequalities that are equalities
(e.g. ``‖S‖ = √d_V``, ``‖∂A/∂T‖ = 1/L`` at uniform attention) and is not a change of any constant.
An exact value below ``ZERO = 1e-12`` counts as 0 (ratio ``inf``).

Each record is ``{"check", "sub", "bound", "exact", "ratio"}``; ``sub`` names the block pair, the
LayerNorm input (``U`` = X + F, ``S`` = Y + FFN(Y), ``X`` = a raw matrix) or the row.
"""
from __future__ import annotations

import math

from ..exact.instances import Instance
from . import formulas as fm
from . import quantities as ex

__all__ = ["CHECKS", "BY_CONSTRUCTION", "RTOL", "ZERO", "evaluate", "ratio", "holds", "part_of", "needs_tensors", "KNOWN_FAILURES",
           "admissible", "ADMISSIBLE_TOL", "TERMS", "term"]

RTOL = 1e-9
ZERO = 1e-12

_T1 = "Theorem 1 (§3.1)"
_C1 = "Theorem 1 proof (App. C.1)"
_R1 = "Theorem 1, repaired (this companion)"
_C6 = "Theorem 6 proof (App. C.6)"
_L4 = "Lemma 4 (App. D)"

# The checks the software expects to fail: each is a finding about the paper with a committed
# counter-example (bounds/counterexamples/) replayed by `curvature-gap verify` and the tests. Every other
# check is expected to hold; a check that changes its verdict is a regression either way.
KNOWN_FAILURES = frozenset({
    "thm1.printed", "thm1.printed.admissible", "thm1.proof", "thm1.printed.maxblock", "thm1.proof.maxblock",
    "thm1.term.Ho_QQ", "thm1.term.Ho_QK", "sa.dA_dT", "sa.Z1",
    "thm6.GQ", "thm6.GK", "thm6.Phi.QQ", "thm6.Phi.VQ", "thm6.Phi.QK", "thm6.Phi.sym", "thm6.xi21", "thm6.block.explicit",
    "thm6.Phi.VQ.no_loss_factor", "thm6.Phi.sym.no_loss_factor",
    "lemma4.J.stated", "lemma4.H.stated", "lemma4.dP.stated", "lemma4.d2P.stated",
})

# id -> part (which evaluator computes it), ref, what, result (the paper result it is evidence for),
# role (statement / proof / repair / reference), claim (what the paper implies: "holds"; None for the
# companion's own checks), expect (what the software expects), errata (the errata its verdict depends on)
CHECKS: dict[str, dict] = {}


def _reg(cid, part, ref, what, result, role="proof", claim="holds", errata=()):
    expect = "fails" if cid in KNOWN_FAILURES else "holds"
    CHECKS[cid] = dict(part=part, ref=ref, what=what, result=result, role=role, claim=claim, expect=expect,
                       errata=list(errata))


_reg("thm1.printed", "sa", _T1, "‖H_i‖_2 ≤ M with M as printed in the statement (per-sample Hessian of the SA MSE "
     "w.r.t. W_Q, W_K, W_V), at every instance evaluated (the statement's w* is not enforced)", "thm1", "statement")
_reg("thm1.printed.admissible", "sa", _T1, "‖H_i‖_2 ≤ M as printed, only at instances that satisfy every assumption "
     "in force: an exact minimiser (Target = F, loss 0, the w* of the statement) with exactly uniform attention "
     "(the proof's ‖∂A/∂T‖ = 1/L)", "thm1", "statement")
_reg("thm1.proof", "sa", _C1, "‖H_i‖_2 ≤ M with M as at the end of the proof (constants 2, √rank(F−Target))", "thm1")
for b in ("VV", "QQ", "VQ", "QK"):
    _reg(f"thm1.proof.{b}", "sa", _C1, f"‖H({b[0]},{b[1]})‖_2 ≤ row {b} of the proof's final expression", "thm1")
_reg("thm1.printed.maxblock", "sa", _T1, "max over all 9 blocks of ‖H(W_i,W_j)‖ ≤ max of the 4 printed rows "
     "(the step '3 max_ij' needs it; no row bounds the K–K and V–K blocks)", "thm1", "proof")
_reg("thm1.proof.maxblock", "sa", _C1, "max over all 9 blocks of ‖H(W_i,W_j)‖ ≤ max of the 4 rows of the proof", "thm1")
_reg("thm1.repaired", "sa", _R1, "‖H_i‖_2 ≤ M_rep = 3 max(VV, QQ, KK, VQ, VK, QK): the printed rows with ‖∂A/∂T‖ ≤ 1/2 "
     "in place of 1/L and the K–K, V–K rows added by the Q ↔ K symmetry", "thm1", "repair", claim=None)
for b in ("VV", "QQ", "KK", "VQ", "VK", "QK"):
    _reg(f"thm1.repaired.{b}", "sa", _R1, f"‖H({b[0]},{b[1]})‖_2 ≤ row {b} of the repaired bound", "thm1", "repair",
         claim=None)
for t, w in (("Ho_VV", "‖H_o(V,V)‖ ≤ 2L/d_V ‖X‖²"), ("Ho_QQ", "‖H_o(Q,Q)‖ ≤ 2/(L³d_Vd_K)‖W_K‖²‖W_V‖²‖X‖⁶"),
             ("Ho_VQ", "‖H_o(V,Q)‖ ≤ 2/(L d_V√d_K)‖W_V‖‖W_K‖‖X‖⁴"), ("Ho_QK", "‖H_o(Q,K)‖ ≤ 2/(L³d_Vd_K)‖W_K‖‖W_Q‖‖W_V‖²‖X‖⁶"),
             ("Hf_QQ", "‖H_f(Q,Q)‖ ≤ 12/(d_Vd_K)√r(L‖X‖‖W_V‖+‖T‖)‖W_V‖‖W_K‖²‖X‖⁵"),
             ("Hf_VQ", "‖H_f(V,Q)‖ ≤ 2√r/(L²√(d_Vd_K))(L‖X‖‖W_V‖+‖T‖)‖W_K‖‖X‖³"),
             ("Hf_QK", "‖H_f(Q,K)‖ ≤ sum of the two derived terms (12/(Ld_Vd_K)… + 2√d_V/(L²d_V√d_K)…)")):
    _reg(f"thm1.term.{t}", "sa", _C1, w, "thm1", errata=["uniform-attention-1-over-n"] if t in ("Ho_QQ", "Ho_QK") else ())
for cid, w, claim, err in (
        ("dA_dT", "‖∂A/∂T‖_2 ≤ 1/L (uniform attention, Noci et al. Lemma A.3, used for all attention)", "holds",
         ["uniform-attention-1-over-n"]),
        ("dA_dT_general", "‖∂A/∂T‖_2 ≤ 1/2 (general softmax rows, by Gershgorin)", None, []),
        ("Z1", "‖Z_1‖_2 ≤ ‖X‖³/L", "holds", ["uniform-attention-1-over-n"]),
        ("A", "‖A‖_2 ≤ L", "holds", []),
        ("A_sqrtL", "‖A‖_2 ≤ √L (row-stochastic A: ‖A‖_1 = 1, ‖A‖_∞ ≤ L)", None, []),
        ("M1", "‖M_1‖_2 = ‖A X‖_2 ≤ L‖X‖", "holds", []),
        ("R", "‖R_m‖_2 = ‖F − Target‖_F ≤ √rank(F−T)(L‖X‖‖W_V‖ + ‖Target‖)", "holds", []),
        ("S", "‖S‖_2 ≤ √d_V (S = (I⊗K)(vec_r I ⊗ I), as written d_V³ × d_V)", "holds", []),
        ("d2A_dT2", "‖∂²A/∂T²‖_2 ≤ 6", "holds", []),
        ("Z2", "‖Z_2‖_2 ≤ 6‖X‖⁵", "holds", [])):
    _reg(f"sa.{cid}", "sa", _C1, w, "thm1", "reference" if claim is None else "proof", claim=claim, errata=err)
for q, w in (("J", "‖J_LN‖ ≤ 1/σ_min + ‖X‖²/(√n σ_min³)"),
             ("H", "‖H_LN‖ ≤ ‖X‖/σ_min³(1+√(m/n)) + ‖X‖²/(√n σ_min³) + 3‖X‖³/(n σ_min⁵)"),
             ("dP", "‖∂P/∂X‖ ≤ ‖X‖/(√n σ_min³) (proof step)"),
             ("d2P", "‖∂²P/∂X²‖ ≤ ‖X‖/(√n σ_min³) + 3‖X‖²/(n σ_min⁵) (proof step)")):
    role = "statement" if q in ("J", "H") else "proof"
    _reg(f"lemma4.{q}.stated", "ln", _L4, w + ", σ_min = min_i ‖M_i‖_2 as the lemma defines it", "lemma4", role)
    _reg(f"lemma4.{q}.std", "ln", _L4, w + ", σ_min = min_i ‖M_i‖_2/√n (the σ of P = diag⁻¹(σ) the proof uses)",
         "lemma4", "repair", claim=None)
_reg("prop.Y", "prop", "Proposition (App. D)", "‖Y‖_2 ≤ √(L d_V)", "prop", "statement")
_reg("prop.FFN", "prop", "Proposition (App. D)", "‖FFN(Y)‖_2 ≤ √min(L,d_ff) ‖Y‖‖W_1‖‖W_2‖", "prop", "statement")
_reg("prop.S", "prop", "Proposition (App. D)", "‖S‖_2 ≤ √(L d_V)(1 + √min(L,d_ff)‖W_1‖‖W_2‖)", "prop", "statement")
_reg("thm6.block.exact", "block", "Theorem 6, per-block inequality", "‖H_tr^(i,j)‖ ≤ ‖J_Z‖‖ξ_ij‖ + ‖B_i‖‖H_Z‖‖B_j‖ with exact "
     "ingredient norms (per pair)", "thm6", "statement")
_reg("thm6.block.explicit", "block", _C6, "‖H_tr^(i,j)‖ ≤ the same with every ingredient replaced by its App. C.6 "
     "estimate (per pair): the explicit per-block bound the statement refers to (\"Explicit expressions for each "
     "bound are stated in the proof\")", "thm6", "statement")
_reg("thm6.full.exact", "block", "Theorem 6, whole-Hessian inequality", "‖H‖ ≤ M_tr = 5 max_ij(2/(Ld_V)‖∂Z/∂W_i‖‖∂Z/∂W_j‖ + "
     "‖R^tr‖‖H_tr^(i,j)‖), exact ingredients", "thm6", "statement")
# statements that follow from their ingredients by the triangle inequality and sub-multiplicativity alone: with the
# exact ingredient norms they cannot fail (said on their rows)
_TRIANGLE = ("they follow from Theorem 5 and the Gauss–Newton split by the triangle inequality, ‖AB‖₂ ≤ ‖A‖₂‖B‖₂ and "
             "the 5 × 5 block-matrix inequality")
BY_CONSTRUCTION = {"thm6.block.exact": _TRIANGLE, "thm6.full.exact": _TRIANGLE}
_reg("thm6.full.explicit", "block", _C6, "‖H‖ ≤ M_tr with all ingredients from App. C.6, Lemma 4 (stated σ_min) and "
     "the Proposition", "thm6", "statement")
_reg("thm6.B1", "block", _C6, "‖B_1‖ ≤ ‖W_2‖‖Y‖", "thm6")
_reg("thm6.B2", "block", _C6, "‖B_2‖ = ‖σ(Y W_1)‖ (an equality; ratio 1 expected)", "thm6")
_reg("thm6.Bk", "block", _C6, "‖B_k‖ ≤ ‖J_SY‖‖J_Y‖‖G_k‖ (k = K, Q, V; exact factors)", "thm6")
_reg("thm6.JSY", "block", _C6, "‖J_SY‖ ≤ ‖W_2‖‖W_1‖ + 1", "thm6")
_reg("thm6.GV", "block", _C6, "‖G_V‖ = ‖∂F/∂W_V‖ ≤ L‖X‖", "thm6")
_reg("thm6.GQ", "block", _C6, "‖G_Q‖ ≤ ‖W_V‖‖W_K‖‖X‖³/(L√d_K)", "thm6", errata=["uniform-attention-1-over-n"])
_reg("thm6.GK", "block", _C6, "‖G_K‖ ≤ ‖W_V‖‖W_Q‖‖X‖³/(L√d_K)", "thm6", errata=["uniform-attention-1-over-n"])
_PHI = {"QQ": "‖Φ_QQ‖ = ‖∂²F/∂W_Q²‖ ≤ 12/(L d_V d_K)‖W_V‖‖W_K‖²‖X‖⁵",
        "VQ": "‖Φ_VQ‖ ≤ 2/(L²√(d_Vd_K))‖W_K‖‖X‖³",
        "QK": "‖Φ_QK‖ ≤ 12/(Ld_Vd_K)‖W_V‖‖W_K‖‖W_Q‖‖X‖⁵ + 2/(L²√(d_Vd_K))‖W_V‖‖X‖³",
        "sym": "the 'by symmetry' Φ bounds (KK, QV, VK, KV, KQ: Q↔K exchanged)"}
for kl, w in _PHI.items():
    err = ["lemma2-phi-loss-factor"] + (["uniform-attention-1-over-n"] if kl != "QQ" else [])
    _reg(f"thm6.Phi.{kl}", "block", _C6, w + ", as printed (with the loss factor 2/(L d_V) of erratum "
         "lemma2-phi-loss-factor)", "thm6", errata=err)
    _reg(f"thm6.Phi.{kl}.no_loss_factor", "block", _C6, w + " with the loss factor 2/(L d_V) removed: a failure that "
         "remains is not the loss-factor erratum", "thm6", errata=err[1:])
_reg("thm6.xi12", "block", _C6, "‖ξ_12‖ ≤ √d_V‖Y‖, for the object the proof differentiates (B_2 w.r.t. W_1)", "thm6",
     errata=["xi12-is-xi21"])
_reg("thm6.xi21", "block", _C6, "‖ξ_21‖ ≤ √d_ff‖W_2‖, for the object the proof differentiates (B_1 w.r.t. W_2)", "thm6",
     errata=["xi12-is-xi21", "xi21-ill-dimensioned"])
_reg("thm6.xi1k", "block", _C6, "‖ξ_1k‖ = ‖∂B_1/∂W_k‖ ≤ √d_ff‖W_2‖‖J_Y‖‖G_k‖ (exact factors)", "thm6")
_reg("thm6.xi2k", "block", _C6, "‖ξ_2k‖ = ‖∂B_2/∂W_k‖ ≤ √d_V‖W_1‖‖J_Y‖‖G_k‖ (exact factors)", "thm6")
_reg("thm6.xikl", "block", _C6, "‖ξ_kl‖ ≤ ‖J_SY‖(‖G_k‖‖H_Y‖‖G_l‖ + ‖J_Y‖‖Φ_kl‖) (exact factors)", "thm6")

_reg("ce.output_factor", "ce", "§5 (cross-entropy) / this companion", "‖diag(p) − p pᵀ‖_2 ≤ 1/2 for the softmax "
     "probabilities p of the head (Gershgorin)", "ce", "reference", claim=None)
_reg("thm6.full.explicit.ce", "ce", "§5 (cross-entropy) + Theorem 6 / App. C.6", "‖∇²_W CE(W_h mean(Z) + b_h, y)‖_2 ≤ "
     "M_tr with 2/(L d_V) → ½‖P‖², ‖R^tr‖ → ‖∂l/∂Z‖ (P = ∂logits/∂Z), other ingredients from App. C.6; trained "
     "MNIST block and head", "ce", "statement")

_reg("thm1.printed.batch", "batch", _T1, "‖(1/n)Σ_i H_i‖_2 (curvlinops Hessian, Lanczos) ≤ max_i M_i (printed) over n "
     "MNIST samples", "thm1", "statement")
_reg("thm6.full.explicit.batch", "batch", "Theorem 6 / App. C.6", "‖(1/n)Σ_i H_i‖_2 (curvlinops Hessian, Lanczos) ≤ "
     "max_i M_tr,i (explicit) over n MNIST samples", "thm6", "statement")

_TENSOR_CHECKS = {"thm6.block.exact", "thm6.block.explicit", "thm6.full.exact", "thm6.Phi.QQ",
                  "thm6.Phi.VQ", "thm6.Phi.QK", "thm6.Phi.sym", "thm6.Phi.QQ.no_loss_factor", "thm6.Phi.VQ.no_loss_factor",
                  "thm6.Phi.QK.no_loss_factor", "thm6.Phi.sym.no_loss_factor", "thm6.xi12", "thm6.xi21", "thm6.xi1k",
                  "thm6.xi2k", "thm6.xikl"}


def part_of(check: str) -> str:
    return CHECKS[check]["part"]


def needs_tensors(check: str) -> bool:
    """Whether a check needs the second-derivative tensors ξ, H_tr, Φ (expensive at L = 49)."""
    return check in _TENSOR_CHECKS


ADMISSIBLE_TOL = 1e-12  # loss and attention deviation counted as exactly 0 (float64 round-off)


def admissible(q: dict) -> bool:
    """Whether the instance behind :func:`.quantities.sa_exact` output ``q`` satisfies every assumption in
    force for Theorem 1: an exact minimiser (‖F − Target‖_F = 0, loss 0) with exactly uniform attention
    (every entry of A equal to 1/L, which the proof's ‖∂A/∂T‖ ≤ 1/L needs)."""
    return q["R"] <= ADMISSIBLE_TOL * max(1.0, q["norm_T"]) and q["attn_uniform_dev"] <= ADMISSIBLE_TOL


def ratio(bound: float, exact: float) -> float:
    """``bound / exact``; ``inf`` when the exact value is (numerically) zero."""
    if abs(exact) <= ZERO:
        return math.inf
    return bound / exact


def holds(r: float) -> bool:
    return r >= 1 - RTOL


def _rec(out, check, sub, bound, exact_):
    out.append({"check": check, "sub": sub, "bound": float(bound), "exact": float(exact_),
                "ratio": ratio(float(bound), float(exact_))})


# ----------------------------------------------------------------------------- the ratio of each check
# check id -> terms(q) -> [(sub, bound, exact)]: the one place where a check's two sides are read off the
# exact quantities ``q`` (of :func:`.quantities.sa_exact`, :func:`.quantities.layernorm_exact` or
# :func:`.quantities.block_exact`). The rows (``records_*``) and the adversarial search
# (:func:`term`, on differentiable tensors) both go through it, so a bound written here is searchable.
TERMS: dict = {}


def _terms(*cids):
    def add(fn):
        for cid in cids:
            TERMS[cid] = (lambda c: (lambda q: fn(q, c)))(cid)
        return fn
    return add


def _a(q):
    return q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["norm_T"], q["L"], q["d_V"], q["d_K"]


@_terms("thm1.printed", "thm1.printed.admissible", "thm1.proof", "thm1.repaired")
def _thm1_whole(q, cid):
    v = cid.split(".")[1]
    kw = {} if v == "printed" else {"rank": q["rank_FT"]}
    return [("", fm.theorem1(*_a(q), variant=v, **kw)["M"], q["H"])]


@_terms(*(f"thm1.proof.{b}" for b in ("VV", "QQ", "VQ", "QK")),
        *(f"thm1.repaired.{b}" for b in ("VV", "QQ", "KK", "VQ", "VK", "QK")))
def _thm1_row(q, cid):
    _, v, b = cid.split(".")
    kw = {} if v == "repaired" else {"rank": q["rank_FT"]}
    return [(b, fm.theorem1(*_a(q), variant=v, **kw)[b], q[f"H_{b}"])]


@_terms("thm1.printed.maxblock", "thm1.proof.maxblock")
def _thm1_maxblock(q, cid):
    v = cid.split(".")[1]
    kw = {} if v == "printed" else {"rank": q["rank_FT"]}
    rows = fm.theorem1(*_a(q), variant=v, **kw)
    worst = max(((p + r) for p in "QKV" for r in "QKV"), key=lambda s: q[f"H_{s}"])
    return [(worst, max(rows[b] for b in ("VV", "QQ", "VQ", "QK")), q[f"H_{worst}"])]


_T1_TERMS = ("Ho_VV", "Ho_QQ", "Ho_VQ", "Ho_QK", "Hf_QQ", "Hf_VQ", "Hf_QK")


@_terms(*(f"thm1.term.{t}" for t in _T1_TERMS))
def _thm1_term(q, cid):
    t = cid.split(".")[-1]
    return [(t[3:], fm.theorem1_terms(*_a(q), rank=q["rank_FT"])[t], q[t])]


_SA_LEMMAS = {"dA_dT": "dA_dT", "dA_dT_general": "dA_dT", "Z1": "Z1", "A": "A", "A_sqrtL": "A", "M1": "M1", "R": "R",
              "S": "S", "d2A_dT2": "d2A_dT2", "Z2": "Z2"}  # lemma -> the exact quantity it bounds


@_terms(*(f"sa.{k}" for k in _SA_LEMMAS))
def _sa_lemma(q, cid):
    k = cid[3:]
    lem = fm.sa_lemmas(q["norm_X"], q["norm_V"], q["norm_T"], q["L"], q["d_V"], q["rank_FT"])
    return [("", lem[k], q[_SA_LEMMAS[k]])]


@_terms(*(f"lemma4.{k}.{r}" for r in ("stated", "std") for k in ("J", "H", "dP", "d2P")))
def _lemma4(ln, cid):
    _, k, reading = cid.split(".")
    s = ln["row_norm_min"] if reading == "stated" else ln["std_min"]
    return [("", fm.lemma4(ln["norm"], s, ln["m"], ln["n"])[k], ln[k])]


_PHI_ROWS = ("QQ", "VQ", "QK")  # the Φ bounds printed one by one (the rest "by symmetry": thm6.Phi.sym)


@_terms(*(f"thm6.Phi.{kl}{v}" for kl in _PHI_ROWS for v in ("", ".no_loss_factor")))
def _thm6_phi(q, cid):
    """A printed Φ bound (App. C.6, :func:`.formulas.phi_bounds`) against ``‖Φ_kl‖ = ‖∂²F/∂W_k∂W_l‖``; the
    ``.no_loss_factor`` variant multiplies the bound by ``L d_V/2`` (removes the loss factor 2/(L d_V))."""
    kl = cid.split(".")[2]
    b = fm.phi_bounds(q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["L"], q["d_V"], q["d_K"])[kl]
    if cid.endswith(".no_loss_factor"):
        b = q["L"] * q["d_V"] / 2 * b
    return [(kl, b, q[f"Phi_{kl}"])]


@_terms("thm6.GV", "thm6.GQ", "thm6.GK")
def _thm6_jacobian(q, cid):
    k = cid[-1]
    b = fm.jacobian_bounds(q["norm_X"], q["norm_Q"], q["norm_K"], q["norm_V"], q["L"], q["d_K"])
    return [("", b[f"G_{k}"], q[f"G_{k}"])]


def term(check: str, q: dict):
    """``(bound, exact)`` of a single-entry check from the quantities ``q`` (floats or tensors: the
    adversarial search differentiates ``bound / exact``)."""
    if check not in TERMS:
        raise KeyError(f"{check} has no ratio written on the exact quantities; checks with one: {', '.join(TERMS)}")
    (_, b, e), *more = TERMS[check](q)
    if more:
        raise ValueError(f"{check} has {1 + len(more)} entries; term() reads single-entry checks")
    return b, e


def _add(out, check, q, sub=None):
    for s, b, e in TERMS[check](q):
        _rec(out, check, s if sub is None else sub, b, e)


# ----------------------------------------------------------------------------- per part
def records_sa(q: dict) -> list[dict]:
    """Theorem 1 and its proof's lemmas from :func:`.exact.sa_exact` output ``q``."""
    out: list[dict] = []
    for cid in ("thm1.printed", "thm1.printed.admissible", "thm1.proof",
                *(f"thm1.proof.{b}" for b in ("VV", "QQ", "VQ", "QK")), "thm1.printed.maxblock", "thm1.proof.maxblock",
                "thm1.repaired", *(f"thm1.repaired.{b}" for b in ("VV", "QQ", "KK", "VQ", "VK", "QK")),
                *(f"thm1.term.{t}" for t in _T1_TERMS), *(f"sa.{k}" for k in _SA_LEMMAS)):
        if cid != "thm1.printed.admissible" or admissible(q):
            _add(out, cid, q)
    return out


def records_ln(ln: dict, sub: str) -> list[dict]:
    """Lemma 4 (both readings of σ_min) from :func:`.exact.layernorm_exact` output ``ln``."""
    out: list[dict] = []
    for reading in ("stated", "std"):
        for k in ("J", "H", "dP", "d2P"):
            _add(out, f"lemma4.{k}.{reading}", ln, sub)
    return out


def records_block(q: dict, tensors: bool = True) -> list[dict]:
    """Proposition, Theorem 6 (exact-ingredient and explicit forms) and the App. C.6 estimates."""
    out: list[dict] = []
    L, d_V, d_K, d_ff = q["L"], q["d_V"], q["d_K"], q["d_ff"]
    p = fm.proposition(L, d_V, d_ff, q["norm_Y"], q["norm_1"], q["norm_2"])
    _rec(out, "prop.Y", "", p["Y"], q["norm_Y"])
    _rec(out, "prop.FFN", "", p["FFN"], q["norm_FFN"])
    _rec(out, "prop.S", "", p["S"], q["norm_S"])
    n = {k: q[f"norm_{k}"] for k in ("X", "Q", "K", "V", "1", "2")}
    expl = fm.theorem6_explicit(n, L, d_V, d_K, d_ff, q["norm_relu"], q["R"], q["ln_U"], q["ln_S"]["row_norm_min"])
    if "H" in q:
        _rec(out, "thm6.full.explicit", "", expl["M_tr"], q["H"])
    _rec(out, "thm6.B1", "", q["norm_2"] * q["norm_Y"], q["B_1"])
    _rec(out, "thm6.B2", "", q["norm_relu"], q["B_2"])
    for k in fm.ATT:
        _rec(out, "thm6.Bk", k, q["J_SY"] * q["J_Y"] * q[f"G_{k}"], q[f"B_{k}"])
    _rec(out, "thm6.JSY", "", q["norm_2"] * q["norm_1"] + 1, q["J_SY"])
    for k in ("V", "Q", "K"):
        _add(out, f"thm6.G{k}", q)
    if not tensors:
        return out
    for i, j in fm.PAIRS:
        _rec(out, "thm6.block.exact", i + j, fm.theorem6_block(q, i, j), q[f"Htr_{i}{j}"])
        _rec(out, "thm6.block.explicit", i + j, expl[f"pair_{i}{j}"], q[f"Htr_{i}{j}"])
    if "H" in q:
        M, _ = fm.theorem6_full(q, L, d_V)
        _rec(out, "thm6.full.exact", "", M, q["H"])
    unfactor = L * d_V / 2  # removes the loss factor 2/(L d_V) the printed Φ bounds carry
    for kl in _PHI_ROWS:
        _add(out, f"thm6.Phi.{kl}", q)
        _add(out, f"thm6.Phi.{kl}.no_loss_factor", q)
    for kl in ("KK", "QV", "VK", "KV", "KQ"):
        _rec(out, "thm6.Phi.sym", kl, expl[f"Phi_{kl}"], q[f"Phi_{kl}"])
        _rec(out, "thm6.Phi.sym.no_loss_factor", kl, unfactor * expl[f"Phi_{kl}"], q[f"Phi_{kl}"])
    _rec(out, "thm6.xi12", "d(B_2)/dW_1", math.sqrt(d_V) * q["norm_Y"], q["xi_21"])
    _rec(out, "thm6.xi21", "d(B_1)/dW_2", math.sqrt(d_ff) * q["norm_2"], q["xi_12"])
    for k in fm.ATT:
        _rec(out, "thm6.xi1k", k, math.sqrt(d_ff) * q["norm_2"] * q["J_Y"] * q[f"G_{k}"], q[f"xi_1{k}"])
        _rec(out, "thm6.xi2k", k, math.sqrt(d_V) * q["norm_1"] * q["J_Y"] * q[f"G_{k}"], q[f"xi_2{k}"])
        for l in fm.ATT:
            b = q["J_SY"] * (q[f"G_{k}"] * q["H_Y"] * q[f"G_{l}"] + q["J_Y"] * q[f"Phi_{k}{l}"])
            _rec(out, "thm6.xikl", k + l, b, q[f"xi_{k}{l}"])
    return out


def evaluate(inst: Instance, parts=("sa", "ln", "prop", "block"), tensors: bool = True,
             hessian: bool = True, ln_input: str = "block") -> list[dict]:
    """All records of ``parts`` at ``inst``.

    ``ln_input="block"`` evaluates Lemma 4 at the block's two LayerNorm inputs (``sub`` U and S);
    ``"X"`` at the raw matrix ``inst.X`` (the LayerNorm sweep).  ``tensors=False`` skips the
    checks that need ``ξ``, ``H_tr``, ``Φ``; ``hessian=False`` skips the loss Hessians.
    """
    recs: list[dict] = []
    if "sa" in parts:
        recs += records_sa(ex.sa_exact(inst, hessian=hessian))
    if "ln" in parts and ln_input == "X":
        recs += records_ln(ex.layernorm_exact(inst.X), "X")
    if any(p in parts for p in ("block", "prop")) or ("ln" in parts and ln_input == "block"):
        q = ex.block_exact(inst, hessian=hessian and "block" in parts,
                           tensors=tensors and "block" in parts)
        if "ln" in parts and ln_input == "block":
            recs += records_ln(q["ln_U"], "U") + records_ln(q["ln_S"], "S")
        brec = records_block(q, tensors=tensors and "block" in parts)
        recs += [r for r in brec if part_of(r["check"]) in parts]
    return recs
