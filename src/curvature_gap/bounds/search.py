"""The one worst-case search of every bound with a ratio: multi-start Adam on ``log(bound/exact)``.

Sweeps show where a bound holds on typical draws, the search where it is tightest. One engine searches every bound
(Theorems 1 and 6, the repaired Theorem 1, Lemma 4, the Proposition, every step and Φ member of the proofs, the
multi-head bound and its lemma) from the same families of starts with one budget, and records which start won.

**Spaces** (:class:`Space`): the self-attention layer (X, W_Q, W_K, W_V, Target), a LayerNorm input (X), the block
(X, W_Q, W_K, W_V, W_1, W_2, Target), multi-head attention (X, W_Q, W_K, W_V, W_O, Target; h heads) and a softmax row
(z, t, s). Every free entry of the instance is searched.

**Families of starts** (:data:`FAMILIES`), applied to a seeded draw: random; value-dominated (W_Q, W_K × 1/4);
one-hot attention (W_Q, W_K × 8); an exact minimiser (Target = F kept at every step); residual-dominated; exactly
uniform attention kept throughout (W_Q W_Kᵀ = 0 on disjoint columns); both at once (every assumption of Theorem 1);
rebalanced; every field scaled by 10^±2 (:data:`SCALES`) and mixed scales. A family applies to a space that has what
it scales. Each is drawn at every length of :data:`L_GRID`; L = 1 (A ≡ 1) is degenerate and reported apart.

**The budget** (:class:`Budget`, the same for every bound and cell): every start of a cell (one L, d, h) takes
``screen`` Adam steps; the ``keep`` best go on for ``steps`` more, so the budget goes where the minima are. All starts
of a cell descend at once, batched with ``torch.func.vmap`` (each has its own Adam state). Adam only proposes: the
best instance of every kept start is re-evaluated by the rows' own, non-differentiable evaluation, and only that value
is recorded, so a published minimum is a plain instance, replayable from its record (family, seed, L).
``rank(F − Target)`` (the proof's √rank) is piecewise constant and recomputed before each step. Every quantity is
differentiable almost everywhere (ReLU kinks, eigenvalue crossings), so no derivative-free search is needed.
"""
from __future__ import annotations

import functools
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.func import vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..exact import forward
from ..exact.instances import Instance, random_instance
from . import formulas, multihead, quantities, registry
from .bound import ZERO

__all__ = ["Space", "Family", "Budget", "Objective", "Cell", "SPACES", "FAMILIES", "SCALES", "L_GRID", "BUDGET",
           "QUICK_BUDGET", "THOROUGH", "families_for", "needs", "objective", "objectives", "search_all", "extent",
           "MH_OBJECTIVES", "SOFTMAX_OBJECTIVE", "CHUNK", "instance_of", "records_of"]

L_GRID = (1, 2, 4, 8, 16)  # the lengths every bound is searched at (L = 1: degenerate, reported apart)
SCALES = (1e-2, 1e2)  # the factors of the scale families: each field two decades down and up
SEEDS = (0,)  # one draw per family and cell (the families, not the seeds, spread the starts)
MIXED = 4  # the mixed-scales families: every field of the draw scaled by an independent random power of ten
MAX_WORKERS = 2  # processes the kinds are spread over at most (one per core of the machines this is run on)
CHUNK = 64  # starts per batched (vmapped) evaluation: bounds the memory of the second-derivative tensors
STALL = 1e-5  # a kept start whose ratio has not fallen by this (relative) for Budget.patience steps has converged


@dataclass(frozen=True)
class Space:
    """Where a bound's instances live: its free ``fields`` (in order) and which of them play the roles the
    families scale (``qk``: the query-key weights, ``v``: the value weight, ``target``)."""

    name: str
    fields: tuple[str, ...]
    roles: dict = field(default_factory=dict)
    widths: tuple[int, ...] = (3,)
    heads: tuple[int, ...] = (1,)

    def role(self, r: str) -> tuple[str, ...]:
        return self.roles.get(r, (r,) if r in self.fields else ())


_SA_ROLES = {"qk": ("W_Q", "W_K"), "v": ("W_V",), "target": ("Target",)}
# The widths d (= d_V = d_K; d_ff = 2d in the block): small, so every tensor is formed densely. The single layer is
# searched at d = 1 too (its constants carry √min(L, d) and √rank(F − Target)); a LayerNorm needs d ≥ 3 (at d = 2
# every row normalises to ±(1, −1)). Multi-head: d = 4 with h ∈ {1, 2, 4}; a softmax row has length L.
SPACES = {
    "sa": Space("sa", ("X", "W_Q", "W_K", "W_V", "Target"), _SA_ROLES, widths=(1, 3)),
    "ln": Space("ln", ("X",)),
    "block": Space("block", ("X", "W_Q", "W_K", "W_V", "W_1", "W_2", "Target"), _SA_ROLES),
    "mh": Space("mh", ("X", "W_Q", "W_K", "W_V", "W_O", "Target"), _SA_ROLES, widths=(4,), heads=(1, 2, 4)),
    "softmax": Space("softmax", ("z", "t", "s"), {"qk": ("z",)}, widths=(1,)),
}
_SPACE_OF_PART = {"sa": "sa", "ln": "ln", "prop": "block", "block": "block"}


