"""The paper's ViT and the authors' (:class:`curvature_gap.model.ViT`, every variant a
:class:`~curvature_gap.config.ModelConfig` names) as a program of the engine (:mod:`.program`), and the route's
speed shortcuts.

The program, with the ops as the config names them (bracketed terms only where the config has them; pre-norm
moves LN1 and LN2 before the attention and the FFN and adds ``ln_f``)::

    x0 = X_p Eᵀ [+ e] [+ pos]                                                       (Patches, Linear, AddParam/Add)
    q = a W_Q [+ b_Q],  k = a W_K [+ b_K],  a = x (post-norm) or LN1(x) (pre-norm)   (Linear)
    one head:  o = (A a) W_V [+ b_V],  A = softmax(q kᵀ / √d_K)                       (Attention, Linear)
    h heads:   o = [A_j v_j]_j,  v = a W_V [+ b_V],  A_j = softmax(q_j k_jᵀ / √(d_K/h))
    [o = o W_O + b_O],  u1 = x + o,  y = LN1(u1),  u2 = y + act(y W_1 [+ b_1]) W_2 [+ b_2],  out = LN2(u2)
    z = mean_tokens(out) W_hᵀ [+ b_h],  L = cross-entropy(z, labels)                 (Pool, Linear, CrossEntropy)

With one head ``A (a W_V + b_V) = (A a) W_V + b_V`` (the rows of A sum to one): the program mixes the tokens first,
the order of :func:`curvature_gap.model.block_forward`, so its values are the model's bit for bit.

Speed shortcuts over the engine's passes, all exact: the last FFN block in closed form
(:meth:`ViTSecondOrder.last_ffn_hessian`); with one head, one pass over the scores' bilinear form ``M = W̃_Q W̃_Kᵀ`` in
place of the query's and key's (:func:`bilinear_blocks`, :func:`scores_to_qk`); with learned positions, the patch
embedding's columns mixed from the positions' pass (:func:`embed_from_pos`); tangents and samples per pass sized for the
cache (:func:`_chunks`), each pass in its cheaper orientation (:func:`curvature_gap.hessian.program.orientation`).
Shapes: B images, n tokens, d = d_V, d_K, d_ff, K classes, c tangent directions. Parameters keep their stored
orientation (``X @ W`` for block weights, ``nn.Linear``'s (out, in) for embedding and head); rows are flattened
row-major per parameter, in ``param_groups`` order.
"""
from __future__ import annotations

import torch

from ..model import ViT
from ..params import param_groups
from .ops.activation import Activation
from .ops.attention import Attention
from .ops.layernorm import LayerNorm, normalize_jvp, normalize_vjp_tangent
from .ops.linear import Linear
from .ops.loss import CrossEntropy
from .ops.tokens import Add, AddParam, Pool, Patches
from .program import Node, Program, State, block_columns, blocks, fill

__all__ = ["ViTSecondOrder", "SUPPORTS", "unsupported", "unsupported_message", "program", "dense",
           "block_pairs", "closed_form_groups", "bilinear_blocks", "embed_from_pos", "dense_plan", "scores_to_qk",
           "EMBED_FROM_POS_BYTES"]

# Every variant of ModelConfig (field -> allowed values; none is restricted): the program is composed from the
# config's fields, each op with its own rules.
SUPPORTS: dict = {}


def unsupported(model) -> list[str]:
    """Why :class:`ViTSecondOrder` cannot differentiate ``model`` (empty when it can)."""
    if not isinstance(model, ViT):
        return [f"{type(model).__name__} is not a curvature_gap ViT"]
    if model.ln_f is not None and model.ln_f.fused or any(b.ln1.fused or b.ln2.fused for b in model.blocks):
        return ["fused_ln=True (the hand-written Hessian follows the hand-written LayerNorm)"]
    return []


