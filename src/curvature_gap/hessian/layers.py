"""Exact loss Hessians of the Transformer layers people train, through one call: :func:`layer_hessian`.

Beyond the paper. Each supported layer class is read from the module itself as a program of the engine's op
rules (:mod:`.program`, :mod:`.ops`): PyTorch's ``nn.TransformerEncoderLayer``, timm's ViT ``Block`` and Hugging
Face's ``ViTLayer`` and ``BertLayer``, each recognised by its exact type (a subclass may change ``forward``) and
found in ``sys.modules`` (no library is imported here: a layer of timm or transformers can only exist if its
library is loaded). Their differences are settings of the same ops: fused or separate Q/K/V (a fused projection is
three linear maps on row blocks of one weight), LayerScale, pre- or post-norm, where the residuals join, the
activation, masks. The same builders give the blocks of whole models (:mod:`.models`).

:func:`layer_hessian` (the loss: one function of all outputs of a batch of sequences) returns the dense Hessian
in ``named_parameters()`` order or only the blocks asked for by name (a ViT-Tiny layer has ≈ 445k parameters: its
dense Hessian, 1.6 TB in float64, does not fit); :func:`layer_hvp` returns Hessian-vector products ``H v`` (one
pass for all parameters at once).
"""
from __future__ import annotations

import operator
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..params import offsets
from .ops.activation import Activation
from .ops.attention import Attention
from .ops.layernorm import LayerNorm
from .ops.linear import Linear
from .ops.layout import add
from .ops.loss import MSE, CrossEntropy, GivenLoss
from .ops.tokens import Add, Scale
from .program import Node, Program, State, blocks as program_blocks, dense, hvp

__all__ = ["layer_hessian", "layer_hvp", "attention_mask", "LayerHessian", "SUPPORTED", "activation_name",
           "layer_nodes", "no_dropout_in_training", "assemble", "requested_pairs", "is_class",
           "layernorm_of", "first_parameter", "program_state"]

SUPPORTED = {
    "torch.nn.TransformerEncoderLayer": (
        "post- or pre-norm (norm_first); bias on or off; any nhead; activation relu, gelu (erf) or "
        "nn.GELU('tanh'); batch_first True or False; dropout any in eval mode. Not: kdim/vdim, add_bias_kv, "
        "add_zero_attn, another norm than nn.LayerNorm, a custom activation"),
    "timm.models.vision_transformer.Block": (
        "pre-norm; qkv_bias and proj_bias on or off; any num_heads (attn_head_dim too); LayerScale (init_values) "
        "or none; scale_attn_norm / scale_mlp_norm LayerNorms; act_layer nn.GELU (erf or tanh), timm GELU / "
        "GELUTanh, nn.ReLU; norm_layer nn.LayerNorm or timm LayerNorm; drop rates any in eval mode. Not: "
        "qk_norm, gated attention, GluMlp / SwiGLU, RmsNorm, LayerNormFp32"),
    "transformers ViTLayer": (
        "pre-norm; qkv_bias on or off; any num_attention_heads; hidden_act gelu, gelu_new, gelu_pytorch_tanh, "
        "relu; dropout any in eval mode; any attn_implementation (check against autograd with 'sdpa': 'eager' "
        "rounds the softmax to float32)"),
    "transformers BertLayer": (
        "post-norm encoder layer (is_decoder=False, no cross-attention); any num_attention_heads; hidden_act as "
        "ViTLayer; dropout any in eval mode"),
}


