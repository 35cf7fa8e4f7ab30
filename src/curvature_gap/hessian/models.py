"""Exact loss Hessians of whole Transformer models: :func:`model_hessian` and :func:`model_hvp`.

Beyond the paper, and the proof that the engine is general: a timm ``VisionTransformer`` and a Hugging Face
``BertModel`` are read from the modules themselves as programs of the same op rules (:mod:`.ops`) as the paper's ViT
(:mod:`._vit`) and the single layers (:mod:`.layers`), from the embeddings to the head:

* timm ``VisionTransformer``: the patch embedding (a convolution with kernel = stride = patch: a linear map of the
  patches), the class and register tokens, the learned positions (added before or after the prefix tokens), an
  optional pre-norm, every ``Block`` (:func:`.layers.layer_nodes`), the final norm, the pooling (class token or
  mean of the patch tokens), ``fc_norm`` and the head;
* Hugging Face ``BertModel``: the word, position and token-type embeddings (lookups; the word table's padding row
  is a constant, as ``nn.Embedding(padding_idx=…)`` has it), their LayerNorm, every ``BertLayer`` (its attention
  masked at the padded keys of ``attention_mask``), and the pooler (first token, dense, tanh) where present.

The loss and the output are :func:`model_hessian`'s; the result is in ``named_parameters()`` order
(:class:`.layers.LayerHessian`). A submodule the engine has no rules for is refused with a ``ValueError`` that
names it and what is supported (:data:`SUPPORTED`).
"""
from __future__ import annotations

import torch
from torch import nn

from . import layers
from .layers import (LayerHessian, _Builder, assemble, check_reads, first_parameter, is_class, layer_nodes,
                     no_dropout_in_training, program_state, supported_kind)
from .ops.activation import Activation
from .ops.linear import Linear
from .ops.tokens import Add, AddParam, Embed, Pool, Patches, Prepend
from .program import State, hvp

__all__ = ["model_hessian", "model_hvp", "model_nodes", "describe", "SUPPORTED"]

SUPPORTED = {
    "timm.models.vision_transformer.VisionTransformer": (
        "patch embedding (PatchEmbed, a Conv2d with kernel = stride, no norm, fixed image size), class token on or "
        "off, register tokens, learned positions (no_embed_class either way) or none, pre_norm, every Block as "
        "layer_hessian supports it, final norm or fc_norm, global_pool 'token' or 'avg', a linear head or none; "
        "dropout any in eval mode. Not: 'max'/'avgmax'/'map' pooling, dynamic image size, patch dropout in training"),
    "transformers BertModel": (
        "absolute position embeddings, word/position/token-type embeddings and their LayerNorm, every BertLayer as "
        "layer_hessian supports it, attention_mask (padding), token_type_ids, the pooler (dense + tanh) or none; "
        "attn_implementation 'sdpa' or 'eager' (check against autograd with 'sdpa': 'eager' rounds the softmax to "
        "float32); dropout any in eval mode. Not: a decoder (is_decoder), inputs_embeds, past key values"),
}


def _timm_vit(model, images: torch.Tensor, out: str | None) -> tuple[list, str, dict]:
    pe = model.patch_embed
    if not is_class(pe, "timm.layers.patch_embed", "PatchEmbed"):
        raise ValueError(f"patch_embed = {type(pe).__name__} is not supported: only timm's PatchEmbed")
    proj = pe.proj
    if type(proj) is not nn.Conv2d or proj.kernel_size != proj.stride or proj.padding != (0, 0) or \
            proj.dilation != (1, 1) or proj.groups != 1 or proj.kernel_size[0] != proj.kernel_size[1]:
        raise ValueError(f"patch_embed.proj = {proj} is not supported: only a square Conv2d with kernel = stride, "
                         "no padding, dilation or groups (a linear map of the patches)")
    if not isinstance(pe.norm, nn.Identity) or not pe.flatten or getattr(pe, "dynamic_img_pad", False):
        raise ValueError("patch_embed with a norm, without flatten or with dynamic_img_pad is not supported")
    if model.dynamic_img_size:
        raise ValueError("dynamic_img_size=True is not supported (fixed image size)")
    if tuple(images.shape[-2:]) != tuple(pe.img_size):
        raise ValueError(f"images of size {tuple(images.shape[-2:])}; the model takes {tuple(pe.img_size)}")
    if model.attn_pool is not None or model.global_pool not in ("token", "avg"):
        raise ValueError(f"global_pool={model.global_pool!r} is not supported: only 'token' or 'avg'")
    no_dropout_in_training(model)
    if model.training and not isinstance(model.patch_drop, nn.Identity):
        raise ValueError("patch_drop (PatchDropout) in training mode is random: call model.eval()")
    d, b = model.embed_dim, _Builder(model, "")
    b.add("patch_embed", Patches(proj.kernel_size[0]), ("images",), "xp")
    x = b.add("patch_embed.proj", Linear(), ("xp",), "x_patches", b.params("patch_embed.proj"))
    if model.pos_embed is not None and model.no_embed_class:
        x = b.add("pos_embed", AddParam(), (x,), "x_pos", {"value": "pos_embed"})
    for tok in ("reg_token", "cls_token"):  # [cls, reg, patches]
        if getattr(model, tok) is not None:
            x = b.add(tok, Prepend(), (x,), f"x_{tok}", {"value": tok})
    if model.pos_embed is not None and not model.no_embed_class:
        x = b.add("pos_embed", AddParam(), (x,), "x_pos", {"value": "pos_embed"})
    x = b.layers(model.blocks, "blocks", b.norm("norm_pre", x, "x_pre", d, optional=True))
    x = b.norm("norm", x, "x_norm", d, optional=True)
    pre = model.num_prefix_tokens if not model.pool_include_prefix else 0
    x = b.add("pool", Pool(0, 1) if model.global_pool == "token" else Pool(pre), (x,), "pooled")
    x = b.norm("fc_norm", x, "x_fc_norm", d, optional=True)
    if not isinstance(model.head, nn.Identity):
        x = b.linear("head", x, "logits")
    if out is not None:
        raise ValueError("output= chooses among BertModel's outputs; a timm VisionTransformer's output is its logits")
    return b.nodes, x, {"images": images}


