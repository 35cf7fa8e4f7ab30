"""Autograd references for :func:`curvature_gap.layer_hessian` on ``nn.TransformerEncoderLayer``: PyTorch's own
layer, differentiated twice.

The reference Hessian of ``l(layer(X))`` is :func:`.layers.hessian_autograd` (random layers:
:func:`.layers.random_layer`): **reverse-over-reverse** ``torch.autograd``, the gradient with ``create_graph=True``,
then the gradient of that gradient along every unit vector at once (``is_grads_batched=True``), under the MATH
attention backend (``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``). Two routes that look equivalent are not,
on this stack (torch 2.x, CPU), and are measured here rather than used:

* the default CPU attention kernel (``_scaled_dot_product_flash_attention_for_cpu``) has no double
  backward: :func:`default_kernel_double_backward_error` returns the error it raises;
* ``torch.func.hessian`` (forward-over-reverse) of the layer gives wrong second derivatives through
  LayerNorm (a Linear followed by ``nn.LayerNorm`` suffices): :func:`func_hessian`.

Also the family of the tests and rows: :data:`CONFIGS` (the 48 configurations).
"""
from __future__ import annotations

import itertools

import torch

from ..params import flat_view
from .layers import math_backend

__all__ = ["CONFIGS", "config_id", "func_hessian", "default_kernel_double_backward_error", "relative_error", "asymmetry"]

# norm_first × activation × bias × nhead × causal: the family the tests and the checks run
CONFIGS = [dict(norm_first=nf, activation=act, bias=b, nhead=h, causal=c)
           for nf, act, b, h, c in itertools.product((False, True), ("relu", "gelu"), (True, False), (1, 2, 4),
                                                     (False, True))]


def config_id(cfg: dict) -> str:
    """E.g. ``post.relu.bias.h2.causal``."""
    return ".".join(["pre" if cfg["norm_first"] else "post", cfg["activation"],
                     "bias" if cfg["bias"] else "nobias", f"h{cfg['nhead']}",
                     "causal" if cfg["causal"] else "full"])


def func_hessian(layer, X, target) -> torch.Tensor:
    """``torch.func.hessian`` (forward-over-reverse, ``jacfwd(jacrev)``) of the MSE ``mean((layer(X) − target)²)``
    w.r.t. the flat parameters, through ``torch.func.functional_call``, under the MATH backend: **wrong** through
    LayerNorm on this stack (the trap measured by the tests and ``verify``)."""
    from torch.func import functional_call, hessian

    unflat = flat_view([n for n, _ in layer.named_parameters()], [p.shape for p in layer.parameters()])
    flat0 = torch.cat([p.detach().reshape(-1) for p in layer.parameters()])
    with math_backend():
        return hessian(lambda flat: (functional_call(layer, unflat(flat), (X,)) - target).pow(2).mean())(flat0)


def default_kernel_double_backward_error(layer, X, target) -> str | None:
    """The error that double backward through the layer raises under the *default* attention backend
    (None if it goes through: the day PyTorch implements it)."""
    ps = list(layer.parameters())
    try:
        g = torch.autograd.grad((layer(X) - target).pow(2).mean(), ps, create_graph=True)
        flat = torch.cat([x.reshape(-1) for x in g])
        torch.autograd.grad(flat[0], ps, allow_unused=True)
    except RuntimeError as e:
        return str(e)
    return None


def relative_error(A: torch.Tensor, B: torch.Tensor) -> float:
    """``max|A - B| / max|B|`` (the reference B)."""
    return float((A - B).abs().max() / B.abs().max())


def asymmetry(H: torch.Tensor) -> float:
    """``max|H - Hᵀ| / max|H|``."""
    return float((H - H.T).abs().max() / H.abs().max())
