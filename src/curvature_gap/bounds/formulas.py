"""The paper's bounds, as functions of the spectral norms of ``X``, the weights and the target.

Notation: ``nX = ‖X‖_2``, ``nQ, nK, nV = ‖W_Q‖_2, ‖W_K‖_2, ‖W_V‖_2``, ``n1, n2 = ‖W_1‖_2, ‖W_2‖_2``,
``nT = ‖Target‖_2``, ``L`` tokens, widths ``d_V, d_K, d_ff``.  No constant here is changed from the paper
(arXiv:2510.16927, LaTeX source ``paper/paper.tex``); where the statement and the proof differ, both are implemented.

Theorem 1 (single self-attention layer, ``‖H_i(w*)‖_2 ≤ M``):

* :func:`theorem1` ``variant="printed"`` — the statement in §3.1: ``M = 3 max(VV, QQ, VQ, QK)`` with
  ``VV = 2L/d_V nX²``, ``QQ = 8/(L³ d_V d_K) nK² nV² nX⁶ + 12/(d_V d_K) √min(L,d_V) (L nX nV + nT) nV nK² nX⁵``,
  ``VQ = 4/(L d_V √d_K) nV nK nX⁴ + 4√min(L,d_V)/(L²√d_K) (L nX nV + nT) nK nX³``,
  ``QK = 8/(L³ d_V d_K) nK nQ nV² nX⁶ + 4√min(L,d_V)(L nX nV + nT)/(L d_V √d_K) nV (3L nK nQ nX⁵ + d_V/L nX³)``.
* ``variant="proof"`` — the final expression at the end of App. C.1: the constants 8, 4, 4, 8, 4 become 2, 2, 2, 2, 2,
  the factors ``√min(L,d_V)`` become ``√rank(F − Target)`` and two ``√d_K`` become ``√(d_V d_K)``.
* :func:`theorem1_terms` — the per-term inequalities derived in the proof (``‖H_o(i,j)‖`` and
  ``‖H_f(i,j)‖`` separately), for locating which step fails; :func:`sa_lemmas` — the proof's intermediate
  inequalities, and two of the companion's own (``‖∂A/∂T‖ ≤ 1/2``, ``‖A‖ ≤ √L``).

Lemma 4 (:func:`lemma4`) for a LayerNorm input ``X ∈ R^{m×n}``, with the proof's intermediate bounds on
``∂P/∂X`` and ``∂²P/∂X²``. The lemma *defines* ``σ_min = min_i ‖M_i‖_2`` (smallest row norm of the centred
input, reading ``"stated"``); its proof uses ``‖P‖ = 1/σ_min`` with ``P = diag^{-1}(σ)``, ``σ_i = ‖m_i‖/√n``,
i.e. ``σ_min = min_i σ_i`` (reading ``"std"``).  Both are evaluated.

Proposition (:func:`proposition`): ``‖Y‖ ≤ √(L d_V)``, ``‖FFN(Y)‖ ≤ √min(L,d_ff) ‖Y‖ n1 n2``,
``‖S‖ ≤ √(L d_V)(1 + √min(L,d_ff) n1 n2)``.

Theorem 6 (:func:`theorem6_block`, :func:`theorem6_full`, :func:`theorem6_explicit`): per block
``‖H_tr^{(i,j)}‖ ≤ ‖J_Z‖ ‖ξ_ij‖ + ‖B_i‖ ‖H_Z‖ ‖B_j‖`` and
``‖H‖ ≤ M_tr = 5 max_ij (2/(L d_V) ‖∂Z/∂W_i‖ ‖∂Z/∂W_j‖ + ‖R^tr‖ ‖H_tr^{(i,j)}‖)``, with the ingredients either exact
(measured) or replaced by the App. C.6 estimates (``"explicit"``: :func:`jacobian_bounds`, :func:`phi_bounds` and the ξ,
B estimates in :func:`theorem6_explicit`; ``Φ_KK``, ``Φ_VK``, ``Φ_KQ``, ``Φ_QV``, ``Φ_KV`` "by symmetry", i.e. with
``Q ↔ K`` exchanged), ``‖Y‖`` and ``‖S‖`` from the Proposition, ``‖J‖, ‖H‖`` of both LayerNorms from Lemma 4 (reading
``"stated"``), ``‖∂Z/∂W_i‖ ≤ ‖J_Z‖ ‖B_i‖`` (Theorem 4) and ``‖R^tr‖ = ‖Z − Target‖_F`` measured.  Pairs the paper does
not instantiate (``(k,1)``, ``(k,2)``) take the bound of ``(1,k)``, ``(2,k)`` by the paper's symmetry statement.
"""
from __future__ import annotations

