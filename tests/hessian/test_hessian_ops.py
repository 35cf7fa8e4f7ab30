"""Each op of curvature_gap.hessian.ops against reverse-over-reverse autograd of its own forward (<= 1e-10) and
central finite differences, in float64, by one harness (curvature_gap.exact.ops.op_errors): its adjoints, forward
tangent, adjoint tangents and parameter rows (together the Hessian-vector product of ``φ(op(x; θ))`` with a
non-linear test function φ, so both the op's own curvature and the curvature coming from downstream enter) and its
parameters' gradient. No forward mode anywhere in the references. The forwards themselves are checked against
PyTorch's modules where they have one."""
from __future__ import annotations

import math

import pytest
import torch

from curvature_gap.exact.ops import op_errors
from curvature_gap.hessian.ops.activation import Activation
from curvature_gap.hessian.ops.attention import Attention
from curvature_gap.hessian.ops.layernorm import LayerNorm
from curvature_gap.hessian.ops.linear import Linear
from curvature_gap.hessian.ops.loss import MSE, CrossEntropy, GivenLoss
from curvature_gap.hessian.ops.tokens import Add, AddParam, Embed, Pool, Prepend, Scale

pytestmark = pytest.mark.usefixtures("one_thread")
B, n, c = 2, 5, 3
TOL, JVP_FD, HVP_FD = 1e-10, 1e-7, 1e-6


def r(*shape, scale=1.0, seed=None):
    g = torch.Generator().manual_seed(hash(shape) % 2 ** 31 if seed is None else seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def _away_from_zero(t):
    return t + 0.2 * torch.sign(t)  # ReLU's kink out of the finite differences' reach


def _mask(per_sample: bool):
    causal = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)
    if not per_sample:
        return causal
    M = r(B, n, n, seed=7)
    M[1, 2, :2] = float("-inf")  # one padded pair of keys in one row
    return M


