"""Notation table: the paper's symbols, their names in :mod:`curvature_gap.theory`, and the clashes.

A symbol the paper uses for several objects (L, k, G, H, S, σ, M) appears once per meaning, with the code name
that keeps the meanings apart; ``clash`` names the other meaning(s) (empty when the symbol is unambiguous).

``paper``, ``meaning`` and ``clash`` are MyST Markdown (formulas inline LaTeX in ``$...$`` with the book's MathJax
macros) and never contain a ``|``, which would break the Markdown table; ``code`` is plain text. In ``paper`` σ is
the Unicode letter inside the math, so that the clashing symbols can still be found by their letter.
"""
from __future__ import annotations

__all__ = ["NOTATION"]

NOTATION: list[dict] = [
    # ---- sizes and indices
    {"paper": r"$L$", "code": "L",
     "meaning": r"sequence length: number of tokens, rows of $\mathbf{X}$ (49 for a $28 \times 28$ MNIST image with patch 4)",
     "clash": r"also the number of blocks ('$L\times$' in Fig. 2) and the loss upper bound in Theorem 7 ($2L/(k+1)$)"},
    {"paper": r"$L$ (Fig. 2, '$L\times$')", "code": "n_blocks", "meaning": "number of Transformer blocks in the ViT",
     "clash": r"$L$ = sequence length"},
    {"paper": r"$L$ (Theorem 7)", "code": "loss_max",
     "meaning": r"upper bound of the per-sample loss, $0 \leq l \leq \mathtt{loss\_max}$",
     "clash": r"$L$ = sequence length"},
    {"paper": r"$k$", "code": "k", "meaning": r"number of samples in the empirical loss $L_k$ (§2, Theorem 7)",
     "clash": r"§3.3 also calls $k$ the sequence length ('The empirical loss over $L = k$ samples'); $k$ is also the "
              r"attention-weight index $k \in \{K, Q, V\}$ in Theorem 5"},
    {"paper": r"$k, \ell \in \{K, Q, V\}$; $i, j \in \{1, 2, K, Q, V\}$", "code": '"K", "Q", "V", "1", "2" (block.BLOCK_PARAMS)',
     "meaning": "parameter-matrix indices of the Hessian blocks", "clash": r"$k$ = number of samples"},
    {"paper": r"$d_V, d_K, d_\mathrm{ff}$", "code": "d_V, d_K, d_ff", "meaning": "embedding, key and FFN widths",
     "clash": ""},
    {"paper": r"$n_1, n_2, n_K, n_Q, n_V$", "code": "block.param_sizes(d_V, d_K, d_ff)",
     "meaning": r"numbers of entries $d_V d_\mathrm{ff}$, $d_\mathrm{ff} d_V$, $d_V d_K$, $d_V d_K$, $d_V^2$", "clash": ""},
    # ---- vectorisation and calculus
    {"paper": r"$\vecr(\mathbf{A})$", "code": "calculus.vec_r (A.reshape(-1))", "meaning": "row-wise vectorisation",
     "clash": ""},
    {"paper": r"$\mathbf{K}_{m,n}$", "code": "calculus.commutation(m, n)",
     "meaning": r"commutation matrix, $\mathbf{K}_{m,n} \vec(\mathbf{A}) = \vec(\mathbf{A}^\top)$ for "
                r"$\mathbf{A} \in \R^{m \times n}$", "clash": ""},
    {"paper": r"$\partial\mathbf{N}/\partial\mathbf{W}$", "code": "(out, n_W) matrix",
     "meaning": r"$\partial\vecr \mathbf{N} / \partial\vecr(\mathbf{W})^\top$ (numerator layout)", "clash": ""},
    {"paper": r"$\partial^2\mathbf{N}/\partial\mathbf{W}_i\partial\mathbf{W}_j$", "code": "(out·n_i, n_j) matrix",
     "meaning": r"$\partial\vecr(\partial\mathbf{N}/\partial\mathbf{W}_i)/\partial\vecr(\mathbf{W}_j)^\top$; entry "
                r"$[(a,b),c] = \partial^2 N_a/\partial w_{i,b}\partial w_{j,c}$", "clash": ""},
    {"paper": r"$\mathbf{E} = (\mathbf{e}_1 \otimes \mathbf{e}_1 \;\dots\; \mathbf{e}_L \otimes \mathbf{e}_L)$",
     "code": "calculus.d_diag(L)", "meaning": r"$\partial\diag(\mathbf{v})/\partial\mathbf{v}$", "clash": ""},
    # ---- LayerNorm
    {"paper": r"$\mathbf{M}(\mathbf{X})$", "code": "layernorm.center",
     "meaning": r"row-centred input $\mathbf{X} - \frac{1}{d_V} \mathbf{X} \mathbf{1} \mathbf{1}^\top$",
     "clash": r"$\mathbf{M}$ is also Noci et al.'s attention pre-activation in $\partial\mathbf{A}/\partial\mathbf{M}$ "
              r"(code: exact.forward.scores, the paper's $\mathbf{T}$), the Hessian bound $M$ of Theorems 1 and 7 "
              r"(code: M_bound) and $\mathbf{M}_1 = \mathbf{A}\mathbf{X}$ (code: attention.M1)"},
    {"paper": r"$σ(\mathbf{X})$", "code": "layernorm.sigma",
     "meaning": r"row standard deviation (population, no $\epsilon$), shape $(L,)$",
     "clash": r"$\sigma$ is also the FFN activation $\sigma(\mathbf{Y}\mathbf{W}_1)$ (code: ffn.relu) and a singular "
              r"value $\sigma_1$ (spectral norm)"},
    {"paper": r"$σ(\cdot)$ (FFN)", "code": "ffn.relu", "meaning": "activation, ReLU in all derivations",
     "clash": r"$\sigma$ = row std"},
    {"paper": r"$σ_1, σ_{\min}$ (norms)", "code": "torch.linalg.matrix_norm(·, 2)", "meaning": "largest singular value",
     "clash": r"$\sigma$ = row std; Lemma 4's $\sigma_{\min}$ is a row norm $\lVert \mathbf{M}_i \rVert_2$, not a std"},
    {"paper": r"$\mathbf{P}(\mathbf{X}) = \diag^{-1}(\sigma)$", "code": "layernorm.P",
     "meaning": r"inverse row-std matrix ($L \times L$)", "clash": ""},
    {"paper": r"$\mathbf{D} = \diag(\sigma)$", "code": "torch.diag(layernorm.sigma(X))", "meaning": "row-std matrix",
     "clash": ""},
    {"paper": r"$\mathbf{G}$ (Theorems 2-3)", "code": "layernorm.dM_dX",
     "meaning": r"centering Jacobian $\mathbf{I} - \frac{1}{d_V}(\mathbf{I}_L \otimes \mathbf{1}\mathbf{1}^\top)$",
     "clash": r"$\mathbf{G}_i = \partial\mathbf{Y}/\partial\mathbf{W}_i$ in Theorem 4 (main text); "
              r"$\mathbf{G}_k = \partial\mathbf{F}/\partial\mathbf{W}_k$ in Theorem 5 (detailed)"},
    {"paper": r"$\mathbf{H}$ (Theorem 3)", "code": "layernorm.dP_dX",
     "meaning": r"$\partial\mathbf{P}/\partial\mathbf{X} \in \R^{L^2 \times L d_V}$",
     "clash": r"$\mathbf{H}$ also denotes every Hessian ($\mathbf{H}_Z$, $\mathbf{H}_Y$, $\mathbf{H}_\mathrm{tr}$, "
              r"$\mathbf{H}_o$, $\mathbf{H}_f$, $\mathbf{H}^{(k)}$)"},
    {"paper": r"$\mathbf{A}_1, \mathbf{B}_1, \mathbf{A}_2, \mathbf{B}_2, \mathbf{A}_3, \mathbf{B}_3, \mathbf{J}$",
     "code": "layernorm._factors / _d2P_terms",
     "meaning": r"factors of $\partial\mathbf{P}/\partial\mathbf{X}$ in the proof of Theorem 3",
     "clash": r"$\mathbf{A}$ is also the attention matrix; $\mathbf{B}_i$ also $\partial\mathbf{S}/\partial\mathbf{W}_i$; "
              r"$\mathbf{J}$ also the Jacobians $\mathbf{J}_Y$, $\mathbf{J}_Z$, $\mathbf{J}_{SY}$"},
    {"paper": r"$\partial\LN/\partial\mathbf{X}$ (Theorem 2)", "code": "layernorm.jacobian",
     "meaning": r"$(L d_V, L d_V)$", "clash": ""},
    {"paper": r"$\partial^2\LN/\partial\mathbf{X}^2$ (Theorem 3)", "code": "layernorm.hessian, layernorm.hessian_rowwise",
     "meaning": r"$((L d_V)^2, L d_V)$; block-diagonal over rows", "clash": ""},
    # ---- attention
    {"paper": r"$\mathbf{T}(\mathbf{X})$", "code": "exact.forward.scores",
     "meaning": r"$\mathbf{X}\mathbf{W}_Q\mathbf{W}_K^\top\mathbf{X}^\top / \sqrt{d_K}$",
     "clash": r"written $\mathbf{M}$ in Noci's $\partial\mathbf{A}/\partial\mathbf{M}$"},
    {"paper": r"$\mathbf{A}(\mathbf{X})$", "code": "exact.forward.attention_matrix", "meaning": r"row-softmax of $\mathbf{T}$",
     "clash": r"$\mathbf{A}_1, \mathbf{A}_2, \mathbf{A}_3$ in Theorem 3's proof"},
    {"paper": r"$\mathbf{F}(\mathbf{X})$", "code": "exact.forward.sa_forward", "meaning": r"$\mathbf{A}\mathbf{X}\mathbf{W}_V$",
     "clash": ""},
    {"paper": r"$\partial\mathbf{A}/\partial\mathbf{T}$", "code": "attention.dA_dT",
     "meaning": r"$\operatorname{blockdiag}(\diag(\mathbf{A}_i) - \mathbf{A}_i \mathbf{A}_i^\top)$", "clash": ""},
    {"paper": r"$\partial^2\mathbf{A}/\partial\mathbf{T}^2$", "code": "attention.d2A_dT2",
     "meaning": r"$(L^4, L^2)$ softmax second derivative (Lemma C.1)", "clash": ""},
    {"paper": r"$\mathbf{M}_1 = \mathbf{A}\mathbf{X}$", "code": "attention.M1", "meaning": "attended input",
     "clash": r"$\mathbf{M}(\mathbf{X})$ = centred input"},
    {"paper": r"$\mathbf{Z}_1, \mathbf{Z}_2$", "code": "attention.Z1, attention.Z2",
     "meaning": "Ormaniec's softmax-derivative operators", "clash": r"$\mathbf{Z}$ = block output"},
    {"paper": r"$\mathbf{S}$ (Ormaniec / Lemma 2)", "code": "attention.S_shuffle",
     "meaning": r"$(\mathbf{I} \otimes \mathbf{K}_{d_V,d_V})(\vecr \mathbf{I} \otimes \mathbf{I}) \in \R^{d_V^3 \times d_V}$",
     "clash": r"$\mathbf{S} = \mathbf{Y} + \mathrm{FFN}(\mathbf{Y})$ (residual sum, code: "
              r"exact.forward.block_forward()['S'])"},
    {"paper": r"$\mathbf{R}_m$", "code": "attention.R_m",
     "meaning": r"$\vecr(\mathbf{F} - \mathrm{Target})^\top \otimes \mathbf{I}_m$", "clash": ""},
    {"paper": r"$\mathbf{G}_V, \mathbf{G}_Q, \mathbf{G}_K$ (Theorem 5)", "code": "attention.G_V / G_Q / G_K",
     "meaning": r"$\partial\mathbf{F}/\partial\mathbf{W}_{V,Q,K}$",
     "clash": r"$\mathbf{G}$ = centering Jacobian; Theorem 4's $\mathbf{G}_i = \partial\mathbf{Y}/\partial\mathbf{W}_i$ "
              r"(code: first_order()['dY_dW'])"},
    {"paper": r"$\mathbf{H}_o, \mathbf{H}_f$", "code": "attention.Ho_*, attention.Hf_*, attention.loss_hessian_blocks",
     "meaning": "outer-product and functional Hessian of the attention loss", "clash": ""},
    {"paper": r"$\Phi_{kl}$", "code": "attention.phi(k, l), attention.contract_phi",
     "meaning": r"$\partial\mathbf{G}_k/\partial\mathbf{W}_l = \partial^2\mathbf{F}/\partial\mathbf{W}_k\partial\mathbf{W}_l$ "
                r"(model curvature, no loss factor)", "clash": ""},
    # ---- block
    {"paper": r"$\mathbf{U} = \mathbf{X} + \mathbf{F}(\mathbf{X})$", "code": "exact.forward.block_forward()['U']",
     "meaning": "first LayerNorm input", "clash": ""},
    {"paper": r"$\mathbf{Y}$", "code": "exact.forward.block_forward()['Y']",
     "meaning": r"$\LN(\mathbf{X} + \mathbf{F}(\mathbf{X}))$", "clash": ""},
    {"paper": r"$\mathbf{S}$", "code": "exact.forward.block_forward()['S']",
     "meaning": r"$\ReLU(\mathbf{Y}\mathbf{W}_1)\mathbf{W}_2 + \mathbf{Y}$",
     "clash": r"$\mathbf{S}$ = Ormaniec's reshaping operator (code: attention.S_shuffle)"},
    {"paper": r"$\mathbf{Z}$", "code": "exact.forward.block_forward()['Z']", "meaning": r"$\LN(\mathbf{S})$, the block output",
     "clash": r"$\mathbf{Z}_1, \mathbf{Z}_2$"},
    {"paper": r"$\mathbf{D}_\sigma$", "code": "ffn.D_sigma",
     "meaning": r"$\diag(\vecr \mathbf{1}\{\mathbf{Y}\mathbf{W}_1 > 0\})$", "clash": ""},
    {"paper": r"$\mathbf{J}_Y, \mathbf{J}_Z, \mathbf{J}_{SY}$", "code": "first_order()['J_Y' | 'J_Z' | 'J_SY']",
     "meaning": r"$\partial\LN/\partial\mathbf{U}$ at $\mathbf{U}$, $\partial\LN/\partial\mathbf{S}$ at $\mathbf{S}$, "
                r"$\partial\mathbf{S}/\partial\mathbf{Y}$", "clash": ""},
    {"paper": r"$\mathbf{B}_i$", "code": "first_order()['B'][i]", "meaning": r"$\partial\mathbf{S}/\partial\mathbf{W}_i$",
     "clash": r"$\mathbf{B}_1, \mathbf{B}_2, \mathbf{B}_3$ in Theorem 3's proof"},
    {"paper": r"$\mathbf{H}_Y, \mathbf{H}_Z$", "code": "layernorm.hessian(U), layernorm.hessian(S)",
     "meaning": r"LayerNorm Hessians at $\mathbf{U}$ and $\mathbf{S}$", "clash": ""},
    {"paper": r"$\xi_{ij}$", "code": "block.xi(i, j), block.contract_xi",
     "meaning": r"$\partial\mathbf{B}_i/\partial\mathbf{W}_j = \partial^2\mathbf{S}/\partial\mathbf{W}_i\partial\mathbf{W}_j$",
     "clash": ""},
    {"paper": r"$\mathbf{H}_\mathrm{tr}^{(i,j)}$", "code": "block.H_tr(i, j)",
     "meaning": r"$\partial^2\mathbf{Z}/\partial\mathbf{W}_i\partial\mathbf{W}_j$ (boxed Theorem 5)", "clash": ""},
    {"paper": r"$\partial^2(L \circ \mathbf{Z})/\partial\mathbf{W}_i\partial\mathbf{W}_j$",
     "code": "block.loss_hessian, block.loss_hessian_literal",
     "meaning": "block-loss Hessian (Gauss–Newton: outer part + functional part)", "clash": ""},
    {"paper": r"$L(\cdot)$, $l(\cdot, \mathrm{Target})$", "code": "exact.forward.block_loss",
     "meaning": r"$\frac{1}{L d_V} \lVert \cdot - \mathrm{Target} \rVert_F^2$",
     "clash": r"$L$ = sequence length; §3.2 writes $\lVert \cdot - \mathrm{Target} \rVert_2^2$"},
    {"paper": r"$\mathbf{R}^\mathrm{tr}_m$", "code": "(g^T ⊗ I_m) with g = 2/(L d_V) vec_r(Z − Target)",
     "meaning": "loss-gradient contraction of the block", "clash": ""},
]