@dataclass(frozen=True)
class Family:
    """A family of starts: the seeded draw with the roles or fields ``scale`` multiplied (``(role, factor)``),
    ``tied``: Target = F at every step (every proposal an exact minimiser), ``uniform``: W_Q and W_K kept on
    disjoint columns (W_Q W_Kᵀ = 0, attention exactly uniform at every step)."""

    name: str
    what: str
    scale: tuple[tuple[str, float], ...] = ()
    tied: bool = False
    uniform: bool = False
    mixed: int = 0  # > 0: every field scaled by 10^u, u ~ U(−2, 2) drawn afresh (the mixed-scales draw number)

    def applies(self, space: Space, d: int | None = None) -> bool:
        """Whether the family means something on ``space`` (at width ``d``): what it scales is there, a tied
        target needs a target, uniform attention a single head with two query-key weights of ≥ 2 columns."""
        return (all(space.role(r) for r, _ in self.scale) and (not self.tied or bool(space.role("target")))
                and (not self.uniform or (len(space.role("qk")) == 2 and space.heads == (1,)
                                          and (d is None or d >= 2))))


FAMILIES: tuple[Family, ...] = (
    Family("random", "a seeded draw: X, Target ~ N(0, 1), weights ~ N(0, 1/fan-in)"),
    Family("value-dominated", "W_Q, W_K × 1/4: attention near uniform, the value terms lead", (("qk", 0.25),)),
    Family("one-hot", "W_Q, W_K × 8 (scores × 64): rows of A near one-hot", (("qk", 8.0),)),
    Family("minimiser", "Target = F kept at every step: each proposal an exact global minimiser (loss 0)",
           tied=True),
    Family("minimiser/value-dominated", "an exact minimiser from near-uniform attention (W_Q, W_K × 1/4)",
           (("qk", 0.25),), tied=True),
    Family("minimiser/one-hot", "an exact minimiser from near-one-hot attention (W_Q, W_K × 8)", (("qk", 8.0),),
           tied=True),
    Family("residual-dominated", "W_V × 1/100 against Target × 10: the residual F − Target dominates",
           (("v", 0.01), ("target", 10.0))),
    Family("uniform", "W_Q, W_K on disjoint columns, kept so: W_Q W_Kᵀ = 0, attention exactly uniform",
           uniform=True),
    Family("admissible", "uniform attention and Target = F kept at every step: every assumption of Theorem 1",
           tied=True, uniform=True),
    Family("rebalanced", "W_Q × 64, W_K / 64: the attention and output unchanged, the query-key blocks apart",
           (("W_Q", 64.0), ("W_K", 1 / 64))),
    Family("admissible/rebalanced", "every assumption of Theorem 1 (as admissible), with W_Q × 64, W_K / 64",
           (("W_Q", 64.0), ("W_K", 1 / 64)), tied=True, uniform=True),
    *(Family(f"{f} × {k:g}", f"{f} scaled by {k:g}", ((f, k),))
      for f in dict.fromkeys(x for s in SPACES.values() for x in s.fields) for k in SCALES),
    *(Family(f"mixed scales {k}", "every field scaled by 10^u, u ~ U(−2, 2) independently: corners no single "
             "scale reaches", mixed=k) for k in range(1, MIXED + 1)),
)


def families_for(space: Space, restrict: Callable[[Family], bool] | None = None,
                 d: int | None = None) -> tuple[Family, ...]:
    """The families that apply to ``space`` at width ``d`` (and pass ``restrict``, e.g. a bound declared on
    admissible instances only)."""
    return tuple(f for f in FAMILIES if f.applies(space, d) and (restrict is None or restrict(f)))


@dataclass(frozen=True)
class Budget:
    """``screen`` Adam steps for every start, ``steps`` more for the ``keep`` best with a free Target and the
    ``keep_tied`` best exact minimisers (each stopping after ``patience`` steps without improvement), learning rate
    ``lr``; ``lengths``: the L of the cells; ``block_lengths``: those of the block's steps (Theorem 6, the
    Proposition), whose third-order tensors at L = 16 would cost more than the rest of the search together."""

    screen: int = 8
    keep: int = 3
    keep_tied: int = 1
    steps: int = 100
    lr: float = 0.05
    lengths: tuple[int, ...] = L_GRID
    block_lengths: tuple[int, ...] = L_GRID[:-1]
    patience: int = 20


BUDGET = Budget()
# `curvature-gap bounds` (writes the tables and the committed counter-examples): the block's steps at L = 16 too (a
# failure that needs it, e.g. Φ_KK as printed, ≈ 15/L at d_V = 3, is then committed and replayed by every verify)
THOROUGH = Budget(block_lengths=L_GRID)
# coverage for the tests, not a search
QUICK_BUDGET = Budget(screen=2, keep=1, keep_tied=1, steps=3, lengths=(1, 2), block_lengths=(1, 2), patience=2)


