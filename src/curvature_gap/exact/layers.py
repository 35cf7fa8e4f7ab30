"""Autograd references for :func:`curvature_gap.layer_hessian` and :func:`curvature_gap.model_hessian`: the real
modules, built from configs, differentiated twice.

The layers are those of the libraries themselves (``torch.nn.TransformerEncoderLayer``, timm's
``vision_transformer.Block``, Hugging Face's ``ViTLayer`` and ``BertLayer``), built from a configuration object only
(nothing is downloaded), every parameter drawn at random from a seed (:func:`randomize`: PyTorch and the libraries
initialise biases to 0 and LayerNorm γ to 1, which would hide their curvature terms). The reference is
reverse-over-reverse ``torch.autograd`` through the module's own ``forward`` under the MATH attention backend
(:func:`autograd_hessian`, the package's one autograd Hessian reference: :mod:`curvature_gap.exact.encoder_layer` says
why this route). Hugging Face layers are built with ``attn_implementation="sdpa"``: the ``"eager"`` one computes the
softmax in float32 even in a float64 model (:func:`eager_softmax_error` measures it).
"""
from __future__ import annotations

import importlib.util
import itertools
import math

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

__all__ = ["GRID", "grid_id", "LIBRARY", "MINIMUM", "available", "check", "randomize", "random_layer", "torch_layer",
           "timm_block", "vit_layer", "bert_layer", "BUILDERS", "timm_vit", "bert_model", "MODEL_BUILDERS",
           "model_instance", "model_output", "model_loss", "math_backend", "batched_rows", "autograd_hessian",
           "model_hessian_autograd", "additive_mask", "layer_output", "layer_loss", "hessian_autograd",
           "block_autograd", "hvp_autograd", "fd_column_error", "eager_softmax_error", "instance"]


# (kind, configuration, L): the grid the tests and the book page check, each on N = 2 sequences
GRID = (
    [("torch", dict(norm_first=nf, heads=h, bias=b), L)
     for nf, h, b, L in itertools.product((False, True), (1, 2), (True, False), (1, 5))]
    + [("timm", dict(heads=h, qkv_bias=qb, init_values=iv), L)
       for h, qb, iv, L in itertools.product((1, 2), (True, False), (None, 0.1), (1, 5))]
    + [("timm", dict(heads=2, proj_bias=False, act="relu"), 5),
       ("timm", dict(heads=2, act="gelu_tanh", scale_attn_norm=True, scale_mlp_norm=True, init_values=1e-5), 5)]
    + [("vit", dict(heads=h, qkv_bias=qb), L) for h, qb, L in itertools.product((1, 2), (True, False), (1, 5))]
    + [("vit", dict(heads=2, act=a), 5) for a in ("gelu_new", "gelu_pytorch_tanh", "relu")]
    + [("bert", dict(heads=h, act=a), L) for h, a, L in itertools.product((1, 2), ("gelu", "gelu_new"), (1, 5))]
)

# the library each kind needs (None: PyTorch itself)
LIBRARY = {"torch": None, "timm": "timm", "vit": "transformers", "bert": "transformers"}


def grid_id(kind: str, cfg: dict, L: int) -> str:
    """E.g. ``timm.h2.qkv_bias=False.init_values=0.1.L5``."""
    parts = [kind] + [f"h{v}" if k == "heads" else f"{k}={v}" for k, v in cfg.items()] + [f"L{L}"]
    return ".".join(parts)


# the oldest release of each library whose layers the adapters read (the ``layers`` extra's lower bounds)
MINIMUM = {"timm": (1, 0, 20), "transformers": (5, 0, 0)}


def available(kind: str) -> bool:
    """Whether the library of ``kind`` is installed at a release the adapters read (the ``layers`` extra:
    timm ≥ 1.0.20, transformers ≥ 5, whose ViT attention is ``q_proj/k_proj/v_proj``)."""
    import importlib.metadata as md

    lib = LIBRARY[kind]
    if lib is None:
        return True
    if importlib.util.find_spec(lib) is None:
        return False
    version = tuple(int(x) for x in md.version(lib).split("+")[0].split(".")[:3] if x.isdigit())
    return version >= MINIMUM[lib]


