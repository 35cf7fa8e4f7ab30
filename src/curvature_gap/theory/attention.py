"""Single-head self-attention: Jacobians, softmax derivatives, H_o / H_f blocks, Φ.

``F(X) = A(X) X W_V`` with ``A = softmax_rows(T)``, ``T = X W_Q W_K^T X^T / √d_K`` (paper Eq. 1); X (L, d_V),
W_Q, W_K (d_V, d_K), W_V (d_V, d_V). Loss of the single layer: ``l = (1/(L d_V)) ||F - Target||_F^2``.

Naming (:mod:`.notation`): ``G_V, G_Q, G_K = ∂F/∂W_{V,Q,K}`` (Noci et al. Lemma A.2), ``Z1, Z2`` and ``S_shuffle``
as in Ormaniec et al. Thm 3.1/3.2, ``phi(k, l) = ∂²F/∂W_k∂W_l`` (the paper's Φ_kl). Functions ending in
``_printed`` reproduce a formula exactly as the paper prints it.
"""
from __future__ import annotations

import math

import torch

from ..exact import linalg as la
from ..exact.derivatives import SA_ORDER
from ..exact.forward import attention_matrix, sa_forward
from .calculus import (apply_commutation, assemble_rowwise, blockdiag_matmul, commutation, d_kron_wrt_first,
                       d_kron_wrt_second, eye, kron, kron3, kron4, ones, vec_r)

__all__ = ["dA_dT", "dA_dT_blocks", "dA_dT_uniform", "d2A_dT2", "d2A_dT2_blocks", "dA_dT_norm", "d2A_dT2_norm",
           "Z2_norm", "contract_d2A_dT2", "contract_d2A_dT2_blocks", "dT_dWQ", "dT_dWK", "Z1", "Z2", "S_shuffle", "M1",
           "G_V", "G_Q", "G_K", "G_K_printed", "G_Q_uniform", "jacobians", "R_m", "Ho_VV", "Ho_QQ", "Ho_VQ", "Ho_QK",
           "Hf_VV", "Hf_QQ", "Hf_VQ", "Hf_QK", "phi_QQ_lemma2", "phi_VQ_lemma2", "phi_QK_lemma2", "phi", "contract_phi",
           "loss_hessian_blocks", "sizes"]


def sizes(d_V: int, d_K: int) -> dict:
    """Parameter counts ``n_Q = n_K = d_V d_K``, ``n_V = d_V^2``."""
    return {"Q": d_V * d_K, "K": d_V * d_K, "V": d_V * d_V}


# ------------------------------------------------------------------ softmax derivatives
def dA_dT_blocks(A: torch.Tensor) -> torch.Tensor:
    """Diagonal blocks ``diag(A_i) - A_i A_i^T`` of ``∂A/∂T``; (L, L, L)."""
    return torch.diag_embed(A) - A[:, :, None] * A[:, None, :]


def dA_dT(A: torch.Tensor) -> torch.Tensor:
    """Row-softmax Jacobian ``∂A/∂T = blockdiag(diag(A_i) - A_i A_i^T)``; (L^2, L^2)."""
    return torch.block_diag(*dA_dT_blocks(A))


