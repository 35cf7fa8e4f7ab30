"""Notation table: the paper's symbols, their names in :mod:`curvature_gap.theory`, and the clashes.

The paper uses several symbols for two or three different objects (L, k, G, H, S, σ, M).
Each such symbol appears here once per meaning, with the code name that keeps the meanings
apart; ``clash`` names the other meaning(s) (empty when the symbol is unambiguous).
"""
from __future__ import annotations

__all__ = ["NOTATION"]

NOTATION: list[dict] = [
    # ---- sizes and indices
    {"paper": "L", "code": "L", "meaning": "sequence length: number of tokens, rows of X (49 for a 28×28 MNIST image with patch 4)",
     "clash": "also the number of blocks ('L×' in Fig. 2) and the loss upper bound in Theorem 7 (2L/(k+1))"},
    {"paper": "L (Fig. 2, 'L×')", "code": "n_blocks", "meaning": "number of Transformer blocks in the ViT",
     "clash": "L = sequence length"},
    {"paper": "L (Theorem 7)", "code": "loss_max", "meaning": "upper bound of the per-sample loss, 0 ≤ l ≤ loss_max",
     "clash": "L = sequence length"},
    {"paper": "k", "code": "k", "meaning": "number of samples in the empirical loss L_k (§2, Theorem 7)",
     "clash": "§3.3 also calls k the sequence length ('The empirical loss over L = k samples'); k is also the "
              "attention-weight index k ∈ {K, Q, V} in Theorem 5"},
    {"paper": "k, ℓ ∈ {K,Q,V}; i, j ∈ {1,2,K,Q,V}", "code": '"K", "Q", "V", "1", "2" (block.BLOCK_PARAMS)',
     "meaning": "parameter-matrix indices of the Hessian blocks", "clash": "k = number of samples"},
    {"paper": "d_V, d_K, d_ff", "code": "d_V, d_K, d_ff", "meaning": "embedding, key and FFN widths", "clash": ""},
    {"paper": "n_1, n_2, n_K, n_Q, n_V", "code": "block.param_sizes(d_V, d_K, d_ff)",
     "meaning": "numbers of entries d_V d_ff, d_ff d_V, d_V d_K, d_V d_K, d_V²", "clash": ""},
    # ---- vectorisation and calculus
    {"paper": "vec_r(A)", "code": "calculus.vec_r (A.reshape(-1))", "meaning": "row-wise vectorisation", "clash": ""},
    {"paper": "K_{m,n}", "code": "calculus.commutation(m, n)",
     "meaning": "commutation matrix, K_{m,n} vec(A) = vec(A^T) for A ∈ R^{m×n}", "clash": ""},
    {"paper": "∂N/∂W", "code": "(out, n_W) matrix", "meaning": "∂vec_r N / ∂vec_r(W)^T (numerator layout)", "clash": ""},
    {"paper": "∂²N/∂W_i∂W_j", "code": "(out·n_i, n_j) matrix",
     "meaning": "∂vec_r(∂N/∂W_i)/∂vec_r(W_j)^T; entry [(a,b),c] = ∂²N_a/∂w_{i,b}∂w_{j,c}", "clash": ""},
    {"paper": "E = (e_1⊗e_1 … e_L⊗e_L)", "code": "calculus.d_diag(L)", "meaning": "∂diag(v)/∂v", "clash": ""},
    # ---- LayerNorm
    {"paper": "M(X)", "code": "layernorm.center", "meaning": "row-centred input X − (1/d_V) X 1 1^T",
     "clash": "M is also Noci et al.'s attention pre-activation in ∂A/∂M (code: exact.forward.scores, the paper's T), "
              "the Hessian bound M of Theorems 1 and 7 (code: M_bound) and M_1 = A X (code: attention.M1)"},
    {"paper": "σ(X)", "code": "layernorm.sigma", "meaning": "row standard deviation (population, no ε), shape (L,)",
     "clash": "σ is also the FFN activation σ(Y W_1) (code: ffn.relu) and a singular value σ_1 (spectral norm)"},
    {"paper": "σ(·) (FFN)", "code": "ffn.relu", "meaning": "activation, ReLU in all derivations", "clash": "σ = row std"},
    {"paper": "σ_1, σ_min (norms)", "code": "torch.linalg.matrix_norm(·, 2)", "meaning": "largest singular value",
     "clash": "σ = row std; Lemma 4's σ_min is a row norm ‖M_i‖_2, not a std"},
    {"paper": "P(X) = diag^{-1}(σ)", "code": "layernorm.P", "meaning": "inverse row-std matrix (L × L)", "clash": ""},
    {"paper": "D = diag(σ)", "code": "torch.diag(layernorm.sigma(X))", "meaning": "row-std matrix", "clash": ""},
    {"paper": "G (Theorems 2-3)", "code": "layernorm.dM_dX", "meaning": "centering Jacobian I − (1/d_V)(I_L ⊗ 1 1^T)",
     "clash": "G_i = ∂Y/∂W_i in Theorem 4 (main text); G_k = ∂F/∂W_k in Theorem 5 (detailed)"},
    {"paper": "H (Theorem 3)", "code": "layernorm.dP_dX", "meaning": "∂P/∂X ∈ R^{L² × L d_V}",
     "clash": "H also denotes every Hessian (H_Z, H_Y, H_tr, H_o, H_f, H^(k))"},
    {"paper": "A_1, B_1, A_2, B_2, A_3, B_3, J", "code": "layernorm._factors / _d2P_terms",
     "meaning": "factors of ∂P/∂X in the proof of Theorem 3",
     "clash": "A is also the attention matrix; B_i also ∂S/∂W_i; J also the Jacobians J_Y, J_Z, J_SY"},
    {"paper": "∂LN/∂X (Theorem 2)", "code": "layernorm.jacobian", "meaning": "(L d_V, L d_V)", "clash": ""},
    {"paper": "∂²LN/∂X² (Theorem 3)", "code": "layernorm.hessian, layernorm.hessian_rowwise",
     "meaning": "((L d_V)², L d_V); block-diagonal over rows", "clash": ""},
    # ---- attention
    {"paper": "T(X)", "code": "exact.forward.scores", "meaning": "X W_Q W_K^T X^T / √d_K", "clash": "written M in Noci's ∂A/∂M"},
    {"paper": "A(X)", "code": "exact.forward.attention_matrix", "meaning": "row-softmax of T", "clash": "A_1, A_2, A_3 in Theorem 3's proof"},
    {"paper": "F(X)", "code": "exact.forward.sa_forward", "meaning": "A X W_V", "clash": ""},
    {"paper": "∂A/∂T", "code": "attention.dA_dT", "meaning": "blockdiag(diag(A_i) − A_i A_i^T)", "clash": ""},
    {"paper": "∂²A/∂T²", "code": "attention.d2A_dT2", "meaning": "(L⁴, L²) softmax second derivative (Lemma C.1)", "clash": ""},
    {"paper": "M_1 = A X", "code": "attention.M1", "meaning": "attended input", "clash": "M(X) = centred input"},
    {"paper": "Z_1, Z_2", "code": "attention.Z1, attention.Z2", "meaning": "Ormaniec's softmax-derivative operators",
     "clash": "Z = block output"},
    {"paper": "S (Ormaniec / Lemma 2)", "code": "attention.S_shuffle",
     "meaning": "(I ⊗ K_{d_V,d_V})(vec_r I ⊗ I) ∈ R^{d_V³ × d_V}",
     "clash": "S = Y + FFN(Y) (residual sum, code: exact.forward.block_forward()['S'])"},
    {"paper": "R_m", "code": "attention.R_m", "meaning": "vec_r(F − Target)^T ⊗ I_m", "clash": ""},
    {"paper": "G_V, G_Q, G_K (Theorem 5)", "code": "attention.G_V / G_Q / G_K", "meaning": "∂F/∂W_{V,Q,K}",
     "clash": "G = centering Jacobian; Theorem 4's G_i = ∂Y/∂W_i (code: first_order()['dY_dW'])"},
    {"paper": "H_o, H_f", "code": "attention.Ho_*, attention.Hf_*, attention.loss_hessian_blocks",
     "meaning": "outer-product and functional Hessian of the attention loss", "clash": ""},
    {"paper": "Φ_kl", "code": "attention.phi(k, l), attention.contract_phi",
     "meaning": "∂G_k/∂W_l = ∂²F/∂W_k∂W_l (model curvature, no loss factor)", "clash": ""},
    # ---- block
    {"paper": "U = X + F(X)", "code": "exact.forward.block_forward()['U']", "meaning": "first LayerNorm input", "clash": ""},
    {"paper": "Y", "code": "exact.forward.block_forward()['Y']", "meaning": "LN(X + F(X))", "clash": ""},
    {"paper": "S", "code": "exact.forward.block_forward()['S']", "meaning": "ReLU(Y W_1) W_2 + Y",
     "clash": "S = Ormaniec's reshaping operator (code: attention.S_shuffle)"},
    {"paper": "Z", "code": "exact.forward.block_forward()['Z']", "meaning": "LN(S), the block output", "clash": "Z_1, Z_2"},
    {"paper": "D_σ", "code": "ffn.D_sigma", "meaning": "diag(vec_r 1{Y W_1 > 0})", "clash": ""},
    {"paper": "J_Y, J_Z, J_SY", "code": "first_order()['J_Y' | 'J_Z' | 'J_SY']",
     "meaning": "∂LN/∂U at U, ∂LN/∂S at S, ∂S/∂Y", "clash": ""},
    {"paper": "B_i", "code": "first_order()['B'][i]", "meaning": "∂S/∂W_i", "clash": "B_1, B_2, B_3 in Theorem 3's proof"},
    {"paper": "H_Y, H_Z", "code": "layernorm.hessian(U), layernorm.hessian(S)", "meaning": "LayerNorm Hessians at U and S",
     "clash": ""},
    {"paper": "ξ_ij", "code": "block.xi(i, j), block.contract_xi", "meaning": "∂B_i/∂W_j = ∂²S/∂W_i∂W_j", "clash": ""},
    {"paper": "H_tr^(i,j)", "code": "block.H_tr(i, j)", "meaning": "∂²Z/∂W_i∂W_j (boxed Theorem 5)", "clash": ""},
    {"paper": "∂²(L∘Z)/∂W_i∂W_j", "code": "block.loss_hessian, block.loss_hessian_literal",
     "meaning": "block-loss Hessian (Gauss–Newton: outer part + functional part)", "clash": ""},
    {"paper": "L(·), l(·, Target)", "code": "exact.forward.block_loss",
     "meaning": "(1/(L d_V)) ‖· − Target‖²_F", "clash": "L = sequence length; §3.2 writes ‖·−Target‖²_2"},
    {"paper": "R^tr_m", "code": "(g^T ⊗ I_m) with g = 2/(L d_V) vec_r(Z − Target)",
     "meaning": "loss-gradient contraction of the block", "clash": ""},
]