# ----------------------------------------------------------------------------- objectives
@dataclass(frozen=True)
class Objective:
    """One bound as the engine sees it: ``quantities(t, rank, h, need)`` (the exact side's quantities at the fields
    ``t``, differentiable and batchable, for the groups ``need``); ``terms(q)`` (``[(sub, bound, exact), …]``,
    elementwise in ``q``); ``records(t, h)`` (the rows' own evaluation at an instance, floats); ``restrict``: which
    families apply; ``rank``: whether it reads ``rank(F − Target)``; objectives of one space and ``kind`` share one
    batched quantity computation (their needs joined)."""

    id: str
    space: Space
    quantities: Callable
    terms: Callable[[dict], list]
    need: tuple[str, ...]
    records: Callable[[dict, int], list[dict]]
    restrict: Callable[[Family], bool] | None = None
    rank: bool = False
    kind: str = ""
    twin_of: str | None = None  # searched through this objective's search (its ratio differs by a shape factor)
    options: dict = field(default_factory=dict)  # how its records were evaluated (registry.evaluate's parts, …)
    widths: tuple[int, ...] | None = None  # the widths it is searched at (None: its space's)
    block: bool = False  # a step of the block's (Theorem 6, the Proposition): searched at Budget.block_lengths

    def families(self, d: int | None = None) -> tuple[Family, ...]:
        return families_for(self.space, self.restrict, d)


class _Reads(dict):
    """A dict that remembers which keys were read (also of the dicts it holds)."""

    def __init__(self, base: dict, seen: set | None = None, prefix: str = ""):
        super().__init__(base)
        self.seen, self.prefix = (set() if seen is None else seen), prefix

    def __getitem__(self, k):
        self.seen.add(self.prefix + k)
        v = super().__getitem__(k)
        return _Reads(v, self.seen, k + ".") if isinstance(v, dict) else v

    def get(self, k, default=None):
        return self[k] if k in self else default


@functools.cache
def _probe(part: str) -> dict:
    """Every quantity of ``part`` at a small regular instance (floats): what :func:`needs` reads the terms on."""
    inst = random_instance(L=3, d_V=3, d_ff=6, seed=5, away_from_kinks=True)
    return (quantities.sa_exact(inst) if part == "sa" else quantities.layernorm_exact(inst.X) if part == "ln"
            else quantities.block_exact(inst))


def _read(check: str) -> set:
    """The quantity keys bound ``check`` reads: its terms (and where it applies) evaluated once on every quantity
    of its part, the keys read collected."""
    b = registry.BOUNDS[check]
    q = _Reads(_probe(b.part))
    b.terms(q)
    if b.applies is not None:
        b.applies(q)
    return {k.split(".")[0] for k in q.seen}


def _groups(part: str, read: set) -> tuple[str, ...]:
    return tuple(sorted({g for g in (quantities.group_of(part, k) for k in read) if g is not None}))


def needs(check: str) -> tuple[str, ...]:
    """The quantity groups (:func:`.quantities.group_of`) bound ``check`` reads. A group the terms read and the
    search did not compute is a KeyError, never a silent zero."""
    return _groups(registry.BOUNDS[check].part, _read(check))


_SA_KEYS = {"norm_X", "norm_Q", "norm_K", "norm_V", "L", "d_V", "d_K"}
_SA_HESSIAN = ("G", "H", *(f"{k}_{p}{r}" for k in ("H", "Ho", "Hf") for p in "QKV" for r in "QKV"))