def check(kind: str, cfg: dict, L: int, closed_form, N: int = 2, seed: int = 0, fd: bool = False, **mask) -> dict:
    """One point of :data:`GRID`: ``closed_form`` (:func:`curvature_gap.layer_hessian`, given by the caller: the
    references do not import what they check) against :func:`hessian_autograd` through the module;
    ``{"P", "rel_err", "seconds_closed", "seconds_autograd"}``, with ``fd`` also ``"fd_err"``
    (:func:`fd_column_error`)."""
    import time

    layer, X, T = instance(kind, N, L, seed, **cfg)
    t0 = time.perf_counter()
    H_ref = hessian_autograd(layer, X, T, **mask)
    t1 = time.perf_counter()
    H = closed_form(layer, X, target=T, **mask).dense
    t2 = time.perf_counter()
    out = dict(P=H.shape[0], rel_err=float((H - H_ref).abs().max() / H_ref.abs().max()),
               seconds_closed=t2 - t1, seconds_autograd=t1 - t0)
    if fd:
        out["fd_err"] = fd_column_error(layer, X, T, H, **mask)
    return out


def randomize(layer: nn.Module, seed: int, scale: float = 1.0) -> nn.Module:
    """Every parameter of ``layer`` (or model) drawn from ``seed``: LayerNorm γ ~ 1 + 0.3 N(0, 1), biases and
    LayerNorm β ~ 0.3 N(0, 1), LayerScale γ ~ 0.5 + 0.3 N(0, 1), matrices and tensors ~ ``scale`` N(0, 1/fan_in)
    (fan_in: the entries of one slice of the leading axis). In place; returns it."""
    g = torch.Generator().manual_seed(10_007 * int(seed) + 29)
    norms = {n for n, m in layer.named_modules() if isinstance(m, nn.LayerNorm)}
    with torch.no_grad():
        for name, p in layer.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p)
            owner, _, leaf = name.rpartition(".")
            if owner in norms:
                p.copy_(1.0 + 0.3 * r if leaf == "weight" else 0.3 * r)
            elif leaf == "gamma":
                p.copy_(0.5 + 0.3 * r)
            elif p.dim() == 1:
                p.copy_(0.3 * r)
            else:
                p.copy_(scale * r / math.sqrt(p[0].numel()))
    return layer


def random_layer(d_model: int = 8, nhead: int = 2, dim_feedforward: int = 6, L: int = 5, seed: int = 0,
                 norm_first: bool = False, activation="relu", bias: bool = True, layer_norm_eps: float = 1e-5,
                 sharp: float = 1.0, x_scale: float = 1.0, dtype=torch.float64, **kw):
    """A seeded ``nn.TransformerEncoderLayer`` (dropout 0, batch_first) with every parameter random (biases
    and LayerNorm γ, β included, which PyTorch initialises to 0 and 1), and ``(X, Target)`` (L, d_model).

    ``sharp`` multiplies the Q and K rows of ``in_proj_weight`` (scores by sharp²: near-one-hot attention
    for sharp ≥ 3); ``x_scale`` multiplies X (large inputs).
    """
    g = torch.Generator().manual_seed(10_007 * int(seed) + 13)
    with torch.random.fork_rng():
        torch.manual_seed(int(seed))
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0, activation=activation,
                                           layer_norm_eps=layer_norm_eps, batch_first=True, norm_first=norm_first,
                                           bias=bias, dtype=dtype, **kw)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=dtype)
            if name.endswith("bias"):
                p.copy_(0.3 * r)
            elif name.startswith("norm"):
                p.copy_(1.0 + 0.3 * r)
            else:
                p.copy_(r / p.shape[1] ** 0.5)
        layer.self_attn.in_proj_weight[:2 * d_model] *= sharp
    X = x_scale * torch.randn(L, d_model, generator=g, dtype=dtype)
    T = torch.randn(L, d_model, generator=g, dtype=dtype)
    return layer, X, T


def torch_layer(d: int = 8, heads: int = 2, d_ff: int = 16, norm_first: bool = False, activation: str = "gelu",
                bias: bool = True, seed: int = 0, dtype=torch.float64) -> nn.TransformerEncoderLayer:
    """``nn.TransformerEncoderLayer`` (batch_first, dropout 0, eval mode), random parameters (:func:`random_layer`)."""
    layer, _, _ = random_layer(d, heads, d_ff, 1, seed=seed, norm_first=norm_first, activation=activation,
                               bias=bias, dtype=dtype)
    return layer.eval()