def _bert(model, input_ids: torch.Tensor, out: str | None, attention_mask=None, token_type_ids=None,
          ) -> tuple[list, str, dict]:
    cfg = model.config
    if cfg.is_decoder or getattr(cfg, "add_cross_attention", False):
        raise ValueError("a decoder BertModel (is_decoder / add_cross_attention) is not supported")
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={cfg.position_embedding_type!r} is not supported: only 'absolute'")
    emb = model.embeddings
    if not is_class(emb, "transformers.models.bert.modeling_bert", "BertEmbeddings"):
        raise ValueError(f"embeddings = {type(emb).__name__} is not supported: only BertEmbeddings")
    no_dropout_in_training(model)
    if input_ids.dtype not in (torch.int64, torch.int32) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be an integer tensor (B, L), not {input_ids.dtype} {tuple(input_ids.shape)}")
    for n in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        e = getattr(emb, n)
        if type(e) is not nn.Embedding or e.max_norm is not None:
            raise ValueError(f"embeddings.{n} = {e} is not supported: only nn.Embedding without max_norm")
    B, L = input_ids.shape
    if L > emb.position_embeddings.num_embeddings:
        raise ValueError(f"sequences of {L} tokens; the model has {emb.position_embeddings.num_embeddings} positions")
    tt = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    if tuple(tt.shape) != (B, L):
        raise ValueError(f"token_type_ids must be (B, L) = ({B}, {L}), not {tuple(tt.shape)}")
    ref = emb.word_embeddings.weight
    mask = None
    if attention_mask is not None:
        if tuple(attention_mask.shape) != (B, L):
            raise ValueError(f"attention_mask must be (B, L) = ({B}, {L}) with 1 at tokens and 0 at padding, not "
                             f"{tuple(attention_mask.shape)}")
        mask = layers.attention_mask(B, L, key_padding_mask=attention_mask == 0, ref=ref)
    b = _Builder(model, "")
    for n, ids, out_ in (("word", "input_ids", "e_word"), ("token_type", "token_type_ids", "e_type"),
                         ("position", "position_ids", "e_pos")):
        b.add(f"embeddings.{n}_embeddings", Embed(getattr(emb, f"{n}_embeddings").padding_idx), (ids,), out_,
              b.params(f"embeddings.{n}_embeddings", ("weight",)))
        if n == "token_type":
            b.add("embeddings.sum_type", Add(), ("e_word", "e_type"), "e_wt")
    b.add("embeddings.sum_position", Add(), ("e_wt", "e_pos"), "e_sum")
    x = last = b.layers(model.encoder.layer, "encoder.layer",
                        b.norm("embeddings.LayerNorm", "e_sum", "h_emb", cfg.hidden_size), mask)
    pooler = model.pooler
    if out not in (None, "pooler_output", "last_hidden_state"):
        raise ValueError(f"output={out!r}: a BertModel has 'pooler_output' (with a pooler) and 'last_hidden_state'")
    if pooler is not None and out != "last_hidden_state":
        if type(pooler.dense) is not nn.Linear or type(pooler.activation) is not nn.Tanh:
            raise ValueError("pooler with another dense layer or activation than nn.Linear and nn.Tanh is not supported")
        b.add("pooler.first_token", Pool(0, 1), (last,), "first")
        b.add("pooler.dense", Linear(), ("first",), "pooled", b.params("pooler.dense"))
        x = b.add("pooler.activation", Activation("tanh"), ("pooled",), "pooler_output")
    elif out == "pooler_output":
        raise ValueError("output='pooler_output' but the model has no pooler (add_pooling_layer=False)")
    positions = torch.arange(L, device=input_ids.device).expand(B, L)
    return b.nodes, x, {"input_ids": input_ids, "token_type_ids": tt, "position_ids": positions}


