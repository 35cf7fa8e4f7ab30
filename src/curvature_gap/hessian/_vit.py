"""Exact Hessian columns of the paper's ViT and of the authors' ViT by hand-written forward-over-reverse
differentiation.

For the empirical risk ``L(w) = (1/B) Σ_n ℓ(z_n(w), y_n)`` (cross-entropy, mean over the batch) a
Hessian column is the directional derivative of the gradient, ``H e_j = d/dε ∇L(w + ε e_j)``.
:class:`ViTSecondOrder` runs the forward and backward pass of :class:`curvature_gap.model.ViT` once
(primal values ``a`` and adjoints ``δa = ∂L/∂a``) and then propagates, for ``c`` tangent directions
at a time, the forward tangents ``ȧ = (∂a/∂w) v`` and the tangents of the adjoints ``δȧ`` (the
"forward-over-reverse" Hessian-vector product), written out op by op for this architecture.

The block (post-norm, one head; bracketed terms exist only in the variants that have them)::

    q = x W_Q [+ b_Q],  k = x W_K [+ b_K],  A = softmax(q kᵀ / √d_K),  v = (A x) W_V [+ b_V],
    o = v [W_O + b_O],  u1 = x + o,  y = LN1(u1),  h = y W_1 [+ b_1],  r = act(h),
    u2 = y + r W_2 [+ b_2],  out = LN2(u2),

with act = ReLU (the theorem's block) or the exact-erf GELU (the authors' block), and the tokens
``x0 = X_p Eᵀ + e + pos`` (``pos`` a learned parameter, the fixed sinusoidal table — a buffer, no
tangent — or absent). The rules, per op:

* linear ``C = X W``: ``Ċ = Ẋ W + X Ẇ``; ``δX = δC Wᵀ`` so ``δẊ = δĊ Wᵀ + δC Ẇᵀ``;
  ``∇_W = Xᵀ δC`` so the Hessian rows of ``W`` are ``Ẋᵀ δC + Xᵀ δĊ``;
* bias ``C = X W + b`` (b (o,) broadcast over tokens): ``Ċ`` gains ``ḃ``; ``∇_b = Σ_tokens δC`` so the
  Hessian rows of ``b`` are ``Σ_tokens δĊ`` (b has no second derivative and does not enter ``δX``);
* output projection ``o = v W_O + b_O`` after ``v = (A x) W_V + b_V``: two linears in a row, so
  ``ȯ = v̇ W_O + v Ẇ_O + ḃ_O``; ``δv = δo W_Oᵀ``, ``δv̇ = δȯ W_Oᵀ + δo Ẇ_Oᵀ``; rows of ``W_O``:
  ``v̇ᵀ δo + vᵀ δȯ``, of ``b_O``: ``Σ δȯ``; rows of ``W_V``: ``(ȧx)ᵀ δv + (ax)ᵀ δv̇``, of ``b_V``: ``Σ δv̇``
  (without W_O, ``δv = δo = δu1``);
* softmax ``A = softmax(T)`` (rows): ``Ȧ = A ∘ (Ṫ − rowsum(A ∘ Ṫ))``; ``δT = A ∘ (δA − ρ)`` with
  ``ρ = rowsum(A ∘ δA)``, so ``δṪ = A ∘ (δȦ − rowsum(A ∘ δȦ)) + Ȧ ∘ (δA − ρ) − A ∘ rowsum(Ȧ ∘ δA)``;
* LayerNorm ``n̂ = (u − μ) r``, ``r = (σ² + ε)^{-1/2}``: ``n̂̇ = r (u̇ − mean(u̇) − n̂ mean(n̂ u̇))``;
  ``δu = r w``, ``w = δn̂ − mean(δn̂) − n̂ s``, ``s = mean(n̂ δn̂)``, so
  ``δu̇ = −r mean(n̂ u̇) δu + r (δn̂̇ − mean(δn̂̇) − n̂̇ s − n̂ mean(n̂̇ δn̂ + n̂ δn̂̇))``;
* elementwise activation ``r = act(h)``, ``a1 = act'(h)``, ``a2 = act''(h)``: ``ṙ = a1 ∘ ḣ``;
  ``δh = a1 ∘ δr`` (``δr = δu2 W_2ᵀ``), so ``δḣ = a1 ∘ δṙ + a2 ∘ ḣ ∘ δr``. ReLU: ``a1 = 1[h > 0]``,
  ``a2 = 0`` almost everywhere (the last term is dropped). GELU ``h Φ(h)`` (Φ, φ the standard normal
  CDF and density): ``a1 = Φ(h) + h φ(h)``, ``a2 = 2 φ(h) − h² φ(h) = φ(h) (2 − h²)``;
* cross-entropy on logits ``z``: ``δz = (p − onehot(y))/B`` and ``δż = (p ∘ (ż − ⟨p, ż⟩))/B``.

Savings over generic Hessian-vector products, all exact:

* **triangle:** the tangent of a column in parameter group ``g`` is zero before ``g`` is first used,
  and only rows of groups at or after ``g`` (forward order) are computed, so the backward tangent
  stops at ``g``; the other triangle follows from symmetry ``H = Hᵀ``;
* **batched tangents:** ``c`` directions travel together in the layout (B, n, c, d), so every
  weight product is one GEMM ((B·n·c, d_in) @ (d_in, d_out)) and every Hessian-row contraction
  over tokens is one GEMM with inner dimension B·n; attention tangents use (B, c, n, n);
* **token-sized row sums:** the softmax adjoint tangent needs ``rowsum(A ∘ δȦ + Ȧ ∘ δA)``, which
  equals ``⟨δȧx, ax⟩ + ⟨δax, ȧx⟩`` per (token, direction) because ``δA = δax xᵀ``;
* **closed-form last FFN:** :meth:`ViTSecondOrder.last_ffn_hessian` gives the (W1, b1, W2, b2)
  block of the last block from per-token quantities (see its docstring; with GELU it has one more,
  diagonal, term).

Shapes: B images, n tokens, d = d_V, d_K, d_ff, K classes, c tangent directions; bias tangents (c, o).
Parameters keep their stored orientation (``X @ W`` for block weights, ``nn.Linear``'s (out, in) for
embedding and head); rows are flattened row-major per parameter, in ``param_groups`` order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import describe_support, unsupported_variant
from ..model import THEOREM_BLOCK, ViT, block_forward, layer_norm_parts, param_groups, patchify

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
_SQRT_2PI = math.sqrt(2 * math.pi)


def _act_parts(h: torch.Tensor, activation: str):
    """(act(h), act'(h), act''(h) or None) for ``"relu"`` (None: zero a.e.) or the exact-erf ``"gelu"``.

    GELU(h) = h Φ(h): GELU' = Φ + h φ, GELU'' = 2φ − h² φ = φ (2 − h²), Φ, φ the standard normal CDF
    and density. The value is ``nn.functional.gelu`` (what the model computes), the derivatives
    are evaluated from the formulas in the same dtype.
    """
    if activation == "relu":
        return torch.relu(h), (h > 0).to(h.dtype), None
    phi = torch.exp(-0.5 * h * h) / _SQRT_2PI
    Phi = 0.5 * (1 + torch.erf(h / math.sqrt(2.0)))
    return torch.nn.functional.gelu(h), Phi + h * phi, phi * (2 - h * h)


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


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Tangent-batched activation times a shared matrix: (..., c, i) @ (i, o) -> (..., c, o), one GEMM."""
    return (x.reshape(-1, x.shape[-1]) @ w).view(*x.shape[:-1], w.shape[-1])


def _tok2att(t: torch.Tensor, B: int) -> torch.Tensor:
    """Token layout (B, n, c, k) -> attention layout (B, c, n, k), contiguous."""
    return t.expand(B, *t.shape[1:]).permute(0, 2, 1, 3).contiguous()


def _att2tok(t: torch.Tensor) -> torch.Tensor:
    """Attention layout (B, c, n, k) -> token layout (B, n, c, k), contiguous."""
    return t.permute(0, 2, 1, 3).contiguous()


def _act_times_tangent(x: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
    """Shared activation times tangent matrices: x (B, n, i), dw (c, i, o) -> (B, n, c, o)."""
    c, i, o = dw.shape
    return (x @ dw.permute(1, 0, 2).reshape(i, c * o)).view(*x.shape[:-1], c, o)


def _tok_contract(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ over (B, n) of aᵀ b for a (B, n, c, i) tangent and b (B, n, o) primal -> (c, i, o).

    Computed as (bᵀ a)ᵀ: (o, B·n) @ (B·n, c·i) is about twice as fast as the transposed-left form.
    """
    c, i = a.shape[-2:]
    o = b.shape[-1]
    return (b.reshape(-1, o).T @ a.reshape(-1, c * i)).view(o, c, i).permute(1, 2, 0)


def _tok_contract_rev(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ over (B, n) of aᵀ b for a (B, n, i) primal and b (B, n, c, o) tangent -> (c, i, o)."""
    c, o = b.shape[-2:]
    i = a.shape[-1]
    return (a.reshape(-1, i).T @ b.reshape(-1, c * o)).view(i, c, o).transpose(0, 1)


def _ln_tangent(n_hat, rstd, du):
    """Forward tangent of n̂ = LN(u) without affine: r (u̇ − mean u̇ − n̂ mean(n̂ u̇)); returns (n̂̇, mean(n̂ u̇))."""
    m_nu = (n_hat * du).mean(-1, keepdim=True)
    return rstd * (du - du.mean(-1, keepdim=True) - n_hat * m_nu), m_nu


def _ln_adjoint_tangent(n_hat, rstd, m_nu, dn_hat, d_n, d_u, s, dd_n):
    """Tangent of the LayerNorm adjoint δu = r (δn̂ − mean δn̂ − n̂ s) (see module docstring).

    n_hat, rstd, d_n (= δn̂), d_u (= δu), s (= mean(n̂ δn̂)) are primal (broadcast over c);
    m_nu = mean(n̂ u̇) and dn_hat = n̂̇ are forward tangents (or None), dd_n = δn̂̇ (or None).
    """
    out = None
    if dn_hat is not None:
        ds = (dn_hat * d_n).mean(-1, keepdim=True)
        out = -(rstd * m_nu) * d_u - rstd * (dn_hat * s)
        inner = ds
    else:
        inner = None
    if dd_n is not None:
        inner = _add(inner, (n_hat * dd_n).mean(-1, keepdim=True))
        out = _add(out, rstd * (dd_n - dd_n.mean(-1, keepdim=True)))
    if inner is not None:
        out = out - rstd * n_hat * inner
    return out


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
    d_A: torch.Tensor | None = None
    rho: torch.Tensor | None = None  # rowsum(A ∘ δA)
    d_Ts: torch.Tensor | None = None  # scaled score adjoint (δ w.r.t. q kᵀ)
    d_q: torch.Tensor | None = None
    d_k: torch.Tensor | None = None

    def slice(self, sl: slice) -> "_Block":
        return _Block(**{f: (None if v is None else v[sl]) for f, v in self.__dict__.items()})


class ViTSecondOrder:
    """Primal pass, adjoint pass and batched Hessian columns of a :class:`ViT` with cross-entropy.

    ``images`` (B, C, H, W), ``labels`` (B,). The loss is the batch mean. All computation runs in
    ``dtype`` (default: the model's) on the images' device; the model itself is not modified.
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
        self.n_blocks = len(model.blocks)
        self.has_ffn_bias = "blocks.0.ffn1.bias" in self.p if self.n_blocks else False
        self.has_out = "blocks.0.out" in self.p if self.n_blocks else False
        self.activation = self.cfg.activation
        # the theorem's block is computed by model.block_forward, as before the other variants existed
        self.theorem_block = not unsupported_variant(self.cfg, THEOREM_BLOCK)
        pos = self.p.get("pos", model.pos)  # learned (a parameter), sinusoidal (a buffer) or None
        self.pos = None if pos is None else pos.detach().to(device=dev, dtype=dtype)
        self.scale = 1.0 / math.sqrt(self.cfg.d_k)
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
            w = lambda name: self._w(i, name)  # noqa: E731
            if not self.theorem_block:
                blk, x = self._block_primal(i, x)
                self.blocks.append(blk)
                continue
            bp = block_forward(x, w("query"), w("key"), w("value"), w("ffn1.weight"), w("ffn2.weight"),
                               w("ffn1.bias"), w("ffn2.bias"), (w("ln1.weight"), w("ln1.bias")),
                               (w("ln2.weight"), w("ln2.bias")), self.eps[i])
            self.blocks.append(_Block(x, bp.q, bp.k, bp.A, bp.ax, bp.n1, bp.rstd1, bp.y, bp.mask, bp.r, bp.n2,
                                      bp.rstd2))
            x = bp.out
        self.features = x
        self.m = x.mean(1)  # (B, d)
        z = self.m @ p["head.weight"].T + p["head.bias"]
        self.probs = torch.softmax(z, -1)
        self.loss = torch.nn.functional.cross_entropy(z, labels)
        self.B = images.shape[0]
        self.d_z = (self.probs - torch.nn.functional.one_hot(labels, z.shape[-1]).to(z.dtype)) / self.B

    def _block_primal(self, i: int, x: torch.Tensor) -> tuple[_Block, torch.Tensor]:
        """One block of a variant beyond the theorem's (Q/K/V biases, W_O, GELU), as ``model.Block``
        computes it; returns its primal values and the block output."""
        w = lambda name: self._w(i, name)  # noqa: E731

        def lin(t, W, b):
            return t @ W if b is None else t @ W + b

        q, k = lin(x, w("query"), w("query_bias")), lin(x, w("key"), w("key_bias"))
        A = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.cfg.d_k), dim=-1)
        ax = A @ x
        v = lin(ax, w("value"), w("value_bias"))
        o = v if not self.has_out else lin(v, w("out"), w("out_bias"))
        n1, rstd1 = layer_norm_parts(x + o, self.eps[i][0])
        y = n1 * w("ln1.weight") + w("ln1.bias")
        h = lin(y, w("ffn1.weight"), w("ffn1.bias"))
        r, a1, a2 = _act_parts(h, self.activation)
        n2, rstd2 = layer_norm_parts(y + lin(r, w("ffn2.weight"), w("ffn2.bias")), self.eps[i][1])
        blk = _Block(x, q, k, A, ax, n1, rstd1, y, a1, r, n2, rstd2, v=v if self.has_out else None, curv=a2)
        return blk, n2 * w("ln2.weight") + w("ln2.bias")

    def _adjoint(self):
        p = self.p
        d_m = self.d_z @ p["head.weight"]  # (B, d)
        d_x = (d_m / self.cfg.n_tokens).unsqueeze(1).expand_as(self.features)
        for i in reversed(range(self.n_blocks)):
            b = self.blocks[i]
            b.d_out = d_x
            b.d_n2 = d_x * self._w(i, "ln2.weight")
            b.s2 = (b.n2 * b.d_n2).mean(-1, keepdim=True)
            b.d_u2 = b.rstd2 * (b.d_n2 - b.d_n2.mean(-1, keepdim=True) - b.n2 * b.s2)
            if b.curv is None:
                b.d_h = (b.d_u2 @ self._w(i, "ffn2.weight").T) * b.mask
            else:
                b.d_r = b.d_u2 @ self._w(i, "ffn2.weight").T
                b.d_h = b.d_r * b.mask
            b.d_y = b.d_u2 + b.d_h @ self._w(i, "ffn1.weight").T
            b.d_n1 = b.d_y * self._w(i, "ln1.weight")
            b.s1 = (b.n1 * b.d_n1).mean(-1, keepdim=True)
            b.d_u1 = b.rstd1 * (b.d_n1 - b.d_n1.mean(-1, keepdim=True) - b.n1 * b.s1)
            b.d_v = b.d_u1 if not self.has_out else b.d_u1 @ self._w(i, "out").T
            b.d_ax = b.d_v @ self._w(i, "value").T
            b.d_A = b.d_ax @ b.x.transpose(-1, -2)
            b.rho = (b.A * b.d_A).sum(-1, keepdim=True)
            b.d_Ts = b.A * (b.d_A - b.rho) * self.scale
            b.d_q = b.d_Ts @ b.k
            b.d_k = b.d_Ts.transpose(-1, -2) @ b.q
            d_x = (b.d_u1 + b.A.transpose(-1, -2) @ b.d_ax + b.d_q @ self._w(i, "query").T
                   + b.d_k @ self._w(i, "key").T)
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
        if self.has_ffn_bias:
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
        Jln, m_nu = _ln_tangent(n2, rstd2, eye)  # Jln[t, a, k] = ∂n̂_k/∂u_a
        K = _ln_adjoint_tangent(n2, rstd2, m_nu, Jln, flat(b.d_n2).unsqueeze(1), flat(b.d_u2).unsqueeze(1),
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

    # ------------------------------------------------------------------ tangents
    def group_basis(self, group: str, cols: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unit tangents e_j (j = flat indices within ``group``) as a dict name -> (c, *shape)."""
        g = self.groups[self.group_index[group]]
        return self.group_tangent(group, torch.nn.functional.one_hot(cols, g.size).to(self.dtype))

    def group_tangent(self, group: str, V: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split (c, group size) directions into a dict parameter name -> (c, *shape)."""
        g = self.groups[self.group_index[group]]
        out, off = {}, 0
        for name in g.param_names:
            shp = self.p[name].shape
            k = self.p[name].numel()
            out[name] = V[:, off:off + k].reshape(V.shape[0], *shp)
            off += k
        return out

    def columns(self, tangent: dict[str, torch.Tensor], rows: list[str], sample_chunk: int | None = None) -> dict[str, torch.Tensor]:
        """Hessian-times-tangent restricted to the parameter groups ``rows``.

        ``tangent`` maps parameter names to (c, *shape) directions; names not given are zero.
        Returns group name -> (c, group size). Rows in groups before the tangent's earliest group
        must not be requested when they would need the backward tangent beyond the input (always
        allowed: every group's rows are computed when asked for). ``sample_chunk`` processes the
        batch in pieces (sum over pieces; identical result).
        """
        B = self.B
        step = sample_chunk or B
        total: dict[str, torch.Tensor] | None = None
        for s0 in range(0, B, step):
            part = self._columns(tangent, rows, slice(s0, min(B, s0 + step)))
            total = part if total is None else {k: total[k] + part[k] for k in total}
        return total

    def _columns(self, tan: dict[str, torch.Tensor], rows: list[str], sl: slice) -> dict[str, torch.Tensor]:
        p = self.p
        c = next(iter(tan.values())).shape[0]
        ntok = self.cfg.n_tokens
        want = set(rows)
        res: dict[str, torch.Tensor] = {}

        def put(group, parts):
            if group in want:
                res[group] = torch.cat([t.reshape(c, -1) for t in parts], 1)

        def T(name):
            return tan.get(name)

        def bias_tangent(db, like):
            """A bias tangent (c, o) in the token layout (B, n, c, o) of ``like`` (B, n, ·)."""
            return db[None, None].expand(*like.shape[:2], c, -1)

        # ---------------- forward tangents
        xp = self.xp[sl]
        dx = None
        if T("embed.weight") is not None:
            dx = _act_times_tangent(xp, T("embed.weight").transpose(1, 2))
        if T("embed.bias") is not None:
            dx = _add(dx, T("embed.bias")[None, None])
        if T("pos") is not None:
            dx = _add(dx, T("pos").transpose(0, 1)[None])
        if dx is not None:
            dx = dx.expand(xp.shape[0], ntok, c, self.cfg.d_model).contiguous()
        blocks = [b.slice(sl) for b in self.blocks]
        fwd = []
        for i, b in enumerate(blocks):
            pre = f"blocks.{i}."
            Wq, Wk, Wv = self._w(i, "query"), self._w(i, "key"), self._w(i, "value")
            t = {"dx": dx}
            if dx is None and not any(k.startswith(pre) for k in tan):
                fwd.append(None)
                continue
            dq = _add(None if dx is None else _lin(dx, Wq), None if T(pre + "query") is None else _act_times_tangent(b.x, T(pre + "query")))
            dk = _add(None if dx is None else _lin(dx, Wk), None if T(pre + "key") is None else _act_times_tangent(b.x, T(pre + "key")))
            if T(pre + "query_bias") is not None:
                dq = _add(dq, bias_tangent(T(pre + "query_bias"), b.x))
            if T(pre + "key_bias") is not None:
                dk = _add(dk, bias_tangent(T(pre + "key_bias"), b.x))
            # attention tangents in the layout (B, c, n, n): Ṫ = (q̇ kᵀ + q k̇ᵀ)/√d_K, Ȧ = softmax'(Ṫ)
            Bs, n, d = b.x.shape
            A4 = b.A.unsqueeze(1)  # (B, 1, n, n)
            dA = dx_a = None
            if dq is not None or dk is not None:
                dT = None
                if dq is not None:
                    dT = (_tok2att(dq, Bs).view(Bs, c * n, -1) @ b.k.transpose(-1, -2)).view(Bs, c, n, n)
                if dk is not None:  # q k̇ᵀ as B·c small products (a transposed add would be ~3x slower)
                    dk_a = _tok2att(dk, Bs)
                    q_rep = b.q.unsqueeze(1).expand(Bs, c, n, b.q.shape[-1]).reshape(Bs * c, n, -1)
                    qdk = torch.bmm(q_rep, dk_a.view(Bs * c, n, -1).transpose(1, 2)).view(Bs, c, n, n)
                    dT = qdk if dT is None else dT.add_(qdk)
                dT.mul_(self.scale)
                dA = dT.sub_((A4 * dT).sum(-1, keepdim=True)).mul_(A4)
            dax = None
            if dA is not None:  # Ȧ x, back to token layout
                dax = _att2tok((dA.view(Bs, c * n, n) @ b.x).view(Bs, c, n, d))
            if dx is not None:  # A ẋ
                dx_a = _tok2att(dx, Bs)
                dax = _add(dax, (b.A @ dx.expand(Bs, n, c, d).reshape(Bs, n, c * d)).view(Bs, n, c, d))
            dv = _add(None if dax is None else _lin(dax, Wv), None if T(pre + "value") is None else _act_times_tangent(b.ax, T(pre + "value")))
            if T(pre + "value_bias") is not None:
                dv = _add(dv, bias_tangent(T(pre + "value_bias"), b.x))
            do = dv
            if self.has_out:  # ȯ = v̇ W_O + v Ẇ_O + ḃ_O
                do = _add(None if dv is None else _lin(dv, self._w(i, "out")),
                          None if T(pre + "out") is None else _act_times_tangent(b.v, T(pre + "out")))
                if T(pre + "out_bias") is not None:
                    do = _add(do, bias_tangent(T(pre + "out_bias"), b.x))
            du1 = _add(dx, do)
            n1, rstd1 = b.n1.unsqueeze(2), b.rstd1.unsqueeze(2)
            dn1, m_nu1 = (None, None) if du1 is None else _ln_tangent(n1, rstd1, du1)
            dy = None if dn1 is None else dn1 * self._w(i, "ln1.weight")
            if T(pre + "ln1.weight") is not None:
                dy = _add(dy, n1 * T(pre + "ln1.weight")[None, None])
            if T(pre + "ln1.bias") is not None:
                dy = _add(dy, T(pre + "ln1.bias")[None, None].expand(*b.y.shape[:2], c, -1))
            dh = _add(None if dy is None else _lin(dy, self._w(i, "ffn1.weight")),
                      None if T(pre + "ffn1.weight") is None else _act_times_tangent(b.y, T(pre + "ffn1.weight")))
            if T(pre + "ffn1.bias") is not None:
                dh = _add(dh, T(pre + "ffn1.bias")[None, None].expand(*b.y.shape[:2], c, -1))
            mask = b.mask.unsqueeze(2)
            dr = None if dh is None else dh * mask
            df = _add(None if dr is None else _lin(dr, self._w(i, "ffn2.weight")),
                      None if T(pre + "ffn2.weight") is None else _act_times_tangent(b.r, T(pre + "ffn2.weight")))
            if T(pre + "ffn2.bias") is not None:
                df = _add(df, T(pre + "ffn2.bias")[None, None].expand(*b.y.shape[:2], c, -1))
            du2 = _add(dy, df)
            n2, rstd2 = b.n2.unsqueeze(2), b.rstd2.unsqueeze(2)
            dn2, m_nu2 = (None, None) if du2 is None else _ln_tangent(n2, rstd2, du2)
            dout = None if dn2 is None else dn2 * self._w(i, "ln2.weight")
            if T(pre + "ln2.weight") is not None:
                dout = _add(dout, n2 * T(pre + "ln2.weight")[None, None])
            if T(pre + "ln2.bias") is not None:
                dout = _add(dout, T(pre + "ln2.bias")[None, None].expand(*b.y.shape[:2], c, -1))
            t.update(dq=dq, dk=dk, dA=dA, dx_a=dx_a, dax=dax, dv=dv, dn1=dn1, m_nu1=m_nu1, dy=dy, dh=dh, dr=dr, dn2=dn2,
                     m_nu2=m_nu2)
            fwd.append(t)
            dx = dout
        m = self.m[sl]
        dm = None if dx is None else dx.mean(1)  # (B, c, d)
        Wh = p["head.weight"]
        dz = None if dm is None else dm @ Wh.T
        if T("head.weight") is not None:
            dz = _add(dz, torch.einsum("bd,ckd->bck", m, T("head.weight")))
        if T("head.bias") is not None:
            dz = _add(dz, T("head.bias")[None].expand(m.shape[0], c, -1))

        # ---------------- backward tangents (adjoint tangents), stopping when all rows are done
        order = [g.name for g in self.groups]
        earliest = min(order.index(r) for r in rows)
        probs, d_z = self.probs[sl], self.d_z[sl]
        ddz = None
        if dz is not None:
            pz = probs.unsqueeze(1)
            ddz = pz * (dz - (pz * dz).sum(-1, keepdim=True)) / self.B
        if "head" in want:
            gw = torch.zeros_like(T("head.weight")) if T("head.weight") is not None else torch.zeros(c, *Wh.shape, dtype=self.dtype, device=self.device)
            gb = torch.zeros(c, Wh.shape[0], dtype=self.dtype, device=self.device)
            if ddz is not None:
                gw = gw + torch.einsum("bck,bd->ckd", ddz, m)
                gb = gb + ddz.sum(0)
            if dm is not None:
                gw = gw + torch.einsum("bk,bcd->ckd", d_z, dm)
            put("head", [gw, gb])
        if earliest >= self.group_index["head"]:
            return res
        ddm = None if ddz is None else ddz @ Wh
        if T("head.weight") is not None:
            ddm = _add(ddm, torch.einsum("bk,ckd->bcd", d_z, T("head.weight")))
        ddx = None if ddm is None else (ddm / ntok).unsqueeze(1).expand(m.shape[0], ntok, c, -1)
        zeros = lambda name: torch.zeros(c, *p[name].shape, dtype=self.dtype, device=self.device)  # noqa: E731
        for i in reversed(range(self.n_blocks)):
            b, t = blocks[i], fwd[i]
            pre = f"blocks.{i}."
            gname = f"block{i}."
            t = t or {}
            n2, rstd2 = b.n2.unsqueeze(2), b.rstd2.unsqueeze(2)
            d_out = b.d_out.unsqueeze(2)
            dn2 = t.get("dn2")
            # LN2 affine
            if gname + "ln2" in want:
                gw, gb = zeros(pre + "ln2.weight"), zeros(pre + "ln2.bias")
                if ddx is not None:
                    gw = gw + (ddx * n2).sum((0, 1))
                    gb = gb + ddx.sum((0, 1))
                if dn2 is not None:
                    gw = gw + (d_out * dn2).sum((0, 1))
                put(gname + "ln2", [gw, gb])
            if earliest >= self.group_index[gname + "ln2"]:
                return res
            ddn2 = None if ddx is None else ddx * self._w(i, "ln2.weight")
            if T(pre + "ln2.weight") is not None:
                ddn2 = _add(ddn2, d_out * T(pre + "ln2.weight")[None, None])
            ddu2 = _ln_adjoint_tangent(n2, rstd2, t.get("m_nu2"), dn2, b.d_n2.unsqueeze(2), b.d_u2.unsqueeze(2), b.s2.unsqueeze(2), ddn2)
            dr, dy = t.get("dr"), t.get("dy")
            W1, W2 = self._w(i, "ffn1.weight"), self._w(i, "ffn2.weight")
            if gname + "ffn2" in want:
                gw = zeros(pre + "ffn2.weight")
                if dr is not None:
                    gw = gw + _tok_contract(dr, b.d_u2)
                if ddu2 is not None:
                    gw = gw + _tok_contract_rev(b.r, ddu2)
                parts = [gw]
                if self.has_ffn_bias:
                    parts.append(zeros(pre + "ffn2.bias") + (0 if ddu2 is None else ddu2.sum((0, 1))))
                put(gname + "ffn2", parts)
            if earliest >= self.group_index[gname + "ffn2"]:
                return res
            ddr = None if ddu2 is None else _lin(ddu2, W2.T)
            if T(pre + "ffn2.weight") is not None:
                ddr = _add(ddr, _act_times_tangent(b.d_u2, T(pre + "ffn2.weight").transpose(1, 2)))
            mask = b.mask.unsqueeze(2)
            ddh = None if ddr is None else ddr * mask
            dh = t.get("dh")
            if b.curv is not None and dh is not None:  # δḣ = a1 ∘ δṙ + a2 ∘ ḣ ∘ δr
                ddh = _add(ddh, dh * (b.curv * b.d_r).unsqueeze(2))
            if gname + "ffn1" in want:
                gw = zeros(pre + "ffn1.weight")
                if dy is not None:
                    gw = gw + _tok_contract(dy, b.d_h)
                if ddh is not None:
                    gw = gw + _tok_contract_rev(b.y, ddh)
                parts = [gw]
                if self.has_ffn_bias:
                    parts.append(zeros(pre + "ffn1.bias") + (0 if ddh is None else ddh.sum((0, 1))))
                put(gname + "ffn1", parts)
            if earliest >= self.group_index[gname + "ffn1"]:
                return res
            ddy = _add(ddu2, None if ddh is None else _lin(ddh, W1.T))
            if T(pre + "ffn1.weight") is not None:
                ddy = _add(ddy, _act_times_tangent(b.d_h, T(pre + "ffn1.weight").transpose(1, 2)))
            n1, rstd1 = b.n1.unsqueeze(2), b.rstd1.unsqueeze(2)
            dn1 = t.get("dn1")
            d_y = b.d_y.unsqueeze(2)
            if gname + "ln1" in want:
                gw, gb = zeros(pre + "ln1.weight"), zeros(pre + "ln1.bias")
                if ddy is not None:
                    gw = gw + (ddy * n1).sum((0, 1))
                    gb = gb + ddy.sum((0, 1))
                if dn1 is not None:
                    gw = gw + (d_y * dn1).sum((0, 1))
                put(gname + "ln1", [gw, gb])
            if earliest >= self.group_index[gname + "ln1"]:
                return res
            ddn1 = None if ddy is None else ddy * self._w(i, "ln1.weight")
            if T(pre + "ln1.weight") is not None:
                ddn1 = _add(ddn1, d_y * T(pre + "ln1.weight")[None, None])
            ddu1 = _ln_adjoint_tangent(n1, rstd1, t.get("m_nu1"), dn1, b.d_n1.unsqueeze(2), b.d_u1.unsqueeze(2), b.s1.unsqueeze(2), ddn1)
            dax, dA, dq, dk, dxi = t.get("dax"), t.get("dA"), t.get("dq"), t.get("dk"), t.get("dx")
            Wv, Wq, Wk = self._w(i, "value"), self._w(i, "query"), self._w(i, "key")
            ddv = ddu1  # δv̇ (= δȯ without W_O)
            if self.has_out:
                dv = t.get("dv")
                if gname + "out" in want:  # rows of W_O: v̇ᵀ δo + vᵀ δȯ; of b_O: Σ δȯ
                    gw = zeros(pre + "out")
                    if dv is not None:
                        gw = gw + _tok_contract(dv, b.d_u1)
                    if ddu1 is not None:
                        gw = gw + _tok_contract_rev(b.v, ddu1)
                    parts = [gw]
                    if pre + "out_bias" in p:
                        parts.append(zeros(pre + "out_bias") + (0 if ddu1 is None else ddu1.sum((0, 1))))
                    put(gname + "out", parts)
                if earliest >= self.group_index[gname + "out"]:
                    return res
                ddv = None if ddu1 is None else _lin(ddu1, self._w(i, "out").T)
                if T(pre + "out") is not None:
                    ddv = _add(ddv, _act_times_tangent(b.d_u1, T(pre + "out").transpose(1, 2)))
            if gname + "value" in want:  # rows of W_V: (ȧx)ᵀ δv + (ax)ᵀ δv̇; of b_V: Σ δv̇
                gw = zeros(pre + "value")
                if dax is not None:
                    gw = gw + _tok_contract(dax, b.d_v)
                if ddv is not None:
                    gw = gw + _tok_contract_rev(b.ax, ddv)
                parts = [gw]
                if pre + "value_bias" in p:
                    parts.append(zeros(pre + "value_bias") + (0 if ddv is None else ddv.sum((0, 1))))
                put(gname + "value", parts)
            if earliest >= self.group_index[gname + "value"]:
                return res
            ddax = None if ddv is None else _lin(ddv, Wv.T)
            if T(pre + "value") is not None:
                ddax = _add(ddax, _act_times_tangent(b.d_v, T(pre + "value").transpose(1, 2)))
            Bs, n, d = b.x.shape
            dx_a = t.get("dx_a")
            A4 = b.A.unsqueeze(1)
            # adjoint of A: δA = δax xᵀ, so δȦ = δȧx xᵀ + δax ẋᵀ, layout (B, c, n, n)
            ddA = None
            if ddax is not None:
                ddA = (_tok2att(ddax, Bs).view(Bs, c * n, d) @ b.x.transpose(-1, -2)).view(Bs, c, n, n)
            if dx_a is not None:  # δax ẋᵀ as B·c small products
                dax_rep = b.d_ax.unsqueeze(1).expand(Bs, c, n, d).reshape(Bs * c, n, d)
                xd = torch.bmm(dax_rep, dx_a.view(Bs * c, n, d).transpose(1, 2)).view(Bs, c, n, n)
                ddA = xd if ddA is None else ddA.add_(xd)
            # δṪ = A ∘ (δȦ − rowsum(A ∘ δȦ + Ȧ ∘ δA)) + Ȧ ∘ (δA − ρ), times 1/√d_K.
            # With δA = δax xᵀ and δȦ = δȧx xᵀ + δax ẋᵀ the row sums are token-sized:
            # rowsum(A ∘ δȦ + Ȧ ∘ δA) = ⟨δȧx, A x⟩ + ⟨δax, Ȧ x + A ẋ⟩ = ⟨δȧx, ax⟩ + ⟨δax, ȧx⟩.
            ddTs = None
            if ddA is not None or dA is not None:
                rs = None if ddax is None else (ddax * b.ax.unsqueeze(2)).sum(-1)
                if dax is not None:
                    rs = _add(rs, (dax * b.d_ax.unsqueeze(2)).sum(-1))
                rs = rs.transpose(1, 2).unsqueeze(-1)  # (B, n, c) -> (B, c, n, 1)
                ddTs = (-rs * A4) if ddA is None else ddA.sub_(rs).mul_(A4)
                if dA is not None:
                    ddTs = ddTs.add_(dA * (b.d_A - b.rho).unsqueeze(1))
                ddTs = ddTs.mul_(self.scale)
            # δq = δTs k, δk = δTsᵀ q
            ddq = ddk = None
            if ddTs is not None:
                ddq = _att2tok((ddTs.view(Bs, c * n, n) @ b.k).view(Bs, c, n, -1))
                ddk = _att2tok(ddTs.transpose(-1, -2) @ b.q.unsqueeze(1))
            if dk is not None:
                ddq = _add(ddq, (b.d_Ts @ dk.expand(Bs, *dk.shape[1:]).reshape(Bs, n, -1)).view(Bs, n, c, -1))
            if dq is not None:
                ddk = _add(ddk, (b.d_Ts.transpose(-1, -2) @ dq.expand(Bs, *dq.shape[1:]).reshape(Bs, n, -1)).view(Bs, n, c, -1))
            for part, dd, dp in (("query", ddq, b.d_q), ("key", ddk, b.d_k)):
                if gname + part in want:  # rows of W: ẋᵀ δq + xᵀ δq̇; of the bias: Σ δq̇ (and so for k)
                    gw = zeros(pre + part)
                    if dxi is not None:
                        gw = gw + _tok_contract(dxi, dp)
                    if dd is not None:
                        gw = gw + _tok_contract_rev(b.x, dd)
                    parts = [gw]
                    if pre + part + "_bias" in p:
                        parts.append(zeros(pre + part + "_bias") + (0 if dd is None else dd.sum((0, 1))))
                    put(gname + part, parts)
            if earliest >= self.group_index[gname + "query"]:
                return res
            # adjoint of the block input
            ddx = ddu1
            if ddax is not None:
                ddx = _add(ddx, (b.A.transpose(-1, -2) @ ddax.reshape(Bs, n, c * d)).view(Bs, n, c, d))
            if dA is not None:  # Ȧᵀ δax
                ddx = _add(ddx, _att2tok(dA.transpose(-1, -2) @ b.d_ax.unsqueeze(1)))
            if ddq is not None:
                ddx = _add(ddx, _lin(ddq, Wq.T))
            if ddk is not None:
                ddx = _add(ddx, _lin(ddk, Wk.T))
            if T(pre + "query") is not None:
                ddx = _add(ddx, _act_times_tangent(b.d_q, T(pre + "query").transpose(1, 2)))
            if T(pre + "key") is not None:
                ddx = _add(ddx, _act_times_tangent(b.d_k, T(pre + "key").transpose(1, 2)))
        # embedding and positions
        if "embed" in want:
            gw, gb = zeros("embed.weight"), zeros("embed.bias")
            if ddx is not None:
                gw = gw + _tok_contract(ddx, xp)
                gb = gb + ddx.sum((0, 1))
            put("embed", [gw, gb])
        if "pos" in want:
            gp = zeros("pos")
            if ddx is not None:
                gp = gp + ddx.sum(0).transpose(0, 1)
            put("pos", [gp])
        return res
