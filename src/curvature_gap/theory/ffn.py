"""ReLU derivatives (Lemma 1) and the feed-forward Jacobians of Theorem 4.

FFN without biases: ``FFN(Y) = ReLU(Y W_1) W_2`` with Y (L, d_V), W_1 (d_V, d_ff),
W_2 (d_ff, d_V); the residual sum is ``S = FFN(Y) + Y`` (L, d_V).

``D_σ = diag(vec_r 1{Y W_1 > 0})`` is the ReLU Jacobian at the pre-activation
``Y W_1`` (L d_ff, L d_ff).  All formulas hold almost everywhere (off the kinks).
"""
from __future__ import annotations

import numpy as np
import torch

from .calculus import eye, kron, vec_r

__all__ = ["relu", "relu_mask", "relu_jacobian", "relu_hessian", "D_sigma", "dS_dW1", "dS_dW1_printed", "dS_dW2",
           "dS_dY", "second_difference_along_W1"]


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
    return kron(eye(Y.shape[0], Y), W2.T) @ _Dsigma_times(Y, W1, kron(Y, eye(W1.shape[1], Y)))


def dS_dW1_printed(X: torch.Tensor, Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Theorem 4 proof as printed: the mask is ``diag(vec_r 1{X > 0})`` with X the block input.

    Only well-defined when d_ff = d_V (then X and Y W_1 have the same shape).
    """
    return kron(eye(Y.shape[0], Y), W2.T) @ relu_jacobian(X) @ kron(Y, eye(W1.shape[1], Y))


def dS_dW2(Y: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """Theorem 4 (detailed): ``B_2 = ∂S/∂W_2 = ReLU(Y W_1) ⊗ I_{d_V}``; (L d_V, d_ff d_V)."""
    return kron(relu(Y @ W1), eye(Y.shape[1], Y))


def dS_dY(Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """Theorem 4 (detailed): ``J_SY = (I_L ⊗ W_2^T) D_σ (I_L ⊗ W_1^T) + I_L ⊗ I_{d_V}``; (L d_V, L d_V)."""
    L, d_V = Y.shape
    return kron(eye(L, Y), W2.T) @ _Dsigma_times(Y, W1, kron(eye(L, Y), W1.T)) + eye(L * d_V, Y)


# ---------------------------------------------------------------- Lemma 1 along a line: the kinks
def second_difference_along_W1(Y: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor, V: torch.Tensor,
                               t: torch.Tensor, entry: tuple[int, int] = (0, 0)) -> dict:
    """One entry ``a = (a_0, a_1)`` of ``S = ReLU(Y W_1) W_2 + Y`` along the line ``W_1 + t V`` (``t`` a uniform
    grid of step ``h``) and its second difference. Returns NumPy values:

    * ``t``, ``s``: ``s(t) = S_a(W_1 + t V)`` (T,) — piecewise linear in t;
    * ``t_inner``, ``d2``: ``(s(t+h) − 2 s(t) + s(t−h)) / h²`` at the interior points (T − 2,) — zero between
      kinks (up to rounding), about ``jump / h`` at one;
    * ``h``; ``kinks``: the t where a pre-activation ``(Y (W_1 + t V))_{a_0 j}`` crosses zero; ``jumps``: the
      change of slope there, ``|(Y V)_{a_0 j} (W_2)_{j a_1}|``; ``max_d2`` and ``max_d2_away`` (max |d2| more than
      2h from every kink).
    """
    r, c = entry
    pre, slope = Y[r] @ W1, Y[r] @ V                                  # row a_0 of Y W_1 and of Y V, (d_ff,)
    s = relu(pre[None, :] + t[:, None] * slope[None, :]) @ W2[:, c] + Y[r, c]
    h = float(t[1] - t[0])
    d2 = (s[2:] - 2 * s[1:-1] + s[:-2]) / h ** 2
    lo, hi = float(t[0]), float(t[-1])
    nz = slope != 0
    tk = (-pre[nz] / slope[nz])
    inside = (tk >= lo) & (tk <= hi)
    kinks = tk[inside].numpy()
    jumps = (slope[nz] * W2[:, c][nz]).abs()[inside].numpy()
    ti = t[1:-1].numpy()
    d2n = d2.numpy()
    far = (np.abs(ti[:, None] - kinks[None, :]) > 2 * h).all(axis=1)
    return {"t": t.numpy(), "s": s.numpy(), "t_inner": ti, "d2": d2n, "h": h, "kinks": kinks, "jumps": jumps,
            "max_d2": float(np.abs(d2n).max()), "max_d2_away": float(np.abs(d2n[far]).max()) if far.any() else 0.0}
