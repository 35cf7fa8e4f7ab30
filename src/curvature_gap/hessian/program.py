"""The one Hessian engine: a model as a program of operations (:mod:`.ops`), walked forward, backward and
forward-over-reverse.

A :class:`Program` is a list of :class:`Node` in forward order, each an op with its input and output values (by
name) and its parameters (by name; a node may read some rows of a parameter, and a parameter may be read by several
nodes); the last node is the loss. A :class:`State` runs it once at given parameters and inputs (primal values and
adjoints ``δa = ∂L/∂a``, each op's context) and then answers Hessian-vector passes: for ``c`` directions at a time
the forward tangents ``ȧ = (∂a/∂w) v`` from the first node a direction reaches to the loss, then the tangents of
the adjoints ``δȧ`` back to the earliest node whose parameters' rows are asked for, each op's rules applied in
turn. Exact, in the layout of :mod:`.ops.layout`; savings, all exact:

* **triangle:** a direction in parameter group g is zero before g's first node, and rows asked only of groups at
  or after g stop the backward tangent there (:func:`dense`: the other triangle from ``H = Hᵀ``); an input whose
  upstream holds no asked parameter gets no adjoint tangent;
* **batched tangents:** ``c`` directions in one GEMM per product (:mod:`.ops.layout`);
* **sample chunks:** a loss that is a sum over samples is taken a chunk of samples at a time (same result);
* **per-sample rows:** rows may be returned mixed over the samples with given weights (:meth:`State.columns`).

Parameters are grouped (``groups``: group name -> parameter names, contiguous in the result's order); a group's
rows are its parameters' rows flattened row-major one after the other. :func:`dense`, :func:`blocks` and
:func:`hvp` assemble Hessians from the passes in the order ``Program.order`` (a model's ``named_parameters()``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..params import offsets
from .ops import Op
from .ops.layout import add

__all__ = ["Node", "Program", "State", "block_columns", "dense", "blocks", "hvp", "fill"]


@dataclass
class Node:
    """One op of a program: ``out = op(ins; params)``. ``params`` maps the op's slots to parameter names, or to
    ``(name, rows)`` for the rows ``rows`` (a slice of its leading axis) of a parameter."""

    name: str
    op: Op
    ins: tuple
    out: str
    params: dict = field(default_factory=dict)


class Program:
    """Nodes in forward order (the last one the loss), the parameters' shapes (``shapes``, virtual ones included),
    the result's parameter order (``order``: real parameters, each used by some node or not at all) and the groups
    (group name -> parameter names; default one group per parameter, named by it)."""

    def __init__(self, nodes: list[Node], shapes: dict, order: Sequence[str], groups: dict | None = None):
        self.nodes, self.shapes, self.order = list(nodes), {k: torch.Size(v) for k, v in shapes.items()}, list(order)
        self.groups = {n: (n,) for n in self.order} if groups is None else {g: tuple(ps) for g, ps in groups.items()}
        produced = {nd.out for nd in self.nodes}
        self.inputs = sorted({v for nd in self.nodes for v in nd.ins} - produced)
        self.din = [nd.ins[:len(nd.ins) if nd.op.n_in is None else nd.op.n_in] for nd in self.nodes]
        self.refs = [[(s, *(r if isinstance(r, tuple) else (r, None))) for s, r in nd.params.items()]
                     for nd in self.nodes]  # per node: [(slot, parameter name, rows or None)]
        self.first: dict[str, int] = {}
        up: dict[str, frozenset] = {v: frozenset() for v in self.inputs}
        self.upstream = []  # per node: the parameters upstream of each differentiable input
        for i, nd in enumerate(self.nodes):
            for v in nd.ins:
                if v not in up:
                    raise ValueError(f"node {nd.name!r} reads {v!r} before any node computes it")
            for _, name, _ in self.refs[i]:
                if name not in self.shapes:
                    raise ValueError(f"node {nd.name!r} reads parameter {name!r}, which has no shape")
                self.first.setdefault(name, i)
            self.upstream.append([up[v] for v in self.din[i]])
            up[nd.out] = frozenset().union(*self.upstream[-1], (name for _, name, _ in self.refs[i]))
        unknown = sorted({n for ps in self.groups.values() for n in ps} - set(self.shapes))
        if unknown:
            raise ValueError(f"groups name {unknown}, which are not parameters of the program")
        self.separable = getattr(self.nodes[-1].op, "separable", True)
        self.sizes = {n: self.shapes[n].numel() for n in self.order}
        self.slices = offsets(self.order, [self.sizes[n] for n in self.order])
        self._plans: dict = {}

    def position(self, group: str) -> tuple:
        """Where a group enters: (its first node, its place in ``order``); unused groups last."""
        ps = self.groups[group]
        i = min((self.first[n] for n in ps if n in self.first), default=len(self.nodes))
        return i, min((self.order.index(n) for n in ps if n in self.order), default=len(self.order))

    def group_order(self, groups: Sequence[str] | None = None) -> list[str]:
        """The groups (default: all with real parameters) in the order they enter the program."""
        gs = [g for g, ps in self.groups.items() if all(n in self.sizes for n in ps)] if groups is None else groups
        return sorted(gs, key=self.position)

    def group_slice(self, group: str) -> slice:
        """A real group's slice of the flat vector in ``order`` (its parameters must be contiguous there)."""
        ps = self.groups[group]
        s0, s1 = self.slices[ps[0]].start, self.slices[ps[-1]].stop
        if s1 - s0 != sum(self.sizes[n] for n in ps):
            raise ValueError(f"group {group!r} is not contiguous in the parameter order")
        return slice(s0, s1)

    def group_size(self, group: str) -> int:
        return sum(self.shapes[n].numel() for n in self.groups[group])

    def plan(self, want: frozenset) -> tuple[int, list[list[bool]], list[dict]]:
        """For the asked parameters ``want``: the node where the backward tangent stops, per node whether each
        differentiable input needs its adjoint tangent, and per node the asked slots {slot: (name, rows)}."""
        if want not in self._plans:
            stop = min((self.first[n] for n in want if n in self.first), default=len(self.nodes) - 1)
            need = [[bool(u & want) for u in ups] for ups in self.upstream]
            asked = [{s: (n, r) for s, n, r in refs if n in want} for refs in self.refs]
            self._plans[want] = (stop, need, asked)
        return self._plans[want]


