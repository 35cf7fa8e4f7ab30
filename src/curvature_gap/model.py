"""The paper's post-norm, single-head Vision Transformer (Table 1), written out in full.

Shapes: images (B, C, H, W) -> patches X (B, n, p) -> tokens (B, n, d_V) -> blocks -> mean over
tokens (B, d_V) -> logits (B, classes). Each block computes

    Y = LN(X + A(X) X W_V),   Z = LN(Y + ReLU(Y W_1 + b_1) W_2 + b_2),
    A(X) = softmax(X W_Q W_Kᵀ Xᵀ / √d_K)   (row-wise).

Weights are stored in the paper's orientation (``X @ W``), so vec_r of a parameter is its
row-major flattening and Hessian blocks map one-to-one onto the theory's formulas.
Attention is written out (no fused kernel: curvlinops needs forward-mode AD) and LayerNorm is
hand-written (the fused kernel gives wrong second derivatives, see ``tests/test_curvature.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .config import MODEL_CONFIGS, ModelConfig, check_choice, MODELS
import dataclasses


def _matrix(fan_in: int, fan_out: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(fan_in, fan_out) / math.sqrt(fan_in))


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
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = (xc * xc).mean(-1, keepdim=True)
        if self.eps == 0 and not torch.jit.is_tracing() and _concrete(var) and bool((var == 0).any()):
            raise ValueError(
                "LayerNorm input has a zero-variance row (violates the paper's Assumption 2); "
                "use eps > 0 or perturb the input"
            )
        return xc / torch.sqrt(var + self.eps) * self.weight + self.bias


def _concrete(t: torch.Tensor) -> bool:
    """True for an ordinary tensor (not a functorch wrapper, where `.any()` cannot be read)."""
    try:
        return not torch._C._functorch.is_functorch_wrapped_tensor(t)
    except AttributeError:  # pragma: no cover
        return True


class Block(nn.Module):
    """One post-norm transformer block (paper Eq. "transformer")."""

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

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """A(X) = softmax(X W_Q W_Kᵀ Xᵀ / √d_K), shape (B, n, n)."""
        t = (x @ self.query) @ (x @ self.key).transpose(-1, -2) / math.sqrt(self.d_k)
        return torch.softmax(t, dim=-1)

    def ffn(self, y: torch.Tensor) -> torch.Tensor:
        h = y @ self.ffn1["weight"]
        if "bias" in self.ffn1:
            h = h + self.ffn1["bias"]
        out = torch.relu(h) @ self.ffn2["weight"]
        if "bias" in self.ffn2:
            out = out + self.ffn2["bias"]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x + self.attention(x) @ x @ self.value)
        return self.ln2(y + self.ffn(y))


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
