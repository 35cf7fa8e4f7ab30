"""precision: the authors' bf16 arithmetic (emulated bf16 GEMM on the CPU, the LayerNorm γ freeze) and the
protocol names; the Fig. 12 sums that depend on it are tested in experiments/test_experiments_running_mean.py."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from cases import TINY_MODEL, mnist_datasets
from curvature_gap import precision
from curvature_gap.config import ConfigError, recipe_for
from curvature_gap.model import build_model
from curvature_gap.train import load_model, train

_BF16_EPS = 2.0 ** -8  # bf16 spacing relative to a number's power of two: one ulp is at most this, relatively


def _bf16(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(torch.bfloat16)


@pytest.mark.parametrize("op", ["mm", "bmm", "addmm", "baddbmm"])
def test_an_emulated_bf16_product_is_the_float32_product_rounded_once(op):
    """Each product of bf16 operands is exact in float32, so the emulation is the float32 GEMM of the same operands
    rounded once to bf16; it agrees with PyTorch's own bf16 kernel (float32 accumulation, one rounding) to one
    ulp, and with the float64 product to one ulp plus the float32 sums' rounding."""
    a, b = (_bf16(6, 40, 30, seed=1), _bf16(6, 30, 20, seed=2)) if "bmm" in op else (_bf16(40, 30, seed=1), _bf16(30, 20, seed=2))
    c = _bf16(*(a.shape[:-1] + b.shape[-1:]), seed=3)
    call = {"mm": lambda: torch.mm(a, b), "bmm": lambda: torch.bmm(a, b),
            "addmm": lambda: torch.addmm(c, a, b), "baddbmm": lambda: torch.baddbmm(c, a, b)}[op]
    native = call()
    with precision.EmulatedBF16Gemm():
        emulated = call()
    assert emulated.dtype == native.dtype == torch.bfloat16
    wide = {"mm": lambda: a.double() @ b.double(), "bmm": lambda: a.double() @ b.double(),
            "addmm": lambda: c.double() + a.double() @ b.double(),
            "baddbmm": lambda: c.double() + a.double() @ b.double()}[op]()
    scale = wide.abs().clamp_min(1.0)
    assert float(((emulated.double() - wide).abs() / scale).max()) <= _BF16_EPS
    assert float(((emulated.double() - native.double()).abs() / scale).max()) <= 2 * _BF16_EPS
    assert torch.equal(emulated, wide.float().to(torch.bfloat16)) or \
        float(((emulated.double() - wide.float().to(torch.bfloat16).double()).abs() / scale).max()) <= _BF16_EPS


def test_the_emulation_covers_the_backward_pass_and_leaves_float32_alone():
    x = _bf16(8, 5, seed=4).requires_grad_()
    w = _bf16(5, 3, seed=5).requires_grad_()
    seen = []

    class Spy(precision.EmulatedBF16Gemm):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return super().__torch_dispatch__(func, types, args, kwargs)

    with Spy():
        (x @ w).sum().backward()
    assert sum("mm" in f for f in seen) == 3, seen  # forward, and both operands' gradients
    assert x.grad.dtype == w.grad.dtype == torch.bfloat16
    f = torch.randn(4, 4, dtype=torch.float32)
    with precision.EmulatedBF16Gemm():
        assert torch.equal(f @ f, torch.mm(f, f))


def test_the_arithmetics_name_their_precisions_and_bad_names_are_clear_errors():
    assert precision.ARITHMETICS == ("authors", "exact")
    assert (precision.precision_of("authors"), precision.precision_of("exact")) == ("bf16", "float32")
    with pytest.raises(ConfigError, match="arithmetic must be one of authors, exact"):
        precision.precision_of("fp8")
    with pytest.raises(ConfigError, match="precision must be float32 or bf16"):
        precision.autocast_for("fp16", torch.device("cpu"))
    assert precision.gemm_for("bf16", torch.device("cpu")) is precision.EmulatedBF16Gemm
    assert precision.gemm_for("float32", torch.device("cpu"))().__class__.__name__ == "nullcontext"


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