def dA_dT_uniform(L: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Uniform attention (Noci et al. Lemma A.3): ``∂A/∂T = (1/L) I_L ⊗ (I_L - (1/L) 1_{L x L})``.

    The paper prints the prefactor as ``1/n``; with uniform rows (A = 1/L) it is ``1/L``.
    """
    return kron(eye(L, ref), eye(L, ref) - ones(L, L, ref) / L) / L


def d2A_dT2_blocks(A: torch.Tensor) -> torch.Tensor:
    """``K_ij = ∂²A_ij/∂t_i² = A_ij (2 a a^T + E_jj - diag(a) - e_j a^T - a e_j^T)`` with ``a = A_{i,:}``
    (Ormaniec et al. Lemma C.1, quoted in the Theorem 1 proof) for every row i and column j; (L, L, L, L)."""
    L = A.shape[0]
    I = eye(L, A)
    aa = A[:, :, None] * A[:, None, :]  # (i, k, l)
    inner = (2 * aa[:, None] + torch.diag_embed(I)[None] - torch.diag_embed(A)[:, None]
             - I[None, :, :, None] * A[:, None, None, :] - A[:, None, :, None] * I[None, :, None, :])
    return A[:, :, None, None] * inner


def d2A_dT2(A: torch.Tensor) -> torch.Tensor:
    """Row-softmax second derivative (Ormaniec et al. Lemma C.1, quoted in the paper); (L^4, L^2).

    Entry ``[((i,j),(i,k)), (i,l)] = (K_ij)_kl`` (:func:`d2A_dT2_blocks`); zero unless all three row
    indices agree (block-diagonal over rows).
    """
    return assemble_rowwise(d2A_dT2_blocks(A))


def dA_dT_norm(A: torch.Tensor) -> torch.Tensor:
    """``‖∂A/∂T‖_2`` of :func:`dA_dT` from its row blocks: the largest eigenvalue over rows (each block
    ``diag(a_i) − a_i a_iᵀ`` is positive semi-definite); a 0-d tensor, differentiable in ``A``."""
    return la.top_eigenvalues(dA_dT_blocks(A)).max()


def d2A_dT2_norm(A: torch.Tensor) -> torch.Tensor:
    """``‖∂²A/∂T²‖_2`` of :func:`d2A_dT2` without forming it: only row ``i`` of ``T`` enters row ``i`` of
    ``A``, so the Gram matrix is block diagonal with blocks ``Σ_j K_ijᵀ K_ij``; the norm is the largest
    ``sqrt(λ_max)`` over rows (a 0-d tensor, differentiable in ``A``)."""
    K = d2A_dT2_blocks(A)
    G = torch.einsum("iabc,iabd->icd", K, K)
    return la.gram_roots(G).max()


def contract_d2A_dT2_blocks(A: torch.Tensor, Gbar: torch.Tensor) -> torch.Tensor:
    """Diagonal blocks of :func:`contract_d2A_dT2`; (L, L, L).

    Row block i: ``diag(a∘g) - (a·g) diag(a) + 2(a·g) a a^T - (a∘g) a^T - a (a∘g)^T`` with
    ``a = A_{i,:}``, ``g = Ḡ_{i,:}`` (Lemma C.1 summed over j).
    """
    ag = A * Gbar
    s = ag.sum(dim=1)[:, None, None]
    outer = lambda u, v: u[:, :, None] * v[:, None, :]
    return (torch.diag_embed(ag) - s * torch.diag_embed(A) + 2 * s * outer(A, A)
            - outer(ag, A) - outer(A, ag))


def contract_d2A_dT2(A: torch.Tensor, Gbar: torch.Tensor) -> torch.Tensor:
    """``(vec_r(Ḡ)^T ⊗ I_{L^2}) ∂²A/∂T² = Σ_ij Ḡ_ij ∂²A_ij/∂T∂T``; (L^2, L^2), block-diagonal."""
    return torch.block_diag(*contract_d2A_dT2_blocks(A, Gbar))


def dT_dWQ(X, W_K) -> torch.Tensor:
    """``∂T/∂W_Q = (X ⊗ X W_K)/√d_K``; (L^2, d_V d_K)."""
    return kron(X, X @ W_K) / math.sqrt(W_K.shape[1])


def dT_dWK(X, W_Q) -> torch.Tensor:
    """``∂T/∂W_K = (X W_Q ⊗ X) K_{d_K,d_V}/√d_K`` (∂W_K^T/∂W_K = K_{d_K,d_V}); (L^2, d_V d_K)."""
    d_V, d_K = W_Q.shape
    return kron(X @ W_Q, X) @ commutation(d_K, d_V, X) / math.sqrt(d_K)


def Z1(X, A) -> torch.Tensor:
    """``Z_1 = (I_L ⊗ X^T)(∂A/∂T)(X ⊗ X)``; (L d_V, d_V^2), formed entrywise as ``Z_1[(i,p),(s,t)] =
    X_is (X^T J_i X)_pt`` with ``J_i = diag(a_i) - a_i a_i^T`` (the row blocks of :func:`dA_dT`)."""
    L, d = X.shape
    C = torch.einsum("jp,ijl,lt->ipt", X, dA_dT_blocks(A), X)
    return torch.einsum("is,ipt->ipst", X, C).reshape(L * d, d * d)


def Z2(X, A) -> torch.Tensor:
    """``Z_2 = (I_L ⊗ X^T ⊗ X^T ⊗ X^T)(∂²A/∂T²)(X ⊗ X)``; (L d_V^3, d_V^2), as written (small L only:
    :func:`Z2_norm` gives its norm at any size)."""
    return kron4(eye(X.shape[0], X), X.T, X.T, X.T) @ d2A_dT2(A) @ kron(X, X)


def Z2_norm(X: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """``‖Z_2‖_2`` of :func:`Z2` without forming it.

    With ``Δa = J_i x_t`` (``x_t`` the t-th column of X) the directional derivative of ``J_i`` is
    ``K_i^(t) = diag(Δa) − Δa a_iᵀ − a_i Δaᵀ`` and ``Z_2[(i,p,q,r),(s,t)] = X_iq X_is (Xᵀ K_i^(t) X)_pr``.
    Hence ``Z_2ᵀ Z_2 = Σ_i ‖x_i‖² (x_i x_iᵀ) ⊗ (C_i C_iᵀ)`` with ``C_i[t,(p,r)] = (Xᵀ K_i^(t) X)_pr``
    (a 0-d tensor, differentiable in ``X`` and ``A``).
    """
    L, d = X.shape
    J = dA_dT_blocks(A)  # (L, L, L)
    Da = torch.einsum("ijl,lt->itj", J, X)  # Δa for row i, column t: (L, d, L)
    K = (torch.diag_embed(Da) - Da[..., :, None] * A[:, None, None, :]
         - A[:, None, :, None] * Da[..., None, :])  # (L, d, L, L)
    C = torch.einsum("jp,itjl,lr->itpr", X, K, X).reshape(L, d, d * d)
    xx = X[:, :, None] * X[:, None, :]  # x_i x_iᵀ: (L, d, d)
    CC = C @ C.transpose(-1, -2)  # C_i C_iᵀ: (L, d, d)
    G = torch.einsum("i,iab,icd->acbd", (X * X).sum(1), xx, CC).reshape(d * d, d * d)
    return la.gram_roots(G)


def S_shuffle(d_V: int, ref: torch.Tensor | None = None) -> torch.Tensor:
    """Ormaniec et al.'s reshaping operator ``S = (I_{d_V} ⊗ K_{d_V,d_V})(vec_r I_{d_V} ⊗ I_{d_V})``.

    The product has shape (d_V^3, d_V) (the paper states d_V^2 x d_V). ``I ⊗ K`` swaps the last two indices of
    ``(vec_r I ⊗ I)[(a,b,c'),c] = δ_ab δ_c'c``, so ``S[(a,c,a'),c'] = δ_aa' δ_cc'``: ``I_{d_V^2}`` read as (d_V^3, d_V).
    """
    return eye(d_V * d_V, ref).reshape(d_V ** 3, d_V)


def M1(X, A) -> torch.Tensor:
    """``M_1 = A X``; (L, d_V)."""
    return A @ X


# ------------------------------------------------------------------ first derivatives
def G_V(X, W_Q, W_K) -> torch.Tensor:
    """``∂F/∂W_V = A X ⊗ I_{d_V}`` (Noci et al. Lemma A.2); (L d_V, d_V^2)."""
    return kron(attention_matrix(X, W_Q, W_K) @ X, eye(X.shape[1], X))


def G_Q(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``∂F/∂W_Q = (I_L ⊗ W_V^T X^T) ∂A/∂T (X ⊗ X W_K)/√d_K``; (L d_V, d_V d_K)."""
    A = attention_matrix(X, W_Q, W_K)
    return kron(eye(X.shape[0], X), W_V.T @ X.T) @ blockdiag_matmul(dA_dT_blocks(A), dT_dWQ(X, W_K))


def G_Q_uniform(X, W_K, W_V) -> torch.Tensor:
    """``∂F/∂W_Q`` with the uniform-attention ``∂A/∂T = (1/L) I_L ⊗ (I_L - (1/L)1)`` (valid at W_Q W_K^T = 0)."""
    L = X.shape[0]
    return kron(eye(L, X), W_V.T @ X.T) @ dA_dT_uniform(L, X) @ dT_dWQ(X, W_K)


def G_K(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``∂F/∂W_K = (I_L ⊗ W_V^T X^T) ∂A/∂T (X W_Q ⊗ X) K_{d_K,d_V}/√d_K``; (L d_V, d_V d_K)."""
    A = attention_matrix(X, W_Q, W_K)
    return kron(eye(X.shape[0], X), W_V.T @ X.T) @ blockdiag_matmul(dA_dT_blocks(A), dT_dWK(X, W_Q))


def G_K_printed(X, W_Q, W_K, W_V) -> torch.Tensor:
    """Theorem 4 proof as printed: ``∂T/∂W_K = (X W_Q ⊗ X) K_{d_V d_K}/√d_k`` (commutation ``K_{d_V d_K}`` in place
    of ``K_{d_K,d_V}``)."""
    L = X.shape[0]
    d_V, d_K = W_Q.shape
    A = attention_matrix(X, W_Q, W_K)
    return kron(eye(L, X), W_V.T @ X.T) @ dA_dT(A) @ (kron(X @ W_Q, X) @ commutation(d_V, d_K, X) / math.sqrt(d_K))


def jacobians(X, W_Q, W_K, W_V) -> dict:
    """``{"Q": G_Q, "K": G_K, "V": G_V}``."""
    return {"Q": G_Q(X, W_Q, W_K, W_V), "K": G_K(X, W_Q, W_K, W_V), "V": G_V(X, W_Q, W_K)}


# ------------------------------------------------------------------ Ormaniec et al. blocks
def R_m(F: torch.Tensor, Target: torch.Tensor, m: int) -> torch.Tensor:
    """``R_m = vec_r(F - Target)^T ⊗ I_m``; (m, m L d_V)."""
    return kron(vec_r(F - Target).reshape(1, -1), eye(m, F))


def _pre(X, W_Q, W_K):
    L, d_V = X.shape
    return L, d_V, W_Q.shape[1], attention_matrix(X, W_Q, W_K)


def Ho_VV(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``H_o(W_V, W_V) = 2/(L d_V) M_1^T M_1 ⊗ I_{d_V}``; (d_V^2, d_V^2)."""
    L, d_V, _, A = _pre(X, W_Q, W_K)
    m1 = M1(X, A)
    return 2.0 / (L * d_V) * kron(m1.T @ m1, eye(d_V, X))


def Ho_QQ(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``H_o(W_Q, W_Q) = 2/(L d_V d_K)(I ⊗ W_K^T) Z_1^T (I_L ⊗ W_V W_V^T) Z_1 (I ⊗ W_K)``."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    z1 = Z1(X, A)
    IK = kron(eye(d_V, X), W_K)
    return 2.0 / (L * d_V * d_K) * IK.T @ z1.T @ kron(eye(L, X), W_V @ W_V.T) @ z1 @ IK


def Ho_VQ(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``H_o(W_V, W_Q) = 2/(L d_V √d_K)(M_1^T ⊗ W_V^T) Z_1 (I ⊗ W_K)``; (d_V^2, d_V d_K)."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    return 2.0 / (L * d_V * math.sqrt(d_K)) * kron(M1(X, A).T, W_V.T) @ Z1(X, A) @ kron(eye(d_V, X), W_K)


def Ho_QK(X, W_Q, W_K, W_V) -> torch.Tensor:
    """``H_o(W_Q, W_K) = 2/(L d_V d_K)(I ⊗ W_K^T) Z_1^T (I_L ⊗ W_V W_V^T) Z_1 (W_Q ⊗ I) K_{d_K,d_V}``."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    z1 = Z1(X, A)
    return (2.0 / (L * d_V * d_K) * kron(eye(d_V, X), W_K).T @ z1.T @ kron(eye(L, X), W_V @ W_V.T)
            @ z1 @ kron(W_Q, eye(d_V, X)) @ commutation(d_K, d_V, X))


def Hf_VV(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``H_f(W_V, W_V) = 0``; (d_V^2, d_V^2)."""
    d_V = X.shape[1]
    return torch.zeros(d_V * d_V, d_V * d_V, dtype=X.dtype, device=X.device)


def Hf_QQ(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``H_f(W_Q, W_Q) = 2/(L d_V d_K) R_{d_V d_K}(I_L ⊗ W_V^T ⊗ I_{d_V} ⊗ W_K^T) Z_2 (I ⊗ W_K)``."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    return (2.0 / (L * d_V * d_K) * R_m(A @ X @ W_V, Target, d_V * d_K)
            @ kron4(eye(L, X), W_V.T, eye(d_V, X), W_K.T) @ Z2(X, A) @ kron(eye(d_V, X), W_K))


def Hf_VQ(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``H_f(W_V, W_Q) = 2/(L d_V √d_K) R_{d_V^2}(I_L ⊗ S) Z_1 (I ⊗ W_K)``; (d_V^2, d_V d_K)."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    return (2.0 / (L * d_V * math.sqrt(d_K)) * R_m(A @ X @ W_V, Target, d_V * d_V)
            @ kron(eye(L, X), S_shuffle(d_V, X)) @ Z1(X, A) @ kron(eye(d_V, X), W_K))


def Hf_QK(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``H_f(W_Q, W_K)``: ``2/(L d_V d_K) R_{d_V d_K}(I_L ⊗ W_V^T ⊗ I ⊗ W_K^T) Z_2 (W_Q ⊗ I) K_{d_K,d_V}
    + [2/(L d_V √d_K) R_{d_V}(I_L ⊗ W_V^T ⊗ I_{d_V})(Z_1 ⊗ I_{d_V}) S] ⊗ I_{d_K}``."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    F = A @ X @ W_V
    t1 = (2.0 / (L * d_V * d_K) * R_m(F, Target, d_V * d_K) @ kron4(eye(L, X), W_V.T, eye(d_V, X), W_K.T)
          @ Z2(X, A) @ kron(W_Q, eye(d_V, X)) @ commutation(d_K, d_V, X))
    inner = (2.0 / (L * d_V * math.sqrt(d_K)) * R_m(F, Target, d_V) @ kron3(eye(L, X), W_V.T, eye(d_V, X))
             @ kron(Z1(X, A), eye(d_V, X)) @ S_shuffle(d_V, X))
    return t1 + kron(inner, eye(d_K, X))


# ------------------------------------------------------------------ Lemma 2 (Φ blocks)
def phi_QQ_lemma2(X, W_Q, W_K, W_V, scale_printed: bool = False) -> torch.Tensor:
    """Lemma 2 ``Φ_QQ = c (I_L ⊗ W_V^T ⊗ I ⊗ W_K^T) Z_2 (I ⊗ W_K)``; (L d_V n_Q, n_Q).

    ``c = 1/d_K`` (corrected: Φ = ∂²F/∂W_Q², no loss factor); ``c = 2/(L d_V d_K)`` as printed.
    """
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    c = 2.0 / (L * d_V * d_K) if scale_printed else 1.0 / d_K
    return c * kron4(eye(L, X), W_V.T, eye(d_V, X), W_K.T) @ Z2(X, A) @ kron(eye(d_V, X), W_K)


def phi_VQ_lemma2(X, W_Q, W_K, W_V, scale_printed: bool = False) -> torch.Tensor:
    """Lemma 2 ``Φ_VQ = c (I_L ⊗ S) Z_1 (I ⊗ W_K)``; ``c = 1/√d_K`` (corrected) or ``2/(L d_V √d_K)``."""
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    c = 2.0 / (L * d_V * math.sqrt(d_K)) if scale_printed else 1.0 / math.sqrt(d_K)
    return c * kron(eye(L, X), S_shuffle(d_V, X)) @ Z1(X, A) @ kron(eye(d_V, X), W_K)


def phi_QK_lemma2(X, W_Q, W_K, W_V, scale_printed: bool = False, first_identity: str = "L") -> torch.Tensor:
    """Lemma 2 ``Φ_QK``; (L d_V n_Q, n_K).

    ``c_1 (I_L ⊗ W_V^T ⊗ I ⊗ W_K^T) Z_2 (W_Q ⊗ I) K_{d_K,d_V}``
    ``+ c_2 [(I_? ⊗ W_V^T ⊗ I_{d_V})(Z_1 ⊗ I_{d_V}) S] ⊗ I_{d_K}``
    with ``c_1 = 1/d_K, c_2 = 1/√d_K`` (corrected) or the printed ``2/(L d_V d_K)``, ``2/(L d_V √d_K)``.
    ``first_identity="L"`` uses I_L (as in H_f(W_Q, W_K)); ``"dV"`` uses I_{d_V} as printed in Lemma 2.
    """
    L, d_V, d_K, A = _pre(X, W_Q, W_K)
    c1, c2 = ((2.0 / (L * d_V * d_K), 2.0 / (L * d_V * math.sqrt(d_K))) if scale_printed
              else (1.0 / d_K, 1.0 / math.sqrt(d_K)))
    n0 = L if first_identity == "L" else d_V
    t1 = c1 * (kron4(eye(L, X), W_V.T, eye(d_V, X), W_K.T) @ Z2(X, A) @ kron(W_Q, eye(d_V, X))
               @ commutation(d_K, d_V, X))
    inner = kron3(eye(n0, X), W_V.T, eye(d_V, X)) @ kron(Z1(X, A), eye(d_V, X)) @ S_shuffle(d_V, X)
    return t1 + c2 * kron(inner, eye(d_K, X))


# ------------------------------------------------------------------ Φ for all pairs
def phi(X, W_Q, W_K, W_V, k: str, l: str) -> torch.Tensor:
    """``Φ_kl = ∂G_k/∂W_l = ∂²F/∂W_k ∂W_l`` for k, l in {Q, K, V}; (L d_V n_k, n_l).

    Built with the product, Kronecker and transpose rules of Appendix B:

    * ``Φ_VV = 0``;
    * ``Φ_Vl = (I_L ⊗ K_{d_V,d_V} ⊗ I_{d_V})(I_{L d_V} ⊗ vec_r I_{d_V}) (I_L ⊗ X^T) ∂A/∂T ∂T/∂W_l``;
    * ``Φ_kV = (I_{L d_V} ⊗ (∂A/∂T ∂T/∂W_k)^T) ∂(I_L ⊗ W_V^T X^T)/∂W_V``;
    * ``Φ_kl = (W ∂A/∂T ⊗ I_{n_k}) ∂(∂T/∂W_k)/∂W_l + (W ⊗ I_{n_k})(I_{L^2} ⊗ (∂T/∂W_k)^T) ∂²A/∂T² ∂T/∂W_l``
      for k, l in {Q, K}, with ``W = I_L ⊗ W_V^T X^T``.
    """
    L, d_V = X.shape
    d_K = W_Q.shape[1]
    n = sizes(d_V, d_K)
    A = attention_matrix(X, W_Q, W_K)
    D = dA_dT(A)
    C = {"Q": dT_dWQ(X, W_K), "K": dT_dWK(X, W_Q)}
    if k == "V" and l == "V":
        return torch.zeros(L * d_V * n["V"], n["V"], dtype=X.dtype, device=X.device)
    if k == "V":
        return d_kron_wrt_first(A @ X, eye(d_V, X)) @ (kron(eye(L, X), X.T) @ D @ C[l])
    Wmat = kron(eye(L, X), W_V.T @ X.T)
    if l == "V":
        dW = d_kron_wrt_second(eye(L, X), W_V.T @ X.T) @ kron(eye(d_V, X), X) @ commutation(d_V, d_V, X)
        return kron(eye(L * d_V, X), (D @ C[k]).T) @ dW
    out = kron(Wmat, eye(n[k], X)) @ kron(eye(L * L, X), C[k].T) @ d2A_dT2(A) @ C[l]
    if k != l:  # ∂(∂T/∂W_k)/∂W_l, zero for k = l (T is bilinear in W_Q, W_K)
        dC = (d_kron_wrt_second(X, X @ W_K) if k == "Q"
              else kron(eye(L * L, X), commutation(d_K, d_V, X).T) @ d_kron_wrt_first(X @ W_Q, X))
        out = out + kron(Wmat @ D, eye(n[k], X)) @ (dC @ kron(X, eye(d_K, X)) / math.sqrt(d_K))
    return out


def contract_phi(X, W_Q, W_K, W_V, w: torch.Tensor, k: str, l: str, cache: dict | None = None) -> torch.Tensor:
    """``(w^T ⊗ I_{n_k}) Φ_kl = Σ_a w_a ∂²F_a/∂W_k∂W_l``; (n_k, n_l).

    Closed forms with ``W = unvec_r(w)`` (L, d_V), ``Ḡ = W (X W_V)^T``, ``Γ = unvec_r((∂A/∂T)^T vec_r Ḡ)``:
    ``VV: 0``; ``Vl: (X^T ⊗ W^T) K_{L,L} ∂A/∂T ∂T/∂W_l``; ``kV``: transpose of ``Vk``;
    ``kl (Q/K): (∂T/∂W_k)^T [(vec_r Ḡ^T ⊗ I) ∂²A/∂T²] ∂T/∂W_l`` plus, for the mixed pairs,
    ``(X^T Γ X ⊗ I_{d_K})/√d_K`` (QK) or its transpose (KQ).
    """
    L, d_V = X.shape
    d_K = W_Q.shape[1]
    c = {} if cache is None else cache
    if "A" not in c:
        c["A"] = attention_matrix(X, W_Q, W_K)
        c["Db"] = dA_dT_blocks(c["A"])
        c["C"] = {"Q": dT_dWQ(X, W_K), "K": dT_dWK(X, W_Q)}
    A, Db, C = c["A"], c["Db"], c["C"]
    Wm = w.reshape(L, d_V)
    if k == "V" and l == "V":
        return torch.zeros(d_V * d_V, d_V * d_V, dtype=X.dtype, device=X.device)
    if k == "V":
        return kron(X.T, Wm.T) @ apply_commutation(L, L, blockdiag_matmul(Db, C[l]))
    if l == "V":
        return contract_phi(X, W_Q, W_K, W_V, w, "V", k, c).T
    Gbar = Wm @ (X @ W_V).T
    out = C[k].T @ blockdiag_matmul(contract_d2A_dT2_blocks(A, Gbar), C[l])
    if k != l:
        Gam = blockdiag_matmul(Db.transpose(1, 2), vec_r(Gbar).reshape(-1, 1)).reshape(L, L)
        first = kron(X.T @ Gam @ X, eye(d_K, X)) / math.sqrt(d_K)
        out = out + (first if k == "Q" else first.T)
    return out


def loss_hessian_blocks(X, W_Q, W_K, W_V, Target) -> dict:
    """Hessian of ``(1/(L d_V))||F - Target||_F^2``: ``H_o + H_f`` for all 9 pairs.

    ``H_o(i, j) = 2/(L d_V) G_i^T G_j`` and ``H_f(i, j) = (∂l/∂F ⊗ I) Φ_ij`` with
    ``∂l/∂F = 2/(L d_V) vec_r(F - Target)^T``.  Returns ``{(i, j): (H_o, H_f)}``.
    """
    L, d_V = X.shape
    Jac = jacobians(X, W_Q, W_K, W_V)
    w = 2.0 / (L * d_V) * vec_r(sa_forward(X, W_Q, W_K, W_V) - Target)
    cache: dict = {}
    return {(i, j): (2.0 / (L * d_V) * Jac[i].T @ Jac[j], contract_phi(X, W_Q, W_K, W_V, w, i, j, cache))
            for i in SA_ORDER for j in SA_ORDER}
