"""precision: the authors' bf16 arithmetic, op by op (its bf16 and TF32 GEMMs, the SDPA math backend, the bf16
cross-entropy, the policy table), the protocol names and the LayerNorm γ freeze; the whole forward against an
independent emulation of CUDA's autocast is tests/test_autocast_policy.py, the Fig. 12 sums that depend on it
experiments/test_experiments_running_mean.py."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from authors_tree import tf32
from cases import TINY_MODEL, mnist_datasets
from curvature_gap import precision
from curvature_gap.config import ConfigError, recipe_for
from curvature_gap.model import build_model
from curvature_gap.train import load_model, train

BF16 = torch.bfloat16
_BF16_EPS = 2.0 ** -8  # bf16 spacing relative to a number's power of two: one ulp is at most this, relatively


def _bf16(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(BF16)


def test_tf32_rounding_is_to_nearest_ties_away_from_zero():
    """Against frexp arithmetic in float64 (tests/authors_tree.py), on random values of every scale and on exact
    ties (one half of the last kept bit), where to nearest and ties away decide."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-60, 60, (20000,), generator=g).float())
    kept = torch.randint(1 << 10, 1 << 11, (2000,), generator=g).double() / 2 ** 11
    ties = ((kept + 2.0 ** -12) * torch.sign(torch.randn(2000, generator=g))).float()
    for t in (x, ties):
        assert torch.equal(precision.round_to_tf32(t), tf32(t))
    assert torch.equal(precision.round_to_tf32(ties).abs(), ties.abs() + torch.ldexp(torch.ones_like(ties), torch.frexp(ties)[1] - 12))
    for v in (1.0, -3.0, 2.0 ** -100, 0.0):
        assert precision.round_to_tf32(torch.tensor([v])).item() == v


def _dispatch(fn):
    """``fn()`` with every bf16 mm/addmm computed in float32 on the same operands, rounded once (addmm: the
    product plus the bias, then the rounding)."""
    from test_autocast_policy import DispatchGemm

    with DispatchGemm():
        return fn()


@pytest.mark.parametrize("shape, bias, dtype", [((40, 30), True, BF16), ((6, 7, 30), True, torch.float32),
                                               ((6, 7, 30), False, BF16)])
def test_a_bf16_linear_is_one_rounding_of_float32_products(shape, bias, dtype):
    """Forward: the float32 product of the bf16 operands plus the bias, rounded once: within half an ulp (at most
    2⁻⁸ relative) of the float64 value (the bf16 products are exact; only the float32 sums round), and the same bits as torch's bf16
    linear whose GEMM is computed so. Backward: each gradient's GEMM likewise, bit for bit; a float32 input gets
    a float32 gradient (autocast's cast)."""
    x = _bf16(*shape, seed=1).to(dtype).requires_grad_()
    W = _bf16(30, 20, seed=2).requires_grad_()
    b = _bf16(20, seed=3).requires_grad_() if bias else None
    out = precision.bf16_linear(x, W, b)
    assert out.dtype == BF16 and out.shape == (*shape[:-1], 20)
    wide = x.double() @ W.double() + (b.double() if bias else 0)
    assert float(((out.double() - wide).abs() / wide.abs().clamp_min(1e-3)).max().detach()) <= _BF16_EPS * (1 + 1e-4)
    g = _bf16(*out.shape, seed=4)
    params = [x, W] + ([b] if bias else [])
    grads = torch.autograd.grad(out, params, g)
    ref = _dispatch(lambda: nn.functional.linear(x.to(BF16), W.t(), b))
    ref_grads = _dispatch(lambda: torch.autograd.grad(ref, params, g))
    assert torch.equal(out, ref) and all(torch.equal(a, r) for a, r in zip(grads, ref_grads))
    assert grads[0].dtype == dtype and all(p.grad is None for p in params)


def test_a_tf32_matmul_rounds_every_operand_forward_and_backward():
    a, b = torch.randn(4, 5, 7, dtype=torch.float64).float(), torch.randn(4, 7, 3, dtype=torch.float64).float()
    a.requires_grad_(), b.requires_grad_()
    out = precision.tf32_matmul(a, b)
    assert torch.equal(out, tf32(a) @ tf32(b)) and not torch.equal(out, a @ b)
    g = torch.randn(4, 5, 3)
    ga, gb = torch.autograd.grad(out, (a, b), g)
    assert torch.equal(ga, tf32(g) @ tf32(b).transpose(-2, -1)) and torch.equal(gb, tf32(a).transpose(-2, -1) @ tf32(g))
    # values already TF32 (bf16 ones) may skip the rounding: the same bits
    ab, bb, gbf = a.detach().to(BF16).float(), b.detach().to(BF16).float(), g.to(BF16).float()
    for x in (ab, bb):
        x.requires_grad_()
    full = torch.autograd.grad(precision.tf32_matmul(ab, bb), (ab, bb), gbf)
    skip = torch.autograd.grad(precision.tf32_matmul(ab, bb, frozenset({"a", "b", "grad"})), (ab, bb), gbf)
    assert all(torch.equal(u, v) for u, v in zip(full, skip))


