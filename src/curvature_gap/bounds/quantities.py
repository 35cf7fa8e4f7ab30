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

import functools
import math
from typing import Callable

import torch
from torch.func import grad, jacfwd, jacrev, vmap

from ..exact import linalg as la
from ..exact.derivatives import BLOCK_ORDER, SA_ORDER, dense_hessian, flat_loss, hessian_norm
from ..exact.forward import block_forward, block_output, sa_forward, softmax_rows
from ..exact.instances import Instance
from ..theory.attention import dA_dT_blocks

__all__ = [
    "sa_exact", "block_exact", "layernorm_exact", "softmax_d1_norm", "softmax_d2_norm", "softmax_d2_blocks",
    "Z1_matrix", "Z2_norm", "S_shuffle", "SA_ORDER", "BLOCK_ORDER",
]

_BLK_IDX = {"Q": 1, "K": 2, "V": 3, "1": 4, "2": 5}  # position in block_forward's arguments


def _block_Z(X, W_Q, W_K, W_V, W_1, W_2):
    return block_output(X, W_Q, W_K, W_V, W_1, W_2, "Z")


def _block_S(X, W_Q, W_K, W_V, W_1, W_2):
    return block_output(X, W_Q, W_K, W_V, W_1, W_2, "S")


def _blocks(H: torch.Tensor, order, sizes) -> dict:
    off = [0]
    for s in sizes:
        off.append(off[-1] + s)
    return {(p, q): H[off[a]:off[a + 1], off[b]:off[b + 1]]
            for a, p in enumerate(order) for b, q in enumerate(order)}


# ----------------------------------------------------------------------------- softmax pieces
def softmax_d1_norm(A: torch.Tensor) -> float:
    """``‖∂A/∂T‖_2`` with ``∂A/∂T = blockdiag_i(diag(a_i) − a_i a_iᵀ)`` (L² × L²)."""
    return max(float(la.top_eigenvalues(J)) for J in dA_dT_blocks(A))


def softmax_d2_blocks(A: torch.Tensor) -> torch.Tensor:
    """``K_ij = ∂²a_ij/∂t_i² = a_ij (2 a aᵀ + E_jj − diag(a) − e_j aᵀ − a e_jᵀ)`` (Ormaniec et al.
    Lemma C.1, quoted in the Theorem 1 proof) for all rows ``i`` and columns ``j``; (L, L, L, L)."""
    L = A.shape[0]
    I = torch.eye(L, dtype=A.dtype)
    aa = A[:, :, None] * A[:, None, :]  # (i, k, l)
    inner = (2 * aa[:, None] + torch.diag_embed(I)[None] - torch.diag_embed(A)[:, None]
             - I[None, :, :, None] * A[:, None, None, :] - A[:, None, :, None] * I[None, :, None, :])
    return A[:, :, None, None] * inner


def softmax_d2_norm(A: torch.Tensor) -> float:
    """``‖∂²A/∂T²‖_2`` of the ``(L²·L²) × L²`` matrix (Ormaniec et al. Lemma C.1 layout).

    Only row ``i`` of ``T`` enters row ``i`` of ``A``, so the Gram matrix is block diagonal with
    blocks ``Σ_j K_ijᵀ K_ij`` (``K_ij`` from :func:`softmax_d2_blocks`); the norm is the largest
    ``sqrt(λ_max)`` over rows.
    """
    K = softmax_d2_blocks(A)
    G = torch.einsum("iabc,iabd->icd", K, K)
    return float(la.gram_roots(G).max())


