"""Exact Hessian columns of the paper's ViT and of the authors' ViT by hand-written forward-over-reverse
differentiation, composed from the per-operation rules of :mod:`curvature_gap.hessian.ops`.

For the empirical risk ``L(w) = (1/B) Σ_n ℓ(z_n(w), y_n)`` (cross-entropy, mean over the batch) a
Hessian column is the directional derivative of the gradient, ``H e_j = d/dε ∇L(w + ε e_j)``.
:class:`ViTSecondOrder` runs the forward and backward pass of :class:`curvature_gap.model.ViT` once
(primal values ``a`` and adjoints ``δa = ∂L/∂a``) and then propagates, for ``c`` tangent directions
at a time, the forward tangents ``ȧ = (∂a/∂w) v`` and the tangents of the adjoints ``δȧ`` (the
"forward-over-reverse" Hessian-vector product), op by op with each op's rules from :mod:`.ops`.

The block (post-norm, one head), with the ops as the model's :class:`~curvature_gap.config.ModelConfig`
names them (``qkv_bias``, ``out_proj``, ``out_proj_bias``, ``ffn_bias``, ``activation``; bracketed terms
exist only where the config has them)::

    q = x W_Q [+ b_Q],  k = x W_K [+ b_K],  A = softmax(q kᵀ / √d_K),  v = (A x) W_V [+ b_V],   (linear, attention)
    o = v [W_O + b_O],  u1 = x + o,  y = LN1(u1),  h = y W_1 [+ b_1],  r = act(h),            (layernorm, activation)
    u2 = y + r W_2 [+ b_2],  out = LN2(u2),

with act = ReLU (the theorem's block) or the exact-erf GELU (the authors' block), the tokens
``x0 = X_p Eᵀ + e + pos`` (``pos`` a learned parameter, the fixed sinusoidal table — a buffer, no
tangent — or absent) and the head ``z = mean_tokens(out) W_hᵀ + b_h`` into the cross-entropy.

Savings over generic Hessian-vector products, all exact:

* **triangle:** the tangent of a column in parameter group ``g`` is zero before ``g`` is first used,
  and only rows of groups at or after ``g`` (forward order) are computed, so the backward tangent
  stops at ``g``; the other triangle follows from symmetry ``H = Hᵀ``;
* **batched tangents:** ``c`` directions travel together in the layout (B, n, c, d), so every
  weight product is one GEMM ((B·n·c, d_in) @ (d_in, d_out)) and every Hessian-row contraction
  over tokens is one GEMM with inner dimension B·n; attention tangents use the row layout (B, n, c, n)
  (:mod:`.ops.attention`), in which each of their products is one batched GEMM;
* **token-sized row sums:** the softmax adjoint tangent's row sums are token-sized (:mod:`.ops.attention`);
* **closed-form last FFN:** :meth:`ViTSecondOrder.last_ffn_hessian` gives the (W1, b1, W2, b2)
  block of the last block from per-token quantities (see its docstring; with GELU it has one more,
  diagonal, term).
* **the scores' bilinear form:** a tangent of the virtual group ``block{i}.scores`` (M = W̃_Q W̃_Kᵀ, D × D;
  :meth:`ViTSecondOrder.scores_input`) enters as ``Ṫ = s x̃ Ṁ x̃ᵀ`` and has rows ``Σ x̃ᵀ (s δṪ) x̃``, from which the
  dense route maps the query and key columns (:func:`curvature_gap.hessian._bilinear_blocks`);
* **per-sample rows:** :meth:`ViTSecondOrder.columns` can return rows mixed over the samples with given weights,
  from which the dense route takes the patch embedding's columns out of the positions' pass
  (:func:`curvature_gap.hessian._embed_from_pos`).

Shapes: B images, n tokens, d = d_V, d_K, d_ff, K classes, c tangent directions; bias tangents (c, o).
Parameters keep their stored orientation (``X @ W`` for block weights, ``nn.Linear``'s (out, in) for
embedding and head); rows are flattened row-major per parameter, in ``param_groups`` order.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..config import describe_support, unsupported_variant
from ..model import ViT, patchify
from ..params import param_groups
from .ops import activation, attention, cross_entropy, layernorm, linear
from .ops.linear import add

__all__ = ["ViTSecondOrder", "BLOCK_PARTS", "SUPPORTS"]

# The parameter groups of one block in forward order ("out", W_O and b_O, only in variants with W_O).
BLOCK_PARTS = ("query", "key", "value", "out", "ln1", "ffn1", "ffn2", "ln2")
# The model variants these hand-written derivatives are written for (ModelConfig field -> allowed values;
# ffn_bias, out_proj_bias, init and ln_eps may take any value): the theorem's post-norm block with Table 1's
# embedding and head, and the authors' block (Q/K/V biases, W_O, GELU, sinusoidal positions). The
# initialisation does not enter the derivatives.
SUPPORTS = {"norm": ("post",), "n_heads": (1,), "activation": ("relu", "gelu"), "qkv_bias": (False, True),
            "out_proj": (False, True), "patch_bias": (True,), "pos_encoding": ("learned", "sinusoidal", "none"),
            "head_bias": (True,)}


def unsupported(model) -> list[str]:
    """Why :class:`ViTSecondOrder` cannot differentiate ``model`` (empty when it can)."""
    if not isinstance(model, ViT):
        return [f"{type(model).__name__} is not a curvature_gap ViT"]
    reasons = unsupported_variant(model.cfg, SUPPORTS)
    if any(b.ln1.fused or b.ln2.fused for b in model.blocks):
        reasons.append("fused_ln=True (the hand-written Hessian follows the hand-written LayerNorm)")
    return reasons


def unsupported_message(model) -> str:
    """The error for ``method='vit'`` on ``model``: what the route supports, what the model has, the fix."""
    reasons = unsupported(model)
    fix = ("build the model with fused_ln=False" if reasons[-1].startswith("fused_ln") and len(reasons) == 1 else
           "use method='functorch', 'curvlinops' or 'torch.func' (any variant), or method='auto'")
    name = f" ({model.cfg.name})" if isinstance(model, ViT) else ""
    return (f"method='vit' supports {describe_support(SUPPORTS)}, hand-written LayerNorm; "
            f"this model{name} has {', '.join(reasons)}. Fix: {fix}")


@dataclass
class _Block:
    """Primal values and adjoints of one block for a batch (shapes without the tangent axis)."""

    x: torch.Tensor  # (B, n, d) block input
    q: torch.Tensor
    k: torch.Tensor  # (B, n, dk)
    A: torch.Tensor  # (B, n, n)
    ax: torch.Tensor  # (B, n, d) = A x
    n1: torch.Tensor
    rstd1: torch.Tensor
    y: torch.Tensor  # LN1 output
    mask: torch.Tensor  # (B, n, dff) act'(h): the ReLU mask as float, or GELU'(h)
    r: torch.Tensor  # act(h)
    n2: torch.Tensor
    rstd2: torch.Tensor
    v: torch.Tensor | None = None  # (B, n, d) = (A x) W_V + b_V, kept only when W_O follows
    curv: torch.Tensor | None = None  # (B, n, dff) act''(h) (GELU; None for ReLU)
    # adjoints (∂L/∂·)
    d_out: torch.Tensor | None = None  # block output
    d_n2: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    d_u2: torch.Tensor | None = None
    d_r: torch.Tensor | None = None  # = δu2 W_2ᵀ, kept only when act'' ≠ 0 (GELU)
    d_h: torch.Tensor | None = None
    d_y: torch.Tensor | None = None
    d_n1: torch.Tensor | None = None
    s1: torch.Tensor | None = None
    d_u1: torch.Tensor | None = None  # = δo
    d_v: torch.Tensor | None = None  # = δo W_Oᵀ (δo itself without W_O)
    d_ax: torch.Tensor | None = None
    att: attention.Adjoint | None = None  # δA, ρ, δT, δq, δk, Aᵀ δax

    def slice(self, sl: slice) -> "_Block":
        def cut(v):
            if v is None:
                return None
            if isinstance(v, attention.Adjoint):
                return attention.Adjoint(**{f: t[sl] for f, t in v.__dict__.items()})
            return v[sl]

        return _Block(**{f: cut(v) for f, v in self.__dict__.items()})


class ViTSecondOrder:
    """Primal pass, adjoint pass and batched Hessian columns of a :class:`ViT` with cross-entropy.

    ``images`` (B, C, H, W), ``labels`` (B,). The loss is the batch mean. All computation runs in
    ``dtype`` (default: the model's) on the images' device; the model itself is not modified. The ops and
    their order come from ``model.cfg`` (:class:`~curvature_gap.config.ModelConfig`).
    """

    def __init__(self, model: ViT, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype | None = None):
        if not isinstance(model, ViT):
            raise TypeError("ViTSecondOrder needs a curvature_gap.model.ViT")
        if unsupported(model):
            raise ValueError(unsupported_message(model))
        self.cfg = model.cfg
        dtype = dtype or next(model.parameters()).dtype
        dev = images.device
        self.dtype, self.device = dtype, dev
        self.p = {n: p.detach().to(device=dev, dtype=dtype) for n, p in model.named_parameters()}
        self.groups = param_groups(model)
        self.group_index = {g.name: i for i, g in enumerate(self.groups)}
        self.eps = [(b.ln1.eps, b.ln2.eps) for b in model.blocks]
        self.n_blocks = self.cfg.n_blocks
        pos = self.p.get("pos", model.pos)  # learned (a parameter), sinusoidal (a buffer) or None
        self.pos = None if pos is None else pos.detach().to(device=dev, dtype=dtype)
        with torch.no_grad():
            self._primal(images.to(dtype), labels)
            self._adjoint()

    # ------------------------------------------------------------------ primal and adjoint
    def _w(self, i: int, name: str) -> torch.Tensor | None:
        return self.p.get(f"blocks.{i}.{name}")

    def _primal(self, images, labels):
        p = self.p
        self.xp = patchify(images, self.cfg.patch_size)  # (B, n, patch_dim)
        x = self.xp @ p["embed.weight"].T + p["embed.bias"]
        if self.pos is not None:
            x = x + self.pos
        self.blocks: list[_Block] = []
        for i in range(self.n_blocks):
            blk, x = self._block_primal(i, x)
            self.blocks.append(blk)
        self.features = x
        self.m = x.mean(1)  # (B, d)
        z = self.m @ p["head.weight"].T + p["head.bias"]
        self.B = images.shape[0]
        self.probs, self.loss, self.d_z = cross_entropy.primal(z, labels)

    def _block_primal(self, i: int, x: torch.Tensor) -> tuple[_Block, torch.Tensor]:
        """One block of the config's variant, the arithmetic of ``model.Block``; returns its primal values and
        the block output."""
        w = lambda name: self._w(i, name)  # noqa: E731
        q, k = linear.primal(x, w("query"), w("query_bias")), linear.primal(x, w("key"), w("key_bias"))
        A = attention.primal(q, k)
        ax = A @ x
        v = linear.primal(ax, w("value"), w("value_bias"))
        o = linear.primal(v, w("out"), w("out_bias")) if self.cfg.out_proj else v
        n1, rstd1, y = layernorm.primal(x + o, self.eps[i][0], w("ln1.weight"), w("ln1.bias"))
        h = linear.primal(y, w("ffn1.weight"), w("ffn1.bias"))
        r, a1, a2 = activation.parts(h, self.cfg.activation)
        n2, rstd2, out = layernorm.primal(y + linear.primal(r, w("ffn2.weight"), w("ffn2.bias")), self.eps[i][1],
                                          w("ln2.weight"), w("ln2.bias"))
        return _Block(x, q, k, A, ax, n1, rstd1, y, a1, r, n2, rstd2, v=v if self.cfg.out_proj else None,
                      curv=a2), out

    def _adjoint(self):
        d_m = self.d_z @ self.p["head.weight"]  # (B, d); the head is nn.Linear: z = m W_hᵀ + b_h
        d_x = (d_m / self.cfg.n_tokens).unsqueeze(1).expand_as(self.features)
        for i in reversed(range(self.n_blocks)):
            b, w = self.blocks[i], (lambda name, i=i: self._w(i, name))
            b.d_out = d_x
            b.d_n2 = layernorm.affine_vjp(d_x, w("ln2.weight"))
            b.d_u2, b.s2 = layernorm.vjp(b.n2, b.rstd2, b.d_n2)
            d_r = linear.vjp(b.d_u2, w("ffn2.weight"))
            b.d_h = activation.vjp(b.mask, d_r)
            b.d_r = None if b.curv is None else d_r
            b.d_y = b.d_u2 + linear.vjp(b.d_h, w("ffn1.weight"))
            b.d_n1 = layernorm.affine_vjp(b.d_y, w("ln1.weight"))
            b.d_u1, b.s1 = layernorm.vjp(b.n1, b.rstd1, b.d_n1)
            b.d_v = linear.vjp(b.d_u1, w("out")) if self.cfg.out_proj else b.d_u1
            b.d_ax = linear.vjp(b.d_v, w("value"))
            b.att = attention.vjp(b.A, b.x, b.q, b.k, b.d_ax)
            d_x = b.d_u1 + b.att.d_x + linear.vjp(b.att.d_q, w("query")) + linear.vjp(b.att.d_k, w("key"))
        self.d_x0 = d_x

    # ------------------------------------------------------------------ last FFN in closed form
    def last_ffn_hessian(self, token_chunk: int = 512) -> torch.Tensor:
        """Exact H over (ffn1, ffn2) of the last block, ((d+β)·d_ff + (d_ff+β)·d)², by GEMMs over tokens
        (β = 1 with FFN biases, 0 without).

        After the last FFN come only LN2, the γ2/β2 affine map, mean pooling, the head and
        cross-entropy, so with u = y + act(y W1 + b1) W2 + b2 per token (y fixed),
        θ1 = [W1; b1] (d+β, d_ff) and θ2 = [W2; b2] (d_ff+β, d), flattened row-major:

        * GGN through the logits: Σ_b J_bᵀ Λ_b J_b, Λ_b = (diag p_b − p_b p_bᵀ)/B,
          J_b = Σ_{t∈b} G_t ∂u_t/∂θ with G_t = W_h diag(γ2) (∂n̂/∂u)_t / n  (K × d);
        * LN2 curvature: Σ_t (∂u_t/∂θ)ᵀ K_t (∂u_t/∂θ), K_t = ∇²_u ⟨δn̂_t, LN(u_t)⟩;
        * the W1–W2 product: Σ_t δu_t[k] y1_t[i] a1_t[j] at (θ1[i, j], θ2[j, k]);
        * the activation's curvature (GELU; zero a.e. for ReLU): Σ_t δr_t[j] a2_t[j] y1_t[i] y1_t[i']
          at (θ1[i, j], θ1[i', j]), diagonal in j, with δr = δu W2ᵀ,

        with ∂u_k/∂θ2[j, k'] = r1_j δ_kk' (r1 = [r, 1] or r) and ∂u_k/∂θ1[i, j] = y1_i a1_j W2[j, k]
        (y1 = [y, 1] or y; a1 = act'(h), a2 = act''(h): the ReLU mask and 0, or GELU' and GELU'').
        K_t and ∂n̂/∂u come from the LayerNorm tangent formulas applied to unit vectors.
        """
        i = self.n_blocks - 1
        b = self.blocks[i]
        dt = self.dtype
        d, dff = self.cfg.d_model, self.cfg.d_ff
        ntok = self.cfg.n_tokens
        T = b.y.shape[0] * b.y.shape[1]
        flat = lambda t: t.reshape(T, t.shape[-1])  # noqa: E731
        if self.cfg.ffn_bias:
            y1 = torch.cat([flat(b.y), torch.ones(T, 1, dtype=dt, device=self.device)], 1)  # (T, d+1)
            r1 = torch.cat([flat(b.r), torch.ones(T, 1, dtype=dt, device=self.device)], 1)  # (T, dff+1)
        else:
            y1, r1 = flat(b.y), flat(b.r)  # (T, d), (T, dff)
        e1, e2 = y1.shape[1], r1.shape[1]  # d + β, d_ff + β
        mask = flat(b.mask)  # act'(h)
        W2 = self._w(i, "ffn2.weight")
        M = mask.unsqueeze(2) * W2  # (T, dff, d): ∂u/∂h = diag(act'(h)) W2
        # LayerNorm Jacobian and curvature per token from the tangent formulas, with u̇ = e_a
        n2, rstd2 = flat(b.n2).unsqueeze(1), flat(b.rstd2).unsqueeze(1)  # (T, 1, d), (T, 1, 1)
        eye = torch.eye(d, dtype=dt, device=self.device).expand(T, d, d)
        Jln, m_nu = layernorm.jvp(n2, rstd2, eye)  # Jln[t, a, k] = ∂n̂_k/∂u_a
        K = layernorm.vjp_tangent(n2, rstd2, m_nu, Jln, flat(b.d_n2).unsqueeze(1), flat(b.d_u2).unsqueeze(1),
                                flat(b.s2).unsqueeze(1), None)  # K[t, a, k] = ∂(δu)_k/∂u_a, symmetric
        p1, p2 = e1 * dff, e2 * d
        # Σ_t (a_t ⊗ b_t) ⊗ C_t as one GEMM over tokens: (a ⊗ b)ᵀ (T, |a||b|) @ vec C (T, |C|)
        F11 = torch.zeros(e1 ** 2, dff * dff, dtype=dt, device=self.device)  # (i i', j j')
        F22 = torch.zeros(e2 ** 2, d * d, dtype=dt, device=self.device)  # (j j', k k')
        F12 = torch.zeros(e1 * e2, dff * d, dtype=dt, device=self.device)  # (i j', j k')
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
        H = torch.empty(p1 + p2, p1 + p2, dtype=dt, device=self.device)
        H[:p1, :p1] = F11.view(e1, e1, dff, dff).permute(0, 2, 1, 3).reshape(p1, p1)
        if b.curv is not None:  # act'' term: Σ_t δr[j] a2[j] y1[i] y1[i'] at (θ1[i, j], θ1[i', j])
            c2 = flat(b.d_r) * flat(b.curv)
            D = torch.einsum("ti,tk,tj->jik", y1, y1, c2)  # (dff, e1, e1)
            jj = torch.arange(dff, device=self.device)
            H[:p1, :p1].view(e1, dff, e1, dff)[:, jj, :, jj] += D
        H[p1:, p1:] = F22.view(e2, e2, d, d).permute(0, 2, 1, 3).reshape(p2, p2)
        f12 = F12.view(e1, e2, dff, d).permute(0, 2, 1, 3)  # (i, j, j', k')
        # W1–W2 product term: δu[k'] y1[i] act'(h)[j] at j' = j (not for the bias row j' = dff)
        bil = torch.einsum("ti,tj,tk->ijk", y1, mask, flat(b.d_u2))
        f12 = f12.clone()
        f12[:, torch.arange(dff), torch.arange(dff), :] += bil
        H[:p1, p1:] = f12.reshape(p1, p2)
        # GGN through the logits
        Wg = self.p["head.weight"] * self._w(i, "ln2.weight")  # (K, d) = W_h diag(γ2)
        G = torch.einsum("ck,tak->tca", Wg, Jln) / ntok  # (T, K, d): ∂z/∂u_t
        Bs, ncls = b.y.shape[0], Wg.shape[0]
        GM = G @ M.transpose(1, 2)  # (T, K, dff)
        J1 = torch.einsum("bti,btcj->bcij", y1.view(Bs, ntok, -1), GM.view(Bs, ntok, ncls, dff)).reshape(Bs, ncls, p1)
        J2 = torch.einsum("btj,btck->bcjk", r1.view(Bs, ntok, -1), G.view(Bs, ntok, ncls, d)).reshape(Bs, ncls, p2)
        J = torch.cat([J1, J2], 2)  # (B, K, p1 + p2)
        p = self.probs
        LJ = (p.unsqueeze(2) * J - p.unsqueeze(2) * (p.unsqueeze(1) @ J)) / self.B  # Λ_b J_b
        GGN = J.reshape(-1, p1 + p2).T @ LJ.reshape(-1, p1 + p2)
        H[:p1, :p1] += GGN[:p1, :p1]
        H[p1:, p1:] += GGN[p1:, p1:]
        H[:p1, p1:] += GGN[:p1, p1:]
        H[p1:, :p1] = H[:p1, p1:].T
        return H

    # ------------------------------------------------------------------ the scores' bilinear form
    @staticmethod
    def scores_group(i: int) -> str:
        """The name of block ``i``'s virtual group M = W̃_Q W̃_Kᵀ (:meth:`scores_input`)."""
        return f"block{i}.scores"

    @staticmethod
    def scores_block(group: str) -> int | None:
        """The block of a virtual ``block{i}.scores`` group; None for any other group."""
        block, _, part = group.partition(".")
        return int(block[len("block"):]) if part == "scores" else None

    def scores_dim(self) -> int:
        """D, the side of M: d, plus 1 where Q and K have biases."""
        return self.cfg.d_model + int(self.cfg.qkv_bias)

    def scores_input(self, i: int, b: _Block | None = None) -> torch.Tensor:
        """x̃ (B, n, D) of block ``i``: its input, with a column of ones where Q and K have biases, so that
        ``q kᵀ = x̃ M x̃ᵀ`` with ``M = W̃_Q W̃_Kᵀ``, ``W̃ = [W; bᵀ]`` (D = d + 1 with biases, else d)."""
        x = (b or self.blocks[i]).x
        if not self.cfg.qkv_bias:
            return x
        return torch.cat([x, torch.ones(*x.shape[:2], 1, dtype=x.dtype, device=x.device)], -1)

    def scores_factors(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(W̃_Q, W̃_K), each (D, d_K): the query and key weights with their bias rows, in the row-major order
        of the groups ``block{i}.query`` and ``block{i}.key``."""
        w = lambda name: self._w(i, name)  # noqa: E731
        if not self.cfg.qkv_bias:
            return w("query"), w("key")
        return torch.cat([w("query"), w("query_bias")[None]]), torch.cat([w("key"), w("key_bias")[None]])

    def scores_grad(self, i: int) -> torch.Tensor:
        """∂L/∂M (D, D) of block ``i``'s bilinear form (:func:`.ops.attention.scores_grad`)."""
        return attention.scores_grad(self.scores_input(i), self.blocks[i].att)

    def _row_index(self, group: str) -> float:
        """Backward position of a row group: its forward index; ``block{i}.scores`` (the virtual group of
        M = W̃_Q W̃_Kᵀ, :meth:`scores_input`) sits between the key and the value."""
        i = self.scores_block(group)
        return self.group_index[group] if i is None else self.group_index[f"block{i}.key"] + 0.5

    def _group_params(self, group: str) -> list[tuple[str, torch.Size]]:
        i = self.scores_block(group)
        if i is not None:
            return [(f"blocks.{i}.scores", torch.Size((self.scores_dim(),) * 2))]
        return [(name, self.p[name].shape) for name in self.groups[self.group_index[group]].param_names]

    def group_size(self, group: str) -> int:
        """Entries of a parameter group, or of a virtual ``block{i}.scores`` group (D²)."""
        return sum(shp.numel() for _, shp in self._group_params(group))

    # ------------------------------------------------------------------ tangents
    def group_basis(self, group: str, cols: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unit tangents e_j (j = flat indices within ``group``, a parameter group or a virtual
        ``block{i}.scores``) as a dict name -> (c, *shape)."""
        return self.group_tangent(group, torch.nn.functional.one_hot(cols, self.group_size(group)).to(self.dtype))

    def group_tangent(self, group: str, V: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split (c, group size) directions into a dict parameter name -> (c, *shape)."""
        out, off = {}, 0
        for name, shp in self._group_params(group):
            k = shp.numel()
            out[name] = V[:, off:off + k].reshape(V.shape[0], *shp)
            off += k
        return out

    def columns(self, tangent: dict[str, torch.Tensor], rows: list[str], sample_chunk: int | None = None,
                mix: torch.Tensor | None = None, mixed_rows=()) -> dict[str, torch.Tensor]:
        """Hessian-times-tangent restricted to the parameter groups ``rows``.

        ``tangent`` maps parameter names to (c, *shape) directions; names not given are zero.
        Returns group name -> (c, group size). Rows in groups before the tangent's earliest group
        must not be requested when they would need the backward tangent beyond the input (always
        allowed: every group's rows are computed when asked for). ``sample_chunk`` processes the
        batch in pieces (sum over pieces; identical result).

        ``mix`` (B, c, m): sample weights. The loss is a sum over samples, so a row is a sum of per-sample
        rows R_b; with ``mix`` the result of each group in ``mixed_rows`` is (c, m, group size),
        ``Σ_b mix[b, c, μ] R_b[c]`` (weights of ones give the plain rows). :func:`curvature_gap.hessian._vit_dense`
        uses it for the patch embedding's columns from the positions' pass.
        """
        B = self.B
        step = sample_chunk or B
        total: dict[str, torch.Tensor] | None = None
        for s0 in range(0, B, step):
            sl = slice(s0, min(B, s0 + step))
            part = self._columns(tangent, rows, sl, None if mix is None else mix[sl], mixed_rows)
            total = part if total is None else {k: total[k] + part[k] for k in total}
        return total


    def _columns(self, tan: dict[str, torch.Tensor], rows: list[str], sl: slice, mix=None,
                 mixed_rows=()) -> dict[str, torch.Tensor]:
        """H V restricted to the rows of groups ``rows`` for the samples ``sl``: forward tangents to the loss,
        then adjoint tangents back to the earliest requested group (each op's rules from :mod:`.ops`); with
        ``mix`` (the samples' weights, (|sl|, c, m)) the rows of ``mixed_rows`` are computed per sample and mixed
        (:meth:`columns`)."""
        c = next(iter(tan.values())).shape[0]
        ntok = self.cfg.n_tokens
        p = self.p
        # ---------------- forward tangents
        xp = self.xp[sl]
        dx = None
        if "embed.weight" in tan:  # the embedding is nn.Linear: x0 = X_p Eᵀ + e
            dx = linear.act_times_tangent(xp, tan["embed.weight"].transpose(1, 2))
        if "embed.bias" in tan:
            dx = add(dx, tan["embed.bias"][None, None])
        if "pos" in tan:
            dx = add(dx, tan["pos"].transpose(0, 1)[None])
        if dx is not None:
            dx = dx.expand(xp.shape[0], ntok, c, self.cfg.d_model).contiguous()
        blocks = [b.slice(sl) for b in self.blocks]
        fwd = []
        for i, b in enumerate(blocks):
            pre = f"blocks.{i}."
            if dx is None and not any(k.startswith(pre) for k in tan):
                fwd.append({})
                continue
            t = self._block_jvp(i, b, dx, tan, c)
            fwd.append(t)
            dx = t["dout"]
        m = self.m[sl]
        dm = None if dx is None else dx.mean(1)  # (B, c, d)
        Wh = p["head.weight"]
        dz = None if dm is None else dm @ Wh.T
        if "head.weight" in tan:
            dz = add(dz, torch.einsum("bd,ckd->bck", m, tan["head.weight"]))
        if "head.bias" in tan:
            dz = add(dz, tan["head.bias"][None].expand(m.shape[0], c, -1))

        # ---------------- adjoint tangents, stopping when all rows are done
        res: dict[str, torch.Tensor] = {}
        want = set(rows)
        earliest = min(self._row_index(r) for r in rows)

        mixed = set(mixed_rows) if mix is not None else set()
        ps = lambda group: group in mixed  # noqa: E731  rows per sample, then mixed

        def put(group, parts):
            """Store the rows of ``group`` if asked; True when no earlier group is asked for (stop)."""
            if group in want:
                if ps(group):  # (c, m, B) @ (c, B, size), part by part
                    res[group] = torch.cat([torch.bmm(mix.permute(1, 2, 0), t.reshape(mix.shape[0], c, -1).transpose(0, 1))
                                            for t in parts], 2)
                else:
                    res[group] = torch.cat([t.reshape(c, -1) for t in parts], 1)
            return earliest >= self._row_index(group)

        d_z = self.d_z[sl]
        ddz = cross_entropy.vjp_tangent(self.probs[sl], dz, self.B)
        if "head" in want:
            lead, b_ = ((m.shape[0], c), "b") if ps("head") else ((c,), "")
            gw = torch.zeros(*lead, *Wh.shape, dtype=self.dtype, device=self.device)
            gb = torch.zeros(*lead, Wh.shape[0], dtype=self.dtype, device=self.device)
            if ddz is not None:
                gw = gw + torch.einsum(f"bck,bd->{b_}ckd", ddz, m)
                gb = gb + (ddz if ps("head") else ddz.sum(0))
            if dm is not None:
                gw = gw + torch.einsum(f"bk,bcd->{b_}ckd", d_z, dm)
            put("head", [gw, gb])
        if earliest >= self.group_index["head"]:
            return res
        ddm = None if ddz is None else ddz @ Wh
        if "head.weight" in tan:
            ddm = add(ddm, torch.einsum("bk,ckd->bcd", d_z, tan["head.weight"]))
        ddx = None if ddm is None else (ddm / ntok).unsqueeze(1).expand(m.shape[0], ntok, c, -1)
        for i in reversed(range(self.n_blocks)):
            ddx, stop = self._block_vjp_tangent(i, blocks[i], fwd[i], ddx, tan, c, put, want, ps)
            if stop:
                return res
        if "embed" in want:
            lead = (xp.shape[0], c) if ps("embed") else (c,)
            if ddx is None:
                gw, gb = torch.zeros(*lead, *p["embed.weight"].shape, dtype=self.dtype, device=self.device), \
                    torch.zeros(*lead, p["embed.bias"].shape[0], dtype=self.dtype, device=self.device)
            else:
                gw, gb = linear.tok_contract(ddx, xp, ps("embed")), linear.tok_sum(ddx, ps("embed"))
            put("embed", [gw, gb])
        if "pos" in want:
            lead = (xp.shape[0], c) if ps("pos") else (c,)
            put("pos", [torch.zeros(*lead, *p["pos"].shape, dtype=self.dtype, device=self.device) if ddx is None
                        else ddx.transpose(1, 2) if ps("pos") else ddx.sum(0).transpose(0, 1)])
        return res

    def _block_jvp(self, i: int, b: _Block, dx, tan: dict, c: int) -> dict:
        """Forward tangents of block ``i`` from the input tangent ``dx`` (or None) and the tangents of its
        parameters in ``tan``; returns every tangent the adjoint tangent needs, and the output's (``dout``)."""
        pre, cfg = f"blocks.{i}.", self.cfg
        w = lambda name: self._w(i, name)  # noqa: E731
        T = lambda name: tan.get(pre + name)  # noqa: E731
        dq = linear.jvp(b.x, dx, w("query"), T("query"), T("query_bias"))
        dk = linear.jvp(b.x, dx, w("key"), T("key"), T("key_bias"))
        dM = T("scores")  # a tangent of the scores' bilinear form (virtual group block{i}.scores)
        dA = attention.jvp(b.A, b.q, b.k, dq, dk, c, dM, None if dM is None else self.scores_input(i, b))
        dax, dx_c = attention.mix_jvp(b.A, b.x, dA, dx, c)
        dv = linear.jvp(b.ax, dax, w("value"), T("value"), T("value_bias"))
        do = linear.jvp(b.v, dv, w("out"), T("out"), T("out_bias")) if cfg.out_proj else dv
        n1, rstd1 = b.n1.unsqueeze(2), b.rstd1.unsqueeze(2)
        dn1, m_nu1 = layernorm.jvp(n1, rstd1, add(dx, do))
        dy = layernorm.affine_jvp(n1, dn1, w("ln1.weight"), T("ln1.weight"), T("ln1.bias"))
        dh = linear.jvp(b.y, dy, w("ffn1.weight"), T("ffn1.weight"), T("ffn1.bias"))
        dr = activation.jvp(b.mask, dh)
        df = linear.jvp(b.r, dr, w("ffn2.weight"), T("ffn2.weight"), T("ffn2.bias"))
        n2, rstd2 = b.n2.unsqueeze(2), b.rstd2.unsqueeze(2)
        dn2, m_nu2 = layernorm.jvp(n2, rstd2, add(dy, df))
        dout = layernorm.affine_jvp(n2, dn2, w("ln2.weight"), T("ln2.weight"), T("ln2.bias"))
        return dict(dx=dx, dq=dq, dk=dk, dA=dA, dx_c=dx_c, dax=dax, dv=dv, dn1=dn1, m_nu1=m_nu1, dy=dy, dh=dh,
                    dr=dr, dn2=dn2, m_nu2=m_nu2, dout=dout)

    def _block_vjp_tangent(self, i: int, b: _Block, t: dict, ddx, tan: dict, c: int, put, want: set,
                           ps=lambda group: False):
        """Adjoint tangents of block ``i`` from the output's ``ddx``, storing the rows of its groups with
        ``put`` (the rows of the virtual ``block{i}.scores`` only when in ``want``); returns (the input's adjoint
        tangent, stop) where stop means no earlier rows are asked for; ``ps(group)``: that group's rows per
        sample."""
        pre, g, cfg = f"blocks.{i}.", f"block{i}.", self.cfg
        w = lambda name: self._w(i, name)  # noqa: E731
        T = lambda name: tan.get(pre + name)  # noqa: E731
        u = lambda a: a.unsqueeze(2)  # noqa: E731  primal (B, n, k) -> (B, n, 1, k)
        n2, rstd2, d_out, dn2 = u(b.n2), u(b.rstd2), u(b.d_out), t.get("dn2")
        if put(g + "ln2", layernorm.affine_rows(n2, dn2, d_out, ddx, c, ps(g + "ln2"))):
            return None, True
        ddn2 = layernorm.affine_vjp_tangent(d_out, ddx, w("ln2.weight"), T("ln2.weight"))
        ddu2 = layernorm.vjp_tangent(n2, rstd2, t.get("m_nu2"), dn2, u(b.d_n2), u(b.d_u2), u(b.s2), ddn2)

        def lin_rows(x, dx_, dC, ddC, name, bias: bool, group: str):
            rows = [linear.weight_rows(x, dx_, dC, ddC, w(name).shape, c, x, ps(group))]
            if bias:
                rows.append(linear.bias_rows(ddC, w(name).shape[-1], c, x, ps(group)))
            return rows

        if put(g + "ffn2", lin_rows(b.r, t.get("dr"), b.d_u2, ddu2, "ffn2.weight", cfg.ffn_bias, g + "ffn2")):
            return None, True
        ddr = linear.vjp_tangent(b.d_u2, ddu2, w("ffn2.weight"), T("ffn2.weight"))
        ddh = activation.vjp_tangent(b.mask, b.curv, b.d_r, ddr, t.get("dh"))
        if put(g + "ffn1", lin_rows(b.y, t.get("dy"), b.d_h, ddh, "ffn1.weight", cfg.ffn_bias, g + "ffn1")):
            return None, True
        ddy = add(ddu2, linear.vjp_tangent(b.d_h, ddh, w("ffn1.weight"), T("ffn1.weight")))
        n1, rstd1, d_y, dn1 = u(b.n1), u(b.rstd1), u(b.d_y), t.get("dn1")
        if put(g + "ln1", layernorm.affine_rows(n1, dn1, d_y, ddy, c, ps(g + "ln1"))):
            return None, True
        ddn1 = layernorm.affine_vjp_tangent(d_y, ddy, w("ln1.weight"), T("ln1.weight"))
        ddu1 = layernorm.vjp_tangent(n1, rstd1, t.get("m_nu1"), dn1, u(b.d_n1), u(b.d_u1), u(b.s1), ddn1)
        ddv = ddu1  # δv̇ (= δȯ without W_O)
        if cfg.out_proj:  # rows of W_O: v̇ᵀ δo + vᵀ δȯ; of b_O: Σ δȯ
            if put(g + "out", lin_rows(b.v, t.get("dv"), b.d_u1, ddu1, "out", cfg.out_proj_bias, g + "out")):
                return None, True
            ddv = linear.vjp_tangent(b.d_u1, ddu1, w("out"), T("out"))
        if put(g + "value", lin_rows(b.ax, t.get("dax"), b.d_v, ddv, "value", cfg.qkv_bias, g + "value")):
            return None, True
        ddax = linear.vjp_tangent(b.d_v, ddv, w("value"), T("value"))
        dxi = t.get("dx")
        ddTs = attention.scores_vjp_tangent(b.x, b.ax, b.att, b.d_ax, t.get("dA"), t.get("dax"), t.get("dx_c"), ddax, c)
        if self.scores_group(i) in want:
            xt = self.scores_input(i, b)
            D = xt.shape[-1]
            lead = (xt.shape[0], c) if ps(self.scores_group(i)) else (c,)
            rows = torch.zeros(*lead, D, D, dtype=self.dtype, device=self.device) if ddTs is None else \
                attention.scores_rows(xt, ddTs, c, ps(self.scores_group(i)))
            if put(self.scores_group(i), [rows]):
                return None, True
        ddq, ddk, ddx_att = attention.vjp_tangent(b.A, b.x, b.q, b.k, b.ax, b.att, b.d_ax, t.get("dA"), t.get("dax"),
                                                  t.get("dx_c"), t.get("dq"), t.get("dk"), ddax, c, ddTs)
        stop = put(g + "query", lin_rows(b.x, dxi, b.att.d_q, ddq, "query", cfg.qkv_bias, g + "query"))
        put(g + "key", lin_rows(b.x, dxi, b.att.d_k, ddk, "key", cfg.qkv_bias, g + "key"))  # after query: stops with it
        if stop:
            return None, True
        ddx = add(ddu1, ddx_att)
        ddx = add(ddx, linear.vjp_tangent(b.att.d_q, ddq, w("query"), T("query")))
        ddx = add(ddx, linear.vjp_tangent(b.att.d_k, ddk, w("key"), T("key")))
        return ddx, False