@pytest.mark.parametrize("d", [16, 128])
def test_sdpa_math_is_the_math_backend_in_float32_with_tf32_products(d):
    """The math backend's steps (float32 q, k, v; q and kᵀ times √(1/√E); TF32 products; softmax; bf16 out), written
    again here; within a bf16 ulp of float64 attention."""
    q, k, v = (_bf16(3, 9, d, seed=s) for s in (5, 6, 7))
    out = precision.sdpa_math(q, k, v)
    s = (1 / math.sqrt(d)) ** 0.5
    attn = torch.softmax(tf32(q.float() * s) @ tf32(k.float().transpose(-2, -1) * s), -1)
    assert out.dtype == BF16 and torch.equal(out, (tf32(attn) @ v.float()).to(BF16))
    exact = torch.softmax(q.double() @ k.double().transpose(-2, -1) / math.sqrt(d), -1) @ v.double()
    assert float((out.double() - exact).abs().max() / exact.abs().max()) < 4 * _BF16_EPS


def test_the_cross_entropy_has_bf16_log_probabilities_and_a_float32_loss():
    """CUDA autocast's cross-entropy of bf16 logits: log_softmax in bf16 (float32 inside, one rounding), nll_loss in
    float32; the gradient g − exp(out)·Σg from the bf16 log-probabilities, rounded once."""
    logits = _bf16(16, 10, seed=8).requires_grad_()
    y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(0))
    for reduction in ("mean", "sum"):
        loss = precision.autocast_cross_entropy(logits, y, reduction)
        logp = torch.log_softmax(logits.detach().float(), -1).to(BF16)
        assert loss.dtype == torch.float32
        assert torch.equal(loss, nn.functional.nll_loss(logp.float(), y, reduction=reduction))
        (grad,) = torch.autograd.grad(loss, logits)
        g = torch.zeros(16, 10).scatter_(1, y[:, None], -1.0 / (16 if reduction == "mean" else 1))
        g = g.to(BF16).float()
        assert grad.dtype == BF16 and torch.equal(grad, (g - logp.float().exp() * g.sum(-1, keepdim=True)).to(BF16))
    exact = nn.functional.cross_entropy(logits.detach().double(), y)
    assert abs(precision.autocast_cross_entropy(logits, y).item() - exact.item()) < 4 * _BF16_EPS * exact.item()


def test_the_policy_table_names_every_op_and_its_source():
    rows = precision.CUDA_BF16_AUTOCAST
    assert {r[0] for r in rows} >= {"linear", "scaled_dot_product_attention", "layer_norm", "gelu", "cross_entropy",
                                    "float32 matmul"}
    assert all(len(r) == 4 and all(isinstance(f, str) and f for f in r) for r in rows)
    assert all(v.startswith("aten/src/ATen/") for v in precision.AUTOCAST_SOURCES.values())


def test_the_arithmetics_name_their_precisions_and_bad_names_are_clear_errors():
    assert precision.ARITHMETICS == ("authors", "exact")
    assert (precision.precision_of("authors"), precision.precision_of("exact")) == ("bf16", "float32")
    with pytest.raises(ConfigError, match="unknown arithmetic 'fp8'; choose one of: authors, exact"):
        precision.precision_of("fp8")
    with pytest.raises(ConfigError, match="unknown precision .*; choose one of: float32, bf16"):
        precision.arithmetic_for("fp16")
    assert precision.arithmetic_for("bf16") == (precision.autocast_logits, precision.autocast_cross_entropy)
    assert precision.arithmetic_for("float32") == (precision.module_logits, nn.functional.cross_entropy)
    m = build_model("mnist", seed=0)
    x = torch.randn(3, 1, 28, 28)
    assert torch.equal(precision.module_logits(m, x), m(x))


@pytest.mark.parametrize("overrides", [{}, dict(norm="pre", n_heads=2, activation="relu", qkv_bias=False,
                                                out_proj=False, out_proj_bias=False, pos_encoding="learned")], ids=["authors", "variant"])
def test_the_autocast_forward_runs_every_variant_close_to_float64(overrides):
    """Any block variant (the Table-1 models train in bf16 too): bf16 logits within a few bf16 ulps of the float64
    forward of the same weights."""
    m = build_model("authors_mnist", seed=0, **TINY_MODEL, **overrides).to(BF16)
    x = torch.randn(8, 1, 28, 28)
    out = precision.autocast_logits(m, x)
    exact = build_model("authors_mnist", seed=0, **TINY_MODEL, **overrides).double()
    exact.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    ref = exact(x.double())
    assert out.dtype == BF16 and float((out.double() - ref).abs().max() / ref.abs().max()) < 16 * _BF16_EPS


def test_a_bf16_recipe_run_freezes_every_layernorm_gamma_at_one(tmp_path):
    """An AdamW step (≈ lr ≤ 1e-3) is below half a bf16 ulp just under 1.0 (2⁻⁹): in bf16 every γ stays exactly
    1.0; the same run in float32 moves every one of them."""
    ds = mnist_datasets(64, 16)
    counts = {}
    for prec in ("bf16", "float32"):
        cfg = dataclasses.replace(recipe_for("authors_mnist", "smoke"), model_overrides=tuple(sorted(TINY_MODEL.items())),
                                  batch_size=16, warmup_steps=0, precision=prec, train_subset=None, test_subset=None)
        train(cfg, tmp_path / prec, "cpu", datasets=ds, progress=False)
        model, _ = load_model(tmp_path / prec / "model.pt")
        counts[prec] = precision.frozen_at_one(model)
    at_one, total, _ = counts["bf16"]
    assert total > 0 and at_one == total
    at_one, total, dev = counts["float32"]
    assert at_one == 0 and 0 < dev < 0.1
    assert precision.frozen_at_one(build_model("authors_mnist", seed=0))[:2] == (32, 32)