def unsupported_message(model) -> str:
    """The error for ``method='vit'`` on ``model``: what the route supports, what the model has, the fix."""
    reasons = unsupported(model)
    fix = ("build the model with fused_ln=False" if reasons[0].startswith("fused_ln") else
           "use method='functorch', 'curvlinops' or 'torch.func' (any nn.Module), or method='auto'")
    name = f" ({model.cfg.name})" if isinstance(model, ViT) else ""
    return (f"method='vit' supports every ModelConfig variant of the curvature_gap ViT with the hand-written "
            f"LayerNorm; this model{name} has {', '.join(reasons)}. Fix: {fix}")


# ====================================================================== the program
def program(model: ViT) -> Program:
    """The program of ``model`` (module doc); inputs ``images``, ``labels`` and, with sinusoidal positions, the
    table ``pos_table``. With one head each block's attention carries the virtual parameter
    ``blocks.{i}.scores`` (its scores' bilinear form, group ``block{i}.scores``)."""
    cfg = model.cfg
    names = dict(model.named_parameters())
    shapes = {n: p.shape for n, p in names.items()}
    nodes = []

    def add(name, op, ins, out, weight=None, bias=None, **params):
        """Append the node ``out = op(ins)`` with its weight and bias where the model has them; returns ``out``."""
        nodes.append(Node(name, op, tuple(ins), out, {**{s: n for s, n in (("weight", weight), ("bias", bias))
                                                          if n in names}, **params}))
        return out

    add("patches", Patches(cfg.patch_size), ("images",), "xp")
    x = add("embed", Linear("out_in"), ("xp",), "e", "embed.weight", "embed.bias")
    if cfg.pos_encoding == "learned":
        x = add("pos", AddParam(), ("e",), "x0", value="pos")
    elif cfg.pos_encoding == "sinusoidal":
        x = add("pos", Add(), ("e", "pos_table"), "x0")
    for i, blk in enumerate(model.blocks):
        P = lambda n, i=i: f"blocks.{i}.{n}"  # noqa: E731
        V = lambda n, i=i: f"b{i}.{n}"  # noqa: E731

        def ln(k, inp, out, blk=blk, P=P, V=V):
            return add(P(f"ln{k}"), LayerNorm(getattr(blk, f"ln{k}").eps), (inp,), V(out), P(f"ln{k}.weight"),
                       P(f"ln{k}.bias"))

        def lin(name, inp, out, weight, bias, P=P, V=V):  # x @ W [+ b], W stored (in, out)
            return add(P(name), Linear("in_out"), (inp,), V(out), P(weight), P(bias))

        a = ln(1, x, "a") if cfg.norm == "pre" else x
        q, k = lin("query", a, "q", "query", "query_bias"), lin("key", a, "k", "key", "key_bias")
        if cfg.n_heads == 1:  # mix first, then W_V (module doc); the scores' bilinear form as a virtual parameter
            ax = add(P("attention"), Attention(1, bilinear=cfg.qkv_bias), (q, k, a, a), V("ax"), scores=P("scores"))
            o = lin("value", ax, "v", "value", "value_bias")
            shapes[P("scores")] = (cfg.d_model + int(cfg.qkv_bias),) * 2
        else:
            v = lin("value", a, "v", "value", "value_bias")
            o = add(P("attention"), Attention(cfg.n_heads), (q, k, v), V("o"))
        if cfg.out_proj:
            o = lin("out", o, "wo", "out", "out_bias")
        u1 = add(P("residual1"), Add(), (x, o), V("u1"))
        if cfg.norm == "post":
            f_in = base = ln(1, u1, "y")
        else:
            f_in, base = ln(2, u1, "b"), u1
        h = lin("ffn1", f_in, "h", "ffn1.weight", "ffn1.bias")
        f = lin("ffn2", add(P("act"), Activation(cfg.activation), (h,), V("r")), "f", "ffn2.weight", "ffn2.bias")
        u2 = add(P("residual2"), Add(), (base, f), V("u2"))
        x = ln(2, u2, "out") if cfg.norm == "post" else u2
    if model.ln_f is not None:
        x = add("ln_f", LayerNorm(model.ln_f.eps), (x,), "features", "ln_f.weight", "ln_f.bias")
    add("pool", Pool(), (x,), "m")
    add("head", Linear("out_in"), ("m",), "z", "head.weight", "head.bias")
    add("loss", CrossEntropy(), ("z", "labels"), "loss")
    groups = {g.name: g.param_names for g in param_groups(model)}
    if cfg.n_heads == 1:
        groups.update({f"block{i}.scores": (f"blocks.{i}.scores",) for i in range(cfg.n_blocks)})
    return Program(nodes, shapes, list(names), groups)


