"""The arithmetic of a run: the authors' bf16 as CUDA computes it, or exact (float32 training, float64 sums).

The authors' code (``config.AUTHORS_CODE``, torch 2.6) keeps weights and AdamW state in bfloat16, runs forward
and loss under ``torch.autocast("cuda", dtype=torch.bfloat16)`` after ``set_float32_matmul_precision("medium")``;
its Fig. 12 pass sums the per-batch gradients into bf16 buffers. Two consequences decide what their figures
show, and both are arithmetic, not modelling:

* an AdamW step is about ``lr`` (1e-3), below half a bf16 ulp just under 1.0 (2⁻⁹ ≈ 1.95e-3), so every
  LayerNorm γ that starts at 1.0 stays exactly 1.0 (:func:`frozen_at_one` counts them);
* a bf16 running sum of a few hundred comparable terms stops growing (each new term is below half an ulp
  of the sum), so a running mean computed from it falls like 1/k whatever the true mean does.

``ARITHMETICS`` names the two protocols a result of the authors' model can be computed in:

* ``"authors"``: their arithmetic, bf16 weights and optimiser state, the forward and the loss as CUDA's bf16
  autocast computes them (:func:`autocast_logits`, :func:`autocast_cross_entropy`: emulated op by op, on
  every device, from :data:`CUDA_BF16_AUTOCAST`), bf16 gradient accumulation in the Fig. 12 pass; Hessians
  are taken in float32 of the bf16 weights, as their notebooks take them (the bf16 values widen exactly);
* ``"exact"``: float32 training, float32 Hessians, sums in float64.

Emulation, not CUDA's own kernels: a bf16 GEMM is the float32 product of bf16 operands (each product is exact in
float32) summed in float32 and rounded once, which is what cuBLAS computes up to the order of the float32 sums;
a TF32 GEMM is the same with the operands first rounded to TF32's 10 fraction bits. Everything else is torch's
own op (LayerNorm, softmax, GELU, the adds) in the dtype the policy names. So a run differs from one on a GPU
only by the order of float32 sums and the last bits of float32 kernels (``exp``, ``erf``, LayerNorm's moments),
and a CPU run does not depend on which CPU's bf16 kernels it ran on (step times: ``benchmarks/bf16_cpu.json``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .codehash import not_in_code_hash
from .config import PRECISIONS, check_choice
from .model import _heads, _merge_heads, ViT, patchify

__all__ = ["ARITHMETICS", "PRECISION_OF", "CUDA_BF16_AUTOCAST", "AUTOCAST_SOURCES", "round_to_tf32",
           "tf32_matmul", "bf16_linear", "sdpa_math", "layer_norm_fp32", "autocast_logits",
           "autocast_cross_entropy", "module_logits", "arithmetic_for", "precision_code", "precision_of",
           "frozen_at_one"]

ARITHMETICS = ("authors", "exact")
PRECISION_OF = {"authors": "bf16", "exact": "float32"}  # arithmetic -> Recipe.precision of its training run

# Where the policy below is read, in github.com/pytorch/pytorch (torch 2.6, the authors' pin). The op lists were
# read at two revisions around 2.6 (before 2.6: the lists in autocast_mode.cpp; after: in autocast_mode.h, as
# the torch 2.14 headers ship them); the entries for the ops below are the same in both.
AUTOCAST_SOURCES = {
    "op lists": "aten/src/ATen/autocast_mode.h: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, "
                "AT_FORALL_FP32_SET_OPT_DTYPE, registered for CUDA in aten/src/ATen/autocast_mode.cpp "
                "(TORCH_LIBRARY_IMPL(aten, Autocast, m)); set_opt_dtype keeps a dtype the caller gave",
    "linear": "aten/src/ATen/native/Linear.cpp: linear() sends a contiguous 3-D input with a bias to "
              "_flatten_nd_linear (addmm of the flattened input), a 2-D one to addmm, one without a bias to matmul",
    "sdpa": "aten/src/ATen/native/transformers/attention.cpp: _scaled_dot_product_attention_math upcasts bf16 "
            "q, k, v to float32 (pytorch PR 128922, since 2.5), scales q and k each by sqrt(1/sqrt(E)), matmul, "
            "_safe_softmax, matmul, .to(bf16); the fused kernels take 4-D inputs only (sdp_utils_cpp.h: "
            "check_tensor_shapes), so 3-D ones run this",
    "cross entropy": "aten/src/ATen/native/Loss.cpp: cross_entropy_loss calls log_softmax(self, class_dim, "
                     "self.scalar_type()), then nll_loss_nd",
    "medium": "aten/src/ATen/Context.cpp: allowTF32CuBLAS() is float32_matmul_precision != HIGHEST, so "
              "'medium' runs cuBLAS float32 GEMMs in TF32 (as 'high'); its bf16 inner precision is oneDNN's (CPU)",
}

# The dtype policy of torch.autocast("cuda", dtype=torch.bfloat16) in torch 2.6 for each op of the authors' model
# (their src/models/vit_classification.py and src/train/vit_classification.py), and what this module computes
# for it: (op, where their model uses it, CUDA autocast's policy, the emulation here).
CUDA_BF16_AUTOCAST = (
    ("linear", "nn.Linear: patch embedding, to_query/to_key/to_value, out_layer, the FFN, the head",
     "lower_precision_fp: every floating input cast to bf16; with a bias one addmm (cuBLASLt adds it in the "
     "epilogue), so float32 accumulation + bias, rounded once; without, mm, rounded once",
     "bf16_linear: input rounded to bf16, float32 product of the bf16 operands + float32 bias, rounded once; "
     "the backward GEMMs likewise"),
    ("scaled_dot_product_attention", "SelfAttention on (batch, tokens, d): 3-D",
     "lower_precision_fp (q, k, v bf16), then the math backend: float32 inside, q and k scaled by "
     "sqrt(1/sqrt(E)) each, two float32 matmuls (TF32 under 'medium'), softmax in float32, output rounded to bf16",
     "sdpa_math with tf32_matmul"),
    ("layer_norm", "nn.LayerNorm after each residual sum",
     "fp32: input, gamma, beta cast to float32, float32 out (so the residual stream after it is float32)",
     "layer_norm_fp32: torch's layer_norm (their nn.LayerNorm's op) on the widened values"),
    ("gelu", "FeedForward's nn.GELU()", "no list: its input's dtype (bf16, computed in float32, rounded once)",
     "torch's GELU on the bf16 tensor"),
    ("add, mean", "residual sums, + positional table (a bf16 buffer), mean over tokens",
     "no list: type promotion (bf16 + bf16 -> bf16, float32 + bf16 -> float32)", "the same ops"),
    ("cross_entropy", "F.cross_entropy(logits, y)",
     "not on CUDA's lists: its composite calls log_softmax with dtype=bf16, which fp32_set_opt_dtype keeps, so "
     "bf16 log-probabilities (float32 inside, rounded once), then nll_loss on the fp32 list",
     "autocast_cross_entropy"),
    ("float32 matmul", "inside SDPA's math backend (forward and backward)",
     "torch.set_float32_matmul_precision('medium'): cuBLAS TF32, operands rounded to 10 fraction bits, "
     "float32 accumulation", "tf32_matmul: operands rounded to the nearest TF32, ties away from zero "
     "(PTX cvt.rna.tf32.f32; cuBLAS does not document its rounding: benchmarks/gpu_check.py compares)"),
)


def precision_of(arithmetic: str) -> str:
    """The training precision (``Recipe.precision``) of ``arithmetic``; a clear error for anything else."""
    check_choice("arithmetic", arithmetic, ARITHMETICS)
    return PRECISION_OF[arithmetic]


# ----------------------------------------------------------------------------- the emulated GEMMs
def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 ``t`` rounded to TF32 (8 exponent bits, 10 fraction bits), to nearest, ties away from zero: half of
    the 13 dropped bits' place added to the bit pattern's magnitude, then the 13 bits cleared."""
    return ((t.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


class _TF32Matmul(torch.autograd.Function):
    """a @ b of float32 tensors as cuBLAS computes it in TF32 mode: the operands rounded to TF32, exact products,
    float32 sums; the backward's two matmuls likewise, the incoming gradient rounded too. ``exact`` names the
    tensors (``"a"``, ``"b"``, ``"grad"``) already representable in TF32 (bf16 values, or those times a power
    of two), whose rounding would change nothing and is skipped."""

    @staticmethod
    def forward(ctx, a, b, exact):
        a = a if "a" in exact else round_to_tf32(a)
        b = b if "b" in exact else round_to_tf32(b)
        ctx.save_for_backward(a, b)
        ctx.exact_grad = "grad" in exact
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        g = g if ctx.exact_grad else round_to_tf32(g)
        return g @ b.transpose(-2, -1), a.transpose(-2, -1) @ g, None


def tf32_matmul(a: torch.Tensor, b: torch.Tensor, exact: frozenset = frozenset()) -> torch.Tensor:
    """(..., m, k) @ (..., k, n) of float32 tensors in TF32 (:class:`_TF32Matmul`), forward and backward;
    ``exact``: which of ``"a"``, ``"b"``, ``"grad"`` (the gradient of the product) are TF32 values already."""
    return _TF32Matmul.apply(a, b, exact)


class _BF16Linear(torch.autograd.Function):
    """x @ W (+ b), x (N, in), W (in, out), as autocast's bf16 GEMM: the float32 product of the bf16 operands plus
    the float32 bias, rounded once to bf16. Backward: the GEMMs of the gradient likewise (float32 products of
    bf16 values, each result rounded once to bf16), the bias gradient the float32 column sum rounded once; the
    input's gradient in its own dtype (autocast's cast of a float32 input has a float32 gradient)."""

    @staticmethod
    def forward(ctx, x, W, b):
        x32, W32 = x.to(torch.bfloat16).float(), W.to(torch.bfloat16).float()
        ctx.save_for_backward(x32, W32)
        ctx.x_dtype, ctx.bias = x.dtype, b is not None
        y = x32 @ W32
        if b is not None:
            y.add_(b.to(torch.bfloat16))  # in float32: the bf16 bias widens exactly
        return y.to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x32, W32 = ctx.saved_tensors
        g32 = g.float()
        gx = (g32 @ W32.t()).to(torch.bfloat16).to(ctx.x_dtype) if ctx.needs_input_grad[0] else None
        gW = (x32.t() @ g32).to(torch.bfloat16) if ctx.needs_input_grad[1] else None
        gb = g32.sum(0).to(torch.bfloat16) if ctx.bias and ctx.needs_input_grad[2] else None
        return gx, gW, gb


def bf16_linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W (+ b) as a bf16 GEMM under CUDA autocast, for a weight stored (in, out); x (..., in) -> bf16 (..., out):
    the input flattened to 2-D (as ``linear`` flattens a 3-D input for ``addmm``), then :class:`_BF16Linear`."""
    return _BF16Linear.apply(x.reshape(-1, x.shape[-1]), W, b).reshape(*x.shape[:-1], W.shape[-1])


def sdpa_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √E) v as ``scaled_dot_product_attention``'s math backend computes it for bf16 q, k, v
    (..., n, E) under autocast with ``'medium'`` float32 matmuls: float32 inside, q and kᵀ each scaled by
    √(1/√E) (a float32 multiplication each), both products in TF32 (:func:`tf32_matmul`), the output rounded
    to bf16. The bf16 values (v, the output's gradient, and q, k times a power of two) are TF32 values already."""
    s = math.sqrt(1.0 / math.sqrt(q.shape[-1]))
    qf, kf, vf = (t.to(torch.bfloat16).float() for t in (q, k, v))
    scaled = frozenset({"a", "b"}) if math.frexp(s)[0] == 0.5 else frozenset()
    attn = torch.softmax(tf32_matmul(qf * s, kf.transpose(-2, -1) * s, scaled), dim=-1)
    return tf32_matmul(attn, vf, frozenset({"b", "grad"})).to(torch.bfloat16)


def layer_norm_fp32(ln: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The LayerNorm ``ln`` (γ, β, ε of a :class:`~curvature_gap.model.LayerNorm`) on autocast's fp32 list: x, γ and
    β widened to float32, torch's ``layer_norm`` (the op of the authors' ``nn.LayerNorm``) in float32. Only first
    derivatives go through it (training); Hessians take the hand-written LayerNorm of the float32 model."""
    return nn.functional.layer_norm(x.float(), x.shape[-1:], ln.weight.float(), ln.bias.float(), ln.eps)


# ----------------------------------------------------------------------------- the forward and the loss
def _autocast_attention(block, x: torch.Tensor) -> torch.Tensor:
    """The attention branch of ``block`` as the authors' SelfAttention computes it under autocast: q, k and
    v = x W_V + b_V projected first (bf16 GEMMs), then attention (:func:`sdpa_math`, per head), then W_O."""
    q = bf16_linear(x, block.query, block.query_bias)
    k = bf16_linear(x, block.key, block.key_bias)
    v = bf16_linear(x, block.value, block.value_bias)
    h = block.cfg.n_heads
    o = sdpa_math(q, k, v) if h == 1 else _merge_heads(sdpa_math(_heads(q, h), _heads(k, h), _heads(v, h)))
    return o if block.out is None else bf16_linear(o, block.out, block.out_bias)


def autocast_logits(model: ViT, images: torch.Tensor) -> torch.Tensor:
    """The logits (B, classes), bf16, of ``model`` (bf16 weights) on ``images`` as CUDA's bf16 autocast computes
    them (:data:`CUDA_BF16_AUTOCAST`), on any device. The blocks in ``model.cfg``'s variant: post-norm
    ``LN(x + f(x))`` or pre-norm ``x + f(LN(x))`` with a final LayerNorm; attention in the authors' order (v
    projected before the attention, as their SelfAttention). On CUDA it needs full float32 products
    (``torch.get_float32_matmul_precision() == "highest"``, torch's default): the emulation rounds for TF32 itself."""
    if images.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        raise RuntimeError("autocast_logits emulates bf16 and TF32 products with float32 ones, which TF32 mode would "
                           "round again: call torch.set_float32_matmul_precision('highest') first")
    cfg = model.cfg
    x = bf16_linear(patchify(images, cfg.patch_size), model.embed.weight.t(), model.embed.bias)
    if model.pos is not None:
        x = x + model.pos
    for block in model.blocks:
        if cfg.norm == "post":
            y = layer_norm_fp32(block.ln1, x + _autocast_attention(block, x))
            x = layer_norm_fp32(block.ln2, y + block.mlp(y, bf16_linear))
        else:
            y = x + _autocast_attention(block, layer_norm_fp32(block.ln1, x))
            x = y + block.mlp(layer_norm_fp32(block.ln2, y), bf16_linear)
    if model.ln_f is not None:
        x = layer_norm_fp32(model.ln_f, x)
    return bf16_linear(x.mean(dim=1), model.head.weight.t(), model.head.bias)


class _BF16LogSoftmax(torch.autograd.Function):
    """log_softmax over the last axis of bf16 logits with a bf16 result, as CUDA computes it: float32 inside,
    rounded once; backward g − exp(out)·Σg from the saved bf16 output, in float32, rounded once."""

    @staticmethod
    def forward(ctx, logits):
        out = torch.log_softmax(logits.float(), dim=-1).to(torch.bfloat16)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        g = g.float()
        return (g - out.float().exp() * g.sum(-1, keepdim=True)).to(torch.bfloat16)


def autocast_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """``F.cross_entropy(logits, labels)`` of bf16 logits (B, classes) under CUDA's bf16 autocast: bf16
    log-probabilities (:class:`_BF16LogSoftmax`), then ``nll_loss`` in float32; a float32 loss."""
    return nn.functional.nll_loss(_BF16LogSoftmax.apply(logits.to(torch.bfloat16)).float(), labels,
                                  reduction=reduction)


def module_logits(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The model's own forward, in its parameters' dtype (float32 training and evaluation)."""
    return model(images)


@not_in_code_hash("it only picks: a run's key hashes what its precision picks (precision_code), and a result that "
                  "runs the picked forward records the key of a run of that precision")
def arithmetic_for(precision: str) -> tuple:
    """(logits, cross_entropy) of a step in ``precision``: the model's forward and ``F.cross_entropy`` for float32;
    :func:`autocast_logits` and :func:`autocast_cross_entropy` (the authors' CUDA arithmetic) for bf16."""
    check_choice("precision", precision, PRECISIONS)
    if precision == "float32":
        return module_logits, nn.functional.cross_entropy
    return autocast_logits, autocast_cross_entropy


def precision_code(precision: str) -> tuple:
    """The code a training step in ``precision`` runs besides the loop (roots for ``train.run_key``): what
    :func:`arithmetic_for` picks, but torch's own ``cross_entropy`` (torch's version is in every run's metrics)."""
    return tuple(f for f in arithmetic_for(precision) if f is not nn.functional.cross_entropy)


def frozen_at_one(model: torch.nn.Module) -> tuple[int, int, float]:
    """(LayerNorm γ entries exactly 1.0, all LayerNorm γ entries, max |γ − 1|) of ``model``: the bf16 freeze."""
    gammas = [m.weight.detach().float().reshape(-1) for m in model.modules()
              if getattr(m, "weight", None) is not None and "LayerNorm" in type(m).__name__]
    if not gammas:
        return 0, 0, 0.0
    g = torch.cat(gammas)
    return int((g == 1.0).sum()), int(g.numel()), float((g - 1).abs().max())