import math

import torch

from ..exact.derivatives import ATTENTION_ORDER, BLOCK_ORDER

__all__ = [
    "theorem1", "theorem1_multihead", "MH_PAIRS", "theorem1_terms", "sa_lemmas", "lemma4", "proposition", "theorem6_block",
    "theorem6_full", "theorem6_explicit", "jacobian_bounds", "phi_bounds", "PAIRS", "ATT", "largest", "root",
]

ATT = ATTENTION_ORDER  # ("K", "Q", "V")
PAIRS = [(i, j) for i in BLOCK_ORDER for j in BLOCK_ORDER]


def largest(values):
    """``max(values)`` of numbers or 0-d tensors: a tensor maximum as soon as one is a tensor, so that the formulas stay
    differentiable and batchable (``torch.func.vmap``) in the worst-case search (no Python ``max`` of tensors)."""
    values = list(values)
    if not any(isinstance(v, torch.Tensor) for v in values):
        return max(values)
    ref = next(v for v in values if isinstance(v, torch.Tensor))
    return torch.stack([v if isinstance(v, torch.Tensor) else torch.as_tensor(v, dtype=ref.dtype) for v in values]).amax(0)


def root(x):
    """``√x`` of a number or a tensor (``rank(F − Target)`` is a tensor in the batched search)."""
    return torch.sqrt(x) if isinstance(x, torch.Tensor) else math.sqrt(x)


def _resid(nX, nV, nT, L):
    return L * nX * nV + nT


