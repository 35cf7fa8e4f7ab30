"""The authors' ViT as their code builds it, and CUDA's bf16 autocast policy applied to it on any device: the
independent reference of ``curvature_gap.precision``'s "authors" arithmetic (importable by name:
``from authors_tree import ...``).

:func:`authors_tree` rebuilds their module tree (``src/models/vit_classification.py`` of the authors' code, written
here from its structure: ``nn.Linear``, ``nn.LayerNorm``, ``nn.GELU``, ``F.scaled_dot_product_attention``, their
module names and forward passes) holding the weights of one of our models. :class:`CudaAutocastPolicy` is a
``TorchFunctionMode`` that gives each torch function those modules call the dtype policy of
``torch.autocast("cuda", dtype=torch.bfloat16)`` under ``torch.set_float32_matmul_precision("medium")``, computed
with float32 and float64 torch ops: ``linear`` with bf16 operands in float32 and one rounding, ``layer_norm`` in
float32, ``scaled_dot_product_attention``'s math backend in float32 with TF32 products (rounded here with
``frexp``, not with the package's bit arithmetic), ``cross_entropy`` as bf16 ``log_softmax`` and float32
``nll_loss``; everything else as torch computes it (type promotion). None of it calls the package's arithmetic.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from curvature_gap.params import authors_parameter_names

BF16 = torch.bfloat16


def tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 ``t`` rounded to 11 significant bits, to nearest, ties away from zero (in float64 via frexp)."""
    m, e = torch.frexp(t.double())
    return torch.ldexp(torch.sign(m) * torch.floor(m.abs() * 2.0 ** 11 + 0.5) / 2.0 ** 11, e).float()


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


class CudaAutocastPolicy(TorchFunctionMode):
    """CUDA's bf16 autocast (torch 2.6) for the functions of the authors' model, on any device (see the module
    docstring). Each handler runs with the mode switched off, as torch runs a mode's handler."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:  # lower_precision_fp; addmm with the bias in cuBLASLt's epilogue: one rounding
            x, w, b = args[0], _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
            return F.linear(x.to(BF16).float(), w.to(BF16).float(), None if b is None else b.to(BF16).float()).to(BF16)
        if func is F.layer_norm:  # fp32 list
            x, shape = args[0], _arg(args, kwargs, 1, "normalized_shape")
            w, b = _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")
            return F.layer_norm(x.float(), shape, w.float(), b.float(), _arg(args, kwargs, 4, "eps", 1e-5))
        if func is F.scaled_dot_product_attention:  # lower_precision_fp, then the math backend in float32, TF32
            q, k, v = (a.to(BF16).float() for a in args[:3])
            s = (1.0 / math.sqrt(q.shape[-1])) ** 0.5
            attn = torch.softmax(tf32(q * s) @ tf32(k.transpose(-2, -1) * s), dim=-1)
            return (tf32(attn) @ tf32(v)).to(BF16)
        if func is F.cross_entropy:  # no list: log_softmax(dtype=logits' dtype) kept, nll_loss on the fp32 list
            logits, target = args[0], args[1]
            logp = torch.log_softmax(logits, 1, dtype=logits.dtype)
            return F.nll_loss(logp.float(), target, reduction=kwargs.get("reduction", "mean"))
        return func(*args, **kwargs)


class _PatchEmbeddings(nn.Module):
    def __init__(self, channels: int, patch: int, dim: int):
        super().__init__()
        self.patch = patch
        self.in_layer = nn.Linear(channels * patch * patch, dim)

    def forward(self, x):
        b, c, h, w = x.shape
        p = self.patch
        x = x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).contiguous()
        return self.in_layer(x.view(b, (h // p) * (w // p), c * p * p))


class _SelfAttention(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.to_query, self.to_key, self.to_value, self.out_layer = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        return self.out_layer(F.scaled_dot_product_attention(self.to_query(x), self.to_key(x), self.to_value(x)))


class _FeedForward(nn.Module):
    def __init__(self, dim: int, ff: int):
        super().__init__()
        self.in_layer, self.activation, self.out_layer = nn.Linear(dim, ff, bias=False), nn.GELU(), nn.Linear(ff, dim, bias=False)

    def forward(self, x):
        return self.out_layer(self.activation(self.in_layer(x)))


class _Block(nn.Module):
    def __init__(self, dim: int, ff: int):
        super().__init__()
        self.self_attention, self.self_attention_norm = _SelfAttention(dim), nn.LayerNorm(dim)
        self.feed_forward, self.feed_forward_norm = _FeedForward(dim, ff), nn.LayerNorm(dim)

    def forward(self, x):
        x = self.self_attention_norm(x + self.self_attention(x))
        return self.feed_forward_norm(x + self.feed_forward(x))


class AuthorsViT(nn.Module):
    """Their VisionTransformer: patch embedding, sinusoidal table (a buffer), post-norm blocks, mean, head."""

    def __init__(self, cfg):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.patch_embeddings = _PatchEmbeddings(cfg.in_channels, cfg.patch_size, cfg.d_model)
        n, d = cfg.n_tokens, cfg.d_model
        angle = torch.arange(n)[:, None] * torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
        table = torch.zeros(n, d)
        table[:, 0::2], table[:, 1::2] = angle.sin(), angle.cos()
        self.register_buffer("pe", table[None], persistent=False)
        self.transformer_blocks = nn.ModuleList(_Block(d, cfg.d_ff) for _ in range(cfg.n_blocks))
        self.out_layer = nn.Linear(d, cfg.n_classes)

    def forward(self, x):
        x = self.embeddings.patch_embeddings(x)
        x = x + self.pe[:, :x.shape[1]]
        for block in self.transformer_blocks:
            x = block(x)
        return self.out_layer(x.mean(dim=1))


def authors_tree(model: nn.Module) -> AuthorsViT:
    """Their module tree holding ``model``'s weights (one of our authors' models), in ``model``'s dtype and device,
    its table cast as ``model.to(dtype)`` casts theirs."""
    tree = AuthorsViT(model.cfg)
    ours = dict(model.named_parameters())
    tree.load_state_dict({k: ours[o].detach().T if t else ours[o].detach()
                          for k, (o, t) in authors_parameter_names(model.cfg).items()})
    p = next(model.parameters())
    return tree.to(p.device, p.dtype)
