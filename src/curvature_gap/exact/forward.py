"""The block and the self-attention layer in the theory's setting, and their losses.

The theorems study one post-norm block without biases, with LayerNorms of γ = 1, β = 0 and no ε
(paper §3.2), on one sequence ``X ∈ R^{L×d_V}``:

    T = X W_Q W_Kᵀ Xᵀ / √d_K,  A = softmax_rows(T),  F = A X W_V,  U = X + F,  Y = LN(U),
    Pre = Y W_1,  S = ReLU(Pre) W_2 + Y,  Z = LN(S),

with the MSE loss ``l = ‖· − Target‖_F² / (L d_V)``. Everything here is
:func:`curvature_gap.model.block_forward` with those settings, so the theory, the bounds and the
trained ViT share one forward pass. Layout: ``vec_r`` of a row-major tensor is ``reshape(-1)``.
"""
from __future__ import annotations

import torch

from ..model import attention_matrix, attention_scores, block_forward as _block_parts, layer_norm_parts

__all__ = ["attention_matrix", "scores", "softmax_rows", "sa_forward", "sa_parts", "layernorm", "inv_std",
           "ffn_residual", "block_forward", "sa_loss", "block_loss", "block_output"]


def scores(X, W_Q, W_K) -> torch.Tensor:
    """``T = X W_Q (X W_K)ᵀ / √d_K``; (L, L) (:func:`curvature_gap.model.attention_scores`)."""
    return attention_scores(X, W_Q, W_K)


def softmax_rows(T: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax."""
    return torch.softmax(T, dim=-1)


def sa_forward(X, W_Q, W_K, W_V) -> torch.Tensor:
    """Eq. 1: ``F = A(X) X W_V``; (L, d_V) (batched over leading axes of X)."""
    return attention_matrix(X, W_Q, W_K) @ X @ W_V


def sa_parts(X, W_Q, W_K, W_V) -> dict:
    """Eq. 1 with its intermediate values: ``{"T", "A", "F"}``, each as :func:`sa_forward` computes it."""
    T = scores(X, W_Q, W_K)
    A = softmax_rows(T)
    return {"T": T, "A": A, "F": A @ X @ W_V}


def layernorm(U: torch.Tensor) -> torch.Tensor:
    """``(U − mean)/√(population variance)`` row-wise over the last axis, γ = 1, β = 0, no ε
    (Assumption 2 checked); (..., n) -> (..., n)."""
    return layer_norm_parts(U, 0.0)[0]


def inv_std(U: torch.Tensor) -> torch.Tensor:
    """``1/σ`` row-wise over the last axis, σ the population standard deviation (the diagonal of
    ``P = diag⁻¹(σ)``, Theorem 2); (..., n) -> (...)."""
    return layer_norm_parts(U, 0.0)[1].squeeze(-1)


def ffn_residual(Y, W_1, W_2) -> torch.Tensor:
    """The FFN sublayer with its residual, ``S = ReLU(Y W_1) W_2 + Y`` (no biases); Y (L, d_V) -> (L, d_V)."""
    return torch.relu(Y @ W_1) @ W_2 + Y


def block_forward(X, W_Q, W_K, W_V, W_1, W_2) -> dict:
    """The theory block; returns ``{"A", "F", "U", "Y", "Pre", "S", "Z"}``."""
    p = _block_parts(X, W_Q, W_K, W_V, W_1, W_2)
    return {"A": p.A, "F": p.ax @ W_V, "U": p.u1, "Y": p.y, "Pre": p.h, "S": p.u2, "Z": p.out}


def block_output(X, W_Q, W_K, W_V, W_1, W_2, out: str = "Z") -> torch.Tensor:
    """One output of the block: ``"U"``, ``"Y"``, ``"S"`` or ``"Z"`` (for ``torch.func`` references)."""
    return block_forward(X, W_Q, W_K, W_V, W_1, W_2)[out]


def sa_loss(X, W_Q, W_K, W_V, Target) -> torch.Tensor:
    """``‖F − Target‖_F² / (L d_V)`` (Theorem 1's MSE)."""
    L, d_V = X.shape
    return (sa_forward(X, W_Q, W_K, W_V) - Target).pow(2).sum() / (L * d_V)


def block_loss(X, W_Q, W_K, W_V, W_1, W_2, Target) -> torch.Tensor:
    """``‖Z − Target‖_F² / (L d_V)`` (the MSE of §3.2 on the block output)."""
    L, d_V = X.shape
    return (block_output(X, W_Q, W_K, W_V, W_1, W_2) - Target).pow(2).sum() / (L * d_V)