def theorem1(nX, nQ, nK, nV, nT, L, d_V, d_K, rank=None, variant="printed") -> dict:
    """Theorem 1's ``M`` and its rows (see module doc).

    ``variant`` is ``"printed"`` (main-text statement), ``"proof"`` (end of App. C.1, with ``rank = rank(F − Target)``;
    ``None`` uses ``min(L, d_V)``) or ``"repaired"``: the printed statement with the two defects of its proof removed,

    * every factor ``1/L`` that the proof takes from ``‖∂A/∂T‖_2 ≤ 1/L`` (true only for exactly uniform attention)
      replaced by ``1/2``, the bound that holds for every row-softmax Jacobian: by Gershgorin, row j of
      ``diag(a) − a aᵀ`` has diagonal ``a_j − a_j²`` and off-diagonal sum ``a_j (1 − a_j)``, so its eigenvalues lie in
      ``[0, 2 a_j (1 − a_j)] ⊂ [0, 1/2]``; hence ``‖Z_1‖ ≤ ‖X‖³/2``; and
    * the rows the statement leaves out added by the symmetry ``Q ↔ K`` of ``T = X W_Q W_Kᵀ Xᵀ/√d_K``:
      ``KK`` (``QQ`` with ``‖W_K‖ → ‖W_Q‖``) and ``VK`` (``VQ`` with ``‖W_K‖ → ‖W_Q‖``),

    every other constant as printed; ``M = 3 max`` over the six rows.
    """
    if variant not in ("printed", "proof", "repaired"):
        raise ValueError(f"unknown Theorem 1 variant {variant!r}; choose printed, proof or repaired")
    r = _resid(nX, nV, nT, L)
    s = root(rank) if variant == "proof" and rank is not None else math.sqrt(min(L, d_V))
    sk = math.sqrt(d_V * d_K) if variant == "proof" else math.sqrt(d_K)
    # each variant's constants (c1: QQ, QK; c2: VQ; c3: QK) and powers of L (Lq: QQ, QK; Lv1, Lv2: VQ; Lk: QK's d_V/Lk):
    # the proof's 2 in place of the printed 8, 4, 4, 8, 4; the repaired's 1/2 in place of a 1/L of ‖∂A/∂T‖ in each
    c1, Lq, c2, Lv1, Lv2, c3, Lk = {"printed": (8, L ** 3, 4, L, L ** 2, 4, L),
                                    "proof": (2, L ** 3, 2, L, L ** 2, 2, L),
                                    "repaired": (2, L, 2, 1, L, 4, 2)}[variant]

    def qq(a):
        return c1 / (Lq * d_V * d_K) * a ** 2 * nV ** 2 * nX ** 6 + 12 / (d_V * d_K) * s * r * nV * a ** 2 * nX ** 5

    def vq(a):
        return c2 / (Lv1 * d_V * math.sqrt(d_K)) * nV * a * nX ** 4 + c2 * s / (Lv2 * sk) * r * a * nX ** 3

    QK = (c1 / (Lq * d_V * d_K) * nK * nQ * nV ** 2 * nX ** 6
          + c3 * s * r / (L * d_V * sk) * nV * (3 * L * nK * nQ * nX ** 5 + d_V / Lk * nX ** 3))
    if variant == "repaired":  # the rows KK and VK added by the symmetry Q ↔ K
        rows = {"VV": 2 * L / d_V * nX ** 2, "QQ": qq(nK), "KK": qq(nQ), "VQ": vq(nK), "VK": vq(nQ), "QK": QK}
    else:
        rows = {"VV": 2 * L / d_V * nX ** 2, "QQ": qq(nK), "VQ": vq(nK), "QK": QK}
    return {"M": 3 * largest(rows.values()), **rows}


MH_PAIRS = ("QQ", "KK", "VV", "OO", "QK", "QV", "KV", "QO", "KO", "VO")


def theorem1_multihead(nX, nQ, nK, nV, nO, nT, L, d, h) -> dict:
    """The repaired Theorem 1 extended to ``h`` heads with an output projection (this companion's).

    The layer ``F = [A_1 X W_V^1, …, A_h X W_V^h] W_O`` with ``A_c = softmax(X W_Q^c W_K^cᵀ Xᵀ/√d_h)``,
    ``d_h = d/h`` (head c: columns c of ``W_Q, W_K, W_V`` (d, d), rows c of ``W_O`` (d, d)); loss
    ``(1/(L d))‖F − Target‖_F²``; Hessian w.r.t. ``(W_Q, W_K, W_V, W_O)``. With ``‖A_c‖ ≤ √L``,
    ``‖∂A/∂T[Ṫ]‖_F ≤ ½‖Ṫ‖_F`` and ``‖∂²A/∂T²[Ṫ, Ṫ']‖_F ≤ ‖Ṫ‖_F‖Ṫ'‖_F`` (row-wise softmax), the first
    derivatives ``g_i = ‖∂F/∂W_i‖`` and second derivatives ``φ_ij = ‖∂²F/∂W_i∂W_j‖`` are bounded by

        g_Q = n_O n_V n_K n_X³/(2√d_h), g_K = (Q ↔ K), g_V = √L n_X n_O, g_O = √(hL) n_X n_V,
        φ_QQ = n_O n_V n_K² n_X⁵/d_h, φ_KK = (Q ↔ K), φ_QK = n_O n_V (n_Q n_K n_X⁵/d_h + n_X³/(2√d_h)),
        φ_QV = n_O n_K n_X³/(2√d_h), φ_QO = n_V n_K n_X³/(2√d_h), φ_VO = √L n_X, φ_VV = φ_OO = 0

    (K rows: n_K → n_Q). Row ``ij`` is ``2/(L d) (g_i g_j + ρ φ_ij)`` with
    ``ρ = √min(L, d) (√(hL) n_X n_V n_O + n_T) ≥ ‖F − Target‖_F``; ``M = 4 max`` over the ten rows of
    :data:`MH_PAIRS` (the 4×4 block inequality). Returns ``{"M", row: value, "g_i", "phi_ij", "rho"}``.
    """
    dh = d / h
    s = math.sqrt(dh)
    g = {"Q": nO * nV * nK * nX ** 3 / (2 * s), "K": nO * nV * nQ * nX ** 3 / (2 * s),
         "V": math.sqrt(L) * nX * nO, "O": math.sqrt(h * L) * nX * nV}
    phi = {"QQ": nO * nV * nK ** 2 * nX ** 5 / dh, "KK": nO * nV * nQ ** 2 * nX ** 5 / dh,
           "QK": nO * nV * (nQ * nK * nX ** 5 / dh + nX ** 3 / (2 * s)),
           "QV": nO * nK * nX ** 3 / (2 * s), "KV": nO * nQ * nX ** 3 / (2 * s),
           "QO": nV * nK * nX ** 3 / (2 * s), "KO": nV * nQ * nX ** 3 / (2 * s),
           "VO": math.sqrt(L) * nX, "VV": 0.0, "OO": 0.0}
    rho = math.sqrt(min(L, d)) * (math.sqrt(h * L) * nX * nV * nO + nT)
    rows = {ij: 2 / (L * d) * (g[ij[0]] * g[ij[1]] + rho * phi[ij]) for ij in MH_PAIRS}
    return {"M": 4 * largest(rows.values()), **rows, "rho": rho, **{f"g_{k}": v for k, v in g.items()},
            **{f"phi_{k}": v for k, v in phi.items()}}