CASES = {
    "linear X W + b": (Linear("in_out"), [r(B, n, 4)], dict(weight=r(4, 6), bias=r(6))),
    "linear nn.Linear": (Linear("out_in"), [r(B, n, 4)], dict(weight=r(6, 4), bias=r(6))),
    "linear conv patches, no bias": (Linear("out_in"), [r(B, n, 12)], dict(weight=r(5, 3, 2, 2))),
    "layernorm eps 1e-5": (LayerNorm(1e-5), [r(B, n, 6)], dict(weight=1 + 0.3 * r(6), bias=r(6))),
    "layernorm eps 0": (LayerNorm(0.0), [r(B, n, 6)], dict(weight=1 + 0.3 * r(6), bias=r(6))),
    "layernorm no affine": (LayerNorm(0.3), [r(B, n, 6)], {}),
    "relu": (Activation("relu"), [_away_from_zero(r(B, n, 7))], {}),
    "gelu": (Activation("gelu"), [r(B, n, 7)], {}),
    "gelu tanh": (Activation("gelu_tanh"), [r(B, n, 7)], {}),
    "tanh": (Activation("tanh"), [r(B, n, 7)], {}),
    "attention 1 head": (Attention(1), [r(B, n, 4), r(B, n, 4), r(B, n, 3)], {}),
    "attention 2 heads": (Attention(2), [r(B, n, 4), r(B, n, 4), r(B, n, 6)], {}),
    "attention 2 heads causal": (Attention(2, _mask(False)), [r(B, n, 4, scale=2), r(B, n, 4), r(B, n, 6)], {}),
    "attention 2 heads per-sample mask": (Attention(2, _mask(True)), [r(B, n, 4), r(B, n, 4), r(B, n, 6)], {}),
    "residual": (Add(), [r(B, n, 4), r(B, n, 4)], {}),
    "layerscale": (Scale(), [r(B, n, 4)], dict(weight=r(4))),
    "positions": (AddParam(), [r(B, n, 4)], dict(value=r(n, 4))),
    "class token": (Prepend(), [r(B, n, 4)], dict(value=r(1, 1, 4))),
    "first token": (Pool(0, 1), [r(B, n, 4)], {}),
    "mean of tokens": (Pool(), [r(B, n, 4)], {}),
    "mean after the class token": (Pool(1), [r(B, n, 4)], {}),
    "embedding lookup": (Embed(), [torch.tensor([[0, 3, 1, 3, 2], [4, 4, 0, 1, 2]])], dict(weight=r(6, 4))),
    "cross-entropy": (CrossEntropy(), [r(4, 1, 5), torch.tensor([0, 3, 1, 4])], {}),
    "mse": (MSE(), [r(B, n, 4), r(B, n, 4, seed=3)], {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rules_against_reverse_over_reverse_and_finite_differences(name):
    op, xs, params = CASES[name]
    err = op_errors(op, xs, params, c=c)
    assert max(err[k] for k in ("vjp", "jvp", "hvp", "grads")) <= TOL, err
    assert err["jvp_fd"] <= JVP_FD and err["hvp_fd"] <= HVP_FD, err


def test_a_loss_given_by_its_derivatives():
    """GivenLoss applies ∂²L/∂Z² as given: the Hessian of L = Σ log-sum-exp over rows + ½ zᵀ Q z."""
    Q = r(B * n * 4, B * n * 4)
    Q = (Q + Q.T) / 10

    def dl(Z):
        return torch.softmax(Z, 1) + (Q @ Z.reshape(-1)).reshape(Z.shape)

    def d2l(Z):
        S = torch.softmax(Z, 1)
        return torch.block_diag(*[torch.diag(s) - torch.outer(s, s) for s in S]) + Q

    z = r(B, n, 4)
    op = GivenLoss(dl, d2l)
    _, ctx = op.forward([z], {})
    dz = r(c, B, n, 4)
    _, t = op.jvp(ctx, {}, [dz.movedim(0, 2)], {}, c)
    got = op.vjp_tangent(ctx, {}, t, None, {}, c, [True])[0].movedim(2, 0)

    def L(zz):
        return torch.logsumexp(zz.reshape(-1, 4), 1).sum() + 0.5 * zz.reshape(-1) @ Q @ zz.reshape(-1)

    for j in range(c):
        _, hv = torch.autograd.functional.hvp(L, z, dz[j])
        assert float((got[j] - hv).abs().max()) <= TOL * float(hv.abs().max())


def test_the_forwards_are_pytorchs():
    x = r(B, n, 6)
    ln = torch.nn.LayerNorm(6, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.3 * r(6))
        ln.bias.copy_(r(6))
    assert torch.allclose(LayerNorm(1e-5).forward([x], dict(ln.named_parameters()))[0], ln(x), rtol=0, atol=1e-14)
    q, k, v = r(B, n, 4), r(B, n, 4), r(B, n, 6)
    M = _mask(True)
    ours = Attention(2, M).forward([q, k, v], {})[0]
    split = lambda t: t.reshape(B, n, 2, -1).transpose(1, 2)  # noqa: E731
    ref = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=M[:, None])
    assert torch.allclose(ours, ref.transpose(1, 2).reshape(B, n, 6), rtol=0, atol=1e-14)
    for name, fn in (("gelu", torch.nn.GELU()), ("gelu_tanh", torch.nn.GELU("tanh")), ("tanh", torch.tanh)):
        assert torch.allclose(Activation(name).forward([x], {})[0], fn(x), rtol=0, atol=1e-15)


def test_attention_scores_bilinear_form_rules():
    """The scores as the bilinear form T = s x̃ M x̃ᵀ (M = W̃_Q W̃_Kᵀ, one head): the forward tangent of a direction
    Ṁ, the rows of M (x fixed) and ∂L/∂M, for φ(A x) with x̃ = [x, 1], against autograd in M."""
    x = r(B, n, 3)
    xt = torch.cat([x, torch.ones(B, n, 1, dtype=x.dtype)], -1)
    M = r(4, 4, scale=0.5)
    dM = r(c, 4, 4)
    op = Attention(1, bilinear=True)
    # q = x̃ M and k = x̃ give q kᵀ = x̃ M x̃ᵀ; the scale is the query width's, 1/√4
    out, ctx = op.forward([xt @ M, xt, x, x], {})
    w, w2 = r(*out.shape, seed=11), r(*out.shape, seed=12)
    op.vjp(ctx, {}, w + w2 * out, [False] * 3)
    dax, t = op.jvp(ctx, {}, [None, None, None], {"scores": dM}, c)
    rows = op.rows(ctx, {}, t, w2.unsqueeze(2) * dax, {"scores": dM}, c, ("scores",))["scores"]
    per_sample = op.rows(ctx, {}, t, w2.unsqueeze(2) * dax, {"scores": dM}, c, ("scores",), True)["scores"]
    assert torch.allclose(per_sample.sum(0), rows, rtol=0, atol=1e-14)

    def fn(M_):
        return torch.softmax(xt @ M_ @ xt.transpose(1, 2) / 2, -1) @ x

    def phi(M_):
        y = fn(M_)
        return (w * y).sum() + 0.5 * (w2 * y * y).sum()

    for j in range(c):
        _, jv = torch.autograd.functional.jvp(fn, M, dM[j])
        _, hv = torch.autograd.functional.hvp(phi, M, dM[j])
        assert float((dax.movedim(2, 0)[j] - jv).abs().max()) <= TOL * float(jv.abs().max())
        assert float((rows[j] - hv).abs().max()) <= TOL * float(hv.abs().max())
    g = torch.autograd.functional.vjp(phi, M)[1]
    assert torch.allclose(op.grads(ctx, {}, ("scores",))["scores"], g, rtol=0, atol=1e-12 * float(g.abs().max()))


def test_per_sample_rows_sum_to_the_rows():
    """The rows per sample (the ViT mixes the embedding's columns from them) sum to the rows."""
    for name in ("linear X W + b", "linear nn.Linear", "layernorm eps 1e-5", "positions", "layerscale"):
        op, xs, params = CASES[name]
        y, ctx = op.forward(xs, params)
        op.vjp(ctx, params, r(*y.shape), [True] * len(xs))
        dp = {s: r(c, *p.shape) for s, p in params.items()}
        _, t = op.jvp(ctx, params, [r(c, *x.shape).movedim(0, 2) for x in xs], dp, c)
        dd = r(c, *y.shape).movedim(0, 2)
        rows = op.rows(ctx, params, t, dd, dp, c, tuple(params))
        per = op.rows(ctx, params, t, dd, dp, c, tuple(params), True)
        for s in params:
            assert torch.allclose(per[s].sum(0), rows[s], rtol=0, atol=1e-13), (name, s)


def test_a_wrong_rule_fails():
    """The harness can fail: LayerNorm's adjoint tangent without its n̂̇ s term, and a GELU with ReLU's zero
    curvature, are caught."""

    class NoS(LayerNorm):
        def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
            return super().vjp_tangent(dict(ctx, s=ctx["s"] * 0), p, t, dd_y, dp, c, need)

    class FlatGELU(Activation):
        def forward(self, xs, p):
            y, ctx = super().forward(xs, p)
            return y, dict(ctx, a2=None)

    op, xs, params = CASES["layernorm eps 1e-5"]
    assert op_errors(NoS(1e-5), xs, params)["hvp"] > 1e-3
    assert op_errors(FlatGELU("gelu"), CASES["gelu"][1], {})["hvp"] > 1e-3
    assert math.isfinite(op_errors(op, xs, params)["hvp"])
