"""ReLU derivatives (Lemma 1) and the feed-forward Jacobians of Theorem 4.

FFN without biases: ``FFN(Y) = ReLU(Y W_1) W_2`` with Y (L, d_V), W_1 (d_V, d_ff),
W_2 (d_ff, d_V); the residual sum is ``S = FFN(Y) + Y`` (L, d_V).

``D_σ = diag(vec_r 1{Y W_1 > 0})`` is the ReLU Jacobian at the pre-activation
``Y W_1`` (L d_ff, L d_ff).  All formulas hold almost everywhere (off the kinks).
"""
from __future__ import annotations

import torch

from .calculus import eye, kron, vec_r

__all__ = [
    "relu", "relu_mask", "relu_jacobian", "relu_hessian",
    "D_sigma", "dS_dW1", "dS_dW1_printed", "dS_dW2", "dS_dY",
]


def relu(X: torch.Tensor) -> torch.Tensor:
    """Element-wise ReLU."""
    return torch.clamp_min(X, 0.0)


def relu_mask(X: torch.Tensor) -> torch.Tensor:
    """Indicator matrix ``1{X > 0}`` (same shape as X, float)."""
    return (X > 0).to(X.dtype)


def relu_jacobian(X: torch.Tensor) -> torch.Tensor:
    """Lemma 1: ``∂ReLU(X)/∂X = diag(vec_r 1{X > 0})``; X (m, n) -> (m n, m n)."""
    return torch.diag(vec_r(relu_mask(X)))


def relu_hessian(X: torch.Tensor) -> torch.Tensor:
    """Lemma 1: ``∂²ReLU(X)/∂X² = 0`` a.e.; X (m, n) -> ((m n)^2, m n) zeros."""
    n = X.numel()
    return torch.zeros(n * n, n, dtype=X.dtype, device=X.device)


def D_sigma(Y: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """``D_σ = diag(vec_r 1{Y W_1 > 0})`` (Theorem 5, detailed); (L d_ff, L d_ff)."""
    return relu_jacobian(Y @ W1)


def _Dsigma_times(Y: torch.Tensor, W1: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """``D_σ M`` applied as the row scaling it is (D_σ is diagonal)."""
    return vec_r(relu_mask(Y @ W1))[:, None] * M


def dS_dW1(Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Theorem 4 (detailed): ``B_1 = ∂S/∂W_1 = (I_L ⊗ W_2^T) D_σ (Y ⊗ I_{d_ff})``; (L d_V, d_V d_ff)."""
    L = Y.shape[0]
    d_ff = W1.shape[1]
    return kron(eye(L, Y), W2.T) @ _Dsigma_times(Y, W1, kron(Y, eye(d_ff, Y)))


def dS_dW1_printed(X: torch.Tensor, Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Theorem 4 proof as printed: the mask is ``diag(vec_r 1{X > 0})`` with X the block input.

    Only well-defined when d_ff = d_V (then X and Y W_1 have the same shape).
    """
    L = Y.shape[0]
    d_ff = W1.shape[1]
    return kron(eye(L, Y), W2.T) @ relu_jacobian(X) @ kron(Y, eye(d_ff, Y))


def dS_dW2(Y: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """Theorem 4 (detailed): ``B_2 = ∂S/∂W_2 = ReLU(Y W_1) ⊗ I_{d_V}``; (L d_V, d_ff d_V)."""
    d_V = Y.shape[1]
    return kron(relu(Y @ W1), eye(d_V, Y))


def dS_dY(Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Theorem 4 (detailed): ``J_SY = (I_L ⊗ W_2^T) D_σ (I_L ⊗ W_1^T) + I_L ⊗ I_{d_V}``; (L d_V, L d_V)."""
    L, d_V = Y.shape
    return kron(eye(L, Y), W2.T) @ _Dsigma_times(Y, W1, kron(eye(L, Y), W1.T)) + eye(L * d_V, Y)