def _kind(part: str, need: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The batch kind of a bound of ``part`` with groups ``need``, and the groups its kind computes: on the single
    layer every bound that reads the Hessian shares one computation of all its blocks; every bound that reads pairs
    of one second derivative (ξ, H_tr, Φ) one pass over all its pairs; others batch with those of the same groups."""
    if part == "sa" and any(g.split("_")[0] in ("H", "Ho", "Hf") for g in need):
        return "sa:hessian", tuple(sorted(set(need) | set(_SA_HESSIAN)))
    for name in ("Htr", "xi", "Phi"):
        touched = sorted({w for g in need if g.startswith(name + "_") for w in g.split("_")[1]})
        if name == "Phi" and touched:  # Φ lives on W_Q, W_K, W_V alone: one pass gives all nine pairs, for all
            touched = ["K", "Q", "V"]
        if touched:  # one pass over the weights the pairs touch gives every pair among them
            pairs = {f"{name}_{i}{j}" for i in touched for j in touched}
            return f"{part}:{name}:{''.join(touched)}", tuple(sorted(set(need) | pairs))
    return f"{part}:{','.join(need)}", need


# space -> (t, rank, h, need) -> its quantities at the fields t (:mod:`.quantities`)
_QUANTITIES = {
    "sa": lambda t, rank, h, need: quantities.sa_quantities(*(t[f] for f in SPACES["sa"].fields), need, rank),
    "ln": lambda t, rank, h, need: quantities.layernorm_quantities(t["X"], need=need),
    "block": lambda t, rank, h, need: quantities.block_quantities(*(t[f] for f in SPACES["block"].fields), need),
}


def instance_of(t: dict) -> Instance:
    """The :class:`Instance` of a single-layer, LayerNorm or block point (absent weights: zeros of their shape)."""
    X = t["X"].detach()
    L, d = X.shape
    z = lambda *s: torch.zeros(*s, dtype=X.dtype)  # noqa: E731
    g = lambda k, *s: t[k].detach() if k in t else z(*s)  # noqa: E731
    return Instance(X, g("W_Q", d, d), g("W_K", d, d), g("W_V", d, d), g("W_1", d, 2 * d), g("W_2", 2 * d, d),
                    g("Target", L, d), {"source": "search"})


def objective(check: str) -> Objective:
    """The engine's view of bound ``check`` of the registry (:mod:`.declarations`), one object per declaration."""
    return _objective(check, id(registry.BOUNDS[check]))


@functools.cache  # one object per declaration (its identity in the key)
def _objective(check: str, declaration: int) -> Objective:
    b = registry.BOUNDS[check]
    if b.part not in _SPACE_OF_PART:
        raise KeyError(f"{check} ({b.part}) is evaluated at the trained model only and is not searched; searchable "
                       f"parts: {', '.join(_SPACE_OF_PART)}")
    read = _read(check)
    # a block bound that reads only the attention layer's quantities is searched in the attention layer's space
    part = "sa" if b.part == "block" and read <= _SA_KEYS | {k for k in read if k[:2] == "G_" or k[:4] == "Phi_"} \
        else b.part
    kind, need = _kind(part, _groups(part, read))
    # its rows evaluate it on the block (a LayerNorm needs d ≥ 3): at the block's widths and lengths, whatever space
    # it descends in
    on_block = b.part in ("prop", "block")
    block_need = _groups(b.part, read) if on_block else None

    def records(t: dict, h: int) -> list[dict]:
        return registry.evaluate(instance_of(t), **b.evaluate_options(), only=check, need=block_need)

    # a bound declared on the instances where every assumption of Theorem 1 holds is searched there only
    restrict = (lambda f: f.tied and f.uniform) if b.applies is not None and b.part == "sa" else None
    space = _SPACE_OF_PART[part]
    return Objective(check, SPACES[space], _QUANTITIES[space], b.terms, need, records, restrict,
                     rank="rank_FT" in read, kind=kind + ("@block" if on_block and part == "sa" else ""),
                     twin_of=b.twin_of, widths=SPACES["block"].widths if on_block else None, block=on_block,
                     options={k: (v[0] if k == "parts" else v) for k, v in b.evaluate_options().items()
                              if k in ("parts", "tensors", "ln_input")})


_DECLARED = frozenset(registry.BOUNDS)  # the bounds a fresh process knows: those declared (not registered later)


def objectives() -> list[Objective]:
    """Every searchable bound of the registry, in declaration order: all but those that cannot fail with exact
    ingredients (:attr:`.bound.Bound.by_construction`: a search would only confirm the triangle inequality)."""
    return [objective(c) for c, b in registry.BOUNDS.items() if b.part in _SPACE_OF_PART and not b.by_construction]


def _mh_q(t, rank, h, need):
    q = multihead.exact(*(t[f] for f in SPACES["mh"].fields), h)
    q["bound"] = multihead.bound(q, *t["X"].shape, h)
    del q["H"]
    return q


def _mh_records(which: str):
    def records(t: dict, h: int) -> list[dict]:
        inst = multihead.MHInstance(*(t[f].detach() for f in SPACES["mh"].fields), h)
        return [r for r in multihead.evaluate(inst) if r["check"] == which]
    return records


MH_OBJECTIVES = (
    Objective("mh", SPACES["mh"], _mh_q, lambda q: [("", q["bound"]["M"], q["norm_H"])], (), _mh_records("mh"),
              kind="mh"),
    Objective("mh.blocks", SPACES["mh"], _mh_q, lambda q: [(ij, q["bound"][ij], q[f"H_{ij}"]) for ij in formulas.MH_PAIRS],
              (), _mh_records("mh.blocks"), kind="mh"),
)


def _softmax_q(t, rank, h, need):
    return {"bound": t["t"].norm() * t["s"].norm(), "exact": multihead.softmax_d2(t["z"], t["t"], t["s"]).norm()}


def _softmax_records(t: dict, h: int) -> list[dict]:
    with torch.no_grad():
        q = _softmax_q(t, None, h, ())
    b, e = float(q["bound"]), float(q["exact"])
    return [dict(check="softmax_d2", sub="", bound=b, exact=e, ratio=registry.ratio(b, e))]


SOFTMAX_OBJECTIVE = Objective("softmax_d2", SPACES["softmax"], _softmax_q, lambda q: [("", q["bound"], q["exact"])],
                              (), _softmax_records, kind="softmax")


def _smallest(terms: list) -> torch.Tensor:
    """The smallest ``bound/exact`` over a bound's entries, elementwise over a batch, as a differentiable tensor (an
    entry whose exact side is numerically zero counts as +∞ and contributes no gradient)."""
    rs = []
    for _, b, e in terms:
        e, b = torch.as_tensor(e, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
        b, e = torch.broadcast_tensors(b, e)
        ok = e.abs() > ZERO
        rs.append(torch.where(ok, b / torch.where(ok, e, torch.ones_like(e)), torch.full_like(e, math.inf)))
    return torch.stack(rs).amin(0)


# ----------------------------------------------------------------------------- starts
def _draw(space: Space, L: int, d: int, h: int, seed: int) -> dict:
    """The seeded base draw of a cell (the "random" family)."""
    if space.name == "mh":
        inst = multihead.instance(L, d, h, seed)
        return dict(zip(space.fields, inst.tensors()))
    if space.name == "softmax":
        g = torch.Generator().manual_seed(1_000_003 * int(seed) + 7_919 * L + 3)
        return {f: torch.randn(L, generator=g, dtype=torch.float64) for f in space.fields}
    inst = random_instance(L=L, d_V=d, d_ff=2 * d, seed=seed)
    return {f: getattr(inst, f) for f in space.fields}


def _start(space: Space, family: Family, L: int, d: int, h: int, seed: int) -> tuple[dict, dict]:
    """The fields of one start and its masks (ones where free)."""
    t = {k: v.clone() for k, v in _draw(space, L, d, h, seed).items()}
    for r, k in family.scale:
        for f in space.role(r):
            t[f] = t[f] * k
    if family.mixed:
        g = torch.Generator().manual_seed(104_729 * family.mixed + 7_919 * L + 101 * d + h + 1_000_003 * seed)
        for f in space.fields:
            t[f] = t[f] * 10.0 ** (4 * float(torch.rand((), generator=g, dtype=torch.float64)) - 2)
    masks = {f: torch.ones_like(v) for f, v in t.items()}
    if family.uniform:  # W_Q kept on the first ⌊d_K/2⌋ columns, W_K on the others: W_Q W_Kᵀ = 0 exactly
        mq = torch.ones_like(t["W_Q"])
        mq[:, max(1, t["W_Q"].shape[1] // 2):] = 0.0
        masks.update(W_Q=mq, W_K=1.0 - mq)
        for f in ("W_Q", "W_K"):
            t[f] = t[f] * masks[f]
    return t, masks


@dataclass
class Cell:
    """One cell of a bound's search: its length L, width d, heads h, the outcome per start (family, seed, the
    smallest ratio the descent saw, whether it was kept) and the records of the kept starts."""

    L: int
    d: int
    h: int
    starts: list = field(default_factory=list)
    records: list = field(default_factory=list)


def _slice(q, idx: torch.Tensor):
    """The entries ``idx`` of a batch of quantities (tensors with a leading batch axis; numbers as they are)."""
    if isinstance(q, dict):
        return {k: _slice(v, idx) for k, v in q.items()}
    return q[idx] if isinstance(q, torch.Tensor) and q.dim() > 0 else q


def _lead(v: torch.Tensor, n: int) -> torch.Tensor:
    return v.view(-1, *([1] * (n - 1)))


class _Batch:
    """The starts of one cell, of every objective of one kind, descending together: the fields stacked over the
    starts, their masks (zeros where a family fixes an entry), Adam state per entry, the best point seen."""

    def __init__(self, objs: list[Objective], L: int, d: int, h: int, starts: list[tuple[int, Family, int]]):
        self.objs, self.h, self.labels = objs, h, starts
        self.space = space = objs[0].space
        drawn = [_start(space, f, L, d, h, s) for _, f, s in starts]
        self.t = {f: torch.stack([x[0][f] for x in drawn]) for f in space.fields}
        self.mask = {f: torch.stack([x[1][f] for x in drawn]) for f in space.fields}
        self.tied = torch.tensor([f.tied for _, f, _ in starts])
        self.obj_of = torch.tensor([i for i, _, _ in starts])
        self.need = tuple(sorted({g for o in objs for g in o.need}))
        self.rank = any(o.rank for o in objs)
        self.m = {f: torch.zeros_like(v) for f, v in self.t.items()}
        self.v = {f: torch.zeros_like(v) for f, v in self.t.items()}
        self.k = 0
        n = len(starts)
        self.active = torch.ones(n, dtype=torch.bool)
        self.best = torch.full((n,), math.inf, dtype=torch.float64)
        self.best_t = {f: v.clone() for f, v in self.t.items()}
        self.since = torch.zeros(n, dtype=torch.long)  # steps since the start's ratio last improved
        self.finished: list[tuple] = []  # (label, best ratio, best point) of the starts taken out of the batch

    def _effective(self, t: dict) -> dict:
        """The fields with a tied Target replaced by the output it follows (batched)."""
        if not bool(self.tied.any()) or not self.space.role("target"):
            return t
        out = vmap(lambda tt: _target(self.space, tt, self.h))({f: v for f, v in t.items() if f != "Target"})
        return dict(t, Target=torch.where(_lead(self.tied, out.dim()), out, t["Target"]))

    def take(self, idx: torch.Tensor) -> None:
        """Keep the starts ``idx`` only."""
        for d in (self.t, self.mask, self.m, self.v, self.best_t):
            for f in d:
                d[f] = d[f][idx]
        for a in ("tied", "active", "best", "obj_of", "since"):
            setattr(self, a, getattr(self, a)[idx])
        self.labels = [self.labels[i] for i in idx.tolist()]

    def retire(self) -> None:
        """Take the starts that stopped out of the batch (their outcome kept in :attr:`finished`)."""
        done = (~self.active).nonzero().flatten()
        if len(done) == 0:
            return
        self.finished += [(self.labels[i], float(self.best[i]), self.point(i)) for i in done.tolist()]
        self.take(self.active.nonzero().flatten())

    def outcomes(self) -> list[tuple]:
        """(label, best ratio, best point) of every start, stopped or not."""
        return self.finished + [(self.labels[i], float(self.best[i]), self.point(i)) for i in range(len(self.labels))]

    def _ranks(self, t: dict) -> torch.Tensor:
        if not self.rank:
            return torch.zeros(len(self.labels), dtype=torch.float64)
        with torch.no_grad():
            F = vmap(lambda tt: forward.sa_forward(tt["X"], tt["W_Q"], tt["W_K"], tt["W_V"]))(t)
            return torch.linalg.matrix_rank(F - t["Target"]).to(torch.float64)

    def ratios(self, t: dict) -> torch.Tensor:
        """The ratio of every start: the kind's quantities batched (chunks of :data:`CHUNK`), then each
        objective's terms on its own starts."""
        rk = self._ranks(t)
        n = len(self.labels)
        q = _cat([_batched(self.objs[0].quantities, {f: v[a:a + CHUNK] for f, v in t.items()}, rk[a:a + CHUNK],
                           self.h, self.need) for a in range(0, n, CHUNK)])
        pieces, order = [], []
        for i, o in enumerate(self.objs):
            idx = (self.obj_of == i).nonzero().flatten()
            if len(idx):
                pieces.append(_smallest(o.terms(_slice(q, idx))))
                order.append(idx)
        return torch.cat(pieces)[torch.argsort(torch.cat(order))]

    def descend(self, steps: int, lr: float, patience: int | None = None, b1: float = 0.9, b2: float = 0.999,
                eps: float = 1e-8) -> None:
        """``steps`` steps of Adam on ``Σ log ratio`` (the sum separates over starts), recording each start's best
        point before each step; a start whose ratio turns non-finite stops where it was best, and with ``patience``
        one that has not improved by :data:`STALL` (relative) for that many steps leaves the batch (:meth:`retire`)."""
        for _ in range(steps):
            if patience is not None and bool((~self.active).any()):
                self.retire()
            if not bool(self.active.any()):
                return
            t = {f: v.detach().requires_grad_(True) for f, v in self.t.items()}
            r = self.ratios(self._effective(t))
            rd = r.detach()
            self.active &= torch.isfinite(rd) & (rd > 0)
            better = self.active & (rd < self.best)
            gain = self.active & (rd < self.best * (1 - STALL))
            self.since = torch.where(gain, torch.zeros_like(self.since), self.since + 1)
            if patience is not None:
                self.active &= self.since <= patience
            self.best = torch.where(better, rd, self.best)
            for f in self.t:
                self.best_t[f] = torch.where(_lead(better, self.t[f].dim()), self.t[f], self.best_t[f])
            loss = torch.log(torch.where(self.active, r, torch.ones_like(r))).sum()
            if not loss.requires_grad:  # the ratio does not depend on the instance (e.g. ‖S‖ = √d_V)
                return
            grads = torch.autograd.grad(loss, list(t.values()), allow_unused=True)
            self.k += 1
            with torch.no_grad():
                for (f, cur), g in zip(self.t.items(), grads):
                    if g is None:
                        continue
                    g = torch.nan_to_num(g) * self.mask[f]
                    self.m[f] = b1 * self.m[f] + (1 - b1) * g
                    self.v[f] = b2 * self.v[f] + (1 - b2) * g * g
                    step = lr * (self.m[f] / (1 - b1 ** self.k)) / ((self.v[f] / (1 - b2 ** self.k)).sqrt() + eps)
                    self.t[f] = torch.where(_lead(self.active, cur.dim()), cur - step, cur) * self.mask[f]

    def point(self, i: int) -> dict:
        """The best point of start ``i`` (with a tied Target set to the output it follows)."""
        t = {f: v[i] for f, v in self.best_t.items()}
        if self.labels[i][1].tied:
            t["Target"] = _target(self.space, {f: v for f, v in t.items() if f != "Target"}, self.h).detach()
        return t


def _batched(qf: Callable, t: dict, rank: torch.Tensor, h: int, need: tuple) -> dict:
    """``qf(t, rank, h, need)`` for every start of ``t`` (a leading batch axis) by ``vmap``: the tensors come back
    batched, the numbers (shapes, counts) as they are."""
    spec = {}

    def tensors(tt, r):
        leaves, spec["tree"] = tree_flatten(qf(tt, r, h, need))
        spec["numbers"] = {i: x for i, x in enumerate(leaves) if not isinstance(x, torch.Tensor)}
        return [x for x in leaves if isinstance(x, torch.Tensor)]

    out = iter(vmap(tensors)(t, rank))
    leaves = [spec["numbers"][i] if i in spec["numbers"] else next(out) for i in range(spec["tree"].num_leaves)]
    return tree_unflatten(leaves, spec["tree"])


def _cat(parts: list):
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], dict):
        return {k: _cat([p[k] for p in parts]) for k in parts[0]}
    if isinstance(parts[0], torch.Tensor) and parts[0].dim() > 0:
        return torch.cat(parts)
    return parts[0]


def _target(space: Space, t: dict, h: int) -> torch.Tensor:
    """The output a tied Target follows: F of the attention layer, Z of the block, F of multi-head attention."""
    if space.name == "sa":
        return forward.sa_forward(t["X"], t["W_Q"], t["W_K"], t["W_V"])
    if space.name == "block":
        return forward.block_output(t["X"], t["W_Q"], t["W_K"], t["W_V"], t["W_1"], t["W_2"])
    return multihead.forward(t["X"], t["W_Q"], t["W_K"], t["W_V"], t["W_O"], h)


def _cells(obj: Objective, budget: Budget) -> list[tuple[int, int, int]]:
    """The (L, d, h) cells ``obj`` is searched in."""
    sp = obj.space
    lengths = budget.block_lengths if obj.block else budget.lengths
    return [(L, d, h) for L in lengths for d in (obj.widths or sp.widths) for h in sp.heads if d % h == 0]


def _workers() -> int:
    """How many processes :func:`search_all` spreads the kinds over: ``$CURVATURE_GAP_WORKERS``, else one per core
    up to :data:`MAX_WORKERS` (each runs one torch thread: the search's tensors are small)."""
    env = os.environ.get("CURVATURE_GAP_WORKERS")
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"CURVATURE_GAP_WORKERS must be a positive integer, got {env!r}")
        return int(env)
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def _by_id(oid: str) -> Objective:
    return next((o for o in (*MH_OBJECTIVES, SOFTMAX_OBJECTIVE) if o.id == oid), None) or objective(oid)


def _search_kind(ids: list[str], budget: Budget) -> tuple[dict[str, list[Cell]], float]:
    """The cells of one kind's objectives (by id), and the CPU seconds they took: what a worker process runs."""
    torch.set_num_threads(1)
    return _search_here([_by_id(i) for i in ids], budget)


def search_all(objs: list[Objective] | None = None, budget: Budget = BUDGET,
               log: Callable[[str], None] | None = None, workers: int | None = None) -> dict[str, list[Cell]]:
    """Search every objective (default: every bound of the registry, the multi-head bound and its softmax lemma)
    in every cell of ``budget``; returns each objective's cells, keyed by its id. A cell's records (the rows' own
    evaluation at the best point of each kept start) carry ``family``, ``seed``, ``L``, ``d``, ``h``, ``degenerate``
    (L = 1), ``minimiser`` (a tied family) and ``point`` (the instance's fields). The kinds are independent: with
    ``workers`` > 1 (default :func:`_workers`) they run in that many processes, the costliest first, with the same
    result; objectives registered after import (a contributor's toy bound) are searched in this process."""
    objs = (objectives() + list(MH_OBJECTIVES) + [SOFTMAX_OBJECTIVE]) if objs is None else objs
    out: dict[str, list[Cell]] = {o.id: [] for o in objs}
    ids = {o.id for o in objs}
    twins = [o for o in objs if o.twin_of in ids]
    kinds: dict[tuple, list[Objective]] = {}
    for o in objs:
        if o not in twins:
            kinds.setdefault((o.space.name, o.kind), []).append(o)
    order = sorted(kinds, key=lambda k: -_cost(kinds[k], budget))
    workers = _workers() if workers is None else workers

    def done(k: tuple, cells: dict, cpu: float) -> None:
        out.update(cells)
        if log:
            log(f"  search [{k[1]}] {', '.join(cells)}: {cpu:.1f} s CPU")

    # another process rebuilds an objective from its id: only those declared at import, as declared
    portable = all((o.id in _DECLARED and o is _by_id(o.id)) or o in (*MH_OBJECTIVES, SOFTMAX_OBJECTIVE) for o in objs)
    if workers > 1 and len(order) > 1 and portable:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_search_kind, [o.id for o in kinds[k]], budget): k for k in order}
            for f in as_completed(futures):
                done(futures[f], *f.result())
    else:
        for k in order:
            done(k, *_search_here(kinds[k], budget))
    for o in twins:  # evaluated at the points its twin's search kept
        out[o.id] = _twin_cells(o, out[o.twin_of])
    return out


