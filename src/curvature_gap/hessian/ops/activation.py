"""Elementwise activation ``r = act(h)``: ReLU (the theorem's block) or the exact-erf GELU (the authors').

With ``a1 = act'(h)`` and ``a2 = act''(h)``: forward tangent ``ṙ = a1 ∘ ḣ``; adjoint ``δh = a1 ∘ δr``;
adjoint tangent ``δḣ = a1 ∘ δṙ + a2 ∘ ḣ ∘ δr``. ReLU: ``a1 = 1[h > 0]``, ``a2 = 0`` almost everywhere (the
term is dropped). GELU ``h Φ(h)`` (Φ, φ the standard normal CDF and density): ``a1 = Φ(h) + h φ(h)``,
``a2 = 2 φ(h) − h² φ(h) = φ(h) (2 − h²)``.
"""
from __future__ import annotations

import math

import torch

from ...model import ACTIVATIONS

__all__ = ["parts", "jvp", "vjp", "vjp_tangent"]
_SQRT_2PI = math.sqrt(2 * math.pi)


def parts(h: torch.Tensor, activation: str):
    """(act(h), act'(h), act''(h) or None) for ``"relu"`` (None: zero a.e.) or ``"gelu"``.

    The value is the model's (:data:`curvature_gap.model.ACTIVATIONS`); the derivatives are evaluated from
    the formulas in the same dtype.
    """
    if activation == "relu":
        return ACTIVATIONS["relu"](h), (h > 0).to(h.dtype), None
    if activation != "gelu":
        raise ValueError(f"no second-order rule for activation {activation!r}; have 'relu', 'gelu'")
    phi = torch.exp(-0.5 * h * h) / _SQRT_2PI
    Phi = 0.5 * (1 + torch.erf(h / math.sqrt(2.0)))
    return ACTIVATIONS["gelu"](h), Phi + h * phi, phi * (2 - h * h)


def jvp(a1: torch.Tensor, dh):
    """``ṙ = a1 ∘ ḣ``; a1 primal (B, n, k), dh (B, n, c, k) or None."""
    return None if dh is None else dh * a1.unsqueeze(2)


def vjp(a1: torch.Tensor, d_r: torch.Tensor) -> torch.Tensor:
    """``δh = a1 ∘ δr``."""
    return d_r * a1


def vjp_tangent(a1: torch.Tensor, a2, d_r, ddr, dh):
    """``δḣ = a1 ∘ δṙ + a2 ∘ ḣ ∘ δr`` (the second term only where ``a2`` is not None)."""
    out = None if ddr is None else ddr * a1.unsqueeze(2)
    if a2 is not None and dh is not None:
        g = dh * (a2 * d_r).unsqueeze(2)
        out = g if out is None else out + g
    return out