def is_class(obj, module: str, name: str) -> bool:
    """Whether ``obj`` is exactly of the class ``module.name`` (False where that module is not loaded: module doc)."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls is not None and type(obj) is cls


# ---------------------------------------------------------------------------------------------- shared checks
def no_dropout_in_training(module: nn.Module, extra: dict | None = None) -> None:
    """Dropout (nn.Dropout p > 0, timm DropPath drop_prob > 0, attention-probability dropout) in training mode
    makes the module random: refuse it, naming every such submodule."""
    if not module.training:
        return
    bad = [f"{n}(p={m.p})" for n, m in module.named_modules() if isinstance(m, nn.Dropout) and m.p > 0]
    bad += [f"{n}(drop_prob={m.drop_prob})" for n, m in module.named_modules()
            if type(m).__name__ == "DropPath" and getattr(m, "drop_prob", 0) > 0]
    bad += [f"{k}={v}" for k, v in (extra or {}).items() if v > 0]
    if bad:
        raise ValueError(f"{type(module).__name__} is in training mode with dropout {', '.join(bad)}: it is random, "
                         "its Hessian undefined; call .eval() (or set the rates to 0)")


def layernorm_of(mod: nn.Module, where: str, d: int) -> LayerNorm:
    ok = type(mod) is nn.LayerNorm or is_class(mod, "timm.layers.norm", "LayerNorm")
    if not ok or tuple(mod.normalized_shape) != (d,):
        raise ValueError(f"{where} = {type(mod).__name__}{tuple(getattr(mod, 'normalized_shape', ()))} is not "
                         f"supported: only nn.LayerNorm (or timm's LayerNorm) over the last dimension ({d})")
    return LayerNorm(mod.eps)


def _linear(mod: nn.Module, where: str) -> Linear:
    if type(mod) not in (nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear):
        raise ValueError(f"{where} = {type(mod).__name__} is not supported: only nn.Linear")
    return Linear()


_ACTIVATIONS = {
    ("torch.nn.modules.activation", "ReLU"): "relu",
    ("timm.layers.activations", "GELU"): "gelu",
    ("timm.layers.activations", "GELUTanh"): "gelu_tanh",
    ("transformers.activations", "GELUActivation"): "gelu",
    ("transformers.activations", "NewGELUActivation"): "gelu_tanh",
    ("transformers.activations", "GELUTanh"): "gelu_tanh",
}


def activation_name(act, where: str) -> str:
    """The name (``relu``, ``gelu``, ``gelu_tanh``) of an activation module or function, else ValueError."""
    if type(act) is nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}[act.approximate]
    if act is F.relu or act is torch.relu:
        return "relu"
    if act is F.gelu:
        return "gelu"
    key = (type(act).__module__, type(act).__name__)
    if key in _ACTIVATIONS and is_class(act, *key):
        name = _ACTIVATIONS[key]
        inner = getattr(act, "act", None)  # transformers: the python forms compute the same function
        if name == "gelu" and inner is not None and getattr(inner, "__name__", "") not in ("gelu", "_gelu_python"):
            raise ValueError(f"{where}: GELUActivation with act {inner!r} is not supported")
        return name
    raise ValueError(f"{where} = {act!r} is not supported: supported activations are ReLU, GELU (erf: nn.GELU(), "
                     "F.gelu, timm GELU, transformers 'gelu') and its tanh approximation (nn.GELU('tanh'), timm "
                     "GELUTanh, transformers 'gelu_new' / 'gelu_pytorch_tanh'); others (quick_gelu, gelu_fast, "
                     "SiLU, ...) have no second-order rule here")


class _Builder:
    """Nodes of one module's program: parameter names and values ``prefix + name`` (unique in a whole model)."""

    def __init__(self, module: nn.Module, prefix: str):
        self.m, self.pre, self.nodes = module, prefix, []

    def get(self, path: str):
        return operator.attrgetter(path)(self.m)

    def params(self, mod: str, slots=("weight", "bias"), rename=None, rows=None) -> dict:
        """``{slot: parameter name}`` of the submodule ``mod`` (absent parameters left out); ``rows``: only those rows
        of each."""
        m = self.m.get_submodule(mod)
        rename = rename or {}
        out = {}
        for s in slots:
            attr = rename.get(s, s)
            if getattr(m, attr, None) is not None:
                name = self.pre + (f"{mod}.{attr}" if mod else attr)
                out[s] = name if rows is None else (name, rows)
        return out

    def add(self, name: str, op, ins, out: str, params=None) -> str:
        self.nodes.append(Node(self.pre + name, op, tuple(ins), self.pre + out, params or {}))
        return self.pre + out

    def norm(self, path: str, inp: str, out: str, width: int, optional: bool = False) -> str:
        """The LayerNorm ``path`` over ``width`` features; ``optional``: an ``nn.Identity`` there is no node."""
        if optional and isinstance(self.get(path), nn.Identity):
            return inp
        return self.add(path, layernorm_of(self.get(path), path, width), (inp,), out, self.params(path))

    def linear(self, path: str, inp: str, out: str) -> str:
        return self.add(path, _linear(self.get(path), path), (inp,), out, self.params(path))

    def layers(self, mods, where: str, x: str, mask=None) -> str:
        """The supported layers ``mods`` (``where.0``, ``where.1``, …) one after the other from the value ``x``."""
        for i, lay in enumerate(mods):
            nodes, x, _ = layer_nodes(lay, f"{self.pre}{where}.{i}.", x, mask)
            self.nodes += nodes
        return x


