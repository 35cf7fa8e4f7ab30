"""The paper's Vision Transformer (Table 1) and the variants a ``ModelConfig`` names, written out in full.

Shapes: images (B, C, H, W) -> patches X (B, n, p) -> tokens (B, n, d_V) -> blocks -> mean over tokens (B, d_V) ->
logits (B, classes). The default block is the theorem's (paper Eq. 1):

    Y = LN(X + A(X) X W_V),   Z = LN(Y + ReLU(Y W_1 + b_1) W_2 + b_2),
    A(X) = softmax(X W_Q W_Kᵀ Xᵀ / √d_K)   (row-wise).

The variants are those of :class:`curvature_gap.config.ModelConfig`; ``MODEL_CONFIGS["authors_mnist"]`` is the
authors' model and :func:`from_authors_state_dict` loads their checkpoints.

Weights are stored in the paper's orientation (``X @ W``), so vec_r of a parameter is its row-major flattening and
Hessian blocks map one-to-one onto the theory's formulas. Attention is written out (no fused kernel: curvlinops needs
forward-mode AD) and LayerNorm is hand-written (forward-over-reverse through the fused kernel gives wrong second
derivatives, see ``tests/hessian/test_hessian_generic.py``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from .config import MODEL_CONFIGS, ConfigError, ModelConfig, check_choice
from .params import AUTHORS_MODELS, authors_parameter_names


def _matrix(fan_in: int, fan_out: int, init: str = "normal") -> nn.Parameter:
    """A weight used as ``X @ W``: N(0, 1/fan_in) (``"normal"``) or U(±1/√fan_in) (``"torch"``, nn.Linear's default)."""
    if init == "normal":
        return nn.Parameter(torch.randn(fan_in, fan_out) / math.sqrt(fan_in))
    return _bias(fan_in, (fan_in, fan_out), init)


def _bias(fan_in: int, size, init: str = "normal") -> nn.Parameter:
    """A bias of ``size``: zeros (``"normal"``) or U(±1/√fan_in) (``"torch"``: nn.Linear's default, as weights)."""
    if init == "normal":
        return nn.Parameter(torch.zeros(size))
    bound = 1 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(size).uniform_(-bound, bound))


def _linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W (+ b) for a weight stored (in, out)."""
    return x @ W if b is None else x @ W + b


def _heads(t: torch.Tensor, h: int) -> torch.Tensor:
    """(..., n, h·e) -> (..., h, n, e): split the columns into h heads."""
    return t.unflatten(-1, (h, -1)).transpose(-2, -3)


def _merge_heads(t: torch.Tensor) -> torch.Tensor:
    """(..., h, n, e) -> (..., n, h·e), the inverse of :func:`_heads`."""
    return t.transpose(-2, -3).flatten(-2)


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """The fixed positional table of Vaswani et al. (n, d): row t is (sin t ω_0, cos t ω_0, sin t ω_1, cos t ω_1, ...)
    with ω_i = 10000^(−2i/d), in the default dtype (float32), as the authors' module computes it."""
    t = torch.arange(n).unsqueeze(1)
    omega = torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(t * omega)
    table[:, 1::2] = torch.cos(t * omega)
    return table


ACTIVATIONS = {"relu": torch.relu, "gelu": nn.functional.gelu}
# The variant the theory's block (block_forward, Block.parts) computes; other fields may take any value.
THEOREM_BLOCK = {"norm": "post", "n_heads": 1, "activation": "relu", "qkv_bias": False, "out_proj": False}


# ----------------------------------------------------------------------------- the block as functions
# The theorem's block with all its intermediate values, used by Block.parts, by the exact references of the
# theory (curvature_gap.exact.forward: no biases, γ = 1, β = 0, no ε) and by the hand-written Hessian
# (curvature_gap.hessian._vit). For that variant Block.forward computes the same operations in the same
# order, so the two agree bit for bit (tested).
def scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """T = q kᵀ / √d with d = q.shape[-1]; q, k (..., n, d) -> (..., n, n)."""
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


def attention_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A = softmax_rows(q kᵀ / √d) (:func:`scaled_scores`): the package's one attention softmax, used by the
    model's forward, :func:`block_forward` and the hand-written Hessians; q, k (..., n, d) -> (..., n, n)."""
    return torch.softmax(scaled_scores(q, k), dim=-1)


