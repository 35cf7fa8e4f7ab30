"""The arithmetic of a run: the authors' bf16 or exact (float32 training, float64 sums).

The authors' code (``config.AUTHORS_CODE``) keeps weights and AdamW state in bfloat16
(``model.to(device, torch.bfloat16)``) and runs forward and loss under ``torch.autocast(bfloat16)``; its
Fig. 12 pass sums the per-batch gradients into bf16 buffers. Two consequences decide what their figures
show, and both are arithmetic, not modelling:

* an AdamW step is about ``lr`` (1e-3), below half a bf16 ulp just under 1.0 (2⁻⁹ ≈ 1.95e-3), so every
  LayerNorm γ that starts at 1.0 stays exactly 1.0 (:func:`frozen_at_one` counts them);
* a bf16 running sum of a few hundred comparable terms stops growing (each new term is below half an ulp
  of the sum), so a running mean computed from it falls like 1/k whatever the true mean does.

``ARITHMETICS`` names the two protocols a result of the authors' model can be computed in:

* ``"authors"``: their arithmetic, bf16 weights and optimiser state, bf16 autocast (on the CPU too), bf16
  gradient accumulation in the Fig. 12 pass; Hessians are taken in float32 of the bf16 weights, as their
  notebooks take them (the bf16 values widen to float32 exactly);
* ``"exact"``: float32 training, float32 Hessians, sums in float64.

:class:`EmulatedBF16Gemm` computes each bf16 matrix
product as the float32 product of the same bf16 operands rounded once to bf16: a bf16 × bf16 product is exact
in float32, and GPUs' and oneDNN's bf16 GEMMs also accumulate in float32 and round the result once, so
the two differ only in the order of the float32 sums (``tests/test_precision.py`` bounds the difference by one
bf16 ulp). It is used on every CPU, so that a CPU run does not depend on which CPU's bf16 kernel it ran on; it
is not there for speed: in a same-run comparison (``benchmarks/bf16_cpu.py``, RESULTS.md) a step of the authors'
MNIST recipe takes 24.7 ms in float32, 28.7 ms with PyTorch's own bf16 kernels and 32.7 ms emulated on a 2-core
AMD EPYC (an earlier figure of 106 ms for PyTorch's kernels, timed alone on a busy machine, did not hold).
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .codehash import not_in_code_hash
from .config import ConfigError

__all__ = ["ARITHMETICS", "PRECISION_OF", "EmulatedBF16Gemm", "autocast_for", "gemm_for", "contexts_for",
           "precision_code", "precision_of", "frozen_at_one", "BF16_HALF_ULP_BELOW_ONE"]

ARITHMETICS = ("authors", "exact")
PRECISION_OF = {"authors": "bf16", "exact": "float32"}  # arithmetic -> Recipe.precision of its training run
BF16_HALF_ULP_BELOW_ONE = 2.0 ** -9  # bf16 has 8 significand bits: the spacing just below 1.0 is 2⁻⁸

_aten = torch.ops.aten
_GEMMS = frozenset({_aten.mm.default, _aten.bmm.default, _aten.addmm.default, _aten.baddbmm.default})


def precision_of(arithmetic: str) -> str:
    """The training precision (``Recipe.precision``) of ``arithmetic``; a clear error for anything else."""
    if arithmetic not in PRECISION_OF:
        raise ConfigError(f"arithmetic must be one of {', '.join(ARITHMETICS)}, got {arithmetic!r}")
    return PRECISION_OF[arithmetic]


class EmulatedBF16Gemm(TorchDispatchMode):
    """Every bf16 ``mm``, ``bmm``, ``addmm`` and ``baddbmm`` (forward and backward, below autograd) computed in
    float32 on the same bf16 operands and rounded once to bf16; every other operation untouched."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _GEMMS and any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args):
            wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args]
            return func(*wide, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def autocast_for(precision: str, device: torch.device):
    """A factory of the forward context of a run in ``precision`` on ``device``: nothing for float32, bf16
    autocast for bf16 (the authors' ``torch.autocast(dtype=torch.bfloat16)``). Backward runs outside it."""
    check_precision(precision)
    if precision == "float32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def gemm_for(precision: str, device: torch.device):
    """A factory of the context a whole step of a run in ``precision`` runs in (forward and backward):
    :class:`EmulatedBF16Gemm` for bf16 on a CPU, else nothing (float32; CUDA's own bf16 GEMM)."""
    check_precision(precision)
    if precision == "bf16" and device.type == "cpu":
        return EmulatedBF16Gemm
    return contextlib.nullcontext


@not_in_code_hash("it only picks: no context for float32, autocast_for and gemm_for otherwise; a run's key hashes "
                  "what its precision picks (precision_code)")
def contexts_for(precision: str, device: torch.device) -> tuple:
    """(autocast, gemm) context factories of a training step in ``precision``: none for float32, else
    :func:`autocast_for` and :func:`gemm_for`."""
    check_precision(precision)
    if precision == "float32":
        return contextlib.nullcontext, contextlib.nullcontext
    return autocast_for(precision, device), gemm_for(precision, device)


def precision_code(precision: str) -> tuple:
    """The code a training step in ``precision`` runs besides the loop (roots for ``train.run_key``)."""
    check_precision(precision)
    return () if precision == "float32" else (autocast_for, gemm_for)


def check_precision(precision: str) -> None:
    if precision not in ("float32", "bf16"):
        raise ConfigError(f"precision must be float32 or bf16, got {precision!r}")


def frozen_at_one(model: torch.nn.Module) -> tuple[int, int, float]:
    """(LayerNorm γ entries exactly 1.0, all LayerNorm γ entries, max |γ − 1|) of ``model``: the bf16 freeze."""
    gammas = [m.weight.detach().float().reshape(-1) for m in model.modules()
              if getattr(m, "weight", None) is not None and "LayerNorm" in type(m).__name__]
    if not gammas:
        return 0, 0, 0.0
    g = torch.cat(gammas)
    return int((g == 1.0).sum()), int(g.numel()), float((g - 1).abs().max())
