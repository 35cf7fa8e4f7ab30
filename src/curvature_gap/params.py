"""Flat parameter vectors: the one home of parameter offsets, groups and flattening.

Every Hessian, gradient and spectrum of the package is over a flat vector of parameters (in
``parameters_to_vector`` order, each parameter row-major); its layout is computed here only, and so is the
authors' parameter order and flattening (their ``nn.Linear`` storage) as indices into ours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import nn

from .config import ConfigError, ModelConfig

__all__ = ["offsets", "flat_view", "flatten", "ParamGroup", "group_of", "param_slices", "param_groups", "groups_of",
           "count_parameters", "AUTHORS_MODELS", "authors_parameter_names", "authors_indices", "authors_hessian_order"]


def offsets(names: Sequence[str], sizes: Sequence[int]) -> dict[str, slice]:
    """``{name: slice}`` of pieces of ``sizes`` concatenated in the order of ``names``."""
    out, start = {}, 0
    for name, n in zip(names, sizes):
        out[name] = slice(start, start + int(n))
        start += int(n)
    return out


def flat_view(names: Sequence[str], shapes: Sequence[torch.Size]) -> Callable[[torch.Tensor], dict]:
    """``θ ↦ {name: view}``: a flat vector (the pieces ``names`` concatenated, each row-major) as the named
    tensors of those shapes (leading batch dimensions of ``θ`` are not allowed: use ``vmap``)."""
    names, shapes = list(names), [torch.Size(s) for s in shapes]
    sizes = [s.numel() for s in shapes]
    return lambda theta: {n: c.view(s) for n, c, s in zip(names, theta.split(sizes), shapes)}


def flatten(tensors: Mapping[str, torch.Tensor] | Sequence[torch.Tensor], names: Sequence[str] | None = None,
            start_dim: int = 0) -> torch.Tensor:
    """The inverse of :func:`flat_view`: the tensors (of ``names``, in that order) flattened row-major from
    ``start_dim`` on and concatenated (``start_dim=1`` keeps a leading batch dimension)."""
    ts = [tensors[n] for n in (names or list(tensors))] if isinstance(tensors, Mapping) else list(tensors)
    return torch.cat([t.flatten(start_dim) for t in ts], dim=start_dim)


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
    """Stable group name of a parameter: embed, pos, block{i}.{query,...,ln2}, ln_f, head.

    A bias stored beside its weight (``query_bias``, ``out_bias``) belongs to the weight's group."""
    parts = param_name.split(".")
    return f"block{parts[1]}.{parts[2].removesuffix('_bias')}" if parts[0] == "blocks" else parts[0]


def param_slices(model: nn.Module) -> dict[str, slice]:
    """Parameter name -> its slice of ``parameters_to_vector(model.parameters())``."""
    named = list(model.named_parameters())
    return offsets([n for n, _ in named], [p.numel() for _, p in named])


def param_groups(model: nn.Module, group=group_of) -> list[ParamGroup]:
    """Ordered parameter groups (``group(name)``, default :func:`group_of`) with their slices of
    ``parameters_to_vector(model.parameters())``; a group that is not contiguous raises a RuntimeError."""
    sl, names = param_slices(model), {}
    for pname in sl:
        g = group(pname)
        if g in names and next(reversed(names)) != g:
            raise RuntimeError(f"parameter group {g} is not contiguous")
        names.setdefault(g, []).append(pname)
    return [ParamGroup(g, tuple(ps), sl[ps[0]].start, sl[ps[-1]].stop) for g, ps in names.items()]


def groups_of(model: nn.Module) -> list[ParamGroup]:
    """:func:`param_groups` when its naming applies, else one group per parameter (any ``nn.Module``)."""
    try:
        return param_groups(model)
    except RuntimeError:
        return param_groups(model, group=lambda name: name)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- the authors' parameter order
AUTHORS_MODELS = {"mnist": "authors_mnist", "cifar100": "authors_cifar100"}


def authors_parameter_names(cfg: ModelConfig) -> dict[str, tuple[str, bool]]:
    """Parameter names of the authors' ``VisionTransformer`` (their ``src/models/vit_classification.py``)
    -> (our parameter name, transposed). Their ``nn.Linear`` weights are (out, in); ours are (in, out) for
    the block matrices and (out, in) for the embedding and head (both ``nn.Linear`` here too)."""
    names = {"embeddings.patch_embeddings.in_layer.weight": ("embed.weight", False),
             "embeddings.patch_embeddings.in_layer.bias": ("embed.bias", False)}
    for i in range(cfg.n_blocks):
        theirs, ours = f"transformer_blocks.{i}.", f"blocks.{i}."
        for t, o in (("to_query", "query"), ("to_key", "key"), ("to_value", "value"), ("out_layer", "out")):
            names[f"{theirs}self_attention.{t}.weight"] = (ours + o, True)
            names[f"{theirs}self_attention.{t}.bias"] = (ours + o + "_bias", False)
        for t, o in (("self_attention_norm", "ln1"), ("feed_forward_norm", "ln2")):
            names[f"{theirs}{t}.weight"] = (f"{ours}{o}.weight", False)
            names[f"{theirs}{t}.bias"] = (f"{ours}{o}.bias", False)
        names[f"{theirs}feed_forward.in_layer.weight"] = (ours + "ffn1.weight", True)
        names[f"{theirs}feed_forward.out_layer.weight"] = (ours + "ffn2.weight", True)
    names["out_layer.weight"] = ("head.weight", False)
    names["out_layer.bias"] = ("head.bias", False)
    return names


def _their_flat(model: nn.Module, ours: str, transposed: bool) -> list[int]:
    """Our flat indices of parameter ``ours``, flattened row-major in the authors' storage (the transpose
    of ours where ``transposed``)."""
    sl, p = param_slices(model)[ours], dict(model.named_parameters())[ours]
    block = torch.arange(sl.start, sl.stop).reshape(p.shape)
    return (block.T if transposed else block).reshape(-1).tolist()


def authors_indices(model: nn.Module, names) -> list[int]:
    """Our flat indices of the authors' parameters ``names`` (their names, e.g.
    ``"transformer_blocks.0.self_attention.to_query.weight"``), in that order and their flattening: the
    parameter list their notebooks hand to curvlinops. An unknown name raises a ConfigError listing theirs."""
    table = authors_parameter_names(model.cfg)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ConfigError(f"not a parameter of the authors' model: {', '.join(unknown)}; theirs are: {', '.join(table)}")
    return [i for n in names for i in _their_flat(model, *table[n])]


def authors_hessian_order(model: nn.Module) -> tuple[list[int], list[tuple[str, int]]]:
    """The parameters the authors' Hessian figures differentiate, in their order and flattening: every
    weight and LayerNorm γ, β, no other bias (their ``notebooks/hessian_visualization.ipynb``), in module
    order (patch, Q, K, V, O, LN1, FF1, FF2, LN2, head), each flattened row-major in *their* storage (their
    ``nn.Linear`` weights are the transposes of our block matrices). Returns (our flat indices in that
    order, [(our group name, entries)] of the consecutive groups)."""
    inv = {ours: (theirs, t) for theirs, (ours, t) in authors_parameter_names(model.cfg).items()}
    idx, groups = [], []
    for name, p in model.named_parameters():
        theirs, transposed = inv[name]
        if theirs.endswith(".bias") and "norm" not in theirs:
            continue
        idx += _their_flat(model, name, transposed)
        g = group_of(name)
        if groups and groups[-1][0] == g:
            groups[-1] = (g, groups[-1][1] + p.numel())
        else:
            groups.append((g, p.numel()))
    return idx, groups