def check_reads(module: nn.Module, nodes: list, prefix: str, supported: str, complete: bool = True) -> None:
    """ValueError unless the program ``nodes`` reads only ``module``'s parameters and (``complete``) all of them."""
    named = {prefix + n for n, _ in module.named_parameters()}
    used = {r[0] if isinstance(r, tuple) else r for nd in nodes for r in nd.params.values()}
    bad = sorted((used - named) | (named - used if complete else set()))
    if bad:
        raise ValueError(f"{type(module).__name__}: parameters {bad} are not part of the derived program "
                         f"(supported: {supported})")


def supported_kind(module: nn.Module, table: tuple, supported: dict, what: str, hint: str = "") -> tuple:
    """(kind, builder) of the row of ``table`` [(kind, (module, class name), builder)] whose class ``module`` is,
    exactly; ValueError naming the ``supported`` kinds otherwise."""
    for kind, (mod, name), build in table:
        if is_class(module, mod, name):
            return kind, build
    raise ValueError(f"{type(module).__module__}.{type(module).__qualname__} is not supported. Supported {what} "
                     "(exactly; a subclass may change forward): " + "; ".join(supported) + hint)


# ---------------------------------------------------------------------------------------------- the classes
def _encoder(b: _Builder, x: str, qkv: list, attn: Attention, d: int, pre: bool, lay: dict) -> str:
    """The encoder layer every supported class computes, from the Q, K, V nodes ``qkv`` [(name, op, params)] and
    the submodules ``lay`` names; returns the output value. Pre-norm: ``U1 = X + SA(LN1(X))``,
    ``Z = U1 + F(LN2(U1))``; post-norm: ``Y = LN1(X + SA(X))``, ``Z = LN2(Y + F(Y))``; SA = [LayerScale] ∘ out ∘
    [norm] ∘ attention, F = [LayerScale] ∘ fc2 ∘ [norm] ∘ act ∘ fc1 (bracketed: timm's, where ``lay`` names them
    in ``norms`` ((path, width) pairs) and ``scales``). ``x_last``: the residual sums read ``SA + X``."""
    (ln1, ln2), (fc1, act, fc2) = lay["ln"], lay["mlp"]
    (an, aw), (mn, mw) = lay.get("norms", ((None, None), (None, None)))
    ls1, ls2 = lay.get("scales", (None, None))

    def optional(path, inp, out, width=None):  # an inner norm (width) or a LayerScale; nn.Identity: absent
        if path is None or isinstance(b.get(path), nn.Identity):
            return inp
        if width is not None:
            return b.norm(path, inp, out, width)
        if not is_class(b.get(path), "timm.layers.layer_scale", "LayerScale"):
            raise ValueError(f"{path} = {type(b.get(path)).__name__} is not supported: only timm's LayerScale")
        return b.add(path, Scale(), (inp,), out, b.params(path, ("weight",), {"weight": "gamma"}))

    def join(name, u, v, out):  # u + v in the class's order of the operands
        return b.add(name, Add(), (v, u) if lay.get("x_last") else (u, v), out)

    a = b.norm(ln1, x, "A", d) if pre else x
    o = b.add(lay["attn"], attn, [b.add(n, op, (a,), v, ps) for (n, op, ps), v in zip(qkv, "QKV")], "O")
    u1 = join("residual1", x, optional(ls1, b.linear(lay["out"], optional(an, o, "On", aw), "SA"), "SAs"), "U1")
    f_in = b.norm(ln2, u1, "B", d) if pre else b.norm(ln1, u1, "Y", d)
    p = b.linear(fc1, f_in, "P")
    hd = b.add(act, Activation(activation_name(b.get(act), act)), (p,), lay.get("hidden", "Hd"))
    f = optional(ls2, b.linear(fc2, optional(mn, hd, "Hn", mw), "F"), "Fs")
    if pre:
        return join("residual2", u1, f, "Z")
    return b.norm(ln2, join("residual2", f_in, f, "U2"), "Z", d)


