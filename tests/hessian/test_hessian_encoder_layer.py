"""hessian.layers on nn.TransformerEncoderLayer: curvature_gap.layer_hessian of PyTorch's layer against the
layer itself, under PyTorch's own arguments.

Reference: reverse-over-reverse torch.autograd of the layer itself under the MATH attention backend
(curvature_gap.exact.encoder_layer), float64. Every configuration of the family, near-one-hot attention
and large inputs; one sequence in each layout PyTorch takes; PyTorch's masks (src_mask, src_key_padding_mask, the
is_causal hint, and the hint with a mask it would not apply, refused); the second-derivative pieces of the engine's
ops against central differences and the paper's Lemma C.1 and Theorem 3; the paper's block (theory.block, Theorem 5)
and the authors' experimental block as points of the family; the two autodiff traps, which fail here the day PyTorch
fixes them.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from cases import slow_but
from curvature_gap.checks import Inputs
from curvature_gap.exact import encoder_layer as ref
from curvature_gap.exact import layers as R
from curvature_gap.exact.instances import random_instance
from curvature_gap.hessian.layers import layer_hessian
from curvature_gap.hessian.ops.activation import parts as activation_parts
from curvature_gap.hessian.ops.attention import Attention
from curvature_gap.hessian.ops.layernorm import LayerNorm
from curvature_gap.theory import attention as at
from curvature_gap.theory import block as bk
from curvature_gap.theory import layernorm as ln

TOL = 1e-10
FD_TOL = 1e-7
# (seed, sharp, x_scale): a generic instance, near-one-hot attention, large inputs
INSTANCES = ((0, 1.0, 1.0), (1, 8.0, 2.0), (2, 1.0, 30.0))

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("one_thread")]


def _layer(cfg, seed, sharp, x_scale, **kw):
    return R.random_layer(seed=seed, sharp=sharp, x_scale=x_scale, norm_first=cfg["norm_first"],
                            activation=cfg["activation"], bias=cfg["bias"], nhead=cfg["nhead"], **kw)


def _max_attention(layer, X, causal):
    """Median over heads and rows of the largest attention weight of a row (1: one-hot)."""
    A_in = layer.norm1(X) if layer.norm_first else X
    qkv = nn.functional.linear(A_in, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias)
    L = X.shape[0]
    mask = torch.triu(torch.full((L, L), float("-inf"), dtype=X.dtype), 1) if causal else None
    _, ctx = Attention(layer.self_attn.num_heads, mask).forward(list(qkv[None].chunk(3, -1)), {})
    return float(ctx["A"].amax(-1).median())


# ---------------------------------------------------------------------------------------- the family
# make test-fast: one configuration in twelve (post- and pre-norm, each activation, with and without bias)
@pytest.mark.parametrize("cfg", slow_but(ref.CONFIGS, lambda i, c: i % 12 == 0, ids=ref.config_id))
def test_every_configuration_matches_autograd_of_the_pytorch_layer(cfg):
    assert len(ref.CONFIGS) == 48 and 8 // cfg["nhead"] > 1
    worst, sharpest = 0.0, 0.0
    for seed, sharp, xs in INSTANCES:
        layer, X, T = _layer(cfg, seed, sharp, xs)
        H_ref = R.hessian_autograd(layer, X, target=T, is_causal=cfg["causal"])
        res = layer_hessian(layer, X, target=T, is_causal=cfg["causal"])
        assert res.dense.shape == H_ref.shape == (sum(res.sizes),) * 2
        worst = max(worst, ref.relative_error(res.dense, H_ref))
        if sharp > 1:
            sharpest = _max_attention(layer, X, cfg["causal"])
    assert worst <= TOL, (ref.config_id(cfg), worst)
    assert sharpest > 0.99, sharpest  # the near-one-hot instance is one (most rows)


def test_result_layout_names_blocks_gradient_and_one_sequence_in_each_layout():
    layer, X, T = R.random_layer(nhead=2, seed=3)
    res = layer_hessian(layer, X, target=T)
    assert res.names == tuple(n for n, _ in layer.named_parameters())
    assert res.sizes == tuple(p.numel() for p in layer.parameters())
    off = res.offsets()
    a, b = "self_attn.in_proj_weight", "linear2.bias"
    assert res.blocks[(a, b)].shape == (3 * 64, 8)
    assert torch.equal(res.blocks[(a, b)], res.dense[off[a]:off[a] + 192, off[b]:off[b] + 8])
    assert torch.equal(res.dense, res.dense.T)
    with R.math_backend():
        loss = R.layer_loss(layer, X, target=T)
        g = torch.autograd.grad(loss, list(layer.parameters()))
    assert ref.relative_error(res.gradient, torch.cat([x.reshape(-1) for x in g])) <= TOL
    assert math.isclose(res.loss, float(loss), rel_tol=1e-12)
    # one sequence as (L, d), a batch of one (1, L, d), and (L, 1, d) for a sequence-first layer
    batched = layer_hessian(layer, X[None], target=T[None])
    assert torch.equal(batched.dense, res.dense) and torch.equal(batched.Z, res.Z[None])
    seq_first = R.random_layer(nhead=2, seed=3)[0]
    seq_first.self_attn.batch_first = False
    seq = layer_hessian(seq_first, X[:, None], target=T[:, None])
    assert torch.equal(seq.dense, res.dense) and torch.equal(seq.Z, res.Z[:, None])
    for chunk in (7, None):   # directions pushed through 7 at a time / a whole parameter at once
        chunked = layer_hessian(layer, X, target=T, chunk=chunk)
        assert ref.relative_error(chunked.dense, res.dense) <= 1e-14


@pytest.mark.parametrize("variant", ["gelu_tanh", "eps0", "eps_large", "no_affine", "bool_mask", "float_mask",
                                     "causal_as_mask"])
def test_further_points_of_the_family(variant):
    kw, call = {}, {}
    L = 5
    if variant == "gelu_tanh":
        kw["activation"] = nn.GELU(approximate="tanh")
    elif variant == "eps0":
        kw["layer_norm_eps"] = 0.0
    elif variant == "eps_large":
        kw["layer_norm_eps"] = 0.5
    layer, X, T = R.random_layer(nhead=2, seed=4, norm_first=variant == "no_affine", sharp=2.0, **kw)
    if variant == "no_affine":
        for n in ("norm1", "norm2"):
            ln_ = getattr(layer, n)
            ln_.weight = None
            ln_.bias = None
    if variant == "bool_mask":
        call["attn_mask"] = torch.rand(L, L, generator=torch.Generator().manual_seed(0)) > 0.6
        call["attn_mask"].fill_diagonal_(False)
    elif variant == "float_mask":
        call["attn_mask"] = torch.randn(L, L, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    elif variant == "causal_as_mask":
        call["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    H_ref = R.hessian_autograd(layer, X, target=T, **call)
    res = layer_hessian(layer, X, target=T, attn_mask=call.get("attn_mask"))
    assert ref.relative_error(res.dense, H_ref) <= TOL, variant
    if variant == "causal_as_mask":  # is_causal=True alone, or with the causal mask itself: the same mask
        for mask in (None, call["attn_mask"]):
            causal = layer_hessian(layer, X, target=T, attn_mask=mask, is_causal=True)
            assert ref.relative_error(causal.dense, H_ref) <= 1e-14


def test_other_outer_losses_through_dl_dZ_and_d2l_dZ2():
    """l(Z) = ½ vec_r(Z)ᵀ Q vec_r(Z) + cᵀ vec_r(Z) + Σ log-sum-exp of the rows of Z: given as callables and
    as tensors, against autograd of the same loss."""
    layer, X, _ = R.random_layer(nhead=4, seed=5, norm_first=True, activation="gelu")
    n = X.numel()
    g = torch.Generator().manual_seed(1)
    M = torch.randn(n, n, generator=g, dtype=torch.float64)
    Q, c = (M + M.T) / n, torch.randn(n, generator=g, dtype=torch.float64)

    def loss(Z):
        z = Z.reshape(-1)
        return 0.5 * z @ Q @ z + c @ z + torch.logsumexp(Z, dim=1).sum()

    def dl(Z):
        return (Q @ Z.reshape(-1) + c).reshape(Z.shape) + torch.softmax(Z, dim=1)

    def d2l(Z):
        S = torch.softmax(Z, dim=1)
        return Q + torch.block_diag(*[torch.diag(s) - torch.outer(s, s) for s in S])

    H_ref = R.hessian_autograd(layer, X, loss=loss)
    res = layer_hessian(layer, X, loss=(dl, d2l))
    assert ref.relative_error(res.dense, H_ref) <= TOL
    Z = res.Z
    as_tensors = layer_hessian(layer, X, loss=(dl(Z), d2l(Z)))
    assert torch.equal(as_tensors.dense, res.dense)


def test_hessian_against_central_differences_of_the_gradient():
    layer, X, T = R.random_layer(nhead=2, seed=6, activation="gelu", sharp=2.0)
    res = layer_hessian(layer, X, target=T)
    ps = list(layer.parameters())
    flat0 = torch.cat([p.detach().reshape(-1) for p in ps])

    def grad_at(flat):
        with torch.no_grad():
            o = 0
            for p in ps:
                p.copy_(flat[o:o + p.numel()].reshape(p.shape))
                o += p.numel()
        return layer_hessian(layer, X, target=T).gradient

    g = torch.Generator().manual_seed(2)
    h = 1e-5
    for _ in range(3):
        v = torch.randn(flat0.numel(), generator=g, dtype=torch.float64)
        fd = (grad_at(flat0 + h * v) - grad_at(flat0 - h * v)) / (2 * h)
        Hv = res.dense @ v
        assert ref.relative_error(Hv, fd) <= 1e-7
    grad_at(flat0)


# ------------------------------------------------------------------ second-derivative pieces vs FD and the paper
def test_softmax_second_derivative_against_central_differences_and_lemma_c1():
    """The attention op's adjoint tangent of the scores, with keys and values the identity (so T = s q and
    δA = δax), is the softmax's second derivative contracted with Ā: against central differences of the softmax's
    transposed Jacobian and the paper's Lemma C.1 blocks (theory.attention), with and without a causal mask."""
    g = torch.Generator().manual_seed(0)
    L = 5
    T = 3 * torch.randn(2, L, L, generator=g, dtype=torch.float64)
    gA = torch.randn(2, L, L, generator=g, dtype=torch.float64)
    dT = torch.randn(2, L, L, generator=g, dtype=torch.float64)
    causal = torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), 1)
    mask = torch.stack([torch.zeros(L, L, dtype=torch.float64), causal])
    op = Attention(1, mask)
    eye = torch.eye(L, dtype=torch.float64).expand(2, L, L)
    s = L ** -0.5
    _, ctx = op.forward([T / s, eye, eye], {})
    op.vjp(ctx, {}, gA, [False] * 3)
    _, t = op.jvp(ctx, {}, [(dT / s).unsqueeze(2), None, None], {}, 1)
    op.vjp_tangent(ctx, {}, t, None, {}, 1, [True, False, False])
    closed = t["ddTs"][:, :, 0] / s  # (Ā·∂²A/∂T²)[Ṫ]

    def vjp(Tm):  # T̄ = (∂A/∂T)ᵀ Ā, softmax's transposed Jacobian, by autograd
        Tm = Tm.detach().requires_grad_()
        return torch.autograd.grad(torch.softmax(Tm + mask, -1), Tm, gA)[0]

    h = 1e-5
    fd = (vjp(T + h * dT) - vjp(T - h * dT)) / (2 * h)
    assert ref.relative_error(closed, fd) <= FD_TOL
    A = ctx["A"]
    blocks = at.contract_d2A_dT2_blocks(A[0], gA[0])  # Lemma C.1, one head without mask
    assert ref.relative_error(closed[0], torch.einsum("ikl,il->ik", blocks, dT[0])) <= 1e-13
    fd1 = (torch.softmax(T + h * dT + mask, -1) - torch.softmax(T - h * dT + mask, -1)) / (2 * h)
    assert ref.relative_error(t["dA"][:, :, 0], fd1) <= FD_TOL


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.3])
def test_layernorm_second_derivative_against_central_differences(eps):
    """The LayerNorm op's second-order term (δy = u fixed, no γ): against central differences of its adjoint and,
    without ε, Theorem 3 (theory.layernorm) contracted with u."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 4, 6, generator=g, dtype=torch.float64)
    u = torch.randn(1, 4, 6, generator=g, dtype=torch.float64)
    dx = torch.randn(1, 4, 6, generator=g, dtype=torch.float64)
    op = LayerNorm(eps)

    def vjp(xm):
        _, c = op.forward([xm], {})
        return op.vjp(c, {}, u, [True])[0]

    _, ctx = op.forward([x], {})
    op.vjp(ctx, {}, u, [True])
    _, t = op.jvp(ctx, {}, [dx.unsqueeze(2)], {}, 1)
    closed = op.vjp_tangent(ctx, {}, t, None, {}, 1, [True])[0][:, :, 0]
    h = 1e-5
    fd = (vjp(x + h * dx) - vjp(x - h * dx)) / (2 * h)
    assert ref.relative_error(closed, fd) <= FD_TOL
    if eps == 0.0:   # Theorem 3 (theory.layernorm, no ε) contracted with u
        Hc = ln.contract_hessian(x[0], u.reshape(-1))
        assert ref.relative_error(closed.reshape(-1), Hc @ dx.reshape(-1)) <= 1e-12


@pytest.mark.parametrize("name", ["relu", "gelu", "gelu_tanh"])
def test_activation_derivatives_against_central_differences_and_pytorch(name):
    p = torch.linspace(-4, 4, 81, dtype=torch.float64) + 0.013
    y, d1, d2 = activation_parts(p, name)
    torch_fn = {"relu": torch.relu, "gelu": nn.functional.gelu,
                "gelu_tanh": lambda t: nn.functional.gelu(t, approximate="tanh")}[name]
    assert ref.relative_error(y, torch_fn(p)) <= 1e-15
    h = 1e-5
    f1 = lambda t: activation_parts(t, name)[1]
    assert ref.relative_error(d1, (torch_fn(p + h) - torch_fn(p - h)) / (2 * h)) <= FD_TOL
    if name == "relu":
        assert d2 is None
    else:
        assert ref.relative_error(d2, (f1(p + h) - f1(p - h)) / (2 * h)) <= FD_TOL


# ------------------------------------------------------- the paper's and the authors' blocks as points of the family
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


def paper_index(res, d_model: int, d_ff: int) -> torch.Tensor:
    """Positions in ``res.dense`` of the theory's weights in :data:`curvature_gap.theory.block.BLOCK_PARAMS` order ("1", "2", "K",
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


