"""Exact counterparts of the quantities the paper bounds, by automatic differentiation in float64.

The left-hand side of every inequality of Theorems 1 and 6, Lemma 4 and the Proposition, from
``torch.func`` derivatives of the theory's forward pass (:mod:`curvature_gap.exact.forward`, written
out by hand: never differentiated through ``torch.nn.LayerNorm``, whose fused kernel has wrong second
derivatives). Layout follows the paper (§2): ``vec_r`` of a row-major tensor is its ``reshape(-1)``,
Jacobians are ``(out, in)``, second derivatives ``(out · n_i, n_j)``.

Self-attention layer (Theorem 1, Eq. 1), one sequence ``X ∈ R^{L×d_V}``:
``T = X W_Q W_Kᵀ Xᵀ/√d_K``, ``A = softmax_rows(T)``, ``F = A X W_V`` and
``l = ‖F − Target‖_F² / (L d_V)``.  :func:`sa_exact` returns the per-sample Hessian of ``l`` w.r.t.
``(W_Q, W_K, W_V)``, its ``3 × 3`` block norms, the outer-product / functional split
``H = H_o + H_f`` (``H_o = (2/(L d_V)) G_iᵀ G_j`` with ``G_i = ∂F/∂W_i``), and the intermediate
objects of the proof: ``‖∂A/∂T‖``, ``‖Z_1‖``, ``‖∂²A/∂T²‖``, ``‖Z_2‖``, ``‖A‖``, ``‖M_1‖``,
``‖R_m‖ = ‖F − Target‖_F``, ``‖S‖``.

Transformer block (Theorems 4–6, Eq. "transformer"): ``U = X + F``, ``Y = LN(U)``,
``S = ReLU(Y W_1) W_2 + Y``, ``Z = LN(S)``, loss ``‖Z − Target‖_F²/(L d_V)``.  :func:`block_exact`
returns ``‖J_Y‖, ‖H_Y‖, ‖J_Z‖, ‖H_Z‖`` (LayerNorm Jacobians/Hessians at ``U`` and ``S``),
``‖J_SY‖``, ``‖G_k‖``, ``‖B_i‖``, ``‖∂Z/∂W_i‖``, ``‖ξ_ij‖ = ‖∂B_i/∂W_j‖``,
``‖H_tr^{(i,j)}‖ = ‖∂²Z/∂W_i∂W_j‖``, ``‖Φ_kl‖ = ‖∂²F/∂W_k∂W_l‖`` and the loss Hessian over
``{W_1, W_2, W_K, W_Q, W_V}`` (full and per block).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch.func import grad, jacfwd, jacrev, vmap

from ..exact import linalg as la
from ..exact.derivatives import BLOCK_ORDER, SA_ORDER, block_slices, dense_hessian, flat_loss, hessian_norm, split_blocks
from ..exact.forward import block_forward, block_output, ffn_residual, inv_std, layernorm, sa_forward, sa_parts
from ..exact.instances import Instance
from ..theory.attention import S_shuffle, Z1, Z2_norm, dA_dT_norm, d2A_dT2_norm

__all__ = [
    "sa_exact", "block_exact", "layernorm_exact", "layernorm_quantities", "layernorm_inputs", "LN_PARTS",
    "sa_jacobians", "hessian_split", "block_Z", "block_S", "SA_ORDER", "BLOCK_ORDER",
]

_BLK_IDX = {"Q": 1, "K": 2, "V": 3, "1": 4, "2": 5}  # position in block_forward's arguments


def block_Z(X, W_Q, W_K, W_V, W_1, W_2):
    """The block's output ``Z`` as a function of the input and the five weight matrices (for ``jacrev``)."""
    return block_output(X, W_Q, W_K, W_V, W_1, W_2, "Z")


def block_S(X, W_Q, W_K, W_V, W_1, W_2):
    """``S = Y + FFN(Y)``, the second LayerNorm's input, as a function of the input and the five matrices."""
    return block_output(X, W_Q, W_K, W_V, W_1, W_2, "S")


# ----------------------------------------------------------------------------- LayerNorm
LN_PARTS = ("J", "H", "dP", "d2P")


def layernorm_quantities(U: torch.Tensor, need=LN_PARTS) -> dict:
    """The quantities of :func:`layernorm_exact` as tensors, differentiable in ``U`` (the adversarial
    search descends through them), for the derivative norms in ``need`` only; the input data
    (``norm``, ``row_norm_min``, ``std_min``, ``m``, ``n``) always."""
    m, n = U.shape
    M = U - U.mean(dim=1, keepdim=True)
    rn = M.norm(dim=1)
    out = {"norm": la.matrix_norms(U), "row_norm_min": rn.min(), "std_min": rn.min() / math.sqrt(n), "m": m, "n": n}
    if "J" in need:
        out["J"] = la.matrix_norms(vmap(jacrev(layernorm))(U)).max()
    if "H" in need:
        H = vmap(jacfwd(jacrev(layernorm)))(U)  # (m, n_out, n, n): row i's Hessian of each output
        out["H"] = la.gram_roots(torch.einsum("iabc,iabd->icd", H, H)).max()
    if "dP" in need:
        out["dP"] = vmap(grad(inv_std))(U).norm(dim=1).max()
    if "d2P" in need:
        out["d2P"] = la.matrix_norms(vmap(jacfwd(grad(inv_std)))(U)).max()
    return out


