"""The figures' Hessians: the fast exact Hessian, its cross-check against curvlinops, block statistics.

Figs. 3–5 and 7–11 show the exact Hessian of the mean cross-entropy of one batch. It is computed by
:func:`curvature_gap.hessian.hessian` (hand-written forward-over-reverse, exact) and cross-checked
against curvlinops' ``HessianLinearOperator`` (the paper's tool) on a seeded random sample of columns
that covers every parameter group: in the figure's dtype (float32) on the figure's batch, and in float64
on a smaller batch, where the two must agree to rounding (≤ 1e-10). ``check_columns=None`` compares
the full curvlinops matrix instead (slow: about 4 minutes on a 2-core CPU at batch 128).

Block statistics (:func:`unit_statistics`) describe each diagonal block ``H_uu`` of a parameter unit u (a weight
matrix, a bias, a LayerNorm's γ and β, the embedding, the positions, the head) by the seven numbers of
:data:`STATISTICS`, some of which do not grow with the block's size, so that units of very different sizes compare.
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from ..exact.linalg import sym_spectral_norm
from ..hessian import hessian
from ..hessian._generic import curvlinops_columns
from ..hessian._vit import ViTSecondOrder
from ..params import param_groups, param_slices

__all__ = ["UNITS", "OUTSIDE_BLOCK", "STATISTICS", "SETS", "units_of", "sample_columns", "cross_check",
           "exact_columns", "unit_statistics", "rankings", "group_pair_statistics"]

# statistics of a diagonal block: name -> (label, function of the block as float64)
STATISTICS = {
    "fro": ("Frobenius norm (grows with the block's size)", lambda B: float(np.linalg.norm(B))),
    "mean": ("mean |H|", lambda B: float(np.abs(B).mean())),
    "rms": ("RMS of the entries", lambda B: float(np.sqrt(np.mean(B * B)))),
    "median": ("median |H|", lambda B: float(np.median(np.abs(B)))),
    "max": ("max |H|", lambda B: float(np.abs(B).max())),
    "spectral": ("spectral norm", lambda B: sym_spectral_norm(B)),
    "fro_sqrt_n": ("‖H‖_F/√n (RMS eigenvalue)", lambda B: float(np.linalg.norm(B) / math.sqrt(B.shape[0]))),
}
# the readings of "the block" a claim about "the largest block" is ranked over: the block's own parameters only (the
# embedding, the positions and the head are in the statistics, in no reading); a unit the model lacks is left out
# (the theorem's block has no W_O and no attention biases, the authors' none of the FFN biases)
SETS = {
    "weights": ("the weight matrices W_Q, W_K, W_V (W_O where there is one), W_1, W_2",
                ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2")),
    "with_layernorm": ("… and the LayerNorms (γ, β)", ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2", "LN1", "LN2")),
    "block": ("every parameter group of the block (… and its biases)",
              ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2", "LN1", "LN2", "b_att", "b_1", "b_2")),
}
OUTSIDE_BLOCK = ("embed", "pos", "head")  # units with statistics that are not parameters of the block
_UNIT_PARAMS = {"W_Q": ("query",), "W_K": ("key",), "W_V": ("value",), "W_O": ("out",),
                "b_att": ("query_bias", "key_bias", "value_bias", "out_bias"), "W_1": ("ffn1.weight",),
                "W_2": ("ffn2.weight",), "LN1": ("ln1.weight", "ln1.bias"), "LN2": ("ln2.weight", "ln2.bias"),
                "b_1": ("ffn1.bias",), "b_2": ("ffn2.bias",)}
UNITS = tuple(SETS["block"][1]) + OUTSIDE_BLOCK  # every unit whose diagonal block is measured


def units_of(model, block: int = 0) -> dict[str, np.ndarray]:
    """Unit name -> flat indices (into ``parameters_to_vector``) of block ``block``'s units and of the
    embedding, positions and head."""
    sl = param_slices(model)
    out = {}
    for unit, params in _UNIT_PARAMS.items():
        idx = [np.arange(sl[k].start, sl[k].stop) for p in params if (k := f"blocks.{block}.{p}") in sl]
        if idx:
            out[unit] = np.concatenate(idx)
    for g in param_groups(model):
        if g.name in ("embed", "pos", "head"):
            out[g.name] = np.arange(g.start, g.stop)
    return out


def sample_columns(model, n: int, seed: int) -> np.ndarray:
    """A seeded sample of at least ``n`` column indices covering every parameter group: each group gets
    ``max(1, round(n · size / P))`` columns drawn without replacement; sorted."""
    groups = param_groups(model)
    P = groups[-1].stop
    rng = np.random.default_rng(seed)
    cols = []
    for g in groups:
        k = min(g.size, max(1, round(n * g.size / P)))
        cols.append(g.start + rng.choice(g.size, size=k, replace=False))
    out = np.unique(np.concatenate(cols))
    if len(out) < n:  # rounding left it short: top up from the rest
        rest = np.setdiff1d(np.arange(P), out)
        out = np.union1d(out, rng.choice(rest, size=n - len(out), replace=False))
    return out


def exact_columns(model, batch, columns, dtype=torch.float64) -> torch.Tensor:
    """Columns ``H[:, columns]`` of the exact Hessian by the hand-written forward-over-reverse products
    (no dense Hessian formed); (P, len(columns))."""
    so = ViTSecondOrder(model, batch[0], batch[1], dtype)
    names = [g.name for g in so.groups]
    P = so.groups[-1].stop
    out = torch.empty(P, len(columns), dtype=dtype, device=batch[0].device)
    for s in range(0, len(columns), 64):
        cols = torch.as_tensor(columns[s:s + 64], device=batch[0].device)
        V = torch.zeros(len(cols), P, dtype=dtype, device=batch[0].device)
        V[torch.arange(len(cols)), cols] = 1
        tan = {}
        for g in so.groups:
            tan.update(so.group_tangent(g.name, V[:, g.slice]))
        res = so.columns(tan, names)
        out[:, s:s + len(cols)] = torch.cat([res[n] for n in names], 1).T
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def cross_check(model, batch, H: torch.Tensor, columns, small_batch: int, chunk: int = 64) -> dict:
    """Agreement of the fast exact Hessian ``H`` (the figure's, in its dtype) with curvlinops on ``columns``
    (all columns when None), and of the two methods in float64 on the first ``small_batch`` images.

    Returns ``{"float32": {...}, "float64": {...}}`` with the max relative difference ``max|H_ours − H_curvlinops| /
    max|H_curvlinops|`` over the columns, the worst group, the number of columns and the seconds each side took."""
    groups = param_groups(model)
    cols = None if columns is None else np.asarray(columns)
    t0 = time.perf_counter()
    Hc = curvlinops_columns(model, batch[0], batch[1], cols, H.dtype, chunk)
    t1 = time.perf_counter()
    mine = H if cols is None else H[:, torch.as_tensor(cols)]
    per_group = {}
    sel = np.arange(H.shape[0]) if cols is None else cols
    for g in groups:
        m = (sel >= g.start) & (sel < g.stop)
        if m.any():
            mm = torch.as_tensor(np.nonzero(m)[0])
            per_group[g.name] = _rel(mine[:, mm], Hc[:, mm])
    out = {str(H.dtype).replace("torch.", ""): dict(
        batch=int(batch[0].shape[0]), columns=int(len(sel)), max_relative_difference=_rel(mine, Hc),
        worst_group=max(per_group, key=per_group.get), per_group=per_group, curvlinops_seconds=round(t1 - t0, 2))}
    xs, ys = batch[0][:small_batch].double(), batch[1][:small_batch]
    m64 = copy.deepcopy(model).double()
    t0 = time.perf_counter()
    c64 = curvlinops_columns(m64, xs, ys, cols, torch.float64, chunk)
    t1 = time.perf_counter()
    o64 = exact_columns(m64, (xs, ys), sel)
    t2 = time.perf_counter()
    out["float64"] = dict(batch=int(small_batch), columns=int(len(sel)), max_relative_difference=_rel(o64, c64),
                          curvlinops_seconds=round(t1 - t0, 2), ours_seconds=round(t2 - t1, 2))
    return out


def unit_statistics(H: np.ndarray, units: dict[str, np.ndarray], statistics=tuple(STATISTICS)) -> dict:
    """``{unit: {statistic: value}}`` of every diagonal block ``H[u, u]`` (float64), over ``statistics``."""
    out = {}
    for u, idx in units.items():
        B = np.asarray(H[np.ix_(idx, idx)], dtype=np.float64)
        out[u] = {k: STATISTICS[k][1](B) for k in statistics}
    return out


def rankings(stats: dict[str, dict[str, float]]) -> dict:
    """``{set: {statistic: [units largest first]}}`` over :data:`SETS` (``stats``'s units) and :data:`STATISTICS`."""
    out = {}
    for set_name, (_, members) in SETS.items():
        members = [u for u in members if u in stats]
        out[set_name] = {st: sorted(members, key=lambda u: -stats[u][st]) for st in STATISTICS}
    return out


def group_pair_statistics(H: np.ndarray, starts, stops) -> dict[str, np.ndarray]:
    """Frobenius norm, max |entry| and mean |entry| of every (group, group) block of ``H``."""
    G = len(starts)
    fro, mx, mean = np.zeros((G, G)), np.zeros((G, G)), np.zeros((G, G))
    A = np.abs(H)
    for i in range(G):
        for j in range(G):
            blk = A[starts[i]:stops[i], starts[j]:stops[j]]
            fro[i, j] = math.sqrt(float(np.square(blk, dtype=np.float64).sum()))
            mx[i, j] = float(blk.max())
            mean[i, j] = float(blk.mean(dtype=np.float64))
    return dict(fro=fro, max=mx, mean=mean)


def dense(model, batch, chunk=None) -> tuple[torch.Tensor, float]:
    """(the exact dense Hessian of the mean cross-entropy on ``batch`` in the model's dtype, seconds)."""
    t0 = time.perf_counter()
    H = hessian(model, batch, chunk=chunk or None)
    return H.detach(), time.perf_counter() - t0