def _search_here(group: list[Objective], budget: Budget) -> tuple[dict[str, list[Cell]], float]:
    t0 = time.process_time()
    out: dict[str, list[Cell]] = {o.id: [] for o in group}
    for L, d, h in _cells(group[0], budget):
        _search_cell(group, L, d, h, budget, out)
    return out, time.process_time() - t0


def _cost(group: list[Objective], budget: Budget) -> float:
    """A rough cost of a kind, to start the costliest first: objectives × cells × a weight of its quantities."""
    k, mh = group[0].kind, group[0].space.name == "mh"
    weight = 20.0 if "Htr" in k or mh else 5.0 if any(s in k for s in ("hessian", ":xi", ":Phi")) else 1.0
    return weight * len(group) * len(_cells(group[0], budget))


def _twin_cells(o: Objective, cells: list[Cell]) -> list[Cell]:
    """The cells of a twin: its own records at the points its twin's search kept."""
    out = []
    for c in cells:
        cell = Cell(c.L, c.d, c.h, starts=[dict(x) for x in c.starts])
        first: dict = {}  # the first record at each point
        for r in c.records:
            first.setdefault(r["inst_key"], r)
        for r in first.values():
            tag = {k: v for k, v in r.items() if k not in ("check", "sub", "bound", "exact", "ratio")}
            tag.update(x=r["x"].replace(o.twin_of, o.id, 1), inst_key=r["inst_key"].replace(o.twin_of, o.id, 1))
            cell.records += [dict(rr, **tag) for rr in o.records(r["point"], c.h)]
        out.append(cell)
    return out