class ViTSecondOrder(State):
    """The program of a :class:`ViT` with cross-entropy, run once on ``images`` (B, C, H, W) and ``labels`` (B,):
    primal values, adjoints and batched Hessian columns (:meth:`columns`). The loss is the batch mean; everything
    runs in ``dtype`` (default: the model's) on the images' device; the model is not modified.

    Attributes besides :class:`~curvature_gap.hessian.program.State`'s: ``cfg``, ``groups`` (the
    :func:`~curvature_gap.params.param_groups`), ``n_blocks``, ``xp`` (the patches), ``p`` (the parameters by name)."""

    def __init__(self, model: ViT, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype | None = None):
        if not isinstance(model, ViT):
            raise TypeError("ViTSecondOrder needs a curvature_gap.model.ViT")
        if unsupported(model):
            raise ValueError(unsupported_message(model))
        self.cfg = model.cfg
        dtype = dtype or next(model.parameters()).dtype
        dev = images.device
        params = {n: p.detach().to(device=dev, dtype=dtype) for n, p in model.named_parameters()}
        self.groups = param_groups(model)
        self.n_blocks = self.cfg.n_blocks
        inputs = {"images": images.to(dtype), "labels": labels}
        if self.cfg.pos_encoding == "sinusoidal":
            inputs["pos_table"] = model.pos.detach().to(device=dev, dtype=dtype)
        with torch.no_grad():
            super().__init__(program(model), params, inputs)
        self.xp = self.values["xp"]
        self._node_index = {nd.name: i for i, nd in enumerate(self.program.nodes)}

    def ctx(self, node: str) -> dict:
        """The context of the node named ``node`` (its primal values and adjoints)."""
        return self.ctxs[self._node_index[node]]

    # ------------------------------------------------------------------ last FFN in closed form
    def last_ffn_hessian(self, token_chunk: int = 512) -> torch.Tensor:
        """Exact H over (ffn1, ffn2) of the last block, ((d+β)·d_ff + (d_ff+β)·d)², by GEMMs over tokens
        (β = 1 with FFN biases, 0 without).

        After the last FFN come only a LayerNorm (LN2, or ``ln_f`` in pre-norm), its γ/β affine map, mean pooling,
        the head and cross-entropy, so with u = base + act(y W1 + b1) W2 + b2 per token (the FFN input y and the
        residual base fixed), θ1 = [W1; b1] (d+β, d_ff) and θ2 = [W2; b2] (d_ff+β, d), flattened row-major:

        * GGN through the logits: Σ_b J_bᵀ Λ_b J_b, Λ_b = (diag p_b − p_b p_bᵀ)/B,
          J_b = Σ_{t∈b} G_t ∂u_t/∂θ with G_t = W_h diag(γ) (∂n̂/∂u)_t / n  (K × d);
        * the LayerNorm's curvature: Σ_t (∂u_t/∂θ)ᵀ K_t (∂u_t/∂θ), K_t = ∇²_u ⟨δn̂_t, LN(u_t)⟩;
        * the W1–W2 product: Σ_t δu_t[k] y1_t[i] a1_t[j] at (θ1[i, j], θ2[j, k]);
        * the activation's curvature (GELU; zero a.e. for ReLU): Σ_t δr_t[j] a2_t[j] y1_t[i] y1_t[i']
          at (θ1[i, j], θ1[i', j]), diagonal in j, with δr = δu W2ᵀ,

        with ∂u_k/∂θ2[j, k'] = r1_j δ_kk' (r1 = [r, 1] or r) and ∂u_k/∂θ1[i, j] = y1_i a1_j W2[j, k]
        (y1 = [y, 1] or y; a1 = act'(h), a2 = act''(h): the ReLU mask and 0, or GELU' and GELU'').
        K_t and ∂n̂/∂u come from the LayerNorm's tangent rules applied to unit vectors.
        """
        i = self.n_blocks - 1
        P = lambda n: f"blocks.{i}.{n}"  # noqa: E731
        ln_name = P("ln2") if self.cfg.norm == "post" else "ln_f"
        act, ln = self.ctx(P("act")), self.ctx(ln_name)
        y, r = self.ctx(P("ffn1"))["x"], self.ctx(P("ffn2"))["x"]
        dt, dev = self.dtype, self.device
        d, dff = self.cfg.d_model, self.cfg.d_ff
        ntok = self.cfg.n_tokens
        T = y.shape[0] * y.shape[1]
        flat = lambda t: t.reshape(T, t.shape[-1])  # noqa: E731
        if self.cfg.ffn_bias:
            y1 = torch.cat([flat(y), torch.ones(T, 1, dtype=dt, device=dev)], 1)  # (T, d+1)
            r1 = torch.cat([flat(r), torch.ones(T, 1, dtype=dt, device=dev)], 1)  # (T, dff+1)
        else:
            y1, r1 = flat(y), flat(r)  # (T, d), (T, dff)
        e1, e2 = y1.shape[1], r1.shape[1]  # d + β, d_ff + β
        mask = flat(act["a1"])  # act'(h)
        W2 = self.params[P("ffn2.weight")]
        M = mask.unsqueeze(2) * W2  # (T, dff, d): ∂u/∂h = diag(act'(h)) W2
        # LayerNorm Jacobian and curvature per token from the tangent formulas, with u̇ = e_a
        n2, rstd2 = flat(ln["n"]).unsqueeze(1), flat(ln["r"]).unsqueeze(1)  # (T, 1, d), (T, 1, 1)
        eye = torch.eye(d, dtype=dt, device=dev).expand(T, d, d)
        Jln, m_nu = normalize_jvp(n2, rstd2, eye)  # Jln[t, a, k] = ∂n̂_k/∂u_a
        K = normalize_vjp_tangent(n2, rstd2, m_nu, Jln, flat(ln["d_n"]).unsqueeze(1), flat(ln["d_u"]).unsqueeze(1),
                                  flat(ln["s"]).unsqueeze(1), None)  # K[t, a, k] = ∂(δu)_k/∂u_a, symmetric
        p1, p2 = e1 * dff, e2 * d
        # Σ_t (a_t ⊗ b_t) ⊗ C_t as one GEMM over tokens: (a ⊗ b)ᵀ (T, |a||b|) @ vec C (T, |C|)
        F11 = torch.zeros(e1 ** 2, dff * dff, dtype=dt, device=dev)  # (i i', j j')
        F22 = torch.zeros(e2 ** 2, d * d, dtype=dt, device=dev)  # (j j', k k')
        F12 = torch.zeros(e1 * e2, dff * d, dtype=dt, device=dev)  # (i j', j k')
        outer = lambda a, b_: (a.unsqueeze(2) * b_.unsqueeze(1)).reshape(a.shape[0], -1)  # noqa: E731
        for s0 in range(0, T, token_chunk):
            sl = slice(s0, min(T, s0 + token_chunk))
            Kc, Mc, yc, rc = K[sl], M[sl], y1[sl], r1[sl]
            MK = Mc @ Kc  # (t, dff, d)
            N = MK @ Mc.transpose(1, 2)  # (t, dff, dff) = M K Mᵀ
            F11 += outer(yc, yc).T @ N.reshape(-1, dff * dff)
            F22 += outer(rc, rc).T @ Kc.reshape(-1, d * d)
            F12 += outer(yc, rc).T @ MK.reshape(-1, dff * d)
        # assemble to row-major (θ1 | θ2) indices
        H = torch.empty(p1 + p2, p1 + p2, dtype=dt, device=dev)
        H[:p1, :p1] = F11.view(e1, e1, dff, dff).permute(0, 2, 1, 3).reshape(p1, p1)
        if act["a2"] is not None:  # act'' term: Σ_t δr[j] a2[j] y1[i] y1[i'] at (θ1[i, j], θ1[i', j])
            c2 = flat(act["d_y"]) * flat(act["a2"])
            D = torch.einsum("ti,tk,tj->jik", y1, y1, c2)  # (dff, e1, e1)
            jj = torch.arange(dff, device=dev)
            H[:p1, :p1].view(e1, dff, e1, dff)[:, jj, :, jj] += D
        H[p1:, p1:] = F22.view(e2, e2, d, d).permute(0, 2, 1, 3).reshape(p2, p2)
        f12 = F12.view(e1, e2, dff, d).permute(0, 2, 1, 3)  # (i, j, j', k')
        # W1–W2 product term: δu[k'] y1[i] act'(h)[j] at j' = j (not for the bias row j' = dff)
        bil = torch.einsum("ti,tj,tk->ijk", y1, mask, flat(ln["d_u"]))
        f12 = f12.clone()
        f12[:, torch.arange(dff), torch.arange(dff), :] += bil
        H[:p1, p1:] = f12.reshape(p1, p2)
        # GGN through the logits
        Wg = self.params["head.weight"] * self.params[ln_name + ".weight"]  # (K, d) = W_h diag(γ)
        G = torch.einsum("ck,tak->tca", Wg, Jln) / ntok  # (T, K, d): ∂z/∂u_t
        Bs, ncls = y.shape[0], Wg.shape[0]
        GM = G @ M.transpose(1, 2)  # (T, K, dff)
        J1 = torch.einsum("bti,btcj->bcij", y1.view(Bs, ntok, -1), GM.view(Bs, ntok, ncls, dff)).reshape(Bs, ncls, p1)
        J2 = torch.einsum("btj,btck->bcjk", r1.view(Bs, ntok, -1), G.view(Bs, ntok, ncls, d)).reshape(Bs, ncls, p2)
        J = torch.cat([J1, J2], 2)  # (B, K, p1 + p2)
        p = self.ctx("loss")["p"]
        LJ = (p.unsqueeze(2) * J - p.unsqueeze(2) * (p.unsqueeze(1) @ J)) / self.B  # Λ_b J_b
        GGN = J.reshape(-1, p1 + p2).T @ LJ.reshape(-1, p1 + p2)
        H[:p1, :p1] += GGN[:p1, :p1]
        H[p1:, p1:] += GGN[p1:, p1:]
        H[:p1, p1:] += GGN[:p1, p1:]
        H[p1:, :p1] = H[:p1, p1:].T
        return H

    # ------------------------------------------------------------------ the scores' bilinear form
    def scores_grad(self, i: int) -> torch.Tensor:
        """∂L/∂M (D, D) of block ``i``'s bilinear form."""
        node = f"blocks.{i}.attention"
        k = self._node_index[node]
        return self.program.nodes[k].op.grads(self.ctxs[k], self.p[k], ("scores",))["scores"]