# ---------------------------------------------------------------------- named points of the family
@pytest.mark.parametrize("shape,seed", [((5, 6, 6, 8), 0), ((4, 4, 4, 6), 1)])
def test_the_paper_block_is_the_special_case_theorem5(shape, seed):
    """One head, post-norm, ReLU, no biases, out_proj = I, γ = 1, ε = 0: the Hessian w.r.t.
    (in_proj_weight, linear1.weight, linear2.weight), permuted by paper_index, is Theorem 5's
    (theory.block.loss_hessian) w.r.t. (W_1, W_2, W_K, W_Q, W_V)."""
    inst = random_instance(*shape, seed=seed, sharpness=1.5, away_from_kinks=True)
    layer = paper_block(inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2)
    assert [n for n, _ in layer.named_parameters()] == ["self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                                        "linear1.weight", "linear2.weight", "norm1.weight",
                                                        "norm2.weight"]
    with torch.no_grad():
        Z_nn = layer(inst.X)
    res = layer_hessian(layer, inst.X, target=inst.Target)
    from curvature_gap.exact.forward import block_output
    Z_th = block_output(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2)
    assert ref.relative_error(res.Z, Z_th) <= 1e-13 and ref.relative_error(Z_nn, Z_th) <= 1e-13
    idx = paper_index(res, inst.d_V, inst.d_ff)
    assert sorted(idx.tolist()) == sorted(set(idx.tolist()))
    H_th = bk.assemble(bk.loss_hessian(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2, inst.Target))
    assert ref.relative_error(res.dense[idx][:, idx], H_th) <= TOL
    # a wrong orientation (W instead of Wᵀ) would not match
    assert ref.relative_error(res.dense[:idx.numel(), :idx.numel()], H_th) > 1e-3


