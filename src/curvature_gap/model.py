"""The paper's post-norm, single-head Vision Transformer (Table 1), written out in full.

Shapes: images (B, C, H, W) -> patches X (B, n, p) -> tokens (B, n, d_V) -> blocks -> mean over
tokens (B, d_V) -> logits (B, classes). Each block computes

    Y = LN(X + A(X) X W_V),   Z = LN(Y + ReLU(Y W_1 + b_1) W_2 + b_2),
    A(X) = softmax(X W_Q W_Kᵀ Xᵀ / √d_K)   (row-wise).

Weights are stored in the paper's orientation (``X @ W``), so vec_r of a parameter is its
row-major flattening and Hessian blocks map one-to-one onto the theory's formulas.
Attention is written out (no fused kernel: curvlinops needs forward-mode AD) and LayerNorm is
hand-written (the fused kernel gives wrong second derivatives, see ``tests/hessian/test_hessian_generic.py``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from .config import MODEL_CONFIGS, MODELS, ModelConfig, check_choice


def _matrix(fan_in: int, fan_out: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(fan_in, fan_out) / math.sqrt(fan_in))


# ----------------------------------------------------------------------------- the block as functions
# One implementation of the forward pass, used by the nn.Module below, by the exact references of the
# theory (curvature_gap.exact.forward: no biases, γ = 1, β = 0, no ε) and by the hand-written Hessian
# (curvature_gap.hessian._vit), which needs the intermediate values.
def attention_matrix(x: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """A = softmax_rows(x W_Q (x W_K)ᵀ / √d_K); x (..., n, d) -> (..., n, n)."""
    q, k = x @ W_Q, x @ W_K
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(W_Q.shape[-1]), dim=-1)


def layer_norm_parts(u: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(n̂, r) with n̂ = (u − mean u) r and r = (var u + ε)^(-1/2), row-wise over the last axis,
    population variance. With ``eps = 0`` a zero-variance row violates the paper's Assumption 2 and
    raises instead of returning NaN."""
    uc = u - u.mean(-1, keepdim=True)
    var = (uc * uc).mean(-1, keepdim=True)
    if eps == 0 and not torch.jit.is_tracing() and _concrete(var) and bool((var == 0).any()):
        raise ValueError(
            "LayerNorm input has a zero-variance row (violates the paper's Assumption 2); "
            "use eps > 0 or perturb the input"
        )
    rstd = torch.rsqrt(var + eps)
    return uc * rstd, rstd


def _concrete(t: torch.Tensor) -> bool:
    """True for an ordinary tensor (not a functorch wrapper, where `.any()` cannot be read)."""
    return not torch._C._functorch.is_functorch_wrapped_tensor(t)


def _affine(n_hat, weight, bias):
    out = n_hat if weight is None else n_hat * weight
    return out if bias is None else out + bias


@dataclass
class BlockParts:
    """Intermediate values of one post-norm block for input x (..., n, d).

    u1 = x + A x W_V, y = γ₁ n̂₁ + β₁ with (n̂₁, r₁) = layer_norm_parts(u1), h = y W_1 + b_1,
    r = ReLU(h) = h ∘ mask, u2 = y + r W_2 + b_2, out = γ₂ n̂₂ + β₂.
    """

    q: torch.Tensor
    k: torch.Tensor
    A: torch.Tensor
    ax: torch.Tensor
    u1: torch.Tensor
    n1: torch.Tensor
    rstd1: torch.Tensor
    y: torch.Tensor
    h: torch.Tensor
    mask: torch.Tensor
    r: torch.Tensor
    u2: torch.Tensor
    n2: torch.Tensor
    rstd2: torch.Tensor
    out: torch.Tensor


def block_forward(x, W_Q, W_K, W_V, W_1, W_2, b_1=None, b_2=None, ln1=(None, None), ln2=(None, None),
                  eps=(0.0, 0.0)) -> BlockParts:
    """The post-norm block (paper Eq. "transformer") with all its intermediate values.

    ``ln1``/``ln2`` are the (γ, β) of the two LayerNorms (None: γ = 1, β = 0), ``eps`` their ε.
    """
    q, k = x @ W_Q, x @ W_K
    A = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(W_Q.shape[-1]), dim=-1)
    ax = A @ x
    u1 = x + ax @ W_V
    n1, rstd1 = layer_norm_parts(u1, eps[0])
    y = _affine(n1, *ln1)
    h = y @ W_1 if b_1 is None else y @ W_1 + b_1
    mask = (h > 0).to(h.dtype)
    r = torch.relu(h)
    u2 = y + (r @ W_2 if b_2 is None else r @ W_2 + b_2)
    n2, rstd2 = layer_norm_parts(u2, eps[1])
    return BlockParts(q, k, A, ax, u1, n1, rstd1, y, h, mask, r, u2, n2, rstd2, _affine(n2, *ln2))