# ====================================================================== the route's plans
def closed_form_groups(so: ViTSecondOrder) -> list[str]:
    """Groups whose joint block comes from :meth:`ViTSecondOrder.last_ffn_hessian`.

    The closed form holds for ReLU and GELU, with or without FFN biases, post- and pre-norm; a ReLU model
    without FFN biases keeps its Hessian-vector columns (its published result).
    """
    if not so.n_blocks or (so.cfg.activation == "relu" and not so.cfg.ffn_bias):
        return []
    return [f"block{so.n_blocks - 1}.{f}" for f in ("ffn1", "ffn2")]


def _chunks(so: ViTSecondOrder, chunk, sample_chunk):
    """group -> (tangents per pass, samples per pass): ``chunk`` and ``sample_chunk`` where given, else:

    CPU: 16 tangents × 32 samples keeps the (samples, tangents, n, n) attention tangents in cache
    (64 × 16 for groups after the attention: ``block{i}.out`` (W_O, b_O), ``ln1``, ``ffn1``, ``ffn2``,
    ``ln2``, ``head``); GPU: 256 tangents over the whole batch.
    """
    def per_group(group):
        if so.device.type == "cuda":
            ch, sc = 256, None
        elif group.split(".")[-1] in ("out", "ln1", "ffn1", "ffn2", "ln2") or group in ("head", "ln_f"):
            ch, sc = 64, 16
        else:
            ch, sc = 16, 32
        return chunk or ch, sample_chunk if sample_chunk is not None else sc

    return per_group