def theorem1_terms(nX, nQ, nK, nV, nT, L, d_V, d_K, rank) -> dict:
    """The per-term inequalities of the App. C.1 proof, ``{"Ho_VV": …, "Hf_QK": …}``.

    ``Hf_QQ`` is the value printed after the equality sign (``12/(d_V d_K)``; the line before,
    ``2/(L d_V d_K)·6``, equals ``12/(L d_V d_K)``).  ``Hf_QK`` is the un-factored sum of its two
    terms as derived (the factored final form differs in the first term by ``L√d_K/(2√d_V)``).
    """
    r = _resid(nX, nV, nT, L) * root(rank)
    return {
        "Ho_VV": 2 * L / d_V * nX ** 2,
        "Ho_QQ": 2 / (L ** 3 * d_V * d_K) * nK ** 2 * nV ** 2 * nX ** 6,
        "Ho_VQ": 2 / (L * d_V * math.sqrt(d_K)) * nV * nK * nX ** 4,
        "Ho_QK": 2 / (L ** 3 * d_V * d_K) * nK * nQ * nV ** 2 * nX ** 6,
        "Hf_QQ": 12 / (d_V * d_K) * r * nV * nK ** 2 * nX ** 5,
        "Hf_VQ": 2 / (L ** 2 * math.sqrt(d_V * d_K)) * r * nK * nX ** 3,
        "Hf_QK": (2 / (L * d_V * d_K) * r * nV * nK * nQ * 6 * nX ** 5
                  + 2 / (L * d_V * math.sqrt(d_K)) * r * nV / L * nX ** 3 * math.sqrt(d_V)),
    }


def sa_lemmas(nX, nV, nT, L, d_V, rank) -> dict:
    """Right-hand sides of the Theorem 1 proof's intermediate inequalities; ``dA_dT_general`` (Gershgorin on
    ``diag(a) − aaᵀ``) and ``A_sqrtL`` (row-stochastic ``A``) are the companion's own."""
    return {
        "dA_dT": 1 / L,
        "dA_dT_general": 0.5,
        "Z1": nX ** 3 / L,
        "A": float(L),
        "A_sqrtL": math.sqrt(L),
        "M1": L * nX,
        "R": root(rank) * _resid(nX, nV, nT, L),
        "S": math.sqrt(d_V),
        "d2A_dT2": 6.0,
        "Z2": 6 * nX ** 5,
    }