def Z1_matrix(X: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """``Z_1 = (I_L ⊗ Xᵀ)(∂A/∂T)(X ⊗ X)`` (L d_V × d_V²), entrywise
    ``Z_1[(i,p),(s,t)] = X_is (Xᵀ J_i X)_pt`` with ``J_i = diag(a_i) − a_i a_iᵀ``."""
    L, d = X.shape
    C = torch.einsum("jp,ijl,lt->ipt", X, dA_dT_blocks(A), X)
    return torch.einsum("is,ipt->ipst", X, C).reshape(L * d, d * d)


def Z2_norm(X: torch.Tensor, A: torch.Tensor) -> float:
    """``‖Z_2‖_2`` for ``Z_2 = (I_L ⊗ Xᵀ ⊗ Xᵀ ⊗ Xᵀ)(∂²A/∂T²)(X ⊗ X)`` (L d_V³ × d_V²).

    With ``Δa = J_i x_t`` (``x_t`` the t-th column of X) the directional derivative of ``J_i`` is
    ``K_i^(t) = diag(Δa) − Δa a_iᵀ − a_i Δaᵀ`` and ``Z_2[(i,p,q,r),(s,t)] = X_iq X_is (Xᵀ K_i^(t) X)_pr``.
    Hence ``Z_2ᵀ Z_2 = Σ_i ‖x_i‖² (x_i x_iᵀ) ⊗ (C_i C_iᵀ)`` with ``C_i[t,(p,r)] = (Xᵀ K_i^(t) X)_pr``.
    """
    L, d = X.shape
    J = dA_dT_blocks(A)  # (L, L, L)
    Da = torch.einsum("ijl,lt->itj", J, X)  # Δa for row i, column t: (L, d, L)
    K = (torch.diag_embed(Da) - Da[..., :, None] * A[:, None, None, :]
         - A[:, None, :, None] * Da[..., None, :])  # (L, d, L, L)
    C = torch.einsum("jp,itjl,lr->itpr", X, K, X).reshape(L, d, d * d)
    G = torch.zeros(d * d, d * d, dtype=X.dtype)
    for i in range(L):
        xi = X[i]
        G += float(xi @ xi) * torch.kron(torch.outer(xi, xi), C[i] @ C[i].T)
    return float(la.gram_roots(G))


@functools.lru_cache(maxsize=8)
def S_shuffle(d: int) -> torch.Tensor:
    """``S = (I_d ⊗ K_{d,d})(vec_r I_d ⊗ I_d)`` as written (d³ × d), built entrywise:
    ``(vec_r I ⊗ I)[(a,b,c'),c] = δ_ab δ_c'c`` and ``I ⊗ K_{d,d}`` swaps the last two indices,
    so ``S[(a,c,a),c] = 1`` and all other entries are 0."""
    S = torch.zeros(d, d, d, d, dtype=torch.float64)
    a = torch.arange(d)
    for c in range(d):
        S[a, c, a, c] = 1.0
    return S.reshape(d ** 3, d)


# ----------------------------------------------------------------------------- LayerNorm
def _ln_row(x):
    m = x - x.mean()
    return m / m.pow(2).mean().sqrt()


def _inv_sigma_row(x):
    m = x - x.mean()
    return 1.0 / m.pow(2).mean().sqrt()


def layernorm_exact(U: torch.Tensor) -> dict:
    """Norms of LayerNorm's derivatives at the input ``U`` (m × n), and the inputs of Lemma 4.

    ``J_LN`` (mn × mn) and ``H_LN`` ((mn)² × mn) are block diagonal over rows, so
    ``‖J_LN‖ = max_i ‖J_i‖`` and ``‖H_LN‖ = max_i sqrt(λ_max(Σ_a K_iaᵀ K_ia))`` with ``K_ia`` the
    Hessian of output ``(i, a)`` w.r.t. row ``i``.  ``P = diag(1/σ_i)``: ``‖∂P/∂X‖ = max_i ‖∇(1/σ_i)‖``
    and ``‖∂²P/∂X²‖ = max_i ‖∇²(1/σ_i)‖``.  Returns also ``‖U‖_2``, ``row_norm_min = min_i ‖m_i‖_2``
    (Lemma 4's ``σ_min`` as stated) and ``std_min = min_i ‖m_i‖_2/√n`` (the proof's σ).
    """
    m, n = U.shape
    J = vmap(jacrev(_ln_row))(U)
    H = vmap(jacfwd(jacrev(_ln_row)))(U)  # (m, n_out, n, n)
    G = torch.einsum("iabc,iabd->icd", H, H)
    dP = vmap(grad(_inv_sigma_row))(U)
    d2P = vmap(jacfwd(grad(_inv_sigma_row)))(U)
    M = U - U.mean(dim=1, keepdim=True)
    rn = M.norm(dim=1)
    return {
        "J": float(la.matrix_norms(J).max()),
        "H": max(float(la.gram_roots(g)) for g in G),
        "dP": float(dP.norm(dim=1).max()),
        "d2P": float(la.matrix_norms(d2P).max()),
        "norm": la.spectral_norm(U),
        "row_norm_min": float(rn.min()),
        "std_min": float(rn.min() / math.sqrt(n)),
        "m": m, "n": n,
    }


# ----------------------------------------------------------------------------- self-attention
def sa_exact(inst: Instance, hessian: bool = True) -> dict:
    """Exact quantities of the single self-attention layer at ``inst`` (see module doc)."""
    X, WQ, WK, WV, T = inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target
    L, d = X.shape
    Tm = X @ WQ @ WK.T @ X.T / math.sqrt(inst.d_K)
    A = softmax_rows(Tm)
    F = A @ X @ WV
    out = {
        "norm_X": la.spectral_norm(X), "norm_Q": la.spectral_norm(WQ), "norm_K": la.spectral_norm(WK),
        "norm_V": la.spectral_norm(WV), "norm_T": la.spectral_norm(T),
        "rank_FT": int(torch.linalg.matrix_rank(F - T)), "L": L, "d_V": d, "d_K": inst.d_K,
        "A": la.spectral_norm(A), "M1": la.spectral_norm(A @ X), "R": float((F - T).norm()),
        "dA_dT": softmax_d1_norm(A), "d2A_dT2": softmax_d2_norm(A),
        "Z1": la.spectral_norm(Z1_matrix(X, A)), "Z2": Z2_norm(X, A),
        "S": la.spectral_norm(S_shuffle(d)),
        "attn_max": float(A.max(dim=1).values.mean()), "attn_uniform_dev": float((A - 1.0 / L).abs().max()),
    }
    if not hessian:
        return out
    f, x, sizes = flat_loss(inst, SA_ORDER, "sa")
    H = dense_hessian(f, x)
    blk = _blocks(H, SA_ORDER, sizes)
    args = (X, WQ, WK, WV)
    G = {p: jacrev(sa_forward, argnums=1 + k)(*args).reshape(L * d, -1) for k, p in enumerate(SA_ORDER)}
    out["H"] = la.sym_spectral_norm(H)
    out["H_dense"] = H
    for (p, q), B in blk.items():
        Ho = 2.0 / (L * d) * G[p].T @ G[q]
        out[f"H_{p}{q}"] = la.spectral_norm(B)
        out[f"Ho_{p}{q}"] = la.spectral_norm(Ho)
        out[f"Hf_{p}{q}"] = la.spectral_norm(B - Ho)
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
        off = [0]
        for s_ in sizes:
            off.append(off[-1] + s_)
        for a_, p in enumerate(order):
            for b_, q in enumerate(order):
                res[f"{name}_{p}{q}"] = la.gram_norm(T[:, off[a_]:off[a_ + 1], off[b_]:off[b_ + 1]])
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
    S_of_Y = lambda Yv: torch.relu(Yv @ inst.W_1) @ inst.W_2 + Yv  # noqa: E731
    out["J_SY"] = la.spectral_norm(jacrev(S_of_Y)(Y).reshape(L * d, L * d))
    for k in ("Q", "K", "V"):
        out[f"G_{k}"] = la.spectral_norm(jacrev(sa_forward, argnums=_BLK_IDX[k])(*args[:4]).reshape(L * d, -1))
    for i in BLOCK_ORDER:
        out[f"B_{i}"] = la.spectral_norm(jacrev(_block_S, argnums=_BLK_IDX[i])(*args).reshape(L * d, -1))
        out[f"dZ_{i}"] = la.spectral_norm(jacrev(_block_Z, argnums=_BLK_IDX[i])(*args).reshape(L * d, -1))
    for name, fn, order, nargs in () if not tensors else (("xi", _block_S, BLOCK_ORDER, 6), ("Htr", _block_Z, BLOCK_ORDER, 6),
                                   ("Phi", sa_forward, ("Q", "K", "V"), 4)):
        out.update(_pair_norms(name, fn, args[:nargs], order, dense_limit))
    if hessian:
        f, x, _ = flat_loss(inst, BLOCK_ORDER, "block")
        out["H"] = hessian_norm(f, x, dense=x.numel() * L * d <= dense_hessian_limit)
    return out