def _packed(b: _Builder, where: str, width: int, **kw) -> list:
    """The Q, K, V nodes of a fused projection ``where``: three linear maps on row blocks of one weight."""
    name = where if "rename" not in kw else where + ".in_proj"
    return [(f"{name}[{s}]", Linear(), b.params(where, rows=slice(k * width, (k + 1) * width), **kw))
            for k, s in enumerate("qkv")]


def _separate(b: _Builder, names: tuple, scaling: float, head_dim: int) -> list:
    """The Q, K, V nodes of separate projections (Hugging Face)."""
    if abs(scaling - head_dim ** -0.5) > 1e-15 * scaling:
        raise ValueError(f"{names[0].rpartition('.')[0]}: attention scaling {scaling} != head_dim^-1/2 is not "
                         "supported")
    return [(n, _linear(b.get(n), n), b.params(n)) for n in names]


# Each class's builder reads the layer into (Q, K, V nodes, heads, width d, pre-norm, the submodules for _encoder).
def _torch_layer(layer, b: _Builder) -> tuple:
    mha, d = layer.self_attn, layer.self_attn.embed_dim
    no_dropout_in_training(layer, {"self_attn.dropout": mha.dropout})
    if not mha._qkv_same_embed_dim or mha.in_proj_weight is None:
        raise ValueError("self_attn with separate q/k/v projection weights (kdim/vdim != d_model) is not supported")
    if mha.bias_k is not None or mha.bias_v is not None:
        raise ValueError("self_attn with add_bias_kv=True is not supported (only the packed in_proj and out_proj)")
    if mha.add_zero_attn:
        raise ValueError("self_attn with add_zero_attn=True is not supported")
    qkv = _packed(b, "self_attn", d, rename={"weight": "in_proj_weight", "bias": "in_proj_bias"})
    lay = dict(ln=("norm1", "norm2"), attn="self_attn", out="self_attn.out_proj",
               mlp=("linear1", "activation", "linear2"), hidden="H")
    return qkv, mha.num_heads, d, layer.norm_first, lay