def block_pairs(so: ViTSecondOrder, pairs: list[tuple[str, str]], chunk, sample_chunk) -> dict:
    """``{(row, col): H[row, col]}``: the last FFN's pairs from the closed form, the others by the engine's
    :func:`~curvature_gap.hessian.program.blocks`."""
    groups = {g.name: g for g in so.groups}
    cf = closed_form_groups(so)
    out, rest = {}, []
    for row, col in pairs:
        for name in (row, col):
            if name not in groups:
                raise KeyError(f"unknown parameter group {name!r}; groups: {list(groups)}")
        if row in cf and col in cf:
            if "ffn" not in out:
                out["ffn"] = so.last_ffn_hessian()
            off = groups[cf[0]].start
            out[(row, col)] = out["ffn"][groups[row].start - off:groups[row].stop - off,
                                         groups[col].start - off:groups[col].stop - off].contiguous()
        else:
            rest.append((row, col))
    out.pop("ffn", None)
    out.update(blocks(so, rest, chunks=_chunks(so, chunk, sample_chunk)))
    return {p: out[p] for p in pairs}


def bilinear_blocks(so: ViTSecondOrder) -> list[int]:
    """Blocks whose query and key columns come from one pass over the bilinear form of their scores.

    With one head the loss sees W̃_Q and W̃_K (the weights with their bias rows, (D, d_K)) only through
    M = W̃_Q W̃_Kᵀ (D × D), since q kᵀ = x̃ M x̃ᵀ. So H[w, Q] and H[w, K] for every later w are H[w, M]
    mapped by ∂M/∂W̃ (a GEMM with W̃_K or W̃_Q), and the (Q, K)² block is (∂M/∂θ)ᵀ H_MM (∂M/∂θ) plus
    the first-order term ∂L/∂M_ij at (W̃_Q[i, o], W̃_K[j, o]); one pass of D² tangents replaces two of D·d_K
    each. Used where D² < 2 D d_K, i.e. D < 2 d_K (every configured one-head model: D = d_K or d_K + 1).
    """
    if so.cfg.n_heads != 1:
        return []
    D = so.cfg.d_model + int(so.cfg.qkv_bias)
    return list(range(so.n_blocks)) if D < 2 * so.cfg.d_k else []


