"""Machine-readable errata for the formulas of §2 of the paper (arXiv:2510.16927v1).

Each entry: ``id``, ``where`` (theorem / equation / proof step), ``printed`` (what the paper
prints), ``holds`` (what is implemented and verified), ``evidence`` (the ``curvature-gap verify``
check id that measures both), and optionally ``related`` (further check ids).  The measured
errors are in the rows of :func:`curvature_gap.theory.verify.run_checks`.
"""
from __future__ import annotations

import json

__all__ = ["ERRATA", "errata_as_json"]

ERRATA: list[dict] = [
    {
        "id": "layernorm-definition-index",
        "where": "§2 Preliminaries, LayerNorm of U ∈ R^{m×n}",
        "printed": "μ_i = (1/m) Σ_{j=1}^{m} U_ij,  σ_i² = (1/m) Σ_{j=1}^{m} (U_ij − μ_i)²,  γ, β ∈ R^m",
        "holds": "μ_i = (1/n) Σ_{j=1}^{n} U_ij and σ_i² = (1/n) Σ_{j=1}^{n} (U_ij − μ_i)² (row statistics over the "
                 "n = d_V features, as in §3.2 and Theorem 2); γ, β ∈ R^n",
        "evidence": "sec2.layernorm_definition",
    },
    {
        "id": "relu-mask",
        "where": "Theorem 4, detailed version and proof (App. C.4): ∂(FFN(Y)+Y)/∂W_1 and ∂(FFN(Y)+Y)/∂Y",
        "printed": "diag(vec_r(1_{X>0})) with X the block input (L × d_V)",
        "holds": "D_σ = diag(vec_r 1{Y W_1 > 0}) ∈ R^{L d_ff × L d_ff} (ReLU Jacobian at the FFN pre-activation), "
                 "as the paper itself writes in Theorem 5",
        "evidence": "thm4.relu_mask",
    },
    {
        "id": "uniform-attention-1-over-n",
        "where": "Theorem 4 proof (Noci et al. Lemma A.2/A.3), uniform-attention softmax Jacobian",
        "printed": "∂A/∂M = (1/n) I_L ⊗ (I_L − (1/L) 1_{L×L})",
        "holds": "(1/L) I_L ⊗ (I_L − (1/L) 1_{L×L}); this holds only when every attention row is exactly uniform "
                 "(e.g. W_Q W_K^T = 0), not for general softmax rows",
        "evidence": "noci.uniform_dA_dT",
    },
    {
        "id": "dF-dWK-commutation",
        "where": "Theorem 4 proof (App. C.4), ∂F/∂W_K",
        "printed": "(I_L ⊗ W_V^T X^T) ∂A/∂M ((X W_Q ⊗ X) K_{d_V d_K} / √d_k)",
        "holds": "(I_L ⊗ W_V^T X^T) ∂A/∂T (X W_Q ⊗ X) K_{d_K,d_V} / √d_K, since ∂W_K^T/∂W_K = K_{d_K,d_V} for "
                 "W_K ∈ R^{d_V×d_K} (the paper's own Proposition 'Transposed Matrix derivative'); the printed "
                 "K_{d_V,d_K} is its transpose and differs whenever d_V ≠ d_K",
        "evidence": "noci.G_K",
    },
    {
        "id": "thm3-IL-slip",
        "where": "Theorem 3 proof (App. C.3), ∂(P ⊗ I_{d_V})/∂X",
        "printed": "∂(P ⊗ I_L)/∂P ∂P/∂X = (I_L ⊗ K_{L,L} ⊗ I_L)(I_{L²} ⊗ vec_r I_L) ∂P/∂X",
        "holds": "(I_L ⊗ K_{d_V,L} ⊗ I_{d_V})(I_{L²} ⊗ vec_r I_{d_V}) ∂P/∂X ∈ R^{(L d_V)² × L d_V}; the printed "
                 "form has L⁴ rows and coincides with this only when L = d_V",
        "evidence": "thm3.layernorm.d_PkronI_dX",
    },
    {
        "id": "thm3-dD-dX-scale",
        "where": "Theorem 3 proof (App. C.3), ∂D/∂X used in ∂A_1/∂X",
        "printed": "∂D/∂X = (e_1⊗e_1 … e_L⊗e_L)(diag^{-1}(vec_r^{∘1/2}(M^{∘2} 1_{d_V})) (I_L ⊗ 1^T_{d_V}) "
                   "diag(vec_r M) ∂M/∂X)",
        "holds": "∂D/∂X = E ∂σ/∂X = (1/√d_V) E diag^{-1}(vec_r^{∘1/2}(M^{∘2} 1)) (I_L ⊗ 1^T) diag(vec_r M) ∂M/∂X "
                 "(the factor 1/√d_V of σ = τ^{∘1/2}/√d_V is dropped in print)",
        "evidence": "thm3.layernorm.dD_dX",
    },
    {
        "id": "thm3-d2P-dX2",
        "where": "Theorem 3 proof (App. C.3), ∂²P/∂X²",
        "printed": "∂²P/∂X² = (1/√d_V)(A_1 ⊗ I_{L d_V}) ∂B_1/∂X + (I_{L²} ⊗ B_1^T) ∂A_1/∂X, with ∂A_1/∂X from the "
                   "printed ∂D/∂X",
        "holds": "∂²P/∂X² = (1/√d_V)[(A_1 ⊗ I) ∂B_1/∂X + (I_{L²} ⊗ B_1^T) ∂A_1/∂X] with ∂A_1/∂X built from "
                 "∂D/∂X = E ∂σ/∂X (so the second term carries 1/d_V in total); neither reading of the printed "
                 "prefactor is correct with the printed ∂D/∂X. ∂A_2/∂X, not printed, is "
                 "−(A_2 ⊗ A_2) E A_2 (I_L ⊗ 1^T) diag(vec_r M) G",
        "evidence": "thm3.layernorm.d2P_dX2",
        "related": ["thm3.layernorm.hessian", "thm3.layernorm.hessian.fd"],
    },
    {
        "id": "S-shuffle-shape",
        "where": "Ormaniec et al. Thm 3.2 as quoted (H_f) and Lemma 2: definition of S",
        "printed": "S := (I_{d_V} ⊗ K_{d_V,d_V})(vec_r I_{d_V} ⊗ I_{d_V}) ∈ R^{d_V² × d_V}",
        "holds": "the product is in R^{d_V³ × d_V}, and I_L ⊗ S = ∂vec_r(M ⊗ I_{d_V})/∂M for M ∈ R^{L×d_V}; with "
                 "this S the H_f(W_V,W_Q), H_f(W_Q,W_K) and Φ_VQ formulas are dimensionally consistent and correct",
        "evidence": "orm.S_shuffle",
        "related": ["orm.Hf.VQ", "orm.Hf.QK"],
    },
    {
        "id": "lemma2-phi-loss-factor",
        "where": "Lemma 2 (App. D), Φ_QQ, Φ_VQ, Φ_QK",
        "printed": "Φ_QQ = 2/(L d_V d_K)(…)Z_2(…), Φ_VQ = 2/(L d_V √d_K)(I_L ⊗ S)Z_1(I ⊗ W_K), Φ_QK with "
                   "2/(L d_V d_K) and 2/(L d_V √d_K): Ormaniec's H_f with R removed but the loss factor kept",
        "holds": "Φ_kl = ∂²F/∂W_k∂W_l: Φ_QQ = (1/d_K)(I_L ⊗ W_V^T ⊗ I ⊗ W_K^T) Z_2 (I ⊗ W_K), "
                 "Φ_VQ = (1/√d_K)(I_L ⊗ S) Z_1 (I ⊗ W_K), Φ_QK = (1/d_K)(…)Z_2(W_Q ⊗ I)K_{d_K,d_V} + "
                 "(1/√d_K)[(I_L ⊗ W_V^T ⊗ I)(Z_1 ⊗ I)S] ⊗ I_{d_K}; the factor 2/(L d_V) belongs to ∂l/∂F "
                 "(H_f = (2/(L d_V)) R Φ); the printed Φ are too small by 2/(L d_V)",
        "evidence": "lem2.phi.QQ",
        "related": ["lem2.phi.VQ", "lem2.phi.QK"],
    },
    {
        "id": "lemma2-phiQK-identity",
        "where": "Lemma 2 (App. D), second term of Φ_QK",
        "printed": "(I_{d_V} ⊗ W_V^T ⊗ I_{d_V})(Z_1 ⊗ I_{d_V}) S ⊗ I_{d_K}",
        "holds": "(I_L ⊗ W_V^T ⊗ I_{d_V})(Z_1 ⊗ I_{d_V}) S, Kronecker-multiplied by I_{d_K} (as in the quoted "
                 "H_f(W_Q,W_K)); the printed I_{d_V} is ill-dimensioned unless L = d_V",
        "evidence": "lem2.phi.QK_identity",
    },
    {
        "id": "uniform-attention-phi-zero",
        "where": "Theorem 5 proof, step 3.3 (uniform-attention simplification)",
        "printed": "under uniform attention Φ_VV = Φ_VQ = Φ_VK = Φ_QQ = Φ_KK = 0",
        "holds": "only Φ_VV = 0 in general; ∂A/∂T is not locally constant, so Φ_VQ = (1/√d_K)(I_L ⊗ S)Z_1(I ⊗ W_K) "
                 "and Φ_QQ (through ∂²A/∂T²) are non-zero at exactly uniform attention (W_Q = 0, W_K ≠ 0)",
        "evidence": "thm5.phi.uniform_zero",
    },
    {
        "id": "xi12-is-xi21",
        "where": "Theorem 5, detailed version (App. C.5), ξ_12 (definition ξ_ij := ∂B_i/∂W_j)",
        "printed": "ξ_12 = (I_L ⊗ K_{d_V,d_ff} ⊗ I_{d_V})(I_{L d_ff} ⊗ vec_r I_{d_V})(D_σ (Y ⊗ I_{d_ff}))",
        "holds": "the printed expression is ∂B_2/∂W_1 = ξ_21 (its proof differentiates B_2 w.r.t. W_1); "
                 "ξ_12 = ∂B_1/∂W_2 = (I_{L d_V} ⊗ (Y ⊗ I_{d_ff})^T D_σ) ∂(I_L ⊗ W_2^T)/∂W_2, the partial transpose",
        "evidence": "thm5.xi12_naming",
        "related": ["thm5.xi.12", "thm5.xi.21"],
    },
    {
        "id": "xi21-ill-dimensioned",
        "where": "Theorem 5, detailed version (App. C.5), ξ_21",
        "printed": "ξ_21 = (I_L ⊗ W_2^T) D_σ (I_L ⊗ K_{d_ff,d_V} ⊗ I_{d_ff})(I_{L d_V} ⊗ vec_r I_{d_ff})",
        "holds": "ill-dimensioned as printed (D_σ has L d_ff columns, the next factor L d_ff² d_V rows); "
                 "ξ_21 = ∂B_2/∂W_1 = (I_L ⊗ K_{d_V,d_ff} ⊗ I_{d_V})(I_{L d_ff} ⊗ vec_r I_{d_V}) D_σ (Y ⊗ I_{d_ff})",
        "evidence": "thm5.xi21_printed",
    },
    {
        "id": "xi1k-identity",
        "where": "Theorem 5, detailed version (App. C.5), ξ_1k, k ∈ {K, Q, V}",
        "printed": "((I_L ⊗ W_2^T) D_σ ⊗ I_{n_k})(I_L ⊗ K_{d_ff,d_V} ⊗ I_{d_ff})(I_{L d_V} ⊗ vec_r I_{d_ff})(J_Y G_k)",
        "holds": "((I_L ⊗ W_2^T) D_σ ⊗ I_{n_1})(…)(J_Y G_k): the identity has the size of W_1 (product rule with the "
                 "constant left factor of B_1); the printed I_{n_k} is ill-dimensioned unless n_k = n_1",
        "evidence": "thm5.xi1k_identity",
    },
    {
        "id": "dW2T-commutation",
        "where": "Theorem 5 proof (App. C.5), pair (2,1): ∂vec_r(I_L ⊗ W_2^T)/∂W_2",
        "printed": "(I_L ⊗ K_{d_V,L} ⊗ I_{d_ff})(vec_r I_L ⊗ I_{d_V d_ff}) K_{d_ff,d_V}",
        "holds": "(I_L ⊗ K_{d_V,L} ⊗ I_{d_ff})(vec_r I_L ⊗ I_{d_V d_ff}) K_{d_V,d_ff}, since W_2 ∈ R^{d_ff×d_V} "
                 "gives ∂W_2^T/∂W_2 = K_{d_V,d_ff}",
        "evidence": "thm5.proof.dW2T_commutation",
    },
    {
        "id": "mixed-block-symmetry",
        "where": "Theorem 5, detailed version: 'all mixed blocks are symmetric almost everywhere'",
        "printed": "H_tr^(i,j) = H_tr^(j,i) a.e.",
        "holds": "H_tr^(i,j) ∈ R^{(L d_V n_i) × n_j} and H_tr^(j,i) ∈ R^{(L d_V n_j) × n_i}; what holds is "
                 "H_tr^(j,i) = partial transpose of H_tr^(i,j) (entry [(a,c),b] = [(a,b),c], Schwarz); literal "
                 "equality fails even where the shapes agree ((1,2), (Q,K)); the loss-Hessian blocks satisfy "
                 "H^(j,i) = (H^(i,j))^T",
        "evidence": "thm5.symmetry",
        "related": ["gn.loss_hessian.literal_symmetry"],
    },
    {
        "id": "loss-normalisation",
        "where": "§3.2 after Eq. (transformer_decomposition)",
        "printed": "L(·) = ‖· − Target‖²_2, its second derivative is 2/(L d_V); R^tr_m = vec_r(Z − Target)^T ⊗ I_m",
        "holds": "with the paper's loss l = (1/(L d_V))‖Z − Target‖²_F: ∂²l/∂Z² = (2/(L d_V)) I and "
                 "∂l/∂Z ⊗ I_{n_i} = (2/(L d_V)) R^tr_{n_i}; mixing the un-normalised gradient with the "
                 "normalised curvature matches neither loss",
        "evidence": "gn.loss_normalisation",
        "related": ["gn.loss_hessian.literal", "gn.loss_hessian.mnist"],
    },
]


def errata_as_json(indent: int | None = 2) -> str:
    """The errata list as a JSON string."""
    return json.dumps(ERRATA, indent=indent, ensure_ascii=False)