class State:
    """One forward and backward pass of ``program`` at ``params`` (name -> tensor; every real parameter a node
    reads) and ``inputs`` (name -> tensor, the program's data); then Hessian-vector passes (:meth:`columns`).
    Attributes: ``values`` (every value of the forward pass by name), ``loss`` (a float, or None for a loss given
    by its derivatives), ``B`` (samples), ``dtype`` and ``device`` (the output's)."""

    def __init__(self, program: Program, params: dict, inputs: dict):
        self.program = program
        missing = sorted(set(program.inputs) - set(inputs))
        if missing:
            raise ValueError(f"the program needs the inputs {missing}")
        self.params = params
        self.p = [{s: (params[n] if r is None else params[n][r]) for s, n, r in refs if n in params}
                  for refs in program.refs]
        vals = dict(inputs)
        self.ctxs = []
        for i, nd in enumerate(program.nodes):
            vals[nd.out], ctx = nd.op.forward([vals[v] for v in nd.ins], self.p[i])
            self.ctxs.append(ctx)
        self.values = vals
        out, out_value = vals[program.nodes[-1].out], vals[program.nodes[-1].ins[0]]  # the loss, the output
        self.loss = None if out is None else float(out)
        self.B = vals[program.nodes[0].ins[0]].shape[0]
        adj = {program.nodes[-1].out: None}
        for i in reversed(range(len(program.nodes))):
            nd = program.nodes[i]
            if nd.out not in adj:
                continue
            d_y = adj.pop(nd.out)
            need = [bool(u) for u in program.upstream[i]]
            if not (any(need) or self.p[i]):
                continue
            for v, d in zip(program.din[i], nd.op.vjp(self.ctxs[i], self.p[i], d_y, need)):
                if d is not None:
                    adj[v] = add(adj.get(v), d)
        self._cuts: dict = {}
        self.dtype, self.device = out_value.dtype, out_value.device

    def gradient(self) -> dict[str, torch.Tensor]:
        """∂L/∂θ for every real parameter (zeros for one no node reads)."""
        prog = self.program
        out = {n: None for n in prog.order}
        for i, refs in enumerate(prog.refs):
            slots = [s for s, n, _ in refs if n in out]
            if not slots:
                continue
            g = prog.nodes[i].op.grads(self.ctxs[i], self.p[i], slots)
            for s, n, r in refs:
                if n in out:
                    out[n] = _accumulate(out[n], g[s], r, prog.shapes[n], (), g[s])
        return {n: torch.zeros(prog.shapes[n], dtype=self.dtype, device=self.device) if g is None else g
                for n, g in out.items()}

    # ------------------------------------------------------------------ tangents
    def group_tangent(self, group: str, V: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split (c, group size) directions into {parameter name: (c, *shape)}."""
        shapes = [self.program.shapes[n] for n in self.program.groups[group]]
        parts = V.split([shp.numel() for shp in shapes], 1)
        return {n: t.reshape(V.shape[0], *shp) for n, t, shp in zip(self.program.groups[group], parts, shapes)}

    def group_basis(self, group: str, cols: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unit tangents e_j (j: flat indices within ``group``) as {parameter name: (c, *shape)}."""
        size = self.program.group_size(group)
        return self.group_tangent(group, torch.nn.functional.one_hot(cols, size).to(self.dtype))

    def _cut(self, sl: slice) -> list:
        if sl.start == 0 and sl.stop == self.B:
            return self.ctxs
        key = (sl.start, sl.stop)
        if key not in self._cuts:  # views: kept for every sample chunk
            self._cuts[key] = [nd.op.cut(ctx, sl) for nd, ctx in zip(self.program.nodes, self.ctxs)]
        return self._cuts[key]

    def _dp(self, i: int, tan: dict) -> dict:
        dp = {}
        for s, n, r in self.program.refs[i]:
            t = tan.get(n)
            if t is None:
                continue
            if r is not None:
                t = t[:, r]
                if not bool(t.any()):
                    continue
            dp[s] = t
        return dp

    def columns(self, tangent: dict, rows: Sequence[str], sample_chunk: int | None = None,
                mix: torch.Tensor | None = None, mixed_rows=()) -> dict[str, torch.Tensor]:
        """Hessian times ``tangent`` ({parameter name: (c, *shape)}; names left out are zero), restricted to the
        groups ``rows``: {group: (c, group size)}. ``sample_chunk`` takes the samples in pieces (the sum over
        pieces; identical result).

        ``mix`` (B, c, m): sample weights. The loss is a sum over samples, so a row is a sum of per-sample rows
        R_b; with ``mix`` each group in ``mixed_rows`` is returned as (c, m, size), ``Σ_b mix[b, c, μ] R_b[c]``.
        """
        B = self.B
        step = sample_chunk or B
        if step < B and not self.program.separable:
            raise ValueError("this loss couples the samples: no sample chunks")
        total = None
        for s0 in range(0, B, step):
            sl = slice(s0, min(B, s0 + step))
            part = self._pass(tangent, list(rows), sl, None if mix is None else mix[sl], mixed_rows)
            total = part if total is None else {k: total[k] + part[k] for k in total}
        return total

    def _pass(self, tan: dict, rows: list, sl: slice, mix, mixed_rows) -> dict:
        prog = self.program
        nodes, groups = prog.nodes, prog.groups
        ctxs = self._cut(sl)
        Bs = sl.stop - sl.start
        c = next(iter(tan.values())).shape[0]
        want = frozenset(n for g in rows for n in groups[g])
        stop, need, asked = prog.plan(want)
        per = {n for g in mixed_rows for n in groups[g]} if mix is not None else set()
        # ---------------- forward tangents, from the first node a direction reaches to the loss
        T, tctx = {}, {}
        for i in range(min((prog.first[n] for n in tan if n in prog.first), default=len(nodes)), len(nodes)):
            nd = nodes[i]
            dxs = [T.get(v) for v in prog.din[i]]
            dp = self._dp(i, tan) if prog.refs[i] else {}
            if not dp and all(d is None for d in dxs):
                continue
            T[nd.out], tctx[i] = nd.op.jvp(ctxs[i], self.p[i], dxs, dp, c)
        # ---------------- adjoint tangents, back to the earliest asked parameter
        res: dict = {}
        DD: dict = {}
        like = self.values[nodes[-1].ins[0]]
        lead = lambda n: (Bs, c) if n in per else (c,)  # noqa: E731
        for i in range(len(nodes) - 1, stop - 1, -1):
            nd = nodes[i]
            dd_y = DD.pop(nd.out, None)
            t = tctx.get(i)
            ask = asked[i]
            if t is None and dd_y is None:
                for s, (n, r) in ask.items():
                    res[n] = _accumulate(res.get(n), None, r, prog.shapes[n], lead(n), like)
                continue
            t = {} if t is None else t
            dp = self._dp(i, tan) if i in tctx and prog.refs[i] else {}
            if ask:
                ps = any(n in per for n, _ in ask.values())
                got = nd.op.rows(ctxs[i], self.p[i], t, dd_y, dp, c, tuple(ask), ps)
                for s, (n, r) in ask.items():
                    res[n] = _accumulate(res.get(n), got[s], r, prog.shapes[n], lead(n), like)
            if i > stop and any(need[i]):
                for v, d, nv in zip(prog.din[i], nd.op.vjp_tangent(ctxs[i], self.p[i], t, dd_y, dp, c, need[i]),
                                    need[i]):
                    if nv and d is not None:
                        DD[v] = add(DD.get(v), d)
        out = {}
        for g in rows:
            parts = [res[n] if n in res else _accumulate(None, None, None, prog.shapes[n], lead(n), like)
                     for n in groups[g]]
            if any(n in per for n in groups[g]):  # (c, m, B) @ (c, B, size), part by part
                out[g] = torch.cat([torch.bmm(mix.permute(1, 2, 0), t.reshape(Bs, c, -1).transpose(0, 1))
                                    for t in parts], 2)
            else:
                out[g] = torch.cat([t.reshape(c, -1) for t in parts], 1)
        return out


def _accumulate(acc, new, rows, shape, lead: tuple, like: torch.Tensor):
    """``acc + new`` for the rows (or the gradient) of a parameter of ``shape`` with the leading axes ``lead``
    (``()``, ``(c,)`` or per sample ``(B, c)``), ``new`` placed at ``rows`` (a slice of the parameter's leading axis,
    or None: all); None is zero (a zero tensor like ``like`` is made where both are)."""
    if new is not None and rows is None:
        return new if acc is None else acc + new
    if acc is None:
        acc = torch.zeros(*lead, *shape, dtype=like.dtype, device=like.device)
    if new is not None:
        acc[(slice(None),) * len(lead) + (rows,)] += new
    return acc


# ====================================================================== Hessians from the passes
def fill(H: torch.Tensor, done: set, slices: dict) -> torch.Tensor:
    """Complete H from the blocks ``done`` ({(row, col)} of group names; ``slices``: every group's slice): mirror
    ``H[c, r] = H[r, c]ᵀ`` where only one side was computed, and symmetrise the diagonal blocks
    ``(H_gg + H_ggᵀ)/2`` (a change by rounding only)."""
    for (r, c) in list(done):
        if r != c and (c, r) not in done:
            H[slices[c], slices[r]] = H[slices[r], slices[c]].T
    for s in slices.values():
        D = H[s, s]
        H[s, s] = (D + D.T) / 2
    return H


def block_columns(state: State, col: str, rows: list, chunk: int | None, sample_chunk: int | None = None,
                  pass_=None) -> dict:
    """``{row: H[row, col]}`` by passes over ``chunk`` unit directions of the group ``col`` at a time (None: all);
    ``pass_(idx)`` may run each pass itself (the directions ``idx``; it returns :meth:`State.columns`'s result)."""
    size = state.program.group_size(col)
    step = size if chunk is None else chunk
    parts = {r: [] for r in rows}
    for s in range(0, size, step):
        idx = torch.arange(s, min(size, s + step), device=state.device)
        res = pass_(idx) if pass_ is not None else state.columns(state.group_basis(col, idx), rows, sample_chunk)
        for r in rows:
            parts[r].append(res[r])
    return {r: torch.cat(parts[r]).T for r in rows}


def dense(state: State, chunk: int | None = 128) -> torch.Tensor:
    """The dense Hessian (P, P) in ``program.order``: for each group in the order it enters, the passes of its unit
    directions with the rows of the groups at or after it (the block triangle), then :func:`fill`."""
    prog = state.program
    order = prog.group_order()
    P = sum(prog.sizes.values())
    H = torch.zeros(P, P, dtype=state.dtype, device=state.device)
    slices = {g: prog.group_slice(g) for g in order}
    done = set()
    for gi, g in enumerate(order):
        if prog.position(g)[0] >= len(prog.nodes):
            continue  # no node reads it: zero rows and columns
        for r, blk in block_columns(state, g, order[gi:], chunk).items():
            H[slices[r], slices[g]] = blk
            done.add((r, g))
    return fill(H, done, slices)


def orientation(prog: Program, row: str, col: str) -> tuple[str, str]:
    """(rows, tangent group) for one block: the cheaper of H[row, col] directly or H[col, row]ᵀ.

    Rough cost of a pass with tangents on group t and rows down to group r, with groups at depth
    δ = index / #groups in forward order: |t| · ((1 − δ_t) + 2 (1 − δ_r)) (the forward tangent runs from t to the
    loss, the backward tangent, about twice as dear, from the loss back to r).
    """
    order = prog.group_order()
    depth = {g: i / len(order) for i, g in enumerate(order)}

    def cost(t, r):
        return prog.group_size(t) * ((1 - depth[t]) + 2 * (1 - min(depth[r], depth[t])))

    return (row, col) if cost(col, row) <= cost(row, col) else (col, row)


def blocks(state: State, pairs: list, chunk: int | None = 128, chunks=None) -> dict:
    """``{(row, col): H[row, col]}`` (|row|, |col|) for pairs of group names, each from the passes of one
    group, in the cheaper orientation (:func:`orientation`); ``chunks(group) -> (chunk, sample_chunk)`` may set
    the pass sizes per tangent group."""
    prog = state.program
    out = {}
    for row, col in pairs:
        for name in (row, col):
            if name not in prog.groups:
                raise KeyError(f"unknown parameter group {name!r}; groups: {list(prog.groups)}")
        r, c = orientation(prog, row, col)
        blk = block_columns(state, c, [r], *(chunks(c) if chunks is not None else (chunk,)))[r]
        out[(row, col)] = blk if (r, c) == (row, col) else blk.T.contiguous()
    return out


def hvp(state: State, v: dict) -> dict:
    """``H v`` in every real parameter: ``v`` maps parameter names to directions of their shapes, or (m, *shape)
    for m directions (every entry the same m; a name left out is zero); returns {name: (H v)[name]} of the same
    form, in ``program.order``."""
    prog = state.program
    unknown = sorted(set(v) - set(prog.order))
    if unknown:
        raise ValueError(f"v names {unknown}, which are not parameters; the parameters: {prog.order}")
    if not v:
        raise ValueError("v is empty: give a direction for at least one parameter")
    batched = None
    for n, t in v.items():
        shp = prog.shapes[n]
        b = tuple(t.shape[1:]) == tuple(shp) and tuple(t.shape) != tuple(shp)
        if not b and tuple(t.shape) != tuple(shp):
            raise ValueError(f"v[{n!r}] has shape {tuple(t.shape)}; expected {tuple(shp)} or (m, *that)")
        if batched is not None and b != batched:
            raise ValueError("v mixes single and batched directions; give every entry the same leading m or none")
        batched = b
    tan = {n: (t if batched else t[None]).to(dtype=state.dtype, device=state.device) for n, t in v.items()}
    m = next(iter(tan.values())).shape[0]
    groups = prog.group_order()
    res = state.columns(tan, groups) if any(n in prog.first for n in tan) else {}
    out = {}
    for g in groups:
        split = state.group_tangent(g, res[g]) if g in res else {}
        for n in prog.groups[g]:
            t = split[n] if n in split else torch.zeros(m, *prog.shapes[n], dtype=state.dtype, device=state.device)
            out[n] = t if batched else t[0]
    return {n: out[n] for n in prog.order}