# The per-sample rows of one pass of the positions (sample chunk × tangents × parameters) this route may hold to
# mix the patch embedding's columns from them (:func:`embed_from_pos`); over it, the embedding has its own pass.
EMBED_FROM_POS_BYTES = 512 * 2 ** 20


def embed_from_pos(so: ViTSecondOrder, chunk: int, sample_chunk: int | None) -> bool:
    """Whether the patch embedding's columns come from the learned positions' pass.

    The tokens are x0[b, t] = E x_p[b, t] + e + pos[t], so a tangent on E[k, j] moves sample b's token t by x_p[b, t, j]
    e_k, and one on e[k] by e_k at every token: each is, sample by sample, a weighted sum of the position tangents e_(t,
    k). The loss is a sum over samples, so with R_b[(t, k)] the per-sample rows of the positions' pass (all groups from
    the embedding on; ∂²x0/∂E² = 0 adds no term) H[:, E[k, j]] = Σ_b Σ_t x_p[b, t, j] R_b[(t, k)] and H[:, e[k]] = Σ_b
    Σ_t R_b[(t, k)]: the positions' pass computes its rows per sample and mixes them with these weights
    (:meth:`ViTSecondOrder.columns`'s ``mix``), and the embedding needs no pass. Needs learned positions, and is used
    while the per-sample rows fit in :data:`EMBED_FROM_POS_BYTES`.
    """
    P = so.groups[-1].stop
    return {"pos", "embed"} <= {g.name for g in so.groups} and \
        (sample_chunk or so.B) * chunk * P * so.xp.element_size() <= EMBED_FROM_POS_BYTES