def lemma4(nX, sigma_min, m, n) -> dict:
    """Lemma 4 for a LayerNorm input ``X ∈ R^{m×n}`` with ``‖X‖_2 = nX`` and a given ``σ_min``."""
    s = sigma_min
    return {
        "J": 1 / s + nX ** 2 / (math.sqrt(n) * s ** 3),
        "H": nX / s ** 3 * (1 + math.sqrt(m / n)) + nX ** 2 / (math.sqrt(n) * s ** 3) + 3 * nX ** 3 / (n * s ** 5),
        "dP": nX / (math.sqrt(n) * s ** 3),
        "d2P": nX / (math.sqrt(n) * s ** 3) + 3 * nX ** 2 / (n * s ** 5),
    }


def proposition(L, d_V, d_ff, nY, n1, n2) -> dict:
    """The Proposition on ``‖Y‖``, ``‖FFN(Y)‖`` and ``‖S‖`` (App. D)."""
    s = math.sqrt(min(L, d_ff))
    return {"Y": math.sqrt(L * d_V), "FFN": s * nY * n1 * n2, "S": math.sqrt(L * d_V) * (1 + s * n1 * n2)}


def theorem6_block(q: dict, i: str, j: str) -> float:
    """Eq. (block_bound_transformer): ``‖J_Z‖ ‖ξ_ij‖ + ‖B_i‖ ‖H_Z‖ ‖B_j‖`` from norms ``q``."""
    return q["J_Z"] * q[f"xi_{i}{j}"] + q[f"B_{i}"] * q["H_Z"] * q[f"B_{j}"]


def theorem6_full(q: dict, L: int, d_V: int, out_curv: float | None = None) -> tuple[float, dict]:
    """Eq. (full_bound_transformer): ``M_tr = 5 max_ij(c ‖∂Z/∂W_i‖ ‖∂Z/∂W_j‖ + ‖R‖ ‖H_tr^{ij}‖)``.

    ``q`` holds ``dZ_i``, ``R`` (the norm multiplying the output curvature ``H_tr``: ``‖Z − Target‖_F`` as printed for
    the MSE, ``‖∂l/∂Z‖`` for another loss) and ``Htr_ij``; ``c = ‖∂²l/∂Z²‖`` is the MSE's ``2/(L d_V)`` by default (for
    cross-entropy through the head: see :mod:`.ce`). Returns ``(M_tr, {pair: term})``.
    """
    c = 2 / (L * d_V) if out_curv is None else out_curv
    terms = {(i, j): c * q[f"dZ_{i}"] * q[f"dZ_{j}"] + q["R"] * q[f"Htr_{i}{j}"] for i, j in PAIRS}
    return 5 * largest(terms.values()), terms


def phi_bounds(nX, nQ, nK, nV, L, d_V, d_K) -> dict:
    """App. C.6's bounds on ``‖Φ_kl‖ = ‖∂²F/∂W_k∂W_l‖`` as printed (with the loss factor 2/(L d_V) of
    erratum lemma2-phi-loss-factor), ``{kl: bound}``; floats or tensors."""
    a = 12 / (L * d_V * d_K) * nX ** 5
    b = 2 / (L ** 2 * math.sqrt(d_V * d_K)) * nX ** 3
    return {
        "VV": 0.0,
        "QQ": a * nV * nK ** 2, "KK": a * nV * nQ ** 2,
        "VQ": b * nK, "QV": b * nK, "VK": b * nQ, "KV": b * nQ,
        "QK": a * nV * nK * nQ + b * nV, "KQ": a * nV * nK * nQ + b * nV,
    }


