"""Machine-readable errata for the formulas of §2 of the paper (arXiv:2510.16927v1).

Each entry: ``id``, ``title`` (in words, the heading a reader sees), ``wrong`` (what is wrong, in a few plain
words, for the errata's summary table), ``where`` (theorem / equation / proof step), ``printed`` (what the paper
prints), ``holds`` (what is implemented and verified), ``evidence`` (the ``curvature-gap verify``
check id that measures both), and optionally ``related`` (further check ids) and ``as_printed`` (what
the errata page says of a printed form that cannot be evaluated, where that is not its shapes).

The entries are numbered E1, E2, … in this order. :func:`misprint_counts` counts errata, not rows: an entry whose
evidence row is ``corrected`` is a misprinted formula; one whose evidence row is ``notation`` is listed but not
counted among them.

``where``, ``printed`` and ``holds`` are MyST Markdown: words are plain text and formulas are inline
LaTeX in ``$...$`` (using the book's MathJax macros vecr, vec, diag, LN, ReLU, softmax and R); they never
contain a ``|``, which would break a Markdown table that shows them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ERRATA", "label", "misprint_counts", "MisprintCounts", "ResultMisprints"]

ERRATA: list[dict] = [
    {
        "id": "layernorm-definition-index",
        "title": "LayerNorm's definition: statistics over the wrong index",
        "wrong": 'mean and variance are averaged over the rows (m) instead of the features (n = d_V); γ, β sized m',
        "where": r"§2 Preliminaries, LayerNorm of $\mathbf{U} \in \R^{m \times n}$ ($\mu_i$, $\sigma_i^2$), and §3.2, "
                 r"LayerNorm of $\mathbf{X} \in \R^{L \times d_V}$ (its parameters $\gamma, \beta$)",
        "printed": r"§2: $\mu_i = \frac{1}{m} \sum_{j=1}^{m} U_{ij}$, $\sigma_i^2 = \frac{1}{m} \sum_{j=1}^{m} (U_{ij} - \mu_i)^2$; "
                   r"§3.2: $\gamma, \beta \in \R^m$",
        "holds": r"$\mu_i = \frac{1}{n} \sum_{j=1}^{n} U_{ij}$ and $\sigma_i^2 = \frac{1}{n} \sum_{j=1}^{n} (U_{ij} - \mu_i)^2$ "
                 r"(row statistics over the $n = d_V$ features, as §3.2's own $\mu_i$, $\sigma_i^2$ and Theorem 2 have "
                 r"them); $\gamma, \beta \in \R^{d_V}$, one scale and shift per feature ($m$ is not defined in §3.2, and "
                 r"§2's $m$ counts the rows)",
        "evidence": "sec2.layernorm_definition",
    },
    {
        "id": "relu-mask",
        "title": 'Theorem 4: the ReLU mask is taken at the wrong matrix',
        "wrong": 'the mask uses the block input X instead of the FFN pre-activation Y W₁',
        "where": r"Theorem 4, detailed version and proof (App. C.4): "
                 r"$\partial(\mathrm{FFN}(\mathbf{Y}) + \mathbf{Y})/\partial\mathbf{W}_1$ and "
                 r"$\partial(\mathrm{FFN}(\mathbf{Y}) + \mathbf{Y})/\partial\mathbf{Y}$",
        "printed": r"$\diag(\vecr(\mathbf{1}_{\mathbf{X} > 0}))$ with $\mathbf{X}$ the block input ($L \times d_V$)",
        "holds": r"$\mathbf{D}_\sigma = \diag(\vecr \mathbf{1}\{\mathbf{Y}\mathbf{W}_1 > 0\}) "
                 r"\in \R^{L d_\mathrm{ff} \times L d_\mathrm{ff}}$ (ReLU Jacobian at the FFN pre-activation), "
                 r"as the paper itself writes in Theorem 5",
        "evidence": "thm4.relu_mask",
    },
    {
        "id": "uniform-attention-1-over-n",
        "title": "Theorem 4: the uniform-attention softmax Jacobian's prefactor",
        "wrong": 'the prefactor 1/n uses a symbol that is never defined; under uniform attention it is 1/L',
        "where": "Theorem 4, detailed version and proof (App. C.4), Noci et al.'s Lemma A.2 as quoted: the softmax "
                 "Jacobian under uniform attention",
        "printed": r"$\partial\mathbf{A}/\partial\mathbf{M} = \frac{1}{n} \mathbf{I}_L \otimes "
                   r"(\mathbf{I}_L - \frac{1}{L} \mathbf{1}_{L \times L})$",
        "holds": r"the prefactor's $n$ is an undefined symbol: neither Theorem 4 nor its proof defines it (the shapes are "
                 r"right, $L^2 \times L^2$). With every attention row exactly uniform ($A_{ij} = 1/L$, e.g. "
                 r"$\mathbf{W}_Q \mathbf{W}_K^\top = 0$) it is $\frac{1}{L} \mathbf{I}_L \otimes (\mathbf{I}_L - "
                 r"\frac{1}{L} \mathbf{1}_{L \times L})$; for general softmax rows the formula does not apply",
        "as_printed": "undefined symbol: n is not defined in Theorem 4 or its proof",
        "evidence": "noci.uniform_dA_dT",
    },
    {
        "id": "dF-dWK-commutation",
        "title": 'Theorem 4, proof: the commutation matrix in ∂F/∂W_K',
        "wrong": 'K with subscripts d_V d_K in the wrong order (and ∂A/∂M for ∂A/∂T)',
        "where": r"Theorem 4 proof (App. C.4), $\partial\mathbf{F}/\partial\mathbf{W}_K$",
        "printed": r"$(\mathbf{I}_L \otimes \mathbf{W}_V^\top \mathbf{X}^\top)\, \partial\mathbf{A}/\partial\mathbf{M}\, "
                   r"((\mathbf{X}\mathbf{W}_Q \otimes \mathbf{X})\, \mathbf{K}_{d_V d_K} / \sqrt{d_k})$",
        "holds": r"$(\mathbf{I}_L \otimes \mathbf{W}_V^\top \mathbf{X}^\top)\, \partial\mathbf{A}/\partial\mathbf{T}\, "
                 r"(\mathbf{X}\mathbf{W}_Q \otimes \mathbf{X})\, \mathbf{K}_{d_K,d_V} / \sqrt{d_K}$, since "
                 r"$\partial\mathbf{W}_K^\top/\partial\mathbf{W}_K = \mathbf{K}_{d_K,d_V}$ for "
                 r"$\mathbf{W}_K \in \R^{d_V \times d_K}$ (the paper's own Proposition 'Transposed Matrix derivative'); "
                 r"the printed $\mathbf{K}_{d_V,d_K}$ is its transpose and differs whenever $d_V \neq d_K$",
        "evidence": "noci.G_K",
    },
    {
        "id": "thm3-IL-slip",
        "title": 'Theorem 3, proof: an identity of size L where one of size d_V belongs',
        "wrong": 'identity matrices of size L instead of d_V in ∂(P ⊗ I)/∂X',
        "where": r"Theorem 3 proof (App. C.3), $\partial(\mathbf{P} \otimes \mathbf{I}_{d_V})/\partial\mathbf{X}$",
        "printed": r"$\partial(\mathbf{P} \otimes \mathbf{I}_L)/\partial\mathbf{P}\; \partial\mathbf{P}/\partial\mathbf{X} = "
                   r"(\mathbf{I}_L \otimes \mathbf{K}_{L,L} \otimes \mathbf{I}_L)(\mathbf{I}_{L^2} \otimes \vecr \mathbf{I}_L)\, "
                   r"\partial\mathbf{P}/\partial\mathbf{X}$",
        "holds": r"$(\mathbf{I}_L \otimes \mathbf{K}_{d_V,L} \otimes \mathbf{I}_{d_V})(\mathbf{I}_{L^2} \otimes \vecr \mathbf{I}_{d_V})\, "
                 r"\partial\mathbf{P}/\partial\mathbf{X} \in \R^{(L d_V)^2 \times L d_V}$; the printed form has $L^4$ rows "
                 r"and coincides with this only when $L = d_V$",
        "evidence": "thm3.layernorm.d_PkronI_dX",
    },
    {
        "id": "thm3-dD-dX-scale",
        "title": 'Theorem 3, proof: a missing factor in ∂D/∂X',
        "wrong": 'the factor 1/√d_V of σ is dropped',
        "where": r"Theorem 3 proof (App. C.3), $\partial\mathbf{D}/\partial\mathbf{X}$ used in "
                 r"$\partial\mathbf{A}_1/\partial\mathbf{X}$",
        "printed": r"$\partial\mathbf{D}/\partial\mathbf{X} = (\mathbf{e}_1 \otimes \mathbf{e}_1 \;\dots\; "
                   r"\mathbf{e}_L \otimes \mathbf{e}_L)(\diag^{-1}(\vecr^{\circ 1/2}(\mathbf{M}^{\circ 2} \mathbf{1}_{d_V}))"
                   r"(\mathbf{I}_L \otimes \mathbf{1}_{d_V}^\top) \diag(\vecr \mathbf{M})\, \partial\mathbf{M}/\partial\mathbf{X})$",
        "holds": r"$\partial\mathbf{D}/\partial\mathbf{X} = \mathbf{E}\, \partial\sigma/\partial\mathbf{X} = "
                 r"\frac{1}{\sqrt{d_V}} \mathbf{E} \diag^{-1}(\vecr^{\circ 1/2}(\mathbf{M}^{\circ 2} \mathbf{1}))"
                 r"(\mathbf{I}_L \otimes \mathbf{1}^\top) \diag(\vecr \mathbf{M})\, \partial\mathbf{M}/\partial\mathbf{X}$ "
                 r"(the factor $1/\sqrt{d_V}$ of $\sigma = \tau^{\circ 1/2}/\sqrt{d_V}$ is dropped in print)",
        "evidence": "thm3.layernorm.dD_dX",
    },
    {
        "id": "thm3-d2P-dX2",
        "title": 'Theorem 3, proof: the second derivative of P',
        "wrong": 'the factor 1/√d_V multiplies only the first of the two terms, and ∂A₁/∂X inherits E6',
        "where": r"Theorem 3 proof (App. C.3), $\partial^2\mathbf{P}/\partial\mathbf{X}^2$",
        "printed": r"$\partial^2\mathbf{P}/\partial\mathbf{X}^2 = \frac{1}{\sqrt{d_V}} (\mathbf{A}_1 \otimes \mathbf{I}_{L d_V})\, "
                   r"\partial\mathbf{B}_1/\partial\mathbf{X} + (\mathbf{I}_{L^2} \otimes \mathbf{B}_1^\top)\, "
                   r"\partial\mathbf{A}_1/\partial\mathbf{X}$, with $\partial\mathbf{A}_1/\partial\mathbf{X}$ from the "
                   r"printed $\partial\mathbf{D}/\partial\mathbf{X}$",
        "holds": r"$\partial^2\mathbf{P}/\partial\mathbf{X}^2 = \frac{1}{\sqrt{d_V}} [(\mathbf{A}_1 \otimes \mathbf{I})\, "
                 r"\partial\mathbf{B}_1/\partial\mathbf{X} + (\mathbf{I}_{L^2} \otimes \mathbf{B}_1^\top)\, "
                 r"\partial\mathbf{A}_1/\partial\mathbf{X}]$ with $\partial\mathbf{A}_1/\partial\mathbf{X}$ built from "
                 r"$\partial\mathbf{D}/\partial\mathbf{X} = \mathbf{E}\, \partial\sigma/\partial\mathbf{X}$ (so the second "
                 r"term carries $1/d_V$ in total); neither reading of the printed prefactor is correct with the printed "
                 r"$\partial\mathbf{D}/\partial\mathbf{X}$. $\partial\mathbf{A}_2/\partial\mathbf{X}$, not printed, is "
                 r"$-(\mathbf{A}_2 \otimes \mathbf{A}_2)\, \mathbf{E} \mathbf{A}_2 (\mathbf{I}_L \otimes \mathbf{1}^\top) "
                 r"\diag(\vecr \mathbf{M})\, \mathbf{G}$",
        "evidence": "thm3.layernorm.d2P_dX2",
        "related": ["thm3.layernorm.hessian", "thm3.layernorm.hessian.fd"],
    },
    {
        "id": "S-shuffle-shape",
        "title": 'Lemma 2 and the quoted H_f: the shape of S',
        "wrong": 'S is declared d_V² × d_V but the product is d_V³ × d_V',
        "where": r"Ormaniec et al. Thm 3.2 as quoted ($\mathbf{H}_f$) and Lemma 2: definition of $\mathbf{S}$",
        "printed": r"$\mathbf{S} := (\mathbf{I}_{d_V} \otimes \mathbf{K}_{d_V,d_V})(\vecr \mathbf{I}_{d_V} \otimes \mathbf{I}_{d_V}) "
                   r"\in \R^{d_V^2 \times d_V}$",
        "holds": r"the product is in $\R^{d_V^3 \times d_V}$, and $\mathbf{I}_L \otimes \mathbf{S} = "
                 r"\partial\vecr(\mathbf{M} \otimes \mathbf{I}_{d_V})/\partial\mathbf{M}$ for $\mathbf{M} \in \R^{L \times d_V}$; "
                 r"with this $\mathbf{S}$ the $\mathbf{H}_f(\mathbf{W}_V, \mathbf{W}_Q)$, $\mathbf{H}_f(\mathbf{W}_Q, \mathbf{W}_K)$ "
                 r"and $\Phi_{VQ}$ formulas are dimensionally consistent and correct",
        "evidence": "orm.S_shuffle",
        "related": ["orm.Hf.VQ", "orm.Hf.QK"],
    },
    {
        "id": "lemma2-phi-loss-factor",
        "title": "Lemma 2: Φ carries the loss's factor",
        "wrong": 'Φ, a derivative of F alone, is printed with the MSE factor 2/(L d_V) of the loss',
        "where": r"Lemma 2 (App. D), $\Phi_{QQ}$, $\Phi_{VQ}$, $\Phi_{QK}$",
        "printed": r"$\Phi_{QQ} = \frac{2}{L d_V d_K}(\dots)\mathbf{Z}_2(\dots)$, "
                   r"$\Phi_{VQ} = \frac{2}{L d_V \sqrt{d_K}}(\mathbf{I}_L \otimes \mathbf{S})\mathbf{Z}_1(\mathbf{I} \otimes \mathbf{W}_K)$, "
                   r"$\Phi_{QK}$ with $\frac{2}{L d_V d_K}$ and $\frac{2}{L d_V \sqrt{d_K}}$: Ormaniec's $\mathbf{H}_f$ with "
                   r"$\mathbf{R}$ removed but the loss factor kept",
        "holds": r"$\Phi_{kl} = \partial^2\mathbf{F}/\partial\mathbf{W}_k\partial\mathbf{W}_l$: "
                 r"$\Phi_{QQ} = \frac{1}{d_K}(\mathbf{I}_L \otimes \mathbf{W}_V^\top \otimes \mathbf{I} \otimes \mathbf{W}_K^\top)\, "
                 r"\mathbf{Z}_2\, (\mathbf{I} \otimes \mathbf{W}_K)$, "
                 r"$\Phi_{VQ} = \frac{1}{\sqrt{d_K}}(\mathbf{I}_L \otimes \mathbf{S})\, \mathbf{Z}_1\, (\mathbf{I} \otimes \mathbf{W}_K)$, "
                 r"$\Phi_{QK} = \frac{1}{d_K}(\dots)\mathbf{Z}_2(\mathbf{W}_Q \otimes \mathbf{I})\mathbf{K}_{d_K,d_V} + "
                 r"\frac{1}{\sqrt{d_K}}[(\mathbf{I}_L \otimes \mathbf{W}_V^\top \otimes \mathbf{I})(\mathbf{Z}_1 \otimes \mathbf{I})\mathbf{S}] "
                 r"\otimes \mathbf{I}_{d_K}$; the factor $2/(L d_V)$ belongs to $\partial l/\partial\mathbf{F}$ "
                 r"($\mathbf{H}_f = \frac{2}{L d_V} \mathbf{R} \Phi$); the printed $\Phi$ are too small by $2/(L d_V)$",
        "evidence": "lem2.phi.QQ",
        "related": ["lem2.phi.VQ", "lem2.phi.QK"],
    },
    {
        "id": "lemma2-phiQK-identity",
        "title": 'Lemma 2: an identity of the wrong size in Φ_QK',
        "wrong": 'the second term of Φ_QK has an identity of size d_V where one of size L belongs',
        "where": r"Lemma 2 (App. D), second term of $\Phi_{QK}$",
        "printed": r"$(\mathbf{I}_{d_V} \otimes \mathbf{W}_V^\top \otimes \mathbf{I}_{d_V})(\mathbf{Z}_1 \otimes \mathbf{I}_{d_V})\, "
                   r"\mathbf{S} \otimes \mathbf{I}_{d_K}$",
        "holds": r"$(\mathbf{I}_L \otimes \mathbf{W}_V^\top \otimes \mathbf{I}_{d_V})(\mathbf{Z}_1 \otimes \mathbf{I}_{d_V})\, \mathbf{S}$, "
                 r"Kronecker-multiplied by $\mathbf{I}_{d_K}$ (as in the quoted $\mathbf{H}_f(\mathbf{W}_Q, \mathbf{W}_K)$); "
                 r"the printed $\mathbf{I}_{d_V}$ is ill-dimensioned unless $L = d_V$",
        "evidence": "lem2.phi.QK_identity",
    },
    {
        "id": "uniform-attention-phi-zero",
        "title": 'Theorem 5, proof: Φ does not vanish under uniform attention',
        "wrong": 'five Φ blocks are said to be zero; only Φ_VV is',
        "where": "Theorem 5 proof, step 3.3 (uniform-attention simplification)",
        "printed": r"under uniform attention $\Phi_{VV} = \Phi_{VQ} = \Phi_{VK} = \Phi_{QQ} = \Phi_{KK} = 0$",
        "holds": r"only $\Phi_{VV} = 0$ in general; $\partial\mathbf{A}/\partial\mathbf{T}$ is not locally constant, so "
                 r"$\Phi_{VQ} = \frac{1}{\sqrt{d_K}}(\mathbf{I}_L \otimes \mathbf{S})\, \mathbf{Z}_1\, (\mathbf{I} \otimes \mathbf{W}_K)$ "
                 r"and $\Phi_{QQ}$ (through $\partial^2\mathbf{A}/\partial\mathbf{T}^2$) are non-zero at exactly uniform "
                 r"attention ($\mathbf{W}_Q = 0$, $\mathbf{W}_K \neq 0$)",
        "evidence": "thm5.phi.uniform_zero",
    },
    {
        "id": "xi12-is-xi21",
        "title": 'Theorem 5: ξ₁₂ and ξ₂₁ swapped',
        "wrong": 'the expression printed as ξ₁₂ is ξ₂₁',
        "where": r"Theorem 5, detailed version (App. C.5), $\xi_{12}$ "
                 r"(definition $\xi_{ij} := \partial\mathbf{B}_i/\partial\mathbf{W}_j$)",
        "printed": r"$\xi_{12} = (\mathbf{I}_L \otimes \mathbf{K}_{d_V,d_\mathrm{ff}} \otimes \mathbf{I}_{d_V})"
                   r"(\mathbf{I}_{L d_\mathrm{ff}} \otimes \vecr \mathbf{I}_{d_V})"
                   r"(\mathbf{D}_\sigma (\mathbf{Y} \otimes \mathbf{I}_{d_\mathrm{ff}}))$",
        "holds": r"the printed expression is $\partial\mathbf{B}_2/\partial\mathbf{W}_1 = \xi_{21}$ (its proof differentiates "
                 r"$\mathbf{B}_2$ w.r.t. $\mathbf{W}_1$); $\xi_{12} = \partial\mathbf{B}_1/\partial\mathbf{W}_2 = "
                 r"(\mathbf{I}_{L d_V} \otimes (\mathbf{Y} \otimes \mathbf{I}_{d_\mathrm{ff}})^\top \mathbf{D}_\sigma)\, "
                 r"\partial(\mathbf{I}_L \otimes \mathbf{W}_2^\top)/\partial\mathbf{W}_2$, the partial transpose",
        "evidence": "thm5.xi12_naming",
        "related": ["thm5.xi.12", "thm5.xi.21"],
    },
    {
        "id": "xi21-ill-dimensioned",
        "title": 'Theorem 5: ξ₂₁ cannot be multiplied out',
        "wrong": 'the printed factors do not have compatible shapes',
        "where": r"Theorem 5, detailed version (App. C.5), $\xi_{21}$",
        "printed": r"$\xi_{21} = (\mathbf{I}_L \otimes \mathbf{W}_2^\top)\, \mathbf{D}_\sigma\, "
                   r"(\mathbf{I}_L \otimes \mathbf{K}_{d_\mathrm{ff},d_V} \otimes \mathbf{I}_{d_\mathrm{ff}})"
                   r"(\mathbf{I}_{L d_V} \otimes \vecr \mathbf{I}_{d_\mathrm{ff}})$",
        "holds": r"ill-dimensioned as printed ($\mathbf{D}_\sigma$ has $L d_\mathrm{ff}$ columns, the next factor "
                 r"$L d_\mathrm{ff}^2 d_V$ rows); $\xi_{21} = \partial\mathbf{B}_2/\partial\mathbf{W}_1 = "
                 r"(\mathbf{I}_L \otimes \mathbf{K}_{d_V,d_\mathrm{ff}} \otimes \mathbf{I}_{d_V})"
                 r"(\mathbf{I}_{L d_\mathrm{ff}} \otimes \vecr \mathbf{I}_{d_V})\, \mathbf{D}_\sigma\, "
                 r"(\mathbf{Y} \otimes \mathbf{I}_{d_\mathrm{ff}})$",
        "evidence": "thm5.xi21_printed",
    },
    {
        "id": "xi1k-identity",
        "title": 'Theorem 5: an identity of the wrong size in ξ₁ₖ',
        "wrong": 'an identity of the size of W_k where one of the size of W₁ belongs',
        "where": r"Theorem 5, detailed version (App. C.5), $\xi_{1k}$, $k \in \{K, Q, V\}$",
        "printed": r"$((\mathbf{I}_L \otimes \mathbf{W}_2^\top)\, \mathbf{D}_\sigma \otimes \mathbf{I}_{n_k})"
                   r"(\mathbf{I}_L \otimes \mathbf{K}_{d_\mathrm{ff},d_V} \otimes \mathbf{I}_{d_\mathrm{ff}})"
                   r"(\mathbf{I}_{L d_V} \otimes \vecr \mathbf{I}_{d_\mathrm{ff}})(\mathbf{J}_Y \mathbf{G}_k)$",
        "holds": r"$((\mathbf{I}_L \otimes \mathbf{W}_2^\top)\, \mathbf{D}_\sigma \otimes \mathbf{I}_{n_1})(\dots)"
                 r"(\mathbf{J}_Y \mathbf{G}_k)$: the identity has the size of $\mathbf{W}_1$ (product rule with the "
                 r"constant left factor of $\mathbf{B}_1$); the printed $\mathbf{I}_{n_k}$ is ill-dimensioned unless "
                 r"$n_k = n_1$",
        "evidence": "thm5.xi1k_identity",
    },
    {
        "id": "dW2T-commutation",
        "title": 'Theorem 5, proof: the commutation matrix of ∂W₂ᵀ/∂W₂',
        "wrong": 'the commutation matrix with its two sizes swapped',
        "where": r"Theorem 5 proof (App. C.5), pair (2,1): "
                 r"$\partial\vecr(\mathbf{I}_L \otimes \mathbf{W}_2^\top)/\partial\mathbf{W}_2$",
        "printed": r"$(\mathbf{I}_L \otimes \mathbf{K}_{d_V,L} \otimes \mathbf{I}_{d_\mathrm{ff}})"
                   r"(\vecr \mathbf{I}_L \otimes \mathbf{I}_{d_V d_\mathrm{ff}})\, \mathbf{K}_{d_\mathrm{ff},d_V}$",
        "holds": r"$(\mathbf{I}_L \otimes \mathbf{K}_{d_V,L} \otimes \mathbf{I}_{d_\mathrm{ff}})"
                 r"(\vecr \mathbf{I}_L \otimes \mathbf{I}_{d_V d_\mathrm{ff}})\, \mathbf{K}_{d_V,d_\mathrm{ff}}$, since "
                 r"$\mathbf{W}_2 \in \R^{d_\mathrm{ff} \times d_V}$ gives "
                 r"$\partial\mathbf{W}_2^\top/\partial\mathbf{W}_2 = \mathbf{K}_{d_V,d_\mathrm{ff}}$",
        "evidence": "thm5.proof.dW2T_commutation",
    },
    {
        "id": "mixed-block-symmetry",
        "title": "Theorem 5: 'mixed blocks are symmetric'",
        "wrong": 'the two blocks have different shapes; what holds is a partial transpose (notation)',
        "where": "Theorem 5, detailed version: 'all mixed blocks are symmetric almost everywhere'",
        "printed": r"$\mathbf{H}_\mathrm{tr}^{(i,j)} = \mathbf{H}_\mathrm{tr}^{(j,i)}$ a.e.",
        "holds": r"$\mathbf{H}_\mathrm{tr}^{(i,j)} \in \R^{(L d_V n_i) \times n_j}$ and "
                 r"$\mathbf{H}_\mathrm{tr}^{(j,i)} \in \R^{(L d_V n_j) \times n_i}$; what holds is "
                 r"$\mathbf{H}_\mathrm{tr}^{(j,i)} =$ partial transpose of $\mathbf{H}_\mathrm{tr}^{(i,j)}$ "
                 r"(entry $[(a,c),b] = [(a,b),c]$, Schwarz); literal equality fails even where the shapes agree "
                 r"($(1,2)$, $(Q,K)$); the loss-Hessian blocks satisfy $\mathbf{H}^{(j,i)} = (\mathbf{H}^{(i,j)})^\top$",
        "evidence": "thm5.symmetry",
        "related": ["gn.loss_hessian.literal_symmetry"],
    },
    {
        "id": "loss-normalisation",
        "title": "§3.2: the loss's normalisation in the Gauss–Newton form",
        "wrong": 'an un-normalised gradient is combined with the normalised curvature 2/(L d_V)',
        "where": "§3.2, after the Gauss–Newton decomposition of the block's loss Hessian",
        "printed": r"$L(\cdot) = \lVert \cdot - \mathrm{Target} \rVert_2^2$, its second derivative is $2/(L d_V)$; "
                   r"$\mathbf{R}^\mathrm{tr}_m = \vecr(\mathbf{Z} - \mathrm{Target})^\top \otimes \mathbf{I}_m$",
        "holds": r"with the paper's loss $l = \frac{1}{L d_V} \lVert \mathbf{Z} - \mathrm{Target} \rVert_F^2$: "
                 r"$\partial^2 l/\partial\mathbf{Z}^2 = \frac{2}{L d_V} \mathbf{I}$ and "
                 r"$\partial l/\partial\mathbf{Z} \otimes \mathbf{I}_{n_i} = \frac{2}{L d_V} \mathbf{R}^\mathrm{tr}_{n_i}$; "
                 r"mixing the un-normalised gradient with the normalised curvature matches neither loss",
        "evidence": "gn.loss_normalisation",
        "related": ["gn.loss_hessian.literal", "gn.loss_hessian.mnist"],
    },
]


def label(erratum_id: str) -> str:
    """The erratum's number on the errata page: ``"E<k>"``, k its place in :data:`ERRATA`."""
    for k, e in enumerate(ERRATA, 1):
        if e["id"] == erratum_id:
            return f"E{k}"
    raise KeyError(f"no erratum {erratum_id!r}")