def layernorm_exact(U: torch.Tensor) -> dict:
    """Norms of LayerNorm's derivatives at the input ``U`` (m × n), and the inputs of Lemma 4.

    ``J_LN`` (mn × mn) and ``H_LN`` ((mn)² × mn) are block diagonal over rows, so
    ``‖J_LN‖ = max_i ‖J_i‖`` and ``‖H_LN‖ = max_i sqrt(λ_max(Σ_a K_iaᵀ K_ia))`` with ``K_ia`` the
    Hessian of output ``(i, a)`` w.r.t. row ``i``.  ``P = diag(1/σ_i)``: ``‖∂P/∂X‖ = max_i ‖∇(1/σ_i)‖``
    and ``‖∂²P/∂X²‖ = max_i ‖∇²(1/σ_i)‖``.  Returns also ``‖U‖_2``, ``row_norm_min = min_i ‖m_i‖_2``
    (Lemma 4's ``σ_min`` as stated) and ``std_min = min_i ‖m_i‖_2/√n`` (the proof's σ); floats.
    """
    return {k: v if isinstance(v, int) else float(v) for k, v in layernorm_quantities(U).items()}


def layernorm_inputs(U: torch.Tensor) -> dict:
    """What Lemma 4's right-hand side reads of a LayerNorm input: ``norm``, ``row_norm_min``, ``m``, ``n``."""
    q = layernorm_quantities(U, need=())
    return {"norm": float(q["norm"]), "row_norm_min": float(q["row_norm_min"]), "m": q["m"], "n": q["n"]}


# ----------------------------------------------------------------------------- self-attention
def sa_jacobians(X, W_Q, W_K, W_V) -> dict:
    """``{p: G_p = ∂vec_r F/∂vec_r W_pᵀ}`` for p in Q, K, V, by ``jacrev``; each (L d_V, n_p)."""
    L, d = X.shape
    return {p: jacrev(sa_forward, argnums=1 + k)(X, W_Q, W_K, W_V).reshape(L * d, -1) for k, p in enumerate(SA_ORDER)}


def hessian_split(H: torch.Tensor, G: dict, norm: Callable) -> dict:
    """``H_{pq}, Ho_{pq}, Hf_{pq}``: ``norm`` of each block of the single layer's loss Hessian ``H``
    (order Q, K, V), of its outer-product part ``H_o = (2/(L d_V)) G_pᵀ G_q`` and of the functional
    rest ``H_f = H − H_o`` (``G`` from :func:`sa_jacobians`)."""
    Ld = next(iter(G.values())).shape[0]
    out = {}
    for (p, q), B in split_blocks(H, SA_ORDER, [G[k].shape[1] for k in SA_ORDER]).items():
        Ho = 2.0 / Ld * G[p].T @ G[q]
        out[f"H_{p}{q}"], out[f"Ho_{p}{q}"], out[f"Hf_{p}{q}"] = norm(B), norm(Ho), norm(B - Ho)
    return out


def sa_exact(inst: Instance, hessian: bool = True) -> dict:
    """Exact quantities of the single self-attention layer at ``inst`` (see module doc)."""
    X, WQ, WK, WV, T = inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target
    L, d = X.shape
    fw = sa_parts(X, WQ, WK, WV)
    A, F = fw["A"], fw["F"]
    out = {
        "norm_X": la.spectral_norm(X), "norm_Q": la.spectral_norm(WQ), "norm_K": la.spectral_norm(WK),
        "norm_V": la.spectral_norm(WV), "norm_T": la.spectral_norm(T),
        "rank_FT": int(torch.linalg.matrix_rank(F - T)), "L": L, "d_V": d, "d_K": inst.d_K,
        "A": la.spectral_norm(A), "M1": la.spectral_norm(A @ X), "R": float((F - T).norm()),
        "dA_dT": dA_dT_norm(A), "d2A_dT2": d2A_dT2_norm(A),
        "Z1": la.spectral_norm(Z1(X, A)), "Z2": Z2_norm(X, A),
        "S": la.spectral_norm(S_shuffle(d)),
        "attn_max": float(A.max(dim=1).values.mean()), "attn_uniform_dev": float((A - 1.0 / L).abs().max()),
    }
    if not hessian:
        return out
    f, x, _ = flat_loss(inst, SA_ORDER, "sa")
    H = dense_hessian(f, x)
    out["H"] = la.sym_spectral_norm(H)
    out["H_dense"] = H
    out.update(hessian_split(H, sa_jacobians(X, WQ, WK, WV), la.spectral_norm))
    return out