def _search_cell(group: list[Objective], L: int, d: int, h: int, budget: Budget, out: dict) -> None:
    starts = [(i, f, s) for i, o in enumerate(group) for f in o.families(d) for s in SEEDS]
    if not starts:  # no family applies at this width (uniform attention needs d ≥ 2)
        return
    batch = _Batch(group, L, d, h, starts)
    batch.descend(budget.screen, budget.lr)
    cells = {i: Cell(L, d, h) for i in range(len(group))}
    for (i, f, s), r in zip(starts, batch.best):
        cells[i].starts.append(dict(family=f.name, seed=s, ratio=float(r)))
    kept = []  # of each objective: the keep best with a free Target, the keep_tied best exact minimisers (reported
    for i in range(len(group)):  # apart, so searched as far)
        mine = (batch.obj_of == i).nonzero().flatten()
        order = mine[torch.argsort(batch.best[mine])]
        kept += [int(j) for j in order if not bool(batch.tied[j])][:budget.keep]
        kept += [int(j) for j in order if bool(batch.tied[j])][:budget.keep_tied]
    batch.take(torch.tensor(sorted(kept), dtype=torch.long))
    batch.descend(budget.steps, budget.lr, budget.patience)
    mh = group[0].space.name == "mh"
    for (i, fam, seed), best, t in batch.outcomes():
        o, cell = group[i], cells[i]
        trace = next(x for x in cell.starts if x["family"] == fam.name and x["seed"] == seed)
        trace.update(kept=True, ratio=best)
        if not math.isfinite(best):
            continue
        shape = {} if o.space.name == "softmax" else dict(d_V=d, d_K=d, d_ff=2 * d if "W_1" in t else "")
        tag = dict(sweep="search", family=fam.name, seed=seed, L=L, d=d, h=h, degenerate=L == 1, minimiser=fam.tied,
                   **shape, **o.options, x=f"{o.id}@L={L},d={d}" + (f",h={h}" if mh else "") + f",{fam.name},seed={seed}",
                   inst_key=f"search|{o.id}@L={L},d={d},h={h},{fam.name},seed={seed}",
                   point={f: v.detach() for f, v in t.items()})
        cell.records += [dict(r, **tag) for r in o.records(t, h)]
    for i, o in enumerate(group):
        out[o.id].append(cells[i])