@dataclass(frozen=True)
class ResultMisprints:
    """The errata of one result, by where the misprint is (the role of the erratum's evidence row)."""
    statement: int = 0  # misprinted formulas in the statement
    proof: int = 0      # misprinted formulas in the detailed version or the proof
    notation: int = 0   # notation-only entries (listed, not counted as misprinted formulas)

    @property
    def formulas(self) -> int:
        """Misprinted formulas of the result, notation-only entries not counted."""
        return self.statement + self.proof


@dataclass(frozen=True)
class MisprintCounts:
    """What :func:`misprint_counts` finds: every count the book states about the errata list."""
    formulas: int                  # misprinted formulas: the errata whose evidence row is "corrected"
    notation: tuple[str, ...]      # labels of the notation-only errata ("E16"): listed, not counted
    rows: int                      # the formula rows these errata are measured on (one erratum may have several)
    by_result: dict[str, ResultMisprints] = field(default_factory=dict)

    @property
    def listed(self) -> int:
        """Entries of the errata list the rows support: the misprinted formulas and the notation-only ones."""
        return self.formulas + len(self.notation)

    def of(self, result: str) -> ResultMisprints:
        """The counts of one result (zero where it has no erratum); they add up to :attr:`formulas`."""
        return self.by_result.get(result, ResultMisprints())