def jacobian_bounds(nX, nQ, nK, nV, L, d_K) -> dict:
    """App. C.6's estimates of the attention Jacobians: ``‖G_V‖ ≤ L‖X‖``,
    ``‖G_Q‖ ≤ ‖W_V‖‖W_K‖‖X‖³/(L√d_K)``, ``‖G_K‖ ≤ ‖W_V‖‖W_Q‖‖X‖³/(L√d_K)``."""
    return {"G_V": L * nX, "G_Q": nV * nK * nX ** 3 / (L * math.sqrt(d_K)),
            "G_K": nV * nQ * nX ** 3 / (L * math.sqrt(d_K))}


def theorem6_explicit(n: dict, L: int, d_V: int, d_K: int, d_ff: int, nrelu: float, R: float,
                      lnU: dict, lnS_sigma: float, out_curv: float | None = None, mirror_21: bool = False) -> dict:
    """App. C.6 instantiated: every ingredient of Theorem 6 replaced by its printed estimate.

    ``n`` holds ``X, Q, K, V, 1, 2`` spectral norms; ``nrelu = ‖σ(Y W_1)‖`` (``‖B_2‖``, printed as an equality);
    ``R = ‖Z − Target‖_F``; ``lnU`` the first LayerNorm's input data (``norm``, ``row_norm_min``, ``m``, ``n``);
    ``lnS_sigma`` the second input's smallest centred row norm (Lemma 4 "stated"), ``‖S‖`` being taken from the
    Proposition.  Returns the ingredient bounds (keys as in :func:`curvature_gap.bounds.quantities.block_exact`), the
    per-pair bounds ``pair_{i}{j}`` and ``M_tr``.
    """
    nX, nQ, nK, nV, n1, n2 = (n[k] for k in ("X", "Q", "K", "V", "1", "2"))
    prop = proposition(L, d_V, d_ff, math.sqrt(L * d_V), n1, n2)
    nY = prop["Y"]
    lY = lemma4(lnU["norm"], lnU["row_norm_min"], lnU["m"], lnU["n"])
    lZ = lemma4(prop["S"], lnS_sigma, L, d_V)
    b = {"J_Y": lY["J"], "H_Y": lY["H"], "J_Z": lZ["J"], "H_Z": lZ["H"], "J_SY": n2 * n1 + 1,
         **jacobian_bounds(nX, nQ, nK, nV, L, d_K), "R": R}
    b.update({f"Phi_{k}": v for k, v in phi_bounds(nX, nQ, nK, nV, L, d_V, d_K).items()})
    b["B_1"], b["B_2"] = n2 * nY, nrelu
    for k in ATT:
        b[f"B_{k}"] = b["J_SY"] * b["J_Y"] * b[f"G_{k}"]
    b["xi_11"] = b["xi_22"] = 0.0
    b["xi_12"], b["xi_21"] = math.sqrt(d_V) * nY, (math.sqrt(d_V) * nY if mirror_21 else math.sqrt(d_ff) * n2)
    for k in ATT:
        b[f"xi_1{k}"] = math.sqrt(d_ff) * n2 * b["J_Y"] * b[f"G_{k}"]
        b[f"xi_2{k}"] = math.sqrt(d_V) * n1 * b["J_Y"] * b[f"G_{k}"]
        b[f"xi_{k}1"], b[f"xi_{k}2"] = b[f"xi_1{k}"], b[f"xi_2{k}"]  # symmetry statement
        for l in ATT:
            b[f"xi_{k}{l}"] = b["J_SY"] * (b[f"G_{k}"] * b["H_Y"] * b[f"G_{l}"] + b["J_Y"] * b[f"Phi_{k}{l}"])
    for i, j in PAIRS:
        b[f"Htr_{i}{j}"] = theorem6_block(b, i, j)
    for i in BLOCK_ORDER:
        b[f"dZ_{i}"] = b["J_Z"] * b[f"B_{i}"]
    b["M_tr"], _ = theorem6_full(b, L, d_V, out_curv)
    b.update({f"pair_{i}{j}": b[f"Htr_{i}{j}"] for i, j in PAIRS})
    return b
