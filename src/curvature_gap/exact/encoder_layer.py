"""Autograd references for :func:`curvature_gap.layer_hessian` on ``nn.TransformerEncoderLayer``: PyTorch's own
layer, differentiated twice.

The reference Hessian of ``l(layer(X))`` is **reverse-over-reverse** ``torch.autograd``: the gradient
with ``create_graph=True``, then the gradient of that gradient along every unit vector at once
(``is_grads_batched=True``) or one at a time, under the MATH attention backend
(``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``). Two routes that look equivalent are not, on this
stack (torch 2.x, CPU), and are measured here rather than used:

* the default CPU attention kernel (``_scaled_dot_product_flash_attention_for_cpu``) has no double
  backward: :func:`default_kernel_double_backward_error` returns the error it raises;
* ``torch.func.hessian`` (forward-over-reverse) of the layer gives wrong second derivatives through
  LayerNorm (a Linear followed by ``nn.LayerNorm`` suffices): :func:`func_hessian`.

Also the random instances of the tests and rows: :data:`CONFIGS` (the 48 configurations) and
:func:`random_layer`.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["CONFIGS", "config_id", "random_layer", "math_backend", "layer_loss", "batched_rows", "autograd_hessian",
           "hessian_autograd", "hessian_autograd_loop", "func_hessian", "default_kernel_double_backward_error",
           "relative_error", "asymmetry"]

# norm_first × activation × bias × nhead × causal: the family the tests and the checks run
CONFIGS = [dict(norm_first=nf, activation=act, bias=b, nhead=h, causal=c)
           for nf, act, b, h, c in itertools.product((False, True), ("relu", "gelu"), (True, False), (1, 2, 4),
                                                     (False, True))]


def config_id(cfg: dict) -> str:
    """E.g. ``post.relu.bias.h2.causal``."""
    return ".".join(["pre" if cfg["norm_first"] else "post", cfg["activation"],
                     "bias" if cfg["bias"] else "nobias", f"h{cfg['nhead']}",
                     "causal" if cfg["causal"] else "full"])


def math_backend():
    """The MATH attention backend (the one whose backward PyTorch can differentiate again)."""
    return sdpa_kernel(SDPBackend.MATH)


def random_layer(d_model: int = 8, nhead: int = 2, dim_feedforward: int = 6, L: int = 5, seed: int = 0,
                 norm_first: bool = False, activation="relu", bias: bool = True, layer_norm_eps: float = 1e-5,
                 sharp: float = 1.0, x_scale: float = 1.0, dtype=torch.float64, **kw):
    """A seeded ``nn.TransformerEncoderLayer`` (dropout 0, batch_first) with every parameter random (biases
    and LayerNorm γ, β included, which PyTorch initialises to 0 and 1), and ``(X, Target)`` (L, d_model).

    ``sharp`` multiplies the Q and K rows of ``in_proj_weight`` (scores by sharp²: near-one-hot attention
    for sharp ≥ 3); ``x_scale`` multiplies X (large inputs).
    """
    g = torch.Generator().manual_seed(10_007 * int(seed) + 13)
    with torch.random.fork_rng():
        torch.manual_seed(int(seed))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0, activation=activation,
                                           layer_norm_eps=layer_norm_eps, batch_first=True, norm_first=norm_first,
                                           bias=bias, dtype=dtype, **kw)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=dtype)
            if name.endswith("bias"):
                p.copy_(0.3 * r)
            elif name.startswith("norm"):
                p.copy_(1.0 + 0.3 * r)
            else:
                p.copy_(r / p.shape[1] ** 0.5)
        layer.self_attn.in_proj_weight[:2 * d_model] *= sharp
    X = x_scale * torch.randn(L, d_model, generator=g, dtype=dtype)
    T = torch.randn(L, d_model, generator=g, dtype=dtype)
    return layer, X, T


def layer_loss(layer, X, target=None, src_mask=None, is_causal=False, loss=None):
    """``l(layer(X))``: the MSE ``mean((Z - target)²)`` or ``loss(Z)``; with ``is_causal`` the causal mask
    is passed as ``src_mask`` with the hint ``is_causal=True`` (as PyTorch documents)."""
    L = X.shape[-2]
    if is_causal and src_mask is None:
        src_mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=X.dtype, device=X.device)
    Z = layer(X, src_mask=src_mask, is_causal=is_causal).reshape(L, -1)
    return (Z - target.reshape(Z.shape)).pow(2).mean() if loss is None else loss(Z)


def batched_rows(g: torch.Tensor, params: list, chunk: int | None = None) -> list[torch.Tensor]:
    """The second backward of the flat gradient ``g`` (built with ``create_graph=True``) along its unit vectors,
    ``chunk`` of them per ``torch.autograd.grad(..., is_grads_batched=True)`` call (all at once by default), into
    each of ``params``: one (g.numel(), numel) tensor per parameter. MATH attention backend."""
    n = g.numel()
    step = n if chunk is None else chunk
    parts = [[] for _ in params]
    with math_backend():
        for c0 in range(0, n, step):
            E = torch.eye(n, dtype=g.dtype, device=g.device)[c0:c0 + step]
            for part, h in zip(parts, torch.autograd.grad(g, params, E, retain_graph=True, is_grads_batched=True)):
                part.append(h.reshape(E.shape[0], -1))
    return [torch.cat(part, 0) for part in parts]


def autograd_hessian(loss_fn, params: list, chunk: int | None = None) -> torch.Tensor:
    """Reverse-over-reverse Hessian (P, P) of the scalar ``loss_fn()`` w.r.t. ``params`` (in that order, each
    flattened): the gradient with ``create_graph=True``, then :func:`batched_rows` along the unit vectors,
    ``chunk`` of them per call (all at once by default). MATH attention backend."""
    with math_backend():
        g = torch.autograd.grad(loss_fn(), params, create_graph=True)
    return torch.cat(batched_rows(torch.cat([x.reshape(-1) for x in g]), params, chunk), 1)


def hessian_autograd(layer, X, chunk: int | None = None, **kw) -> torch.Tensor:
    """Reverse-over-reverse Hessian (P, P) in ``named_parameters()`` order (:func:`autograd_hessian` of
    :func:`layer_loss`), ``chunk`` unit vectors per call (all at once by default). MATH backend."""
    return autograd_hessian(lambda: layer_loss(layer, X, **kw), list(layer.parameters()), chunk)


def hessian_autograd_loop(layer, X, **kw) -> torch.Tensor:
    """As :func:`hessian_autograd`, one Hessian-vector product (``torch.autograd.grad``) per row."""
    ps = list(layer.parameters())
    with math_backend():
        g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(layer_loss(layer, X, **kw), ps, create_graph=True)])
        return torch.stack([torch.cat([h.reshape(-1) for h in torch.autograd.grad(g[i], ps, retain_graph=True)])
                            for i in range(g.numel())])


def func_hessian(layer, X, **kw) -> torch.Tensor:
    """``torch.func.hessian`` (forward-over-reverse, ``jacfwd(jacrev)``) of the same loss w.r.t. the flat
    parameters, through ``torch.func.functional_call``, under the MATH backend: **wrong** through
    LayerNorm on this stack (the trap measured by the tests and ``verify``)."""
    from torch.func import functional_call, hessian

    named = [(n, p.shape) for n, p in layer.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in layer.parameters()])

    def f(flat):
        ps, o = {}, 0
        for n, s in named:
            ps[n] = flat[o:o + s.numel()].reshape(s)
            o += s.numel()
        return layer_loss(lambda X_, **k: functional_call(layer, ps, (X_,), k), X, **kw)

    with math_backend():
        return hessian(f)(flat0)


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