# ----------------------------------------------------------------------------- block
def _pair_norms(name: str, fn: Callable, args: list, order, dense_limit: float) -> dict:
    """``{name_ij: ‖∂²fn/∂W_i∂W_j‖}`` for all pairs of ``order`` (matrices ``(out·n_i) × n_j``).

    One ``jacfwd(jacrev)`` over all of ``order``'s weights at once when the tensor fits
    ``dense_limit`` entries (the cost is that of ``out`` reverse passes, whatever ``n_i``),
    otherwise per row-block ``i``, otherwise matrix-free per pair.
    """
    idx = [_BLK_IDX[p] for p in order]
    sizes = [args[k].numel() for k in idx]
    out_n = fn(*args).numel()
    P = sum(sizes)
    res = {}
    if out_n * P * P <= dense_limit:
        shapes = [args[k].shape for k in idx]

        def g(v):
            a = list(args)
            for k, t, sh in zip(idx, torch.split(v, sizes), shapes):
                a[k] = t.reshape(sh)
            return fn(*a).reshape(-1)

        x = torch.cat([args[k].reshape(-1) for k in idx])
        T = jacfwd(jacrev(g))(x)  # (out, P, P)
        sl = block_slices(order, sizes)
        for p in order:
            for q in order:
                res[f"{name}_{p}{q}"] = la.gram_norm(T[:, sl[p], sl[q]])
        return res
    for a_, p in enumerate(order):
        if out_n * sizes[a_] * P <= dense_limit:
            Ts = la.second_derivative_tensor(fn, args, idx[a_], tuple(idx))
            for q, Tij in zip(order, Ts):
                res[f"{name}_{p}{q}"] = la.gram_norm(Tij)
        else:
            for b_, q in enumerate(order):
                res[f"{name}_{p}{q}"] = la.second_derivative_norm(fn, args, idx[a_], idx[b_], dense_limit)
    return res


def block_exact(inst: Instance, hessian: bool = True, tensors: bool = True,
                dense_limit: float = la.DENSE_LIMIT, dense_hessian_limit: float = 5e6) -> dict:
    """Exact quantities of the transformer block at ``inst`` (see module doc).

    Keys: ``J_Y, H_Y, J_Z, H_Z, J_SY``, ``G_{k}`` (k ∈ Q,K,V), ``B_{i}``, ``dZ_{i}`` (i ∈ 1,2,K,Q,V),
    ``xi_{i}{j}``, ``Htr_{i}{j}``, ``Phi_{k}{l}``, ``H`` (the loss Hessian's spectral norm: dense
    ``eigvalsh`` when ``P · L · d_V ≤ dense_hessian_limit``, else Lanczos on HVPs), norms of ``X, Y, S, FFN(Y), ReLU(Y W_1), Z − Target`` and of the weights, and the LN
    inputs' Lemma-4 data under ``ln_U`` and ``ln_S``.
    """
    X = inst.X
    L, d = X.shape
    args = [X, inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2]
    fw = block_forward(*args)
    Y, S, Z, U = fw["Y"], fw["S"], fw["Z"], fw["U"]
    relu = torch.relu(Y @ inst.W_1)
    out = {
        "L": L, "d_V": d, "d_K": inst.d_K, "d_ff": inst.d_ff,
        "norm_X": la.spectral_norm(X), "norm_Q": la.spectral_norm(inst.W_Q),
        "norm_K": la.spectral_norm(inst.W_K), "norm_V": la.spectral_norm(inst.W_V),
        "norm_1": la.spectral_norm(inst.W_1), "norm_2": la.spectral_norm(inst.W_2),
        "norm_Y": la.spectral_norm(Y), "norm_S": la.spectral_norm(S),
        "norm_FFN": la.spectral_norm(relu @ inst.W_2), "norm_relu": la.spectral_norm(relu),
        "R": float((Z - inst.Target).norm()), "attn_max": float(fw["A"].max(dim=1).values.mean()),
    }
    lnU, lnS = layernorm_exact(U), layernorm_exact(S)
    out.update(ln_U=lnU, ln_S=lnS, J_Y=lnU["J"], H_Y=lnU["H"], J_Z=lnS["J"], H_Z=lnS["H"])
    out["J_SY"] = la.spectral_norm(jacrev(ffn_residual)(Y, inst.W_1, inst.W_2).reshape(L * d, L * d))
    for k in ("Q", "K", "V"):
        out[f"G_{k}"] = la.spectral_norm(jacrev(sa_forward, argnums=_BLK_IDX[k])(*args[:4]).reshape(L * d, -1))
    for i in BLOCK_ORDER:
        out[f"B_{i}"] = la.spectral_norm(jacrev(block_S, argnums=_BLK_IDX[i])(*args).reshape(L * d, -1))
        out[f"dZ_{i}"] = la.spectral_norm(jacrev(block_Z, argnums=_BLK_IDX[i])(*args).reshape(L * d, -1))
    for name, fn, order, nargs in () if not tensors else (("xi", block_S, BLOCK_ORDER, 6), ("Htr", block_Z, BLOCK_ORDER, 6),
                                   ("Phi", sa_forward, ("Q", "K", "V"), 4)):
        out.update(_pair_norms(name, fn, args[:nargs], order, dense_limit))
    if hessian:
        f, x, _ = flat_loss(inst, BLOCK_ORDER, "block")
        out["H"] = hessian_norm(f, x, dense=x.numel() * L * d <= dense_hessian_limit)
    return out