def misprint_counts(rows) -> MisprintCounts:
    """Count the errata that ``rows`` (of ``curvature-gap verify``) find printed wrongly.

    Each erratum is counted once, in the result and role of its evidence row, when that row is among ``rows`` as
    ``corrected`` (a misprinted formula) or ``notation`` (counted apart); so the per-result counts partition the
    total, and the rows of one result alone give that result's counts."""
    by_id = {r.id: r for r in rows}
    wrong = {e["id"]: by_id[e["evidence"]] for e in ERRATA
             if e["evidence"] in by_id and by_id[e["evidence"]].verdict in ("corrected", "notation")}
    per: dict[str, dict[str, int]] = {}
    for ev in wrong.values():
        kind = "notation" if ev.verdict == "notation" else "statement" if ev.role == "statement" else "proof"
        per.setdefault(ev.result, {"statement": 0, "proof": 0, "notation": 0})[kind] += 1
    notation = tuple(label(i) for i, ev in wrong.items() if ev.verdict == "notation")
    measured = {r.id for r in rows if r.kind == "formula" and r.verdict in ("corrected", "notation")
                and set(r.errata) & set(wrong)}
    return MisprintCounts(formulas=len(wrong) - len(notation), notation=notation, rows=len(measured),
                          by_result={k: ResultMisprints(**v) for k, v in per.items()})