# ----------------------------------------------------------------------------- modules
class LayerNorm(nn.Module):
    """Row-wise LayerNorm, (x − μ) / √(σ² + eps) · γ + β, population variance.

    With ``eps = 0`` this is exactly the paper's LayerNorm (Assumption 2 then requires σ² > 0,
    which is checked). ``fused=True`` routes through ``torch.nn.functional.layer_norm`` instead:
    only for demonstrating its wrong curvature, never for reported Hessians.
    """

    def __init__(self, d: int, eps: float = 1e-12, fused: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return _affine(layer_norm_parts(x, self.eps)[0], self.weight, self.bias)


class Block(nn.Module):
    """One post-norm transformer block (paper Eq. "transformer"); the arithmetic is :func:`block_forward`."""

    def __init__(self, cfg: ModelConfig, fused_ln: bool = False):
        super().__init__()
        d, dk, dff = cfg.d_model, cfg.d_k, cfg.d_ff
        self.d_k = dk
        self.query = _matrix(d, dk)  # W_Q (d_V, d_K)
        self.key = _matrix(d, dk)  # W_K (d_V, d_K)
        self.value = _matrix(d, d)  # W_V (d_V, d_V)
        self.ln1 = LayerNorm(d, cfg.ln_eps, fused_ln)
        self.ffn1 = nn.ParameterDict({"weight": _matrix(d, dff)})  # W_1 (d_V, d_ff)
        self.ffn2 = nn.ParameterDict({"weight": _matrix(dff, d)})  # W_2 (d_ff, d_V)
        if cfg.ffn_bias:
            self.ffn1["bias"] = nn.Parameter(torch.zeros(dff))
            self.ffn2["bias"] = nn.Parameter(torch.zeros(d))
        self.ln2 = LayerNorm(d, cfg.ln_eps, fused_ln)

    def parts(self, x: torch.Tensor) -> BlockParts:
        return block_forward(x, self.query, self.key, self.value, self.ffn1["weight"], self.ffn2["weight"],
                             self.ffn1.get("bias"), self.ffn2.get("bias"), (self.ln1.weight, self.ln1.bias),
                             (self.ln2.weight, self.ln2.bias), (self.ln1.eps, self.ln2.eps))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ln1.fused:  # the fused-LayerNorm comparison only: same arithmetic, torch's kernel for LN
            y = self.ln1(x + attention_matrix(x, self.query, self.key) @ x @ self.value)
            h = y @ self.ffn1["weight"] + (self.ffn1["bias"] if "bias" in self.ffn1 else 0)
            f = torch.relu(h) @ self.ffn2["weight"] + (self.ffn2["bias"] if "bias" in self.ffn2 else 0)
            return self.ln2(y + f)
        return self.parts(x).out


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p)(W/p), C p p), patches in row-major order."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // patch) * (w // patch), c * patch * patch)


class ViT(nn.Module):
    """Patch embedding + learned positions + L post-norm blocks + mean pool + linear head."""

    def __init__(self, cfg: ModelConfig, fused_ln: bool = False):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.patch_dim, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=1 / math.sqrt(cfg.patch_dim))
        nn.init.zeros_(self.embed.bias)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_tokens, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg, fused_ln) for _ in range(cfg.n_blocks))
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)
        nn.init.normal_(self.head.weight, std=1 / math.sqrt(cfg.d_model))
        nn.init.zeros_(self.head.bias)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        return self.embed(patchify(images, self.cfg.patch_size)) + self.pos

    def features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).mean(dim=1))


def build_model(name: str, seed: int | None = 0, fused_ln: bool = False, **overrides) -> ViT:
    """The paper's ViT for ``"mnist"`` or ``"cifar100"`` (Table 1), with optional config overrides.

    ``seed`` fixes the initialisation (``None`` uses the global RNG). ``fused_ln=True`` swaps in
    ``torch.nn.functional.layer_norm`` (for the curvature-pitfall comparison only).
    """
    check_choice("model", name, MODELS)
    cfg = dataclasses.replace(MODEL_CONFIGS[name], **overrides)
    if seed is None:
        return ViT(cfg, fused_ln)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ViT(cfg, fused_ln)


@dataclass(frozen=True)
class ParamGroup:
    """A named parameter group and its slice of the flat parameter vector."""

    name: str
    param_names: tuple[str, ...]
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


def group_of(param_name: str) -> str:
    """Stable group name of a parameter: embed, pos, block{i}.{query,...,ln2}, head."""
    parts = param_name.split(".")
    if parts[0] == "blocks":
        return f"block{parts[1]}.{parts[2]}"
    return parts[0]


def param_groups(model: nn.Module) -> list[ParamGroup]:
    """Ordered parameter groups with their slices of ``parameters_to_vector(model.parameters())``."""
    groups: list[ParamGroup] = []
    names: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    order: list[str] = []
    for pname, p in model.named_parameters():
        g = group_of(pname)
        if g not in names:
            if order and g in order:
                raise RuntimeError(f"parameter group {g} is not contiguous")
            names[g], sizes[g] = [], 0
            order.append(g)
        names[g].append(pname)
        sizes[g] += p.numel()
    start = 0
    for g in order:
        groups.append(ParamGroup(g, tuple(names[g]), start, start + sizes[g]))
        start += sizes[g]
    return groups


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