def attention_scores(x: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """T = x W_Q (x W_K)ᵀ / √d_K; x (..., n, d) -> (..., n, n)."""
    return scaled_scores(x @ W_Q, x @ W_K)


def attention_matrix(x: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """A = softmax_rows(T) with T = :func:`attention_scores`; x (..., n, d) -> (..., n, n)."""
    return attention_probs(x @ W_Q, x @ W_K)


def layer_norm_parts(u: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(n̂, r) with n̂ = (u − mean u) r and r = (var u + ε)^(-1/2), row-wise over the last axis, population variance.
    With ``eps = 0`` a zero-variance row violates the paper's Assumption 2 and raises instead of returning NaN."""
    uc = u - u.mean(-1, keepdim=True)
    var = (uc * uc).mean(-1, keepdim=True)
    # a functorch wrapper's `.any()` cannot be read: only an ordinary tensor is checked
    concrete = not torch._C._functorch.is_functorch_wrapped_tensor(var)
    if eps == 0 and not torch.jit.is_tracing() and concrete and bool((var == 0).any()):
        raise ValueError("LayerNorm input has a zero-variance row (violates the paper's Assumption 2); "
                         "use eps > 0 or perturb the input")
    rstd = torch.rsqrt(var + eps)
    return uc * rstd, rstd


def _affine(n_hat, weight, bias):
    out = n_hat if weight is None else n_hat * weight
    return out if bias is None else out + bias


@dataclass
class BlockParts:
    """Intermediate values of one post-norm block for input x (..., n, d).

    u1 = x + A x W_V, y = γ₁ n̂₁ + β₁ with (n̂₁, r₁) = layer_norm_parts(u1), h = y W_1 + b_1,
    r = ReLU(h) = h ∘ mask, u2 = y + r W_2 + b_2, out = γ₂ n̂₂ + β₂."""

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

    ``ln1``/``ln2`` are the (γ, β) of the two LayerNorms (None: γ = 1, β = 0), ``eps`` their ε."""
    q, k = x @ W_Q, x @ W_K
    A = attention_probs(q, k)
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
    only for demonstrating its wrong curvature, never for reported Hessians."""

    def __init__(self, d: int, eps: float = 1e-12, fused: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps, self.fused = eps, fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        return _affine(layer_norm_parts(x, self.eps)[0], self.weight, self.bias)


class Block(nn.Module):
    """One transformer block of the variant ``cfg`` names; the default is the theorem's post-norm block.

    Parameters (stored for ``X @ W``): ``query``, ``key`` (d_V, d_K), ``value`` (d_V, d_V), optional
    ``query_bias``/``key_bias``/``value_bias``, ``out`` = W_O (d_V, d_V) and ``out_bias``; ``ln1``,
    ``ffn1`` (W_1, b_1), ``ffn2`` (W_2, b_2), ``ln2``. Absent ones are ``None``."""

    def __init__(self, cfg: ModelConfig, fused_ln: bool = False):
        super().__init__()
        d, dk, dff, init = cfg.d_model, cfg.d_k, cfg.d_ff, cfg.init
        self.cfg, self.d_k = cfg, dk
        for name, width in (("query", dk), ("key", dk), ("value", d)):  # W_Q, W_K (d_V, d_K), W_V (d_V, d_V)
            setattr(self, name, _matrix(d, width, init))
            setattr(self, f"{name}_bias", _bias(d, width, init) if cfg.qkv_bias else None)
        self.out = _matrix(d, d, init) if cfg.out_proj else None  # W_O (d_V, d_V)
        self.out_bias = _bias(d, d, init) if cfg.out_proj_bias else None
        self.ln1 = LayerNorm(d, cfg.ln_eps, fused_ln)
        self.ffn1 = nn.ParameterDict({"weight": _matrix(d, dff, init)})  # W_1 (d_V, d_ff)
        self.ffn2 = nn.ParameterDict({"weight": _matrix(dff, d, init)})  # W_2 (d_ff, d_V)
        if cfg.ffn_bias:
            self.ffn1["bias"] = _bias(d, dff, init)
            self.ffn2["bias"] = _bias(dff, d, init)
        self.ln2 = LayerNorm(d, cfg.ln_eps, fused_ln)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """The attention branch, x (..., n, d) -> (..., n, d): A x W_V (+ b_V), then W_O (+ b_O) if present.

        Rows of A sum to one, so A (x W_V + b_V) = (A x) W_V + b_V; the product is taken as (A x) W_V,
        the order of the theory's formulas and of :func:`block_forward`."""
        q = _linear(x, self.query, self.query_bias)
        k = _linear(x, self.key, self.key_bias)
        h = self.cfg.n_heads
        if h == 1:
            A = attention_probs(q, k)  # (..., n, n)
            o = _linear(A @ x, self.value, self.value_bias)
        else:  # head j: softmax(q_j k_jᵀ / √(d_K/h)) x W_V[:, columns of head j]
            q, k = _heads(q, h), _heads(k, h)  # (..., h, n, d_K/h)
            A = attention_probs(q, k)  # (..., h, n, n), scaled by √(d_K/h)
            o = _merge_heads((A @ x.unsqueeze(-3)) @ _heads(self.value, h))
            o = o if self.value_bias is None else o + self.value_bias
        return o if self.out is None else _linear(o, self.out, self.out_bias)

    def mlp(self, y: torch.Tensor, linear=_linear) -> torch.Tensor:
        """act(y W_1 + b_1) W_2 + b_2 (biases if present), each affine map ``linear(x, W, b)`` (the bf16 forward:
        ``precision.bf16_linear``)."""
        h = linear(y, self.ffn1["weight"], self.ffn1.get("bias"))
        return linear(ACTIVATIONS[self.cfg.activation](h), self.ffn2["weight"], self.ffn2.get("bias"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.norm == "post":  # paper Eq. 1
            y = self.ln1(x + self.attention(x))
            return self.ln2(y + self.mlp(y))
        y = x + self.attention(self.ln1(x))
        return y + self.mlp(self.ln2(y))

    def parts(self, x: torch.Tensor) -> BlockParts:
        """The intermediate values of the theorem's block (:func:`block_forward`); other variants raise."""
        bad = [f"{f}={getattr(self.cfg, f)!r}" for f, v in THEOREM_BLOCK.items() if getattr(self.cfg, f) != v]
        if bad:
            theorem = ", ".join(f"{f}={v!r}" for f, v in THEOREM_BLOCK.items())
            raise ConfigError(f"Block.parts computes the theorem's block ({theorem}); this block has {', '.join(bad)}")
        return block_forward(x, self.query, self.key, self.value, self.ffn1["weight"], self.ffn2["weight"],
                             self.ffn1.get("bias"), self.ffn2.get("bias"), (self.ln1.weight, self.ln1.bias),
                             (self.ln2.weight, self.ln2.bias), (self.ln1.eps, self.ln2.eps))


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p)(W/p), C p p), patches in row-major order."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // patch) * (w // patch), c * patch * patch)


def _linear_module(fan_in: int, fan_out: int, bias: bool, init: str) -> nn.Linear:
    """An ``nn.Linear`` (weight (out, in)) initialised by :func:`_matrix`, :func:`_bias` (``"torch"``: its default)."""
    lin = nn.Linear(fan_in, fan_out, bias=bias)
    if init == "normal":
        nn.init.normal_(lin.weight, std=1 / math.sqrt(fan_in))
        if bias:
            nn.init.zeros_(lin.bias)
    return lin


class ViT(nn.Module):
    """Patch embedding + positions + L blocks (+ a final LayerNorm if pre-norm) + mean pool + linear head."""

    def __init__(self, cfg: ModelConfig, fused_ln: bool = False):
        super().__init__()
        self.cfg = cfg
        self.embed = _linear_module(cfg.patch_dim, cfg.d_model, cfg.patch_bias, cfg.init)
        if cfg.pos_encoding == "learned":
            self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_tokens, cfg.d_model))
        elif cfg.pos_encoding == "sinusoidal":  # a constant: a buffer, not in the state dict
            self.register_buffer("pos", sinusoidal_positions(cfg.n_tokens, cfg.d_model), persistent=False)
        else:
            self.pos = None
        self.blocks = nn.ModuleList(Block(cfg, fused_ln) for _ in range(cfg.n_blocks))
        self.ln_f = LayerNorm(cfg.d_model, cfg.ln_eps, fused_ln) if cfg.norm == "pre" else None
        self.head = _linear_module(cfg.d_model, cfg.n_classes, cfg.head_bias, cfg.init)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(patchify(images, self.cfg.patch_size))
        return x if self.pos is None else x + self.pos

    def features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        return x if self.ln_f is None else self.ln_f(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).mean(dim=1))


def build_model(name: str, seed: int | None = 0, fused_ln: bool = False, **overrides) -> ViT:
    """The ViT of ``MODEL_CONFIGS[name]`` (``"mnist"``, ``"cifar100"``: Table 1; ``"authors_mnist"``,
    ``"authors_cifar100"``: the authors' code), with optional config overrides.

    ``seed`` fixes the initialisation (``None`` uses the global RNG). ``fused_ln=True`` swaps in
    ``torch.nn.functional.layer_norm`` (for the curvature-pitfall comparison only)."""
    check_choice("model", name, tuple(MODEL_CONFIGS))
    cfg = dataclasses.replace(MODEL_CONFIGS[name], **overrides)
    if seed is None:
        return ViT(cfg, fused_ln)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ViT(cfg, fused_ln)


def from_authors_state_dict(state_dict: dict, model: str = "mnist", dtype: torch.dtype = torch.float32,
                            **overrides) -> ViT:
    """Our ViT of the authors' variant (``MODEL_CONFIGS["authors_" + model]``) holding the weights of a state
    dict saved by the authors' code (``model.state_dict()``, their names and shapes, bf16 or float32).

    ``model`` is ``"mnist"`` or ``"cifar100"``; ``overrides`` change sizes (e.g. ``n_blocks``) but not the variant. The
    result is in ``dtype``; bf16 weights are widened exactly. Its logits are theirs up to rounding (the same arithmetic
    with the hand-written LayerNorm). A missing or unexpected key or a wrong shape raises a ConfigError naming the key.
    """
    check_choice("authors' model", model, tuple(AUTHORS_MODELS))
    base = MODEL_CONFIGS[AUTHORS_MODELS[model]]
    cfg = dataclasses.replace(base, **overrides)
    if cfg.variant() != base.variant():
        changed = [f"{f}={v!r}" for f, v in cfg.variant().items() if v != base.variant()[f]]
        raise ConfigError(f"overrides may change sizes only, not the authors' variant: {', '.join(changed)}")
    names = authors_parameter_names(cfg)
    sizes = f"d_model={cfg.d_model}, d_ff={cfg.d_ff}, n_blocks={cfg.n_blocks}, n_classes={cfg.n_classes}"
    missing = [k for k in names if k not in state_dict]
    unexpected = [k for k in state_dict if k not in names]
    if missing or unexpected:
        hint = ("strip the prefix (e.g. 'module.' or '_orig_mod.') from the keys; "
                if any(k.startswith(("module.", "_orig_mod.")) for k in unexpected) else "")
        found = "; ".join(f"{what} {keys[:4]}{' ...' if len(keys) > 4 else ''}"
                          for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys)
        raise ConfigError(f"not a state dict of the authors' {model} model ({sizes}): {found}. Fix: {hint}pass the "
                          "model it was saved from (model='mnist' or 'cifar100'), or overrides such as n_blocks=... "
                          "for another size")
    vit = build_model(base.name, seed=0, **overrides).to(dtype)  # its initial values are overwritten
    params = dict(vit.named_parameters())
    assert set(params) == {o for o, _ in names.values()}, "authors_parameter_names does not cover the model"
    with torch.no_grad():
        for key, (ours, transposed) in names.items():
            t = state_dict[key]
            if not (torch.is_tensor(t) and t.is_floating_point()):
                raise ConfigError(f"{key}: expected a floating-point tensor, got {type(t).__name__}"
                                  f"{'' if not torch.is_tensor(t) else ' of ' + str(t.dtype)}")
            want = tuple(params[ours].shape[::-1] if transposed else params[ours].shape)
            if tuple(t.shape) != want:
                raise ConfigError(f"{key}: shape {tuple(t.shape)}, expected {want} for the authors' {model} model "
                                  f"({sizes}). Fix: pass the model it was saved from, or overrides for its sizes")
            params[ours].copy_(t.T if transposed else t)
    return vit