def dense_plan(so: ViTSecondOrder, closed_form: list[str], bilinear: list[int] = (),
               embed_mixed: bool = False) -> list[tuple[str, list[str]]]:
    """(column group, row groups) passes that together cover every pair of groups once.

    In forward order (the positions first, then the embedding: :func:`embed_from_pos` takes the embedding's columns from
    the positions' pass) each group's pass computes the rows of the groups after it (block triangle); groups in
    ``closed_form`` get no pass: their rows are added to every other group's pass and their own block comes from
    :meth:`ViTSecondOrder.last_ffn_hessian`. For the blocks in ``bilinear`` the query and key passes are one pass over
    the virtual group ``block{i}.scores`` (:func:`bilinear_blocks`), with the rows of the groups after the key (all
    after the attention in forward order, which the bilinear form needs: a tangent of M reaches no earlier input through
    x̃). With ``embed_mixed`` the embedding has no pass.
    """
    order = sorted((g.name for g in so.groups), key=so.program.position)
    if "pos" in order and "embed" in order:
        order.remove("pos")
        order.insert(order.index("embed"), "pos")
    qk = {f"block{i}.{part}": i for i in bilinear for part in ("query", "key")}
    plan = []
    for gi, g in enumerate(order):
        if g in closed_form or (g == "embed" and embed_mixed) or g.endswith(".key") and g in qk:
            continue
        rows = order[gi:] + [h for h in closed_form if order.index(h) < gi]
        if g in qk:  # the query's place: one pass over M (the virtual group block{i}.scores), rows from the value on
            g = f"block{qk[g]}.scores"
            rows = [g] + rows[2:]
        plan.append((g, rows))
    return plan