def extent(budget: Budget = BUDGET, space: str = "sa") -> str:
    """How far a bound of ``space`` was searched, in words (stated on its row and page)."""
    sp = SPACES[space]
    fams = families_for(sp)
    named = [f.name for f in fams if not any(r in sp.fields for r, _ in f.scale)]
    grid = f"L ∈ {{{', '.join(map(str, budget.lengths))}}} × d ∈ {{{', '.join(map(str, sp.widths))}}}"
    grid += f" × h ∈ {{{', '.join(map(str, sp.heads))}}}" if len(sp.heads) > 1 else ""
    return (f"up to {len(fams)} starts per cell ({', '.join(named)}, and each of {', '.join(sp.fields)} scaled by "
            f"{', '.join(f'{k:g}' for k in SCALES)}) at {grid}: {budget.screen} Adam steps on log(bound/exact) from "
            f"every start, up to {budget.steps} more from the {budget.keep} best and the {budget.keep_tied} best exact "
            f"minimiser{'s' if budget.keep_tied > 1 else ''}; L = 1 "
            "degenerate, reported apart")


def records_of(cells: dict[str, list[Cell]]) -> tuple[list[dict], dict]:
    """The records of a search (:func:`search_all`) as rows' records, and the instances they were evaluated at,
    keyed by each record's ``inst_key`` (single-layer, LayerNorm and block bounds: :func:`instance_of`)."""
    recs, insts = [], {}
    for oid, cs in cells.items():
        for c in cs:
            for r in c.records:
                point = r["point"]
                recs.append({k: v for k, v in r.items() if k != "point"})
                if "X" in point and "W_O" not in point:
                    insts[r["inst_key"]] = instance_of(point)
    return recs, insts
