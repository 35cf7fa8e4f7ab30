"""Closed-form loss Hessian of a ``torch.nn.TransformerEncoderLayer``, in every configuration it has.

Beyond the paper: the paper's block (Theorem 5, :mod:`.block`) is one post-norm, single-head ReLU layer
without ``W_O``, biases or LayerNorm affine parameters. PyTorch's layer adds heads, ``W_O``, biases, the
LayerNorm's ``γ, β`` and ``ε``, GELU, the pre-norm order and a causal mask. On one sequence X (L, d):

    post-norm:  U_1 = X + SA(X),       Y = LN_1(U_1),  U_2 = Y + FFN(Y),  Z = LN_2(U_2)
    pre-norm:   U_1 = X + SA(LN_1(X)),                 Z = U_1 + FFN(LN_2(U_1))
    SA(A) = O W_Oᵀ + b_O,  O = multi-head attention of [Q, K, V] = A W_inᵀ + b_in  (:mod:`.multihead`)
    FFN(Y) = act(Y W_1ᵀ + b_1) W_2ᵀ + b_2,  act ∈ {ReLU, GELU (erf), GELU (tanh)}
    LN(U) = γ ∘ (U - μ)/√(σ² + ε) + β   (row mean μ, population variance σ²)

(``W`` in PyTorch's (out, in) orientation; ``x Wᵀ`` as ``nn.Linear`` computes it.)

**The assembly.** Write the layer as a chain of primitives ``v_k = f_k(v_{parents}, θ_k)`` ending in
``Z`` and let ``v̄_k = ∂l/∂v_k`` be the adjoints (the gradient pass, each primitive's transposed
Jacobian). The Hessian of ``l(Z(θ))`` is the Gauss–Newton decomposition summed over primitives,

    H = J_Zᵀ (∂²l/∂Z²) J_Z + Σ_k J_{in(k)}ᵀ (v̄_k · ∂²f_k) J_{in(k)},

where ``J_{in(k)}`` stacks the Jacobians of the inputs of ``f_k`` (and of ``θ_k``) with respect to θ and
``v̄_k · ∂²f_k = Σ_a (v̄_k)_a ∂²(f_k)_a`` is the primitive's second derivative contracted with its adjoint
(``v̄_k = (∂l/∂Z) ∂Z/∂v_k``: this is the ``Σ (∂l/∂Z)·(second-order terms)`` part, spread over the
primitives). ``H`` is evaluated a column block at a time, one parameter tensor θ_g at a time: the columns
of ``J_k`` for θ_g are pushed forward through each primitive's closed-form Jacobian (``jvp``), then
``(∂²l/∂Z²) J_Z`` is pulled back through the closed-form transposed Jacobians (``vjp``), adding at each
primitive its contracted second derivative applied to the forward columns (``hvp``). Every map is a
hand-written formula (:class:`Linear`, :class:`Activation`, :class:`LayerNorm`, :class:`Residual`,
:class:`Attention` with the softmax second derivative of :mod:`.multihead`); nothing here calls
``torch.autograd`` or ``torch.func``, and no Kronecker product is formed: ``(A ⊗ Bᵀ) vec_r X = vec_r(A X B)``
is always applied as the matrix product it is. The pull-back stops at the primitive where θ_g enters:
the blocks ``H[θ_a, θ_g]`` with θ_a entering earlier are the transposes of blocks of θ_a's pass.

Parameters are those of ``layer.named_parameters()``, in that order, each flattened row-major
(``vec_r``); absent ones (``bias=False``, a removed FFN bias, ``elementwise_affine=False``) are simply
not there. The loss is the paper's MSE ``l = (1/(L d)) ||Z - Target||_F²`` (``nn.MSELoss()``) or any
``l`` given by ``∂l/∂Z`` and ``∂²l/∂Z²``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import multihead as mh

__all__ = [
    "EncoderLayerHessian", "LayerHessian", "encoder_layer_hessian", "program_hessian", "program_hvp", "in_proj_heads", "activation_derivatives", "layernorm_vjp", "layernorm_second",
    "Linear", "Activation", "LayerNorm", "Residual", "Attention", "program", "AUTHORS_BLOCK", "authors_block",
    "PAPER_BLOCK", "paper_block", "paper_index", "SUPPORTED",
]

SUPPORTED = ("nn.TransformerEncoderLayer (exactly that class) on one sequence X (L, d) or (1, L, d) "
             "[(L, 1, d) if batch_first=False]; dropout 0 or eval mode; activation relu, gelu "
             "(erf) or nn.GELU(approximate='tanh'); norm_first True or False; any bias present or absent; "
             "nhead ≥ 1; src_mask None, a (L, L) bool/float mask or is_causal=True")


# ====================================================================== primitives
def sum_parts(parts: list):
    """The sum of the tensors in ``parts`` (None when empty: a zero derivative), without a leading ``0 +``."""
    out = None
    for t in parts:
        out = t if out is None else out + t
    return out


class Linear:
    """``y = x Wᵀ + b``: x (L, i), W (o, i), b (o,) or None.

    Jacobians ``ẏ = ẋ Wᵀ + x Ẇᵀ + ḃ``; transposed ``x̄ = ȳ W``, ``W̄ = ȳᵀ x``, ``b̄ = 1ᵀ ȳ``; the only second
    derivative is the bilinear ``x Wᵀ``: ``(ȳ·∂²y)[ẋ, Ẇ]`` adds ``ȳ Ẇ`` to the tangent of x̄ and ``ȳᵀ ẋ``
    to that of W̄.
    """

    slots = ("weight", "bias")

    def forward(self, xs, p):
        x, = xs
        y = x @ p["weight"].T
        if p.get("bias") is not None:
            y = y + p["bias"]
        return y, {"x": x, "W": p["weight"]}

    def jvp(self, ctx, dxs, dp):
        dx, = dxs
        parts = []
        if dx is not None:
            parts.append(dx @ ctx["W"].T)
        if dp.get("weight") is not None:
            parts.append(torch.einsum("li,boi->blo", ctx["x"], dp["weight"]))
        if dp.get("bias") is not None:
            parts.append(dp["bias"][:, None, :].expand(-1, ctx["x"].shape[0], -1))
        return sum_parts(parts), None

    def vjp(self, ctx, gy):
        return [gy @ ctx["W"]], {"weight": gy.T @ ctx["x"], "bias": gy.sum(0)}, None

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        dx, = dxs
        dW = dp.get("weight")
        dgx = []
        if need_dx:
            if dgy is not None:
                dgx.append(dgy @ ctx["W"])
            if dW is not None:
                dgx.append(torch.einsum("lo,boi->bli", gy, dW))
        if not need_p:
            return [sum_parts(dgx)], {}
        dgW = []
        if dgy is not None:
            dgW.append(dgy.transpose(1, 2) @ ctx["x"])
        if dx is not None:
            dgW.append(gy.T @ dx)
        return ([sum_parts(dgx)],
                {"weight": sum_parts(dgW), "bias": None if dgy is None else dgy.sum(1)})


def activation_derivatives(name: str, p: torch.Tensor):
    """``(act(p), act'(p), act''(p))`` element-wise; ``act''`` is None for ReLU (zero off the kink).

    * ``relu``: ``1{p > 0}`` (PyTorch's convention at 0), second derivative 0 a.e. (Lemma 1);
    * ``gelu`` (exact): ``p Φ(p)``, ``Φ + p φ``, ``φ (2 - p²)`` with the normal cdf Φ and density φ;
    * ``gelu_tanh``: ``½ p (1 + t)``, ``t = tanh u``, ``u = k(p + a p³)``, ``k = √(2/π)``, ``a = 0.044715``:
      ``½(1 + t) + ½ p (1 - t²) u'`` and ``(1 - t²)(u' + ½ p (u'' - 2 t u'²))``, ``u' = k(1 + 3a p²)``, ``u'' = 6 a k p``.
    """
    if name == "relu":
        return p.clamp_min(0.0), (p > 0).to(p.dtype), None
    if name == "gelu":
        Phi = 0.5 * (1.0 + torch.erf(p / math.sqrt(2.0)))
        phi = torch.exp(-0.5 * p * p) / math.sqrt(2.0 * math.pi)
        return p * Phi, Phi + p * phi, phi * (2.0 - p * p)
    if name == "gelu_tanh":
        k, a = math.sqrt(2.0 / math.pi), 0.044715
        t = torch.tanh(k * (p + a * p ** 3))
        u1, u2 = k * (1.0 + 3.0 * a * p * p), 6.0 * a * k * p
        s = 1.0 - t * t
        return 0.5 * p * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * p * s * u1, s * (u1 + 0.5 * p * (u2 - 2.0 * t * u1 * u1))
    raise ValueError(f"unknown activation {name!r}; supported: relu, gelu, gelu_tanh")


class Activation:
    """``y = act(p)`` element-wise: ``ẏ = act'(p) ∘ ṗ``, ``p̄ = act'(p) ∘ ȳ``, second order ``act''(p) ∘ ȳ ∘ ṗ``."""

    slots = ()

    def __init__(self, name: str):
        self.name = name

    def forward(self, xs, p):
        y, d1, d2 = activation_derivatives(self.name, xs[0])
        return y, {"d1": d1, "d2": d2}

    def jvp(self, ctx, dxs, dp):
        return (None if dxs[0] is None else ctx["d1"] * dxs[0]), None

    def vjp(self, ctx, gy):
        return [ctx["d1"] * gy], {}, None

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        parts = []
        if dgy is not None:
            parts.append(ctx["d1"] * dgy)
        if dxs[0] is not None and ctx["d2"] is not None:
            parts.append(ctx["d2"] * gy * dxs[0])
        return [sum_parts(parts)], {}


def layernorm_vjp(xh, r, u):
    """``x̄ = r (u - mean(u) - x̂ mean(u ∘ x̂))`` per row, with ``u = ȳ ∘ γ``, ``x̂ = (x - μ) r``, ``r = (σ² + ε)^{-1/2}``."""
    return r * (u - u.mean(-1, keepdim=True) - xh * (u * xh).mean(-1, keepdim=True))


def layernorm_second(xh, r, u, dx):
    """``(ȳ·∂²LN/∂x²)[ẋ]`` (γ, β fixed): the tangent of :func:`layernorm_vjp` in x with ``u = ȳ ∘ γ`` fixed.

    ``ṙ = -r³ mean((x - μ) ∘ ẋ) = -r² mean(x̂ ∘ ẋ)``, ``dx̂ = r(ẋ - mean ẋ) + x̂ ṙ / r``; then
    ``(ṙ/r) x̄ - r (dx̂ mean(u∘x̂) + x̂ mean(u ∘ dx̂))``. Row-wise: a (d, d) matrix per row, LayerNorm's
    Hessian (Theorem 3, with ε) contracted with ȳ∘γ.
    """
    dr = -r * r * (xh * dx).mean(-1, keepdim=True)
    dxh = r * (dx - dx.mean(-1, keepdim=True)) + xh * (dr / r)
    m = (u * xh).mean(-1, keepdim=True)
    return (dr / r) * layernorm_vjp(xh, r, u) - r * (dxh * m + xh * (u * dxh).mean(-1, keepdim=True))


class LayerNorm:
    """``y = γ ∘ x̂ + β``, ``x̂ = (x - μ) r``, ``r = (σ² + ε)^{-1/2}`` per row (population σ²); γ, β (d,) or None.

    Jacobians: ``ẏ = γ ∘ dx̂ + x̂ ∘ γ̇ + β̇`` with ``dx̂`` of :func:`layernorm_second`; transposed
    ``x̄ = layernorm_vjp(x̂, r, ȳ∘γ)``, ``γ̄ = 1ᵀ(ȳ ∘ x̂)``, ``β̄ = 1ᵀ ȳ``. Second order: the x-x part
    :func:`layernorm_second`, and the γ-x cross terms (γ̇ enters ``u = ȳ ∘ γ``, ``dx̂`` enters ``γ̄``).
    """

    slots = ("weight", "bias")

    def __init__(self, eps: float):
        self.eps = float(eps)

    def forward(self, xs, p):
        x, = xs
        c = x - x.mean(-1, keepdim=True)
        r = torch.rsqrt((c * c).mean(-1, keepdim=True) + self.eps)
        xh = c * r
        g, b = p.get("weight"), p.get("bias")
        y = xh if g is None else xh * g
        if b is not None:
            y = y + b
        return y, {"xh": xh, "r": r, "g": g}

    def _dxh(self, ctx, dx):
        xh, r = ctx["xh"], ctx["r"]
        dr = -r * r * (xh * dx).mean(-1, keepdim=True)
        return r * (dx - dx.mean(-1, keepdim=True)) + xh * (dr / r), dr

    def jvp(self, ctx, dxs, dp):
        dx, = dxs
        parts, t = [], {"dxh": None, "dr": None}
        if dx is not None:
            t["dxh"], t["dr"] = self._dxh(ctx, dx)
            parts.append(t["dxh"] if ctx["g"] is None else t["dxh"] * ctx["g"])
        if dp.get("weight") is not None:
            parts.append(ctx["xh"] * dp["weight"][:, None, :])
        if dp.get("bias") is not None:
            parts.append(dp["bias"][:, None, :].expand(-1, ctx["xh"].shape[0], -1))
        return sum_parts(parts), t

    def vjp(self, ctx, gy):
        u = gy if ctx["g"] is None else gy * ctx["g"]
        return [layernorm_vjp(ctx["xh"], ctx["r"], u)], {"weight": (gy * ctx["xh"]).sum(0), "bias": gy.sum(0)}, {"u": u}

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        xh, r, g, u = ctx["xh"], ctx["r"], ctx["g"], gctx["u"]
        dxh, dr = (tctx or {}).get("dxh"), (tctx or {}).get("dr")
        du = []
        if dgy is not None:
            du.append(dgy if g is None else dgy * g)
        if dp.get("weight") is not None:
            du.append(gy * dp["weight"][:, None, :])
        dgx = []
        if need_dx:
            if du:
                dgx.append(layernorm_vjp(xh, r, sum_parts(du)))
            if dxh is not None:
                dgx.append((dr / r) * layernorm_vjp(xh, r, u)
                           - r * (dxh * (u * xh).mean(-1, keepdim=True) + xh * (u * dxh).mean(-1, keepdim=True)))
        if not need_p:
            return [sum_parts(dgx)], {}
        dgg = []
        if dgy is not None:
            dgg.append((dgy * xh).sum(1))
        if dxh is not None:
            dgg.append((gy * dxh).sum(1))
        return ([sum_parts(dgx)],
                {"weight": sum_parts(dgg), "bias": None if dgy is None else dgy.sum(1)})


class Residual:
    """``y = a + b``: linear, no second derivative."""

    slots = ()

    def forward(self, xs, p):
        return xs[0] + xs[1], None

    def jvp(self, ctx, dxs, dp):
        parts = [d for d in dxs if d is not None]
        return sum_parts(parts), None

    def vjp(self, ctx, gy):
        return [gy, gy], {}, None

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        return [dgy, dgy], {}


class Attention:
    """Multi-head softmax attention ``O([Q, K, V])`` (:mod:`.multihead`), no parameters of its own."""

    slots = ()

    def __init__(self, nhead: int, mask: torch.Tensor | None, n: int | None = None):
        self.nhead, self.mask, self.n = nhead, mask, n      # n: sequences stacked in the rows (multihead.forward)

    def forward(self, xs, p):
        return mh.forward(xs[0], self.nhead, self.mask, self.n)

    def jvp(self, ctx, dxs, dp, head=None):
        return mh.jvp(ctx, dxs[0], head)

    def vjp(self, ctx, gy):
        gx, gctx = mh.vjp(ctx, gy)
        return [gx], {}, gctx

    def hvp(self, ctx, gctx, tctx, gy, dgy, dxs, dp, need_dx=True, need_p=True):
        return [mh.hvp(ctx, gctx, tctx, dgy) if need_dx else None], {}


@dataclass
class _Node:
    name: str            # the submodule of the layer ("self_attn.in_proj", "norm1", ...)
    op: object
    ins: tuple
    out: str
    params: dict = field(default_factory=dict)   # slot -> parameter name in layer.named_parameters()


# ====================================================================== the layer as a chain of primitives
def _activation_name(layer: nn.TransformerEncoderLayer) -> str:
    act = layer.activation
    if act is F.relu or act is torch.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    if isinstance(act, nn.GELU) and act.approximate == "tanh":
        return "gelu_tanh"
    raise ValueError(f"activation {act!r} is not supported: supported are 'relu', 'gelu' (exact erf form, "
                     "F.gelu or nn.GELU()) and nn.GELU(approximate='tanh'); a custom callable has no derived "
                     "second derivative here")


def _check_layer(layer) -> None:
    if type(layer) is not nn.TransformerEncoderLayer:
        raise ValueError(f"{type(layer).__name__} is not supported: pass a torch.nn.TransformerEncoderLayer "
                         "itself (a subclass may change forward). Supported: " + SUPPORTED)
    drops = {"dropout": layer.dropout.p, "dropout1": layer.dropout1.p, "dropout2": layer.dropout2.p,
             "self_attn.dropout": layer.self_attn.dropout}
    if layer.training and any(p > 0 for p in drops.values()):
        bad = ", ".join(f"{k}={v}" for k, v in drops.items() if v > 0)
        raise ValueError(f"dropout > 0 in training mode ({bad}) is not supported: the layer is random; call "
                         "layer.eval() or build it with dropout=0.0")
    mha = layer.self_attn
    if not mha._qkv_same_embed_dim or mha.in_proj_weight is None:
        raise ValueError("self_attn with separate q/k/v projection weights (kdim/vdim != d_model) is not supported")
    if mha.bias_k is not None or mha.bias_v is not None:
        raise ValueError("self_attn with add_bias_kv=True is not supported (only the packed in_proj and out_proj)")
    if mha.add_zero_attn:
        raise ValueError("self_attn with add_zero_attn=True is not supported")
    for n in ("norm1", "norm2"):
        ln = getattr(layer, n)
        if type(ln) is not nn.LayerNorm or tuple(ln.normalized_shape) != (mha.embed_dim,):
            raise ValueError(f"{n} = {ln!r} is not supported: only nn.LayerNorm over the last dimension d_model")
    _activation_name(layer)


def program(layer: nn.TransformerEncoderLayer, L: int, mask: torch.Tensor | None, n: int | None = None) -> list:
    """The layer as the list of :class:`_Node` its forward computes, in order (see the module doc); ``n``: the
    number of sequences stacked in the rows of X (None: one sequence, unstacked)."""
    _check_layer(layer)
    mha = layer.self_attn

    def pn(mod: str, slots=("weight", "bias")):
        m = layer.get_submodule(mod)
        return {s: f"{mod}.{s}" for s in slots if getattr(m, s, None) is not None}

    in_params = {s: f"self_attn.in_proj_{s}" for s in ("weight", "bias") if getattr(mha, f"in_proj_{s}") is not None}
    att = [
        ("self_attn.in_proj", Linear(), None, "QKV", in_params),
        ("self_attn", Attention(mha.num_heads, mask, n), ("QKV",), "O", {}),
        ("self_attn.out_proj", Linear(), ("O",), "SA", pn("self_attn.out_proj")),
    ]
    ffn = [
        ("linear1", Linear(), None, "P", pn("linear1")),
        ("activation", Activation(_activation_name(layer)), ("P",), "H", {}),
        ("linear2", Linear(), ("H",), "F", pn("linear2")),
    ]
    ln1, ln2 = LayerNorm(layer.norm1.eps), LayerNorm(layer.norm2.eps)
    if layer.norm_first:
        nodes = [("norm1", ln1, ("X",), "A", pn("norm1"))]
        att[0] = att[0][:2] + (("A",),) + att[0][3:]
        nodes += att + [("residual1", Residual(), ("X", "SA"), "U1", {}),
                        ("norm2", ln2, ("U1",), "B", pn("norm2"))]
        ffn[0] = ffn[0][:2] + (("B",),) + ffn[0][3:]
        nodes += ffn + [("residual2", Residual(), ("U1", "F"), "Z", {})]
    else:
        att[0] = att[0][:2] + (("X",),) + att[0][3:]
        ffn[0] = ffn[0][:2] + (("Y",),) + ffn[0][3:]
        nodes = att + [("residual1", Residual(), ("X", "SA"), "U1", {}),
                       ("norm1", ln1, ("U1",), "Y", pn("norm1"))]
        nodes += ffn + [("residual2", Residual(), ("Y", "F"), "U2", {}),
                        ("norm2", ln2, ("U2",), "Z", pn("norm2"))]
    nodes = [_Node(*n) for n in nodes]
    named = [n for n, _ in layer.named_parameters()]
    used = [v for node in nodes for v in node.params.values()]
    if sorted(named) != sorted(used):
        raise ValueError(f"parameters {sorted(set(named) ^ set(used))} are not part of the derived layer. "
                         "Supported: " + SUPPORTED)
    return nodes


# ====================================================================== the Hessian
@dataclass
class LayerHessian:
    """Closed-form loss Hessian of a layer: ``dense`` (P, P) in ``names`` order (``named_parameters()``,
    each ``vec_r``-flattened; None when only some ``blocks`` were asked for), ``blocks[(name_i, name_j)]``
    its (n_i, n_j) blocks (views of ``dense``, or the blocks asked for), ``sizes`` the n_i; also the layer
    output ``Z`` (rows, d), the loss gradient ``gradient`` (P,) and ``loss`` (MSE only)."""

    dense: torch.Tensor | None
    names: tuple
    sizes: tuple
    blocks: dict
    Z: torch.Tensor
    gradient: torch.Tensor
    loss: float | None = None

    def offsets(self) -> dict:
        """``{name: first index of the parameter in dense}``."""
        out, o = {}, 0
        for n, s in zip(self.names, self.sizes):
            out[n] = o
            o += s
        return out


EncoderLayerHessian = LayerHessian
"""The result of :func:`encoder_layer_hessian` (the same class as :class:`LayerHessian`)."""


def _sequence(layer, X: torch.Tensor) -> torch.Tensor:
    d = layer.self_attn.embed_dim
    if X.dim() == 3:
        if layer.self_attn.batch_first and X.shape[0] == 1:
            X = X[0]
        elif not layer.self_attn.batch_first and X.shape[1] == 1:
            X = X[:, 0]
        else:
            want = "(1, L, d)" if layer.self_attn.batch_first else "(L, 1, d) (batch_first=False)"
            raise ValueError(f"X of shape {tuple(X.shape)}: only one sequence is supported, X (L, d) or {want}")
    if X.dim() != 2 or X.shape[1] != d:
        raise ValueError(f"X of shape {tuple(X.shape)} is not supported: expected (L, d_model = {d})")
    w = layer.self_attn.in_proj_weight
    if not X.is_floating_point() or X.dtype != w.dtype or X.device != w.device:
        raise ValueError(f"X ({X.dtype}, {X.device}) must have the dtype and device of the layer ({w.dtype}, {w.device})")
    return X


def _loss_terms(loss, target, Z):
    """``(∂l/∂Z (L, d), function applying ∂²l/∂Z² to tangents (B, L, d), l or None)``; Z (L, d) is the
    output's rows (all sequences one after the other for a batch: the MSE is then the mean over all)."""
    L, d = Z.shape
    if isinstance(loss, str):
        if loss != "mse":
            raise ValueError(f"loss={loss!r} is not supported: 'mse' or a pair (dl_dZ, d2l_dZ2)")
        if target is None:
            raise ValueError("loss='mse' needs target, of the shape of the layer's output")
        if target.numel() != L * d:
            raise ValueError(f"target has {target.numel()} entries; the layer's output has {L * d} ({L} rows of {d})")
        T = target.reshape(L, d).to(Z)
        c = 2.0 / (L * d)
        return c * (Z - T), (lambda dZ: c * dZ), float((Z - T).pow(2).sum() / (L * d))
    if not (isinstance(loss, (tuple, list)) and len(loss) == 2):
        raise ValueError("loss must be 'mse' or a pair (dl_dZ, d2l_dZ2) of tensors or callables of Z")
    g, H2 = (f(Z) if callable(f) else f for f in loss)
    g = g.reshape(L, d).to(Z)
    H2 = H2.to(Z)
    if H2.shape != (L * d, L * d):
        raise ValueError(f"d2l_dZ2 must have shape (L d, L d) = ({L * d}, {L * d}), not {tuple(H2.shape)}")
    return g, (lambda dZ: (dZ.reshape(dZ.shape[0], -1) @ H2.T).reshape(dZ.shape)), None


def encoder_layer_hessian(layer: nn.TransformerEncoderLayer, X: torch.Tensor, loss="mse",
                          target: torch.Tensor | None = None, src_mask: torch.Tensor | None = None,
                          is_causal: bool = False, src_key_padding_mask=None,
                          chunk: int | None = 128) -> LayerHessian:
    """Closed-form Hessian of ``l(layer(X))`` with respect to ``layer.named_parameters()`` (module doc).

    ``X`` (L, d) (or (1, L, d); (L, 1, d) when ``batch_first=False``); ``loss="mse"`` with ``target`` (L, d):
    ``l = (1/(L d))||Z - target||_F²`` (``∂l/∂Z = 2(Z - target)/(L d)``, ``∂²l/∂Z² = 2 I/(L d)``, as in
    :mod:`.block`); or ``loss=(dl_dZ, d2l_dZ2)``, each a tensor or a callable of Z, giving ``∂l/∂Z`` (L, d) and
    ``∂²l/∂Z²`` (L d, L d) (row-major ``vec_r`` of Z). ``src_mask``, ``is_causal`` as in the layer's
    forward (``is_causal=True`` alone means the causal mask). ``chunk`` caps the number of directions pushed through at once (memory and cache; None: all
    of a parameter at once). Raises
    ``ValueError`` for what is not derived here (dropout in training, a custom activation, a key
    padding mask, a batch of several sequences, ...), naming it and what is supported.
    (:func:`curvature_gap.layer_hessian` takes batches, blocks by name and other libraries' layers.)
    """
    if src_key_padding_mask is not None:
        raise ValueError("src_key_padding_mask is not supported (one unpadded sequence); use src_mask (L, L) to "
                         "mask keys instead")
    _check_layer(layer)
    X = _sequence(layer, X)
    L = X.shape[0]
    mask = mh.additive_mask(L, src_mask, is_causal, X)
    nodes = program(layer, L, mask)
    return program_hessian(nodes, dict(layer.named_parameters()), X, loss, target, in_proj_heads(layer), chunk)


def in_proj_heads(layer: nn.TransformerEncoderLayer) -> dict:
    """``{parameter name: row -> head}`` for the packed ``in_proj`` of ``layer.self_attn`` (:func:`.multihead.head_of_row`)."""
    d, h = layer.self_attn.embed_dim, layer.self_attn.num_heads
    return {f"self_attn.in_proj_{s}": (lambda r: mh.head_of_row(r, d, h)) for s in ("weight", "bias")}


def _forward_backward(nodes, P: dict, X: torch.Tensor, loss, target):
    """The forward pass of the program on X (rows, d) and its gradient pass: contexts, adjoints, gradient."""
    vals, ctxs = {"X": X}, []
    for node in nodes:
        y, ctx = node.op.forward([vals[v] for v in node.ins], {s: P[n] for s, n in node.params.items()})
        vals[node.out] = y
        ctxs.append(ctx)
    Z = vals[nodes[-1].out]
    gZ, apply_H2, lval = _loss_terms(loss, target, Z)
    adj, gys, gctxs, grad = {nodes[-1].out: gZ}, [None] * len(nodes), [None] * len(nodes), {}
    for i in reversed(range(len(nodes))):
        node = nodes[i]
        gys[i] = adj[node.out]
        gxs, gp, gctxs[i] = node.op.vjp(ctxs[i], gys[i])
        for v, gx in zip(node.ins, gxs):
            adj[v] = gx if v not in adj else adj[v] + gx
        for s, n in node.params.items():
            grad[n] = gp[s].reshape(-1)
    return dict(Z=Z, ctxs=ctxs, gctxs=gctxs, gys=gys, apply_H2=apply_H2, grad=grad, loss=lval)


def program_hessian(nodes, params: dict, X: torch.Tensor, loss="mse", target=None, heads: dict | None = None,
                    chunk: int | None = 128, blocks=None) -> LayerHessian:
    """The Hessian of ``l(Z)`` for the layer given as its program ``nodes`` (list of :class:`_Node`, the
    module doc's assembly) with parameters ``params`` (``dict(layer.named_parameters())``: their order is the
    result's), on the rows ``X`` (all sequences one after the other when the attention node holds ``n``).

    ``heads``: ``{name: row -> head}`` for parameters whose each row feeds one attention head only (the
    directions are then grouped by head and the attention's second-order terms formed for that head only).
    ``blocks``: None (the dense Hessian) or a list of parameter names (every block among them) or of pairs
    ``(name_a, name_b)``: only those blocks, each from the pass of the parameter entering first.
    """
    P = {n: p.detach() for n, p in params.items()}
    names = tuple(params)
    sizes = tuple(P[n].numel() for n in names)
    numels = dict(zip(names, sizes))
    fb = _forward_backward(nodes, P, X, loss, target)
    where = {n: i for i, node in enumerate(nodes) for n in node.params.values()}
    slot_of = {n: s for node in nodes for s, n in node.params.items()}
    missing = sorted(set(names) - set(where))
    if missing:
        raise ValueError(f"parameters {missing} are not part of the derived layer")
    heads = heads or {}
    pairs = _requested_pairs(blocks, names)

    def before(a, b):       # a enters at or before b (ties: by named_parameters order)
        return (where[a], names.index(a)) <= (where[b], names.index(b))

    # the pass of each parameter g and the rows it must deliver
    want: dict = {}
    if pairs is None:
        for g in names:
            want[g] = [n for n in names if where[n] >= where[g]]
    else:
        for a, b in pairs:
            g, r = (a, b) if before(a, b) else (b, a)
            want.setdefault(g, [])
            if r not in want[g]:
                want[g].append(r)

    cols: dict = {}
    for g in names:
        if g not in want:
            continue
        shape = P[g].shape
        E = torch.eye(numels[g], dtype=X.dtype, device=X.device)
        for head, idx in _direction_sets(shape, heads.get(g), X.device):
            step = idx.numel() if chunk is None else max(1, int(chunk))
            for c0 in range(0, idx.numel(), step):
                sub = idx[c0:c0 + step]
                out = _pass(nodes, fb, {where[g]: {slot_of[g]: E[sub].reshape(-1, *shape)}}, head, set(want[g]))
                for n in want[g]:
                    if (n, g) not in cols:
                        cols[(n, g)] = X.new_zeros(numels[n], numels[g])
                    if out.get(n) is not None:
                        cols[(n, g)][:, sub] = out[n].reshape(sub.numel(), -1).T

    def block(a, b):
        """H[a, b] from the pass of the one entering first (dense: a same-primitive pair from both passes,
        symmetrised; blocks: from the one pass, exact too, as no primitive has a parameter-parameter term)."""
        if pairs is None and where[a] == where[b]:
            return 0.5 * (cols[(a, b)] + cols[(b, a)].T)
        return cols[(a, b)] if (a, b) in cols else cols[(b, a)].T

    gradient = torch.cat([fb["grad"][n] for n in names])
    if pairs is not None:
        out = {}
        for a, b in pairs:
            blk = block(a, b)
            out[(a, b)] = 0.5 * (blk + blk.T) if a == b else blk
        return LayerHessian(None, names, sizes, out, fb["Z"], gradient, fb["loss"])
    off, o = {}, 0
    for n, sz in zip(names, sizes):
        off[n] = o
        o += sz
    H = torch.empty(o, o, dtype=X.dtype, device=X.device)
    for a in names:
        for b in names:
            if where[a] > where[b] or (where[a] == where[b] and names.index(a) >= names.index(b)):
                blk = block(a, b)
                H[off[a]:off[a] + numels[a], off[b]:off[b] + numels[b]] = blk
                H[off[b]:off[b] + numels[b], off[a]:off[a] + numels[a]] = blk.T
    blocks_ = {(a, b): H[off[a]:off[a] + numels[a], off[b]:off[b] + numels[b]] for a in names for b in names}
    return LayerHessian(H, names, sizes, blocks_, fb["Z"], gradient, fb["loss"])


def _requested_pairs(blocks, names) -> list | None:
    """``blocks`` as a list of ``(a, b)`` pairs (None: dense), checked against the parameter names."""
    if blocks is None:
        return None
    if isinstance(blocks, str):
        blocks = [blocks]
    blocks = list(blocks)
    if not blocks:
        raise ValueError("blocks=[] asks for nothing: pass None (the dense Hessian), names or (name, name) pairs")
    if all(isinstance(b, str) for b in blocks):
        pairs = [(a, b) for a in blocks for b in blocks]
    elif all(isinstance(b, (tuple, list)) and len(b) == 2 for b in blocks):
        pairs = [tuple(b) for b in blocks]
    else:
        raise ValueError("blocks must be parameter names or (name_a, name_b) pairs, not a mix")
    unknown = sorted({n for p in pairs for n in p} - set(names))
    if unknown:
        raise ValueError(f"blocks name {unknown}, which are not parameters of the layer; its parameters: {list(names)}")
    return list(dict.fromkeys(pairs))


def program_hvp(nodes, params: dict, X: torch.Tensor, v: dict, loss="mse", target=None) -> dict:
    """``H v`` for the layer's program (:func:`program_hessian`): ``v`` maps parameter names to directions of
    their shapes (a leading batch dimension B of several directions allowed; a missing name: zero); returns
    ``{name: (H v)[name]}`` for every parameter, in the shape of ``v`` (one pass, every parameter at once)."""
    P = {n: p.detach() for n, p in params.items()}
    unknown = sorted(set(v) - set(P))
    if unknown:
        raise ValueError(f"v names {unknown}, which are not parameters of the layer; its parameters: {list(P)}")
    if not v:
        raise ValueError("v is empty: give a direction for at least one parameter")
    batched = None
    for n, t in v.items():
        if tuple(t.shape) == tuple(P[n].shape):
            b = False
        elif tuple(t.shape[1:]) == tuple(P[n].shape):
            b = True
        else:
            raise ValueError(f"v[{n!r}] has shape {tuple(t.shape)}; expected {tuple(P[n].shape)} or (B, *that)")
        if batched is not None and b != batched:
            raise ValueError("v mixes single and batched directions; give every entry the same leading B or none")
        batched = b
    vb = {n: (t if batched else t[None]).to(X) for n, t in v.items()}
    B = next(iter(vb.values())).shape[0]
    fb = _forward_backward(nodes, P, X, loss, target)
    dirs: dict = {}
    for i, node in enumerate(nodes):
        for s, n in node.params.items():
            if n in vb:
                dirs.setdefault(i, {})[s] = vb[n]
    out = _pass(nodes, fb, dirs, None, set(P), to_start=True)
    res = {}
    for n in P:
        t = out.get(n)
        t = X.new_zeros(B, *P[n].shape) if t is None else t.reshape(B, *P[n].shape)
        res[n] = t if batched else t[0]
    return res


def _direction_sets(shape, head_of, device):
    """``[(head, indices)]``: the unit directions of a parameter, grouped by the one attention head they reach
    (``head_of``: row -> head, for the rows of a Q/K/V projection), else one group ``(None, all)``."""
    n = math.prod(shape)
    idx = torch.arange(n, device=device)
    if head_of is None:
        return [(None, idx)]
    row = idx // shape[1] if len(shape) == 2 else idx
    heads = head_of(row)
    return [(int(c), idx[heads == c]) for c in torch.unique(heads)]


def _pass(nodes, fb: dict, dirs: dict, head, rows: set, to_start: bool = False) -> dict:
    """One Hessian-vector pass: directions ``dirs = {node index: {slot: (B, *shape)}}`` pushed forward
    (closed-form Jacobians) from the first node that has one, then ``(∂²l/∂Z²) J_Z`` pulled back with each
    primitive's contracted second derivative (module doc). Returns ``{name: (B, *shape)}`` = ``(H v)[name]``
    for the parameters in ``rows``. The pull-back stops at the first node with a direction (the rows of the
    parameters entering before it are then not formed: blocks of the transposed pass) unless ``to_start``.
    ``head``: the one attention head the directions reach (None: any)."""
    ctxs, gctxs, gys, apply_H2 = fb["ctxs"], fb["gctxs"], fb["gys"], fb["apply_H2"]
    k = min(dirs)
    tan, tctx, dps = {}, {}, {}
    for i in range(k, len(nodes)):
        node = nodes[i]
        dxs = [tan.get(v) for v in node.ins]
        dp = dirs.get(i, {})
        dps[i] = (dxs, dp)
        if all(dx is None for dx in dxs) and not dp:
            continue
        if isinstance(node.op, Attention):
            tan[node.out], tctx[i] = node.op.jvp(ctxs[i], dxs, dp, head=head)
        else:
            tan[node.out], tctx[i] = node.op.jvp(ctxs[i], dxs, dp)
    dadj = {nodes[-1].out: apply_H2(tan[nodes[-1].out])}
    out = {}
    # the pull-back ends at the first node whose parameters are asked for (k at the earliest: the rows of the
    # parameters entering before k come from their own passes), at node 0 with to_start; each primitive forms
    # its parameters' tangents only where they are asked for
    asked = [i for i, node in enumerate(nodes) if any(n in rows for n in node.params.values())]
    if not asked:
        return {}
    k0 = 0 if to_start else max(k, min(asked))
    for i in reversed(range(k0, len(nodes))):
        node = nodes[i]
        dxs, dp = dps.get(i, ([None] * len(node.ins), {}))
        tc = tctx.get(i, {"dq": None} if isinstance(node.op, Attention) else None)
        dgxs, dgp = node.op.hvp(ctxs[i], gctxs[i], tc, gys[i], dadj.get(node.out), dxs, dp, need_dx=i > k0,
                                need_p=i in asked)
        if i > k0:
            for v, dgx in zip(node.ins, dgxs):
                if dgx is not None:
                    dadj[v] = dgx if v not in dadj else dadj[v] + dgx
        for s, n in node.params.items():
            if n in rows:
                out[n] = dgp.get(s)
    return out


# ====================================================================== named points of the family
AUTHORS_BLOCK = dict(nhead=1, norm_first=False, activation="gelu", bias=True, ffn_bias=False, layer_norm_eps=1e-5,
                     dropout=0.0, batch_first=True)
"""The block of the authors' experiments: one head, ``W_O`` with bias, Q/K/V biases, GELU, an FFN *without*
biases, post-norm ``nn.LayerNorm`` (γ, β) with ε = 1e-5. ``ffn_bias=False`` is represented by removing
``linear1.bias`` and ``linear2.bias`` (set to None: they are not parameters, not in the Hessian)."""

PAPER_BLOCK = dict(nhead=1, norm_first=False, activation="relu", bias=False, layer_norm_eps=0.0, dropout=0.0,
                   batch_first=True)
"""The paper's block (Theorem 5) as a layer: one head, ReLU, post-norm, no biases and LayerNorm without ε,
with ``out_proj.weight = I`` (no W_O) and ``γ = 1`` (:func:`paper_block`)."""


def authors_block(d_model: int, dim_feedforward: int, dtype=torch.float64, device=None) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` configured as :data:`AUTHORS_BLOCK` (PyTorch's initialisation)."""
    cfg = {k: v for k, v in AUTHORS_BLOCK.items() if k != "ffn_bias"}
    layer = nn.TransformerEncoderLayer(d_model, dim_feedforward=dim_feedforward, dtype=dtype, device=device, **cfg)
    layer.linear1.bias = None
    layer.linear2.bias = None
    return layer


def paper_block(W_Q, W_K, W_V, W_1, W_2) -> nn.TransformerEncoderLayer:
    """The paper's block ``Z = LN(ReLU(Y W_1) W_2 + Y)``, ``Y = LN(X + softmax(X W_Q W_Kᵀ Xᵀ/√d) X W_V)`` as an
    ``nn.TransformerEncoderLayer`` (:data:`PAPER_BLOCK`); the weights in the theory's orientation
    (``X W``, :mod:`.block`): W_Q, W_K, W_V (d, d), W_1 (d, d_ff), W_2 (d_ff, d). Its parameters are
    in_proj_weight = [W_Qᵀ; W_Kᵀ; W_Vᵀ], out_proj.weight = I, linear1.weight = W_1ᵀ, linear2.weight = W_2ᵀ,
    norm1.weight = norm2.weight = 1."""
    d, d_ff = W_1.shape
    if W_Q.shape != (d, d):
        raise ValueError("nn.TransformerEncoderLayer has d_K = d_model / nhead = d_model for one head: W_Q (d, d)")
    layer = nn.TransformerEncoderLayer(d, dim_feedforward=d_ff, dtype=W_1.dtype, device=W_1.device, **PAPER_BLOCK)
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T], dim=0))
        layer.self_attn.out_proj.weight.copy_(torch.eye(d, dtype=W_1.dtype, device=W_1.device))
        layer.linear1.weight.copy_(W_1.T)
        layer.linear2.weight.copy_(W_2.T)
        layer.norm1.weight.fill_(1.0)
        layer.norm2.weight.fill_(1.0)
    return layer


def paper_index(res: EncoderLayerHessian, d_model: int, d_ff: int) -> torch.Tensor:
    """Positions in ``res.dense`` of the theory's weights in :data:`.block.BLOCK_PARAMS` order ("1", "2", "K",
    "Q", "V"), each ``vec_r`` in the theory's orientation: ``H_theory = dense[idx][:, idx]``.

    A theory matrix ``W = W_nnᵀ`` (in, out) whose ``W_nn`` (out, in) starts at row ``r0`` of a parameter at
    offset ``o``: entry ``W[a, b]`` is ``o + (r0 + b)·in + a``. Rows 0, d, 2d of in_proj_weight hold W_Qᵀ,
    W_Kᵀ, W_Vᵀ.
    """
    off, d = res.offsets(), d_model

    def pos(name, r0, n_in, n_out):
        a = torch.arange(n_in).repeat_interleave(n_out)
        b = torch.arange(n_out).repeat(n_in)
        return off[name] + (r0 + b) * n_in + a

    ip = "self_attn.in_proj_weight"
    return torch.cat([pos("linear1.weight", 0, d, d_ff), pos("linear2.weight", 0, d_ff, d),
                      pos(ip, d, d, d), pos(ip, 0, d, d), pos(ip, 2 * d, d, d)])