def _timm_block(layer, b: _Builder) -> tuple:
    attn, mlp = layer.attn, layer.mlp
    if not is_class(attn, "timm.layers.attention", "Attention"):
        raise ValueError(f"timm Block with attn = {type(attn).__name__} is not supported: only timm's Attention")
    if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)):
        raise ValueError("timm Block with qk_norm=True is not supported: the LayerNorm of each head's queries and "
                         "keys has no rule here (build the block with qk_norm=False)")
    if getattr(attn, "gate", None) is not None:
        raise ValueError("timm Attention with gated=True (sigmoid gate) is not supported")
    if not is_class(mlp, "timm.layers.mlp", "Mlp"):
        raise ValueError(f"timm Block with mlp = {type(mlp).__name__} is not supported: only timm's Mlp "
                         "(fc1, activation, fc2); GluMlp / SwiGLU gates have no rule here")
    no_dropout_in_training(layer)
    d = layer.norm1.normalized_shape[0] if hasattr(layer.norm1, "normalized_shape") else attn.qkv.in_features
    aw = getattr(attn, "attn_dim", attn.qkv.out_features // 3)
    if abs(attn.scale - attn.head_dim ** -0.5) > 1e-15 * attn.scale:
        raise ValueError(f"timm Attention with scale {attn.scale} != head_dim^-1/2 is not supported")
    _linear(attn.qkv, "attn.qkv")
    lay = dict(ln=("norm1", "norm2"), attn="attn", out="attn.proj", mlp=("mlp.fc1", "mlp.act", "mlp.fc2"),
               norms=(("attn.norm", aw), ("mlp.norm", mlp.fc1.out_features)), scales=("ls1", "ls2"))
    return _packed(b, "attn.qkv", aw), attn.num_heads, d, True, lay


def _vit_layer(layer, b: _Builder) -> tuple:
    at = layer.attention
    if not all(hasattr(at, m) for m in ("q_proj", "k_proj", "v_proj", "o_proj")) or not hasattr(layer, "mlp"):
        raise ValueError("this ViTLayer has another layout than transformers 5 (attention.q_proj/k_proj/v_proj/"
                         "o_proj, mlp.fc1/fc2): install transformers>=5 (the 'layers' extra)")
    no_dropout_in_training(layer, {"attention_probs_dropout_prob": at.attention_dropout})
    qkv = _separate(b, ("attention.q_proj", "attention.k_proj", "attention.v_proj"), at.scaling, at.head_dim)
    lay = dict(ln=("layernorm_before", "layernorm_after"), attn="attention", out="attention.o_proj",
               mlp=("mlp.fc1", "mlp.activation_fn", "mlp.fc2"), x_last=True)
    return qkv, at.num_attention_heads, layer.layernorm_before.normalized_shape[0], True, lay


def _bert_layer(layer, b: _Builder) -> tuple:
    if layer.is_decoder or layer.add_cross_attention or getattr(layer.attention.self, "is_causal", False):
        raise ValueError("a decoder BertLayer (is_decoder / add_cross_attention) is not supported: only the "
                         "encoder layer (one sequence attending to itself)")
    sa_mod = layer.attention.self
    no_dropout_in_training(layer)
    qkv = _separate(b, ("attention.self.query", "attention.self.key", "attention.self.value"), sa_mod.scaling,
                    sa_mod.attention_head_size)
    lay = dict(ln=("attention.output.LayerNorm", "output.LayerNorm"), attn="attention.self",
               out="attention.output.dense", mlp=("intermediate.dense", "intermediate.intermediate_act_fn",
                                                  "output.dense"), x_last=True)
    return qkv, sa_mod.num_attention_heads, layer.attention.output.LayerNorm.normalized_shape[0], False, lay


_CLASSES = (
    ("torch.nn.TransformerEncoderLayer", ("torch.nn.modules.transformer", "TransformerEncoderLayer"), _torch_layer),
    ("timm.models.vision_transformer.Block", ("timm.models.vision_transformer", "Block"), _timm_block),
    ("transformers ViTLayer", ("transformers.models.vit.modeling_vit", "ViTLayer"), _vit_layer),
    ("transformers BertLayer", ("transformers.models.bert.modeling_bert", "BertLayer"), _bert_layer),
)


def layer_nodes(layer: nn.Module, prefix: str = "", x: str = "X", mask: torch.Tensor | None = None
                ) -> tuple[list, str, int]:
    """(nodes, output value, width d of X) of ``layer`` (a supported class, exactly) reading the value ``x``, its
    parameters and values named with ``prefix``, its attention masked by ``mask`` (additive, (L, L) or (N, L, L));
    ValueError for anything else, naming what is supported (and, within a model, the layer: ``prefix``)."""
    b = _Builder(layer, prefix)
    try:
        kind, build = supported_kind(layer, _CLASSES, SUPPORTED, "classes")
        qkv, heads, d, pre, lay = build(layer, b)
        out = _encoder(b, x, qkv, Attention(heads, mask), d, pre, lay)
        check_reads(layer, b.nodes, prefix, SUPPORTED[kind])
    except ValueError as e:
        raise ValueError(f"{prefix[:-1]}: {e}" if prefix else str(e)) from None
    return b.nodes, out, d


# ---------------------------------------------------------------------------------------------- masks
def attention_mask(N: int, L: int, attn_mask=None, key_padding_mask=None, is_causal: bool = False,
                   ref: torch.Tensor | None = None) -> torch.Tensor | None:
    """The additive attention mask: (L, L) shared, (N, L, L) per sequence, or None.

    ``attn_mask`` (L, L) or (N, L, L) as ``nn.MultiheadAttention`` reads it (bool: True where a query may *not*
    attend; float: added to the scores); ``key_padding_mask`` (N, L) bool, True at padded keys; ``is_causal``
    adds the causal mask. Each is added to the others. ValueError on a wrong shape or dtype, or a query row
    with every key masked (its softmax is undefined).
    """
    ref = torch.zeros((), dtype=torch.float64) if ref is None else ref
    neg = lambda m: torch.zeros(m.shape, dtype=ref.dtype, device=ref.device).masked_fill(m.to(ref.device),  # noqa: E731
                                                                                          float("-inf"))
    M = None
    if attn_mask is not None:
        if tuple(attn_mask.shape) not in ((L, L), (N, L, L)):
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} is not supported: (L, L) = ({L}, {L}) "
                             f"shared by every sequence and head, or (N, L, L) = ({N}, {L}, {L}) one per sequence")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask of dtype {attn_mask.dtype} is not supported: pass a bool or a float mask")
        M = neg(attn_mask) if attn_mask.dtype == torch.bool else attn_mask.to(dtype=ref.dtype, device=ref.device)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, L) or key_padding_mask.dtype != torch.bool:
            raise ValueError(f"key_padding_mask must be bool (N, L) = ({N}, {L}), True at padded keys; got "
                             f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
        M = add(M, neg(key_padding_mask)[:, None, :].expand(N, L, L))
    if is_causal:
        M = add(M, neg(torch.ones(L, L, dtype=torch.bool).triu(1)))
    if M is not None and bool(torch.isneginf(M).all(dim=-1).any()):
        raise ValueError("the attention mask masks every key of some query row: the softmax of that row is undefined")
    return M


def _causal_hint(N: int, L: int, attn_mask: torch.Tensor, ref: torch.Tensor) -> None:
    """PyTorch's ``TransformerEncoderLayer`` reads ``is_causal=True`` as a hint that ``src_mask`` *is* the causal mask:
    it attends causally and ignores ``src_mask`` (or, with a key padding mask, uses ``src_mask`` and not the causal
    mask), where :func:`attention_mask` adds the two. They agree only when ``attn_mask`` is the causal mask; ValueError
    otherwise."""
    causal = attention_mask(N, L, is_causal=True, ref=ref).expand(N, L, L)
    if not torch.equal(attention_mask(N, L, attn_mask, ref=ref).expand(N, L, L), causal):
        raise ValueError("is_causal=True with an attn_mask that is not the causal mask: nn.TransformerEncoderLayer "
                         "reads is_causal as a hint that src_mask is causal and would not apply attn_mask as given; "
                         "pass attn_mask=None (the causal mask alone) or the causal mask itself, or is_causal=False "
                         "(attn_mask alone)")


# ---------------------------------------------------------------------------------------------- the Hessian
@dataclass
class LayerHessian:
    """Exact loss Hessian of a layer or model: ``dense`` (P, P) in ``names`` order (``named_parameters()``, each
    flattened row-major; None when only some ``blocks`` were asked for), ``blocks[(name_i, name_j)]`` its
    (n_i, n_j) blocks (views of ``dense``, or the blocks asked for), ``sizes`` the n_i; also the output ``Z``, the
    loss gradient ``gradient`` (P,) and ``loss`` (None for a loss given by its derivatives)."""

    dense: torch.Tensor | None
    names: tuple
    sizes: tuple
    blocks: dict
    Z: torch.Tensor
    gradient: torch.Tensor
    loss: float | None = None

    def offsets(self) -> dict:
        """``{name: first index of the parameter in dense}``."""
        return {n: s.start for n, s in offsets(self.names, self.sizes).items()}


def requested_pairs(blocks, names) -> list | None:
    """``blocks`` as a list of ``(a, b)`` pairs (None: dense), checked against the parameter names."""
    if blocks is None:
        return None
    if isinstance(blocks, str):
        blocks = [blocks]
    blocks = list(blocks)
    if not blocks:
        raise ValueError("blocks=[] asks for nothing: pass None (the dense Hessian), names or (name, name) pairs")
    if all(isinstance(b, str) for b in blocks):
        pairs = [(a, b) for a in blocks for b in blocks]
    elif all(isinstance(b, (tuple, list)) and len(b) == 2 for b in blocks):
        pairs = [tuple(b) for b in blocks]
    else:
        raise ValueError("blocks must be parameter names or (name_a, name_b) pairs, not a mix")
    unknown = sorted({n for p in pairs for n in p} - set(names))
    if unknown:
        raise ValueError(f"blocks name {unknown}, which are not parameters; the parameters: {list(names)}")
    return list(dict.fromkeys(pairs))


def first_parameter(module: nn.Module) -> torch.Tensor:
    """The module's first parameter (ValueError if it has none: nothing to differentiate)."""
    w = next(module.parameters(), None)
    if w is None:
        raise ValueError(f"{type(module).__name__} has no parameters: nothing to differentiate")
    return w


def program_state(module: nn.Module, nodes: list, out: str, data: dict, loss, target, what: str,
                  names=("mse",)) -> State:
    """The program ``nodes`` + the loss of its output value ``out`` over ``module.named_parameters()`` (detached,
    in that order), run on the inputs ``data`` and ``target`` (in the engine's layout; None: none). ``loss``: one
    of ``names`` (``"mse"``, ``"cross_entropy"``: to ``target``) or a pair ``(dl_dZ, d2l_dZ2)``; ``what``: the
    module's kind in the error messages."""
    if isinstance(loss, str):
        if loss not in names:
            raise ValueError(f"loss={loss!r} is not supported: {' or '.join(map(repr, names))} or a pair "
                             "(dl_dZ, d2l_dZ2)")
        if target is None:
            raise ValueError(f"loss={loss!r} needs target, of the shape of the {what}'s output")
        node = Node("loss", {"mse": MSE, "cross_entropy": CrossEntropy}[loss](), (out, "target"), "loss")
    elif not (isinstance(loss, (tuple, list)) and len(loss) == 2):
        raise ValueError("loss must be 'mse' or a pair (dl_dZ, d2l_dZ2) of tensors or callables of Z")
    else:
        node = Node("loss", GivenLoss(*loss), (out,), "loss")
    data = data if target is None else {**data, "target": target}
    params = {n: p.detach() for n, p in module.named_parameters()}
    return State(Program(nodes + [node], {n: p.shape for n, p in params.items()}, list(params)), params, data)


def assemble(state: State, blocks=None, chunk: int | None = 128, layout=lambda Z: Z) -> LayerHessian:
    """The :class:`LayerHessian` of a program's ``state``: dense, or the ``blocks`` asked for (names or pairs);
    ``.Z`` the loss's input in ``layout``."""
    prog = state.program
    names = tuple(prog.order)
    sizes = tuple(prog.sizes[n] for n in names)
    pairs = requested_pairs(blocks, names)
    grad = state.gradient()
    gradient = torch.cat([grad[n].reshape(-1) for n in names])
    Z = layout(state.values[prog.nodes[-1].ins[0]])
    if pairs is None:
        H, sl = dense(state, chunk), prog.slices
        out = {(a, b): H[sl[a], sl[b]] for a in names for b in names}
    else:
        H, got = None, program_blocks(state, pairs, chunk)
        out = {p: (0.5 * (blk + blk.T) if p[0] == p[1] else blk) for p, blk in got.items()}
    return LayerHessian(H, names, sizes, out, Z, gradient, state.loss)


def _prepare(layer, X, target, attn_mask, key_padding_mask, is_causal, loss):
    """(state, to_layout): the program of ``layer`` on X (L, d) or a batch (N, L, d) ((L, N, d) for a
    sequence-first PyTorch layer), run; ``to_layout`` maps the output back to X's layout."""
    if not isinstance(layer, nn.Module):
        raise ValueError(f"layer must be a torch.nn.Module, not {type(layer).__name__}")
    w = first_parameter(layer)
    if not isinstance(X, torch.Tensor) or not X.is_floating_point() or X.dtype != w.dtype or X.device != w.device:
        raise ValueError(f"X must be a floating tensor with the dtype and device of the layer ({w.dtype}, {w.device})")
    bf = layer.self_attn.batch_first if type(layer) is nn.TransformerEncoderLayer else True
    if X.dim() not in (2, 3):
        raise ValueError(f"X of shape {tuple(X.shape)}: expected (L, d) or (N, L, d)"
                         + ("" if bf else " ((L, N, d): batch_first=False)"))

    def to_layout(Z, back=True):  # the engine's (N, L, d) to X's layout (back) or from it
        return (Z[0] if back else Z[None]) if X.dim() == 2 else (Z if bf else Z.transpose(0, 1))

    Xb = to_layout(X, False)
    N, L, d = Xb.shape
    if is_causal and attn_mask is not None and type(layer) is nn.TransformerEncoderLayer:
        _causal_hint(N, L, attn_mask, X)
    M = attention_mask(N, L, attn_mask, key_padding_mask, is_causal, X)
    nodes, out, width = layer_nodes(layer, "", "X", M)
    if d != width:
        raise ValueError(f"X has width {d}; {type(layer).__name__} expects {width}")
    if target is not None and tuple(target.shape) != tuple(X.shape):
        raise ValueError(f"target of shape {tuple(target.shape)} must have the shape of X (the layer's output), "
                         f"{tuple(X.shape)}")
    target = None if target is None else to_layout(target, False)
    return program_state(layer, nodes, out, {"X": Xb}, loss, target, "layer"), to_layout


def layer_hessian(layer: nn.Module, X: torch.Tensor, loss="mse", target: torch.Tensor | None = None, blocks=None,
                  attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
                  is_causal: bool = False, chunk: int | None = 128) -> LayerHessian:
    """Exact Hessian of ``l(layer(X))`` with respect to ``layer.named_parameters()``, by the engine's op rules.

    ``layer``: ``torch.nn.TransformerEncoderLayer``, timm's ``vision_transformer.Block`` or Hugging Face's ``ViTLayer``
    / ``BertLayer`` (exactly these classes; eval mode or no dropout; :data:`SUPPORTED` lists what each supports). ``X``:
    one sequence (L, d) or a batch (N, L, d) ((L, N, d) for a PyTorch layer with ``batch_first=False``), the dtype and
    device of the layer. ``loss="mse"`` with ``target`` of X's shape: ``l = mean((layer(X) − target)²)`` over all N L d
    entries; or ``loss=(dl_dZ, d2l_dZ2)``, tensors or callables of the stacked output rows Z (N L, d): ``∂l/∂Z`` (N L,
    d) and ``∂²l/∂Z²`` (N L d, N L d). ``blocks``: None (the dense (P, P) Hessian, ``.dense``) or parameter names (every
    block among them) or ``(name_a, name_b)`` pairs (just those): ``.blocks[(a, b)]`` is the (n_a, n_b) block, each
    parameter flattened row-major (as ``p.reshape(-1)``). ``attn_mask``, ``key_padding_mask``, ``is_causal``:
    :func:`attention_mask` (``is_causal=True`` alone: the causal mask; on a PyTorch layer, with an ``attn_mask`` that
    must be the causal mask, as the layer's hint reads it). ``chunk``: directions per pass (memory; None: a parameter's
    all at once).

    Also returns ``.gradient`` (P,), ``.Z`` (the layer's output, X's layout) and ``.loss`` (MSE). Raises
    ``ValueError`` naming what is not supported (another class, qk-norm, a gated or GLU MLP, an activation
    without a second-order rule, dropout in training mode, a mask it cannot express).
    """
    state, to_layout = _prepare(layer, X, target, attn_mask, key_padding_mask, is_causal, loss)
    return assemble(state, blocks, chunk, to_layout)


def layer_hvp(layer: nn.Module, X: torch.Tensor, v: dict, loss="mse", target: torch.Tensor | None = None,
              attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
              is_causal: bool = False) -> dict:
    """Hessian-vector product ``H v`` of :func:`layer_hessian`'s loss, without forming H: ``v`` maps parameter
    names to directions of the parameters' shapes (or (B, *shape) for B directions at once; a name left out is
    a zero direction); returns ``{name: (H v)[name]}`` for every parameter, in ``named_parameters()`` order."""
    return hvp(_prepare(layer, X, target, attn_mask, key_padding_mask, is_causal, loss)[0], v)