def _embed_mix(so: ViTSecondOrder, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sample weights of the position tangents ``idx`` (flat (t, k) indices of ``pos``) for
    :func:`embed_from_pos`: (B, c, 1 + patch_dim) = [1 (the position's own column), x_p[b, t, :]], and the
    columns of E (c·patch_dim,) the second part adds to: E[k, j] at k·patch_dim + j (row-major)."""
    d = so.cfg.d_model
    t, k = idx // d, idx % d
    xp = so.xp[:, t, :]  # (B, c, patch_dim)
    pd = xp.shape[-1]
    mix = torch.cat([torch.ones(*xp.shape[:2], 1, dtype=xp.dtype, device=xp.device), xp], 2)
    dest = (k[:, None] * pd + torch.arange(pd, device=idx.device)[None]).reshape(-1)
    return mix, dest


def scores_to_qk(so: ViTSecondOrder, i: int, H_M: dict[str, torch.Tensor]) -> dict[tuple[str, str], torch.Tensor]:
    """Query and key columns of block ``i`` from its scores' columns ``H_M`` (row group -> (|row|, D²)).

    Returns ``{(row, col): H[row, col]}`` for col the query and the key and every row group but the scores,
    and the (Q, K)² block as (Q, Q), (K, K) and (K, Q) (see :func:`bilinear_blocks`)."""
    w = lambda n: so.params[f"blocks.{i}.{n}"]  # noqa: E731  W̃_Q, W̃_K (D, d_K): with their bias rows
    WQ, WK = (torch.cat([w(n), w(f"{n}_bias")[None]]) if so.cfg.qkv_bias else w(n) for n in ("query", "key"))
    D = WQ.shape[0]

    def to_q(X):  # (r, D²) columns of M -> (r, D·d_K) columns of W̃_Q: Σ_b X[:, (a, b)] W̃_K[b, o]
        return (X.view(-1, D, D) @ WK).reshape(X.shape[0], -1)

    def to_k(X):  # -> columns of W̃_K: Σ_a X[:, (a, j)] W̃_Q[a, o]
        return (X.view(-1, D, D).transpose(1, 2) @ WQ).reshape(X.shape[0], -1)

    g, q, k = f"block{i}.scores", f"block{i}.query", f"block{i}.key"
    out = {}
    for row, X in H_M.items():
        if row != g:
            out[(row, q)], out[(row, k)] = to_q(X), to_k(X)
    HMM = H_M[g]
    HMQ, HMK = to_q(HMM), to_k(HMM)  # (D², D·d_K)
    out[(q, q)] = to_q(HMQ.T.contiguous()).T
    out[(k, k)] = to_k(HMK.T.contiguous()).T
    QK = to_q(HMK.T.contiguous()).T  # (D·d_K, D·d_K): rows Q, columns K
    dk = WQ.shape[1]
    # first-order term: ∂²M_ab/∂W̃_Q[i, o]∂W̃_K[j, o'] = δ_ai δ_bj δ_oo', times ∂L/∂M_ij
    G = so.scores_grad(i)
    QK.view(D, dk, D, dk).add_(G[:, None, :, None] * torch.eye(dk, dtype=G.dtype, device=G.device)[None, :, None, :])
    out[(k, q)] = QK.T
    return out


def dense(so: ViTSecondOrder, chunk, sample_chunk, closed_form: bool = True, bilinear: bool = True,
          embed_mixed: bool = True) -> torch.Tensor:
    """The dense Hessian by the passes of :func:`dense_plan`. ``closed_form`` (:func:`closed_form_groups`), ``bilinear``
    (:func:`bilinear_blocks`) and ``embed_mixed`` (:func:`embed_from_pos`) switch on the module doc's exact shortcuts;
    False computes those columns by their own passes."""
    groups = {g.name: g for g in so.groups}
    P = so.groups[-1].stop
    H = torch.empty(P, P, dtype=so.dtype, device=so.device)
    cf = closed_form_groups(so) if closed_form else []
    per_group = _chunks(so, chunk, sample_chunk)
    mixed = embed_mixed and embed_from_pos(so, *per_group("pos"))
    done = set()
    for col, rows in dense_plan(so, cf, bilinear_blocks(so) if bilinear else (), mixed):
        ch, sc = per_group(col)
        emb = pass_ = None
        if col == "pos" and mixed:  # H[r, E] for the rows from the embedding on, accumulated over the pass
            emb_rows = rows[rows.index("embed"):]
            n_w = so.params["embed.weight"].numel()
            emb = {r: torch.zeros(n_w, groups[r].size, dtype=so.dtype, device=so.device) for r in emb_rows}

            def pass_(idx):
                mix, dest = _embed_mix(so, idx)
                res = so.columns(so.group_basis(col, idx), rows, sc, mix, emb_rows)
                for r in emb_rows:
                    emb[r].index_add_(0, dest, res[r][:, 1:].reshape(-1, groups[r].size))
                    res[r] = res[r][:, 0]
                return res

        blks = block_columns(so, col, rows, ch, sc, pass_)  # H[r, col]
        if emb is not None:  # and H[r, e] = Σ_t H[r, pos(t, ·)]
            d = so.cfg.d_model
            for r in emb_rows:
                cols = [emb[r].T]
                if "embed.bias" in groups["embed"].param_names:
                    cols.append(blks[r].view(-1, so.cfg.n_tokens, d).sum(1))
                H[groups[r].slice, groups["embed"].slice] = torch.cat(cols, 1)
                done.add((r, "embed"))
        block, _, part = col.partition(".")
        blks = scores_to_qk(so, int(block[5:]), blks) if part == "scores" else {(r, col): blks[r] for r in rows}
        for (r, c), blk in blks.items():
            H[groups[r].slice, groups[c].slice] = blk
            done.add((r, c))
    if cf:
        s = slice(groups[cf[0]].start, groups[cf[1]].stop)
        H[s, s] = so.last_ffn_hessian()
        done.update((a, b) for a in cf for b in cf)
    return fill(H, done, {g: groups[g].slice for g in groups})
