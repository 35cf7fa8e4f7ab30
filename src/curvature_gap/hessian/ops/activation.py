"""Elementwise activation ``r = act(h)``: ReLU (the theorem's block), GELU in its exact-erf form (the authors',
``nn.GELU()``) and its tanh approximation (``nn.GELU("tanh")``, Hugging Face's ``gelu_new``), and tanh (BERT's pooler).

With ``a1 = act'(h)`` and ``a2 = act''(h)``: forward tangent ``ṙ = a1 ∘ ḣ``; adjoint ``δh = a1 ∘ δr``; adjoint
tangent ``δḣ = a1 ∘ δṙ + a2 ∘ ḣ ∘ δr``.

* ReLU: ``a1 = 1[h > 0]`` (PyTorch's convention at 0), ``a2 = 0`` almost everywhere (the term is dropped);
* GELU ``h Φ(h)`` (Φ, φ the standard normal CDF and density): ``a1 = Φ + h φ``, ``a2 = φ (2 − h²)``;
* GELU-tanh ``½ h (1 + t)``, ``t = tanh u``, ``u = k (h + a h³)``, ``k = √(2/π)``, ``a = 0.044715``:
  ``a1 = ½ (1 + t) + ½ h (1 − t²) u'``, ``a2 = (1 − t²)(u' + ½ h (u'' − 2 t u'²))``, ``u' = k (1 + 3 a h²)``,
  ``u'' = 6 a k h``;
* tanh: ``a1 = 1 − t²``, ``a2 = −2 t (1 − t²)``.
"""
from __future__ import annotations

import math

import torch

from ...model import ACTIVATIONS
from . import Op
from .layout import add

__all__ = ["Activation", "NAMES", "parts"]

NAMES = ("relu", "gelu", "gelu_tanh", "tanh")


def parts(h: torch.Tensor, name: str):
    """(act(h), act'(h), act''(h) or None (zero a.e.)). ReLU's and GELU's values are the model's
    (:data:`curvature_gap.model.ACTIVATIONS`), the others PyTorch's; the derivatives are the formulas above in h's
    dtype."""
    if name == "relu":
        return ACTIVATIONS["relu"](h), (h > 0).to(h.dtype), None
    if name == "gelu":
        phi = torch.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)
        Phi = 0.5 * (1 + torch.erf(h / math.sqrt(2.0)))
        return ACTIVATIONS["gelu"](h), Phi + h * phi, phi * (2 - h * h)
    if name == "gelu_tanh":
        k, a = math.sqrt(2.0 / math.pi), 0.044715
        t = torch.tanh(k * (h + a * h ** 3))
        u1, u2 = k * (1.0 + 3.0 * a * h * h), 6.0 * a * k * h
        s = 1.0 - t * t
        return (torch.nn.functional.gelu(h, approximate="tanh"), 0.5 * (1.0 + t) + 0.5 * h * s * u1,
                s * (u1 + 0.5 * h * (u2 - 2.0 * t * u1 * u1)))
    if name == "tanh":
        t = torch.tanh(h)
        s = 1.0 - t * t
        return t, s, -2.0 * t * s
    raise ValueError(f"no second-order rule for activation {name!r}; have {', '.join(NAMES)}")


class Activation(Op):
    """``r = act(h)`` for ``name`` in :data:`NAMES`."""

    def __init__(self, name: str):
        if name not in NAMES:
            raise ValueError(f"no second-order rule for activation {name!r}; have {', '.join(NAMES)}")
        self.name = name

    def forward(self, xs, p):
        r, a1, a2 = parts(xs[0], self.name)
        return r, {"a1": a1, "a2": a2}

    def vjp(self, ctx, p, d_y, need):
        if ctx["a2"] is not None:
            ctx["d_y"] = d_y
        return [d_y * ctx["a1"]]

    def jvp(self, ctx, p, dxs, dp, c):
        dh, = dxs
        return dh * ctx["a1"].unsqueeze(2), {"dh": dh}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        dh, a2 = t.get("dh"), ctx["a2"]
        return [add(None if dd_y is None else dd_y * ctx["a1"].unsqueeze(2),
                    None if a2 is None or dh is None else dh * (a2 * ctx["d_y"]).unsqueeze(2))]
