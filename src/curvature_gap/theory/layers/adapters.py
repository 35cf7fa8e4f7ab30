"""Each supported layer class as a chain of primitives (a *program*, :mod:`curvature_gap.theory.encoder_layer`).

An adapter reads the layer's weights and configuration from the module itself and returns a
:class:`Layer`: the program (list of ``_Node``: the submodule, its primitive, its inputs and output, its
parameters by ``named_parameters()`` name), ``d`` (the width of X), ``heads`` (the rows of the Q/K/V
projections that feed one attention head) and the layout of X. Four classes, each recognised by its exact
type (a subclass may change ``forward``), found in ``sys.modules`` (no library is imported here: a layer of
timm or transformers can only exist if its library is already loaded):

* ``torch.nn.TransformerEncoderLayer``: :func:`curvature_gap.theory.encoder_layer.program` itself;
* timm ``vision_transformer.Block``: pre-norm, fused ``qkv``, optional LayerScale (:class:`.primitives.Scale`),
  optional ``scale_attn_norm`` / ``scale_mlp_norm`` LayerNorms, MLP with GELU (erf or tanh) or ReLU;
* Hugging Face ``ViTLayer`` (pre-norm) and ``BertLayer`` (post-norm, encoder only): separate Q/K/V
  projections packed by :class:`.primitives.Concat`, activations ``gelu``, ``gelu_new``,
  ``gelu_pytorch_tanh``, ``relu``.

What an adapter cannot express raises ``ValueError`` naming it: qk-norm, gated attention, GLU MLPs, another
normalisation, another activation, dropout or stochastic depth in training mode, a decoder ``BertLayer``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .. import encoder_layer as el
from .. import multihead as mh
from ..encoder_layer import Activation, Attention, LayerNorm, Linear, Residual, _Node
from .primitives import Concat, Scale

__all__ = ["Layer", "adapt", "SUPPORTED", "library_class"]

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


@dataclass
class Layer:
    """A supported layer read as a program: ``nodes`` (the primitives in forward order, ``n`` sequences
    stacked in X's rows), ``d`` (width of X and Z), ``heads`` ({parameter name: row -> head}), ``kind``
    (a key of :data:`SUPPORTED`), ``batch_first`` (False only for a sequence-first PyTorch layer)."""

    kind: str
    nodes: list
    d: int
    nhead: int
    heads: dict = field(default_factory=dict)
    batch_first: bool = True


def library_class(module: str, name: str):
    """The class ``module.name`` if that module is loaded (else None: no layer of it can exist)."""
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def _is(obj, module: str, name: str) -> bool:
    cls = library_class(module, name)
    return cls is not None and type(obj) is cls


# ---------------------------------------------------------------------------------------------- shared checks
def _no_dropout_in_training(layer: nn.Module, extra: dict | None = None) -> None:
    """Dropout (nn.Dropout p > 0, timm DropPath drop_prob > 0, attention-probability dropout) in training mode
    makes the layer random: refuse it, naming every such submodule."""
    if not layer.training:
        return
    bad = [f"{n}(p={m.p})" for n, m in layer.named_modules() if isinstance(m, nn.Dropout) and m.p > 0]
    bad += [f"{n}(drop_prob={m.drop_prob})" for n, m in layer.named_modules()
            if type(m).__name__ == "DropPath" and getattr(m, "drop_prob", 0) > 0]
    bad += [f"{k}={v}" for k, v in (extra or {}).items() if v > 0]
    if bad:
        raise ValueError(f"{type(layer).__name__} is in training mode with dropout {', '.join(bad)}: the layer is "
                         "random, its Hessian undefined; call layer.eval() (or set the rates to 0)")


def _layernorm(mod: nn.Module, where: str, d: int) -> LayerNorm:
    ok = type(mod) is nn.LayerNorm or _is(mod, "timm.layers.norm", "LayerNorm")
    if not ok or tuple(mod.normalized_shape) != (d,):
        raise ValueError(f"{where} = {type(mod).__name__}{tuple(getattr(mod, 'normalized_shape', ()))} is not "
                         f"supported: only nn.LayerNorm (or timm's LayerNorm) over the last dimension ({d})")
    return LayerNorm(mod.eps)


def _linear(mod: nn.Module, where: str) -> Linear:
    if type(mod) is not nn.Linear:
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
    if isinstance(act, nn.GELU) and type(act) is nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}[act.approximate]
    if act is F.relu or act is torch.relu:
        return "relu"
    if act is F.gelu:
        return "gelu"
    key = (type(act).__module__, type(act).__name__)
    if key in _ACTIVATIONS and library_class(*key) is type(act):
        name = _ACTIVATIONS[key]
        inner = getattr(act, "act", None)           # transformers: the python forms compute the same function
        if name == "gelu" and inner is not None and getattr(inner, "__name__", "") not in ("gelu", "_gelu_python"):
            raise ValueError(f"{where}: GELUActivation with act {inner!r} is not supported")
        return name
    raise ValueError(f"{where} = {act!r} is not supported: supported activations are ReLU, GELU (erf: nn.GELU(), "
                     "F.gelu, timm GELU, transformers 'gelu') and its tanh approximation (nn.GELU('tanh'), timm "
                     "GELUTanh, transformers 'gelu_new' / 'gelu_pytorch_tanh'); others (quick_gelu, gelu_fast, "
                     "SiLU, ...) have no derived second derivative here")


def _params(layer: nn.Module, mod: str, slots=("weight", "bias"), rename=None) -> dict:
    """``{slot: parameter name}`` of the submodule ``mod`` (absent parameters left out)."""
    m = layer.get_submodule(mod)
    rename = rename or {}
    return {s: f"{mod}.{rename.get(s, s)}" for s in slots if getattr(m, rename.get(s, s), None) is not None}


def _finish(layer: nn.Module, kind: str, nodes: list, d: int, nhead: int, heads: dict, batch_first=True) -> Layer:
    nodes = [_Node(*n) for n in nodes]
    named = [n for n, _ in layer.named_parameters()]
    used = [v for node in nodes for v in node.params.values()]
    if sorted(named) != sorted(used):
        raise ValueError(f"{type(layer).__name__}: parameters {sorted(set(named) ^ set(used))} are not part of the "
                         f"derived layer (supported: {SUPPORTED[kind]})")
    return Layer(kind, nodes, d, nhead, heads, batch_first)


def _rows_by_head(width: int, h: int):
    """row -> head for a projection whose output columns are h consecutive heads of width/h."""
    dh = width // h
    return lambda r: r // dh


# ---------------------------------------------------------------------------------------------- the classes
def _torch(layer: nn.TransformerEncoderLayer, mask, n) -> Layer:
    el._check_layer(layer)
    nodes = el.program(layer, 0, mask, n)
    heads = el.in_proj_heads(layer) if layer.self_attn.num_heads > 1 else {}
    return Layer("torch.nn.TransformerEncoderLayer", nodes, layer.self_attn.embed_dim, layer.self_attn.num_heads,
                 heads, layer.self_attn.batch_first)


def _timm_block(layer, mask, n) -> Layer:
    kind = "timm.models.vision_transformer.Block"
    attn, mlp = layer.attn, layer.mlp
    if not _is(attn, "timm.layers.attention", "Attention"):
        raise ValueError(f"timm Block with attn = {type(attn).__name__} is not supported: only timm's Attention")
    if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)):
        raise ValueError("timm Block with qk_norm=True is not supported: the LayerNorm of each head's queries and "
                         "keys is not derived here (build the block with qk_norm=False)")
    if getattr(attn, "gate", None) is not None:
        raise ValueError("timm Attention with gated=True (sigmoid gate) is not supported")
    if not _is(mlp, "timm.layers.mlp", "Mlp"):
        raise ValueError(f"timm Block with mlp = {type(mlp).__name__} is not supported: only timm's Mlp "
                         "(fc1, activation, fc2); GluMlp / SwiGLU gates are not derived here")
    _no_dropout_in_training(layer)
    d = layer.norm1.normalized_shape[0] if hasattr(layer.norm1, "normalized_shape") else attn.qkv.in_features
    h, aw = attn.num_heads, getattr(attn, "attn_dim", attn.qkv.out_features // 3)
    if abs(attn.scale - attn.head_dim ** -0.5) > 1e-15 * attn.scale:
        raise ValueError(f"timm Attention with scale {attn.scale} != head_dim^-1/2 is not supported")
    nodes = [("norm1", _layernorm(layer.norm1, "norm1", d), ("X",), "A", _params(layer, "norm1")),
             ("attn.qkv", _linear(attn.qkv, "attn.qkv"), ("A",), "QKV", _params(layer, "attn.qkv")),
             ("attn", Attention(h, mask, n), ("QKV",), "O", {})]
    o = "O"
    if not isinstance(attn.norm, nn.Identity):
        nodes.append(("attn.norm", _layernorm(attn.norm, "attn.norm", aw), ("O",), "On", _params(layer, "attn.norm")))
        o = "On"
    nodes.append(("attn.proj", _linear(attn.proj, "attn.proj"), (o,), "SA", _params(layer, "attn.proj")))
    sa = "SA"
    if not isinstance(layer.ls1, nn.Identity):
        if not _is(layer.ls1, "timm.layers.layer_scale", "LayerScale"):
            raise ValueError(f"ls1 = {type(layer.ls1).__name__} is not supported: only timm's LayerScale")
        nodes.append(("ls1", Scale(), ("SA",), "SAs", _params(layer, "ls1", ("weight",), {"weight": "gamma"})))
        sa = "SAs"
    nodes += [("residual1", Residual(), ("X", sa), "U1", {}),
              ("norm2", _layernorm(layer.norm2, "norm2", d), ("U1",), "B", _params(layer, "norm2")),
              ("mlp.fc1", _linear(mlp.fc1, "mlp.fc1"), ("B",), "P", _params(layer, "mlp.fc1")),
              ("mlp.act", Activation(activation_name(mlp.act, "mlp.act")), ("P",), "Hd", {})]
    hd = "Hd"
    if not isinstance(mlp.norm, nn.Identity):
        nodes.append(("mlp.norm", _layernorm(mlp.norm, "mlp.norm", mlp.fc1.out_features), ("Hd",), "Hn",
                      _params(layer, "mlp.norm")))
        hd = "Hn"
    nodes.append(("mlp.fc2", _linear(mlp.fc2, "mlp.fc2"), (hd,), "F", _params(layer, "mlp.fc2")))
    f = "F"
    if not isinstance(layer.ls2, nn.Identity):
        if not _is(layer.ls2, "timm.layers.layer_scale", "LayerScale"):
            raise ValueError(f"ls2 = {type(layer.ls2).__name__} is not supported: only timm's LayerScale")
        nodes.append(("ls2", Scale(), ("F",), "Fs", _params(layer, "ls2", ("weight",), {"weight": "gamma"})))
        f = "Fs"
    nodes.append(("residual2", Residual(), ("U1", f), "Z", {}))
    heads = {}
    if h > 1:
        heads = {f"attn.qkv.{s}": (lambda r: mh.head_of_row(r, aw, h)) for s in ("weight", "bias")}
    return _finish(layer, kind, nodes, d, h, heads)


def _hf_attention(layer, where: str, names: tuple, scaling: float, head_dim: int, h: int, d: int, mask, n,
                  inp: str):
    """Separate Q, K, V projections -> Concat -> attention (nodes and heads)."""
    if abs(scaling - head_dim ** -0.5) > 1e-15 * scaling:
        raise ValueError(f"{where}: attention scaling {scaling} != head_dim^-1/2 is not supported")
    nodes = [(f"{where}.{m}", _linear(layer.get_submodule(f"{where}.{m}"), f"{where}.{m}"), (inp,), o,
              _params(layer, f"{where}.{m}")) for m, o in zip(names, ("Q", "K", "V"))]
    nodes += [(f"{where}.concat", Concat(), ("Q", "K", "V"), "QKV", {}),
              (where, Attention(h, mask, n), ("QKV",), "O", {})]
    heads = {}
    if h > 1:
        heads = {f"{where}.{m}.{s}": _rows_by_head(h * head_dim, h) for m in names for s in ("weight", "bias")}
    return nodes, heads


def _vit_layer(layer, mask, n) -> Layer:
    kind = "transformers ViTLayer"
    at = layer.attention
    if not all(hasattr(at, m) for m in ("q_proj", "k_proj", "v_proj", "o_proj")) or not hasattr(layer, "mlp"):
        raise ValueError("this ViTLayer has another layout than transformers 5 (attention.q_proj/k_proj/v_proj/"
                         "o_proj, mlp.fc1/fc2): install transformers>=5 (the 'layers' extra)")
    _no_dropout_in_training(layer, {"attention_probs_dropout_prob": at.attention_dropout})
    d, h = layer.layernorm_before.normalized_shape[0], at.num_attention_heads
    att, heads = _hf_attention(layer, "attention", ("q_proj", "k_proj", "v_proj"), at.scaling, at.head_dim, h, d,
                               mask, n, "A")
    nodes = [("layernorm_before", _layernorm(layer.layernorm_before, "layernorm_before", d), ("X",), "A",
              _params(layer, "layernorm_before"))] + att
    nodes += [("attention.o_proj", _linear(at.o_proj, "attention.o_proj"), ("O",), "SA", _params(layer, "attention.o_proj")),
              ("residual1", Residual(), ("SA", "X"), "U1", {}),
              ("layernorm_after", _layernorm(layer.layernorm_after, "layernorm_after", d), ("U1",), "B",
               _params(layer, "layernorm_after")),
              ("mlp.fc1", _linear(layer.mlp.fc1, "mlp.fc1"), ("B",), "P", _params(layer, "mlp.fc1")),
              ("mlp.activation_fn", Activation(activation_name(layer.mlp.activation_fn, "mlp.activation_fn")), ("P",),
               "Hd", {}),
              ("mlp.fc2", _linear(layer.mlp.fc2, "mlp.fc2"), ("Hd",), "F", _params(layer, "mlp.fc2")),
              ("residual2", Residual(), ("F", "U1"), "Z", {})]
    return _finish(layer, kind, nodes, d, h, heads)


def _bert_layer(layer, mask, n) -> Layer:
    kind = "transformers BertLayer"
    if layer.is_decoder or layer.add_cross_attention or getattr(layer.attention.self, "is_causal", False):
        raise ValueError("a decoder BertLayer (is_decoder / add_cross_attention) is not supported: only the "
                         "encoder layer (one sequence attending to itself)")
    sa = layer.attention.self
    _no_dropout_in_training(layer)
    d, h = layer.attention.output.LayerNorm.normalized_shape[0], sa.num_attention_heads
    att, heads = _hf_attention(layer, "attention.self", ("query", "key", "value"), sa.scaling, sa.attention_head_size,
                               h, d, mask, n, "X")
    ln1, ln2 = layer.attention.output.LayerNorm, layer.output.LayerNorm
    nodes = att + [
        ("attention.output.dense", _linear(layer.attention.output.dense, "attention.output.dense"), ("O",), "SA",
         _params(layer, "attention.output.dense")),
        ("residual1", Residual(), ("SA", "X"), "U1", {}),
        ("attention.output.LayerNorm", _layernorm(ln1, "attention.output.LayerNorm", d), ("U1",), "Y",
         _params(layer, "attention.output.LayerNorm")),
        ("intermediate.dense", _linear(layer.intermediate.dense, "intermediate.dense"), ("Y",), "P",
         _params(layer, "intermediate.dense")),
        ("intermediate.intermediate_act_fn",
         Activation(activation_name(layer.intermediate.intermediate_act_fn, "intermediate.intermediate_act_fn")),
         ("P",), "Hd", {}),
        ("output.dense", _linear(layer.output.dense, "output.dense"), ("Hd",), "F", _params(layer, "output.dense")),
        ("residual2", Residual(), ("F", "Y"), "U2", {}),
        ("output.LayerNorm", _layernorm(ln2, "output.LayerNorm", d), ("U2",), "Z", _params(layer, "output.LayerNorm"))]
    return _finish(layer, kind, nodes, d, h, heads)


_CLASSES = (
    (("torch.nn.modules.transformer", "TransformerEncoderLayer"), _torch),
    (("timm.models.vision_transformer", "Block"), _timm_block),
    (("transformers.models.vit.modeling_vit", "ViTLayer"), _vit_layer),
    (("transformers.models.bert.modeling_bert", "BertLayer"), _bert_layer),
)


def adapt(layer: nn.Module, mask: torch.Tensor | None = None, n: int | None = None) -> Layer:
    """The program of ``layer`` (a supported class, exactly), its attention masked by ``mask`` (additive,
    (L, L) or one per sequence (n, L, L)) over ``n`` stacked sequences; ValueError for anything else."""
    for (mod, name), build in _CLASSES:
        if _is(layer, mod, name):
            return build(layer, mask, n)
    raise ValueError(f"{type(layer).__module__}.{type(layer).__qualname__} is not supported. Supported classes "
                     "(exactly; a subclass may change forward): " + "; ".join(SUPPORTED))