def test_the_authors_block():
    layer = authors_block(8, 12)
    names = [n for n, _ in layer.named_parameters()]
    assert "linear1.bias" not in names and "linear2.bias" not in names
    assert {"self_attn.in_proj_bias", "self_attn.out_proj.bias", "norm1.bias", "norm2.bias"} <= set(names)
    assert layer.self_attn.num_heads == 1 and not layer.norm_first and layer.norm1.eps == 1e-5
    assert layer.activation is nn.functional.gelu
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in layer.named_parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    X, T = (torch.randn(6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    H_ref = R.hessian_autograd(layer, X, target=T)
    res = layer_hessian(layer, X, target=T)
    assert res.names == tuple(names)
    assert ref.relative_error(res.dense, H_ref) <= TOL


# ------------------------------------------------------------------------------ what is refused
def _raises(match, layer, X, **kw):
    with pytest.raises(ValueError, match=match):
        layer_hessian(layer, X, **kw)


def test_configurations_outside_the_family_raise_a_clear_error():
    layer, X, T = R.random_layer(nhead=2, seed=0)
    d = 8
    train = nn.TransformerEncoderLayer(d, 2, 6, dropout=0.1, batch_first=True, dtype=torch.float64)
    _raises("training mode with dropout", train, X, target=T)
    layer_hessian(train.eval(), X, target=T)        # eval mode: dropout is the identity
    custom = nn.TransformerEncoderLayer(d, 2, 6, dropout=0.0, activation=lambda t: t.tanh(), batch_first=True,
                                        dtype=torch.float64)
    _raises("activation .* is not supported", custom, X, target=T)
    # a sequence-first layer reads X (L, N, d): (1, 5, d) is 5 sequences of length 1, so T (5, d) does not fit
    _raises("must have the shape of X", nn.TransformerEncoderLayer(d, 2, 6, dropout=0.0, dtype=torch.float64).eval(),
            torch.randn(1, 5, d, dtype=torch.float64), target=T)
    # PyTorch's layer reads is_causal as a hint that src_mask is causal and applies src_mask alone: refused
    _raises("is not the causal mask", layer, X, target=T, is_causal=True, attn_mask=torch.zeros(5, 5, dtype=torch.float64))
    _raises(r"\(L, L\) = \(5, 5\) shared by every sequence", layer, X, target=T,
            attn_mask=torch.zeros(4, 5, 5, dtype=torch.float64))
    full = torch.zeros(5, 5, dtype=torch.bool)
    full[2] = True
    _raises("masks every key", layer, X, target=T, attn_mask=full)
    _raises("needs target", layer, X)
    _raises("loss='huber' is not supported", layer, X, loss="huber", target=T)
    _raises("d2l_dZ2 must have shape", layer, X, loss=(T, torch.eye(3, dtype=torch.float64)))
    _raises("dtype and device", layer, X.float(), target=T)
    kv = nn.TransformerEncoderLayer(d, 2, 6, dropout=0.0, batch_first=True, dtype=torch.float64)
    kv.self_attn = nn.MultiheadAttention(d, 2, add_bias_kv=True, batch_first=True, dtype=torch.float64)
    _raises("add_bias_kv", kv, X, target=T)

    class Sub(nn.TransformerEncoderLayer):
        pass

    _raises("Sub is not supported", Sub(d, 2, 6, dropout=0.0, batch_first=True, dtype=torch.float64), X, target=T)
    rms = R.random_layer(nhead=2, seed=0)[0]
    rms.norm2 = nn.RMSNorm(d, dtype=torch.float64)
    _raises("norm2 .* is not supported", rms, X, target=T)


# ------------------------------------------------------------------------------ the autodiff traps
def test_trap_default_cpu_attention_kernel_has_no_double_backward():
    layer, X, T = R.random_layer(nhead=2, seed=0)
    err = ref.default_kernel_double_backward_error(layer, X, T)
    assert err is not None, ("PyTorch fixed it: double backward through the default CPU attention kernel now works "
                             "-- the book text (and this test, and the verify row) must change")
    assert "derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [False, True])
def test_trap_torch_func_hessian_is_wrong_through_layernorm(norm_first):
    layer, X, T = R.random_layer(nhead=2, seed=0, norm_first=norm_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        H_func = ref.func_hessian(layer, X, target=T)
    H_ref = R.hessian_autograd(layer, X, target=T)
    err, asym = ref.relative_error(H_func, H_ref), ref.asymmetry(H_func)
    assert err > 1e-6 and asym > 1e-6, (
        f"PyTorch fixed it: torch.func.hessian of the layer now agrees with reverse-over-reverse autograd "
        f"(max rel err {err:.1e}, asymmetry {asym:.1e}) -- the book text (and this test, and the verify row) must change")
    # while the closed form and reverse-over-reverse agree
    assert ref.relative_error(layer_hessian(layer, X, target=T).dense, H_ref) <= TOL


# ------------------------------------------------------------------------------ the verify rows
def test_verify_rows_one_per_configuration_and_trap(quick_rows):
    """The rows of ``checks.encoder_layer.run(Inputs(quick=True))``, as ``verify --quick`` (quick_rows) computed them."""
    from curvature_gap.checks import encoder_layer as rows_mod
    from curvature_gap.row import ROW_SCHEMA

    import jsonschema

    rows = [r for r in quick_rows if r.result == rows_mod.RESULT]
    ids = [r.id for r in rows]
    # 48 configurations, the two autodiff traps, and the 4 rows of the multi-head Theorem 1 (bounds.multihead)
    assert len(rows) == 54 and len(set(ids)) == 54
    assert sum(i.startswith("encoder_layer.mh_bound") for i in ids) == 4
    assert {f"encoder_layer.{ref.config_id(c)}" for c in ref.CONFIGS} <= set(ids)
    assert all(r.as_expected and r.verdict in ("verified", "holds") for r in rows), [r.id for r in rows if not r.as_expected]
    assert max(r.rel_err for r in rows if r.kind == "formula") <= TOL
    trap = {r.id: r for r in rows}["encoder_layer.trap.func_hessian_layernorm"]
    assert trap.value > rows_mod.TRAP_TOL and trap.details["asymmetry"] > rows_mod.TRAP_TOL
    validator = jsonschema.Draft202012Validator(ROW_SCHEMA)
    assert all(not list(validator.iter_errors(r.to_json())) for r in rows)