def _seeded(build, seed: int, dtype) -> nn.Module:
    """``build()`` under ``torch.manual_seed(seed)`` (the global RNG restored after), in ``dtype``, every parameter
    drawn by :func:`randomize`, in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        m = build()
    return randomize(m.to(dtype), seed).eval()


def timm_block(d: int = 8, heads: int = 2, mlp_ratio: float = 2.0, qkv_bias: bool = True, proj_bias: bool = True,
               init_values: float | None = None, act: str = "gelu", scale_attn_norm: bool = False,
               scale_mlp_norm: bool = False, qk_norm: bool = False, seed: int = 0, dtype=torch.float64):
    """timm's ``vision_transformer.Block`` from its arguments (dropout 0.1, drop_path 0.1, eval mode), random
    parameters; ``act``: ``gelu`` (nn.GELU), ``gelu_tanh`` (nn.GELU('tanh')), ``relu``."""
    from timm.models.vision_transformer import Block

    acts = {"gelu": nn.GELU, "relu": nn.ReLU, "gelu_tanh": lambda: nn.GELU(approximate="tanh")}
    return _seeded(lambda: Block(d, heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_bias=proj_bias,
                                 init_values=init_values, act_layer=acts[act], scale_attn_norm=scale_attn_norm,
                                 scale_mlp_norm=scale_mlp_norm, qk_norm=qk_norm, proj_drop=0.1, attn_drop=0.1,
                                 drop_path=0.1), seed, dtype)


def _hf_config(cls, d, heads, d_ff, act, attn, layers=1, **kw):
    return cls(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=d_ff,
               hidden_act=act, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, attn_implementation=attn,
               **kw)


def vit_layer(d: int = 8, heads: int = 2, d_ff: int = 16, qkv_bias: bool = True, act: str = "gelu",
              attn: str = "sdpa", seed: int = 0, dtype=torch.float64):
    """Hugging Face ``ViTLayer(ViTConfig(...))`` (dropout 0.1, eval mode), random parameters."""
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    return _seeded(lambda: ViTLayer(_hf_config(ViTConfig, d, heads, d_ff, act, attn, qkv_bias=qkv_bias)), seed, dtype)


def bert_layer(d: int = 8, heads: int = 2, d_ff: int = 16, act: str = "gelu", attn: str = "sdpa", seed: int = 0,
               dtype=torch.float64, **kw):
    """Hugging Face ``BertLayer(BertConfig(...))`` (dropout 0.1, eval mode), random parameters."""
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    return _seeded(lambda: BertLayer(_hf_config(BertConfig, d, heads, d_ff, act, attn, **kw)), seed, dtype)


BUILDERS = {"torch": torch_layer, "timm": timm_block, "vit": vit_layer, "bert": bert_layer}


def timm_vit(img: int = 8, patch: int = 4, chans: int = 1, classes: int = 5, d: int = 8, depth: int = 2,
             heads: int = 2, seed: int = 0, dtype=torch.float64, **kw):
    """timm's ``VisionTransformer`` from its arguments (``kw``: class_token, global_pool, reg_tokens, no_embed_class,
    fc_norm, pre_norm, init_values, qkv_bias, ...; every dropout rate 0.1, eval mode), random parameters."""
    from timm.models.vision_transformer import VisionTransformer

    rates = dict(drop_rate=0.1, pos_drop_rate=0.1, attn_drop_rate=0.1, proj_drop_rate=0.1, drop_path_rate=0.1)
    return _seeded(lambda: VisionTransformer(img_size=img, patch_size=patch, in_chans=chans, num_classes=classes,
                                             embed_dim=d, depth=depth, num_heads=heads, mlp_ratio=2.0,
                                             **{**rates, **kw}), seed, dtype)


def bert_model(d: int = 8, heads: int = 2, d_ff: int = 16, layers: int = 2, vocab: int = 11, positions: int = 8,
               act: str = "gelu", pooler: bool = True, attn: str = "sdpa", seed: int = 0, dtype=torch.float64, **kw):
    """Hugging Face ``BertModel(BertConfig(...))``, random parameters (dropout 0.1, eval mode; ``pooler``:
    add_pooling_layer)."""
    from transformers import BertConfig, BertModel

    cfg = _hf_config(BertConfig, d, heads, d_ff, act, attn, layers, vocab_size=vocab,
                     max_position_embeddings=positions, type_vocab_size=2, **kw)
    return _seeded(lambda: BertModel(cfg, add_pooling_layer=pooler), seed, dtype)


MODEL_BUILDERS = {"timm_vit": timm_vit, "bert": bert_model}


def model_instance(kind: str, B: int = 3, seed: int = 0, L: int = 6, **cfg) -> tuple:
    """``(model, inputs, labels, kw)``: a random model of ``kind`` (``"timm_vit"``: images (B, C, H, W), labels of
    its classes; ``"bert"``: input_ids (B, L) with padding (``kw``: attention_mask, token_type_ids), labels of
    its width for the pooler's output)."""
    model = MODEL_BUILDERS[kind](seed=seed, **cfg)
    g = torch.Generator().manual_seed(7919 * int(seed) + 11)
    if kind == "timm_vit":
        pe = model.patch_embed
        X = torch.randn(B, pe.proj.in_channels, *pe.img_size, generator=g, dtype=torch.float64)
        return model, X, torch.randint(0, model.num_classes, (B,), generator=g), {}
    V = model.config.vocab_size
    ids = torch.randint(1, V, (B, L), generator=g)
    am = torch.ones(B, L, dtype=torch.long)
    am[-1, L - 2:] = 0  # the last sequence padded
    ids[-1, L - 2:] = model.config.pad_token_id
    tt = torch.randint(0, 2, (B, L), generator=g)
    labels = torch.randint(0, model.config.hidden_size, (B,), generator=g)
    return model, ids, labels, dict(attention_mask=am, token_type_ids=tt)


def model_output(model, inputs, output: str | None = None, **kw) -> torch.Tensor:
    """The module's own forward: timm's logits; BERT's ``output`` (default: the pooler's if present)."""
    out = model(inputs, **kw)
    if isinstance(out, torch.Tensor):
        return out
    name = output or ("pooler_output" if out.pooler_output is not None else "last_hidden_state")
    return getattr(out, name)


def model_loss(model, inputs, loss: str, target, output: str | None = None, **kw) -> torch.Tensor:
    """``cross_entropy(output, labels)`` or ``mean((output − target)²)`` through the module."""
    Z = model_output(model, inputs, output, **kw)
    return nn.functional.cross_entropy(Z, target) if loss == "cross_entropy" else (Z - target).pow(2).mean()


def math_backend():
    """The MATH attention backend (the one whose backward PyTorch can differentiate again)."""
    return sdpa_kernel(SDPBackend.MATH)


def batched_rows(g: torch.Tensor, params: list, chunk: int | None = None) -> list[torch.Tensor]:
    """The second backward of the flat gradient ``g`` (built with ``create_graph=True``) along its unit vectors,
    ``chunk`` of them per ``torch.autograd.grad(..., is_grads_batched=True)`` call (all at once by default), into
    each of ``params``: one (g.numel(), numel) tensor per parameter. MATH attention backend."""
    n = g.numel()
    step = n if chunk is None else chunk
    parts = [[] for _ in params]
    with math_backend():
        for c0 in range(0, n, step):
            E = torch.eye(n, dtype=g.dtype, device=g.device)[c0:c0 + step]
            for part, h in zip(parts, torch.autograd.grad(g, params, E, retain_graph=True, is_grads_batched=True)):
                part.append(h.reshape(E.shape[0], -1))
    return [torch.cat(part, 0) for part in parts]


def autograd_hessian(loss_fn, params: list, chunk: int | None = None) -> torch.Tensor:
    """Reverse-over-reverse Hessian (P, P) of the scalar ``loss_fn()`` w.r.t. ``params`` (in that order, each
    flattened): the gradient with ``create_graph=True``, then :func:`batched_rows` along the unit vectors,
    ``chunk`` of them per call (all at once by default). MATH attention backend."""
    with math_backend():
        g = torch.autograd.grad(loss_fn(), params, create_graph=True)
    return torch.cat(batched_rows(torch.cat([x.reshape(-1) for x in g]), params, chunk), 1)


def model_hessian_autograd(model, inputs, loss: str, target, output: str | None = None, chunk: int | None = None,
                           **kw) -> torch.Tensor:
    """Reverse-over-reverse dense Hessian (P, P) through the module, ``named_parameters()`` order, MATH backend."""
    return autograd_hessian(lambda: model_loss(model, inputs, loss, target, output, **kw), list(model.parameters()),
                            chunk)


def instance(kind: str, N: int = 2, L: int = 5, seed: int = 0, **cfg):
    """``(layer, X, Target)``: a random layer of ``kind`` (a key of :data:`BUILDERS`) and X, Target (N, L, d)."""
    layer = BUILDERS[kind](seed=seed, **cfg)
    d = cfg.get("d", 8)
    g = torch.Generator().manual_seed(7919 * int(seed) + 3)
    X = torch.randn(N, L, d, generator=g, dtype=torch.float64)
    T = torch.randn(N, L, d, generator=g, dtype=torch.float64)
    return layer, X, T


def additive_mask(N: int, L: int, attn_mask=None, key_padding_mask=None, is_causal: bool = False,
                  ref: torch.Tensor | None = None) -> torch.Tensor | None:
    """The masks as one float (N, L, L) mask added to the scores, in ``nn.MultiheadAttention``'s conventions
    (``attn_mask`` (L, L) or (N, L, L), bool True where a query may not attend, or float; ``key_padding_mask``
    (N, L) True at padding; ``is_causal``); None without any. Written here, apart from the engine's
    :func:`curvature_gap.hessian.layers.attention_mask`, so that the reference does not borrow what it checks."""
    if attn_mask is None and key_padding_mask is None and not is_causal:
        return None
    dtype = torch.float64 if ref is None else ref.dtype
    M = torch.zeros(N, L, L, dtype=dtype)
    if attn_mask is not None:
        M = M + (torch.zeros(attn_mask.shape, dtype=dtype).masked_fill(attn_mask, float("-inf"))
                 if attn_mask.dtype == torch.bool else attn_mask.to(dtype))
    if key_padding_mask is not None:
        M = M.masked_fill(key_padding_mask[:, None, :], float("-inf"))
    if is_causal:
        M = M.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return M


def layer_output(layer: nn.Module, X: torch.Tensor, attn_mask=None, key_padding_mask=None,
                 is_causal: bool = False) -> torch.Tensor:
    """The module's own forward on X (L, d) or (N, L, d) (batch-first), the masks of :func:`additive_mask` handed
    over in the module's convention (a float additive mask: ``src_mask`` (N·h, L, L) for PyTorch, ``attn_mask``
    (N, 1, L, L) for timm, ``attention_mask`` (N, 1, L, L) for Hugging Face)."""
    Xb = X[None] if X.dim() == 2 else X
    N, L, _ = Xb.shape
    M = additive_mask(N, L, attn_mask, key_padding_mask, is_causal, Xb)
    if isinstance(layer, nn.TransformerEncoderLayer):
        h = layer.self_attn.num_heads
        src = None if M is None else M.repeat_interleave(h, dim=0)
        Z = layer(Xb if layer.self_attn.batch_first else Xb.transpose(0, 1), src_mask=src)
        Z = Z if layer.self_attn.batch_first else Z.transpose(0, 1)
    elif type(layer).__module__.startswith("timm."):
        Z = layer(Xb, attn_mask=None if M is None else M[:, None])
    else:
        Z = layer(Xb, attention_mask=None if M is None else M[:, None])
    Z = Z[0] if isinstance(Z, tuple) else Z
    return Z[0] if X.dim() == 2 else Z


def layer_loss(layer, X, target=None, loss=None, **mask) -> torch.Tensor:
    """``mean((layer(X) − target)²)`` or ``loss(Z)`` of the stacked output rows Z (N L, d)."""
    Z = layer_output(layer, X, **mask)
    if loss is not None:
        return loss(Z.reshape(-1, Z.shape[-1]))
    return (Z - target).pow(2).mean()


def hessian_autograd(layer, X, target=None, chunk: int | None = None, **kw) -> torch.Tensor:
    """Reverse-over-reverse dense Hessian (P, P) through the module, ``named_parameters()`` order, MATH backend."""
    return autograd_hessian(lambda: layer_loss(layer, X, target, **kw), list(layer.parameters()), chunk)


def _grad(layer, X, target, **kw):
    named = dict(layer.named_parameters())
    with math_backend():
        g = torch.autograd.grad(layer_loss(layer, X, target, **kw), list(named.values()), create_graph=True)
    return named, dict(zip(named, g))


def block_autograd(layer, X, target, pairs, chunk: int | None = None, **kw) -> dict:
    """The blocks ``{(a, b): H[a, b]}`` by reverse-over-reverse autograd *block by block*: one gradient with
    ``create_graph=True``; each pair taken from the side of the smaller parameter r, and for each such r one batched
    second backward of its gradient along its unit vectors (``chunk`` per call) into every parameter it is paired
    with."""
    named, g = _grad(layer, X, target, **kw)
    by_row: dict = {}
    for a, b in pairs:
        r, c = (a, b) if named[a].numel() <= named[b].numel() else (b, a)
        by_row.setdefault(r, {})[c] = None  # an ordered set
    got = {}
    for r, cs in by_row.items():
        got.update(zip([(r, c) for c in cs], batched_rows(g[r].reshape(-1), [named[c] for c in cs], chunk)))
    return {(a, b): got[(a, b)] if (a, b) in got else got[(b, a)].T for a, b in pairs}


def hvp_autograd(layer, X, target, v: dict, **kw) -> dict:
    """``H v`` by one double backward through the module: ``{name: (H v)[name]}``."""
    named, g = _grad(layer, X, target, **kw)
    names = [n for n in named if n in v]
    with math_backend():
        hv = torch.autograd.grad([g[n] for n in names], list(named.values()), [v[n] for n in names],
                                 materialize_grads=True)
    return dict(zip(named, hv))


def fd_column_error(layer, X, target, H: torch.Tensor, h: float = 1e-5, loss_fn=None, **mask) -> float:
    """Central differences of the module's *first* derivatives against Hessian columns, for the middle entry
    of every parameter: ``max_j max|H e_j − (∇l(θ + h e_j) − ∇l(θ − h e_j)) / 2h| / max|H|`` with ∇l the
    module's first-order autograd (no double backward: independent of :func:`hessian_autograd`); ``H`` (P, P)
    in ``named_parameters()`` order; ``l`` is :func:`layer_loss` of ``X``, ``target`` and the masks, or
    ``loss_fn()`` (a whole model's loss, :func:`model_loss`). The parameters are restored. Computed on one thread:
    the error is mostly the gradients' rounding amplified by 1/h, which the thread count changes."""
    loss_fn = loss_fn or (lambda: layer_loss(layer, X, target, **mask))
    params = dict(layer.named_parameters())

    def grad():
        with math_backend():
            g = torch.autograd.grad(loss_fn(), list(params.values()))
        return torch.cat([x.reshape(-1) for x in g])

    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        worst, o = 0.0, 0
        for p in params.values():
            j = p.numel() // 2
            old = float(p.detach().view(-1)[j])
            gs = []
            for x in (old + h, old - h):
                with torch.no_grad():
                    p.view(-1)[j] = x
                gs.append(grad())
            with torch.no_grad():
                p.view(-1)[j] = old
            worst = max(worst, float((H[:, o + j] - (gs[0] - gs[1]) / (2 * h)).abs().max() / H.abs().max()))
            o += p.numel()
        return worst
    finally:
        torch.set_num_threads(n_threads)


def eager_softmax_error(d: int = 8, heads: int = 2, L: int = 5, seed: int = 0) -> float:
    """``max|Z_eager − Z_sdpa| / max|Z_sdpa|`` of one float64 ``ViTLayer``: Hugging Face's eager attention computes the
    softmax in float32 (``softmax(..., dtype=torch.float32)``), so it agrees with the exact layer to float32 rounding
    only."""
    eager = vit_layer(d, heads, attn="eager", seed=seed)
    sdpa = vit_layer(d, heads, attn="sdpa", seed=seed)
    X = torch.randn(1, L, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    with torch.no_grad(), math_backend():
        Ze, Zs = eager(X), sdpa(X)
    return float((Ze - Zs).abs().max() / Zs.abs().max())
