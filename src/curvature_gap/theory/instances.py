"""Random float64 problem instances for the closed-form checks (no autograd here).

``make_instance(L, d_V, d_K, d_ff, seed)`` draws ``X ~ N(0, 1)`` and weights with
variance ``1/fan_in`` so that the attention scores have O(1) spread (attention is far
from uniform), then redraws until (i) no ReLU pre-activation ``Y W_1`` lies within
``1e-4`` of its kink and (ii) every LayerNorm input row has non-zero variance, so that
finite differences do not straddle a kink and Assumption 2 holds.
"""
from __future__ import annotations

import math

import torch

from . import attention as at
from . import layernorm as ln

__all__ = ["make_instance", "shape_of", "MNIST_SHAPE"]

MNIST_SHAPE = (49, 16, 16, 64)   # L (tokens of a 28x28 image, patch 4), d_V = d_K = 16, d_ff = 64


def make_instance(L: int, d_V: int, d_K: int, d_ff: int, seed: int, uniform: bool = False,
                  device: str | torch.device = "cpu") -> dict:
    """Return ``{"X", "W_Q", "W_K", "W_V", "W_1", "W_2", "Target", "seed", "shape"}`` in float64.

    ``uniform=True`` sets ``W_Q = 0`` so that every attention row is exactly uniform (1/L).
    """
    for attempt in range(100):
        g = torch.Generator().manual_seed(1_000_003 * seed + 7919 * attempt + 17)
        r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
        inst = {
            "X": r(L, d_V),
            "W_Q": r(d_V, d_K) / math.sqrt(d_V) * (0.0 if uniform else 1.5),
            "W_K": r(d_V, d_K) / math.sqrt(d_V) * 1.5,
            "W_V": r(d_V, d_V) / math.sqrt(d_V),
            "W_1": r(d_V, d_ff) / math.sqrt(d_V),
            "W_2": r(d_ff, d_V) / math.sqrt(d_ff),
            "Target": r(L, d_V),
        }
        inst = {k: v.to(device) for k, v in inst.items()}
        U = inst["X"] + at.attention(inst["X"], inst["W_Q"], inst["W_K"], inst["W_V"])
        try:
            Y = ln.layernorm(U)
            pre = Y @ inst["W_1"]
            S = torch.clamp_min(pre, 0.0) @ inst["W_2"] + Y
            ln.check_assumption2(S)
        except ValueError:
            continue
        if float(pre.abs().min()) > 1e-4:
            inst["seed"] = seed
            inst["shape"] = (L, d_V, d_K, d_ff)
            return inst
    raise RuntimeError("could not draw an instance away from the ReLU kinks")


def shape_of(inst: dict) -> str:
    """``"L=5,dV=6,dK=3,dff=8"``."""
    L, d_V, d_K, d_ff = inst["shape"]
    return f"L={L},dV={d_V},dK={d_K},dff={d_ff}"