_MODELS = (
    ("timm.models.vision_transformer.VisionTransformer", ("timm.models.vision_transformer", "VisionTransformer"),
     _timm_vit),
    ("transformers BertModel", ("transformers.models.bert.modeling_bert", "BertModel"), _bert),
)


def model_nodes(model: nn.Module, inputs: torch.Tensor | None, output: str | None = None,
                **kw) -> tuple[list, str, dict]:
    """(nodes, output value, the program's data inputs) of ``model`` (a supported class, exactly) on ``inputs``
    (images, or BERT's input_ids; None: a dummy batch, for :func:`describe`); ValueError for anything else."""
    kind, build = supported_kind(model, _MODELS, SUPPORTED, "models", ". Single layers: curvature_gap.layer_hessian")
    if inputs is None:
        inputs = torch.zeros(1, model.patch_embed.proj.in_channels, *model.patch_embed.img_size,
                             dtype=next(model.parameters()).dtype) if build is _timm_vit else \
            torch.zeros(1, 2, dtype=torch.long)
    nodes, out, data = build(model, inputs, output, **kw)
    check_reads(model, nodes, "", SUPPORTED[kind], complete=output is None)  # an output may leave a pooler unread
    return nodes, out, data


def _state(model, inputs, loss, target, output, kw) -> tuple[State, callable]:
    w = first_parameter(model)
    if inputs.is_floating_point() and (inputs.dtype != w.dtype or inputs.device != w.device):
        raise ValueError(f"inputs must have the dtype and device of the model ({w.dtype}, {w.device})")
    nodes, out, data = model_nodes(model, inputs, output, **kw)
    sq = out in ("logits", "pooler_output")  # the output in the engine's token layout: (B, 1, K) for (B, K)
    if loss == "cross_entropy" and (target is None or target.dtype not in (torch.int64, torch.int32)
                                    or target.dim() != 1):
        raise ValueError("loss='cross_entropy' needs target: the labels (B,) as integers")
    if loss == "mse" and sq and target is not None and target.dim() == 2:
        target = target[:, None]
    state = program_state(model, nodes, out, data, loss, target, "model", ("cross_entropy", "mse"))
    return state, (lambda Z: Z[:, 0] if sq else Z)


def model_hessian(model: nn.Module, inputs: torch.Tensor, loss, target: torch.Tensor | None = None, blocks=None,
                  chunk: int | None = 128, output: str | None = None, **kw) -> LayerHessian:
    """Exact Hessian of ``loss(model(inputs), target)`` with respect to ``model.named_parameters()``, by the
    engine's op rules (module doc).

    ``model``: a timm ``VisionTransformer`` (``inputs``: images (B, C, H, W)) or a Hugging Face ``BertModel``
    (``inputs``: input_ids (B, L); ``attention_mask`` (B, L) with 0 at padding and ``token_type_ids`` (B, L) as
    keywords), exactly these classes, in eval mode or without dropout. ``loss``: ``"cross_entropy"`` (batch mean) with labels
    ``target`` (B,), ``"mse"`` with ``target`` of the output's shape, or ``(dl_dZ, d2l_dZ2)`` of the stacked output
    rows. ``blocks``, ``chunk``: as :func:`curvature_gap.layer_hessian`. ``output``: BERT's ``"pooler_output"``
    (the default with a pooler) or ``"last_hidden_state"``. Returns a :class:`~.layers.LayerHessian` (``.dense``
    in ``named_parameters()`` order, ``.blocks``, ``.gradient``, ``.Z`` the output, ``.loss``).
    """
    state, layout = _state(model, inputs, loss, target, output, kw)
    return assemble(state, blocks, chunk, layout)


def model_hvp(model: nn.Module, inputs: torch.Tensor, v: dict, loss, target: torch.Tensor | None = None,
              output: str | None = None, **kw) -> dict:
    """``H v`` of :func:`model_hessian`'s loss without forming H: ``v`` maps parameter names to directions of
    their shapes, or (m, *shape) for m directions (a name left out is zero); returns {name: (H v)[name]} for every
    parameter, in ``named_parameters()`` order."""
    return hvp(_state(model, inputs, loss, target, output, kw)[0], v)


def describe(module: nn.Module) -> list[dict]:
    """What :func:`curvature_gap.layer_hessian` or :func:`model_hessian` reads from ``module``: its program in forward
    order, each step as ``{"submodule", "op", "inputs", "output", "parameters"}`` (ValueError if unsupported)."""
    nodes = (model_nodes(module, None) if any(is_class(module, *cls) for _, cls, _ in _MODELS) else
             layer_nodes(module))[0]

    def pname(r):
        return r if isinstance(r, str) else f"{r[0]}[{r[1].start}:{r[1].stop}]"

    return [dict(submodule=nd.name, op=nd.op.describe(), inputs=list(nd.ins), output=nd.out,
                 parameters=[pname(r) for r in nd.params.values()]) for nd in nodes]

