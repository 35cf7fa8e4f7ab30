"""Exact counterparts of the quantities the paper bounds, by automatic differentiation in float64.

The left-hand side of every inequality of Theorems 1 and 6, Lemma 4 and the Proposition, from ``torch.func`` derivatives
of the theory's forward pass (:mod:`curvature_gap.exact.forward`, written out by hand: never differentiated through
``torch.nn.LayerNorm``, whose fused kernel has wrong second derivatives). Layout follows the paper (§2): ``vec_r`` of a
row-major tensor is its ``reshape(-1)``, Jacobians are ``(out, in)``, second derivatives ``(out · n_i, n_j)``.

Self-attention layer (Theorem 1, Eq. 1), one sequence ``X ∈ R^{L×d_V}``: ``T = X W_Q W_Kᵀ Xᵀ/√d_K``,
``A = softmax_rows(T)``, ``F = A X W_V`` and ``l = ‖F − Target‖_F² / (L d_V)``.  :func:`sa_exact` returns the per-sample
Hessian of ``l`` w.r.t. ``(W_Q, W_K, W_V)``, its ``3 × 3`` block norms, the outer-product / functional split
``H = H_o + H_f`` (``H_o = (2/(L d_V)) G_iᵀ G_j`` with ``G_i = ∂F/∂W_i``), and the intermediate objects of the proof:
``‖∂A/∂T‖``, ``‖Z_1‖``, ``‖∂²A/∂T²‖``, ``‖Z_2‖``, ``‖A‖``, ``‖M_1‖``, ``‖R_m‖ = ‖F − Target‖_F``, ``‖S‖``.

Transformer block (Theorems 4–6, Eq. "transformer"): ``U = X + F``, ``Y = LN(U)``, ``S = ReLU(Y W_1) W_2 + Y``,
``Z = LN(S)``, loss ``‖Z − Target‖_F²/(L d_V)``.  :func:`block_exact` returns ``‖J_Y‖, ‖H_Y‖, ‖J_Z‖, ‖H_Z‖`` (LayerNorm
Jacobians/Hessians at ``U`` and ``S``), ``‖J_SY‖``, ``‖G_k‖``, ``‖B_i‖``, ``‖∂Z/∂W_i‖``, ``‖ξ_ij‖ = ‖∂B_i/∂W_j‖``,
``‖H_tr^{(i,j)}‖ = ‖∂²Z/∂W_i∂W_j‖``, ``‖Φ_kl‖ = ‖∂²F/∂W_k∂W_l‖`` and the loss Hessian over ``{W_1, W_2, W_K, W_Q, W_V}``
(full and per block).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch.func import grad, hessian, jacfwd, jacrev, vmap

from ..exact import linalg as la
from ..params import flat_view, offsets
from ..exact.derivatives import BLOCK_ORDER, SA_ORDER, block_slices, dense_hessian, flat_loss, hessian_norm
from ..exact.forward import attention_matrix, block_forward, block_output, ffn_residual, inv_std, layernorm, sa_forward
from ..exact.instances import Instance
from ..theory.attention import S_shuffle, Z1, Z2_norm, dA_dT_norm, d2A_dT2_norm

__all__ = [
    "sa_exact", "block_exact", "layernorm_exact", "layernorm_quantities", "layernorm_inputs", "LN_PARTS",
    "block_Z", "block_S", "SA_ORDER", "BLOCK_ORDER", "sa_quantities",
    "block_quantities", "group_of",
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
    """The quantities of :func:`layernorm_exact` as tensors, differentiable in ``U`` (the worst-case
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
    return _floats(layernorm_quantities(U))


def layernorm_inputs(U: torch.Tensor) -> dict:
    """What Lemma 4's right-hand side reads of a LayerNorm input: ``norm``, ``row_norm_min``, ``m``, ``n``."""
    return {k: v for k, v in _floats(layernorm_quantities(U, need=())).items() if k != "std_min"}


# ----------------------------------------------------------------------------- self-attention
def _floats(q: dict) -> dict:
    return {k: _floats(v) if isinstance(v, dict) else v if isinstance(v, int) else float(v) for k, v in q.items()}


_SA_BLOCKS = tuple(f"{k}_{p}{r}" for k in ("H", "Ho", "Hf") for p in SA_ORDER for r in SA_ORDER)


def sa_exact(inst: Instance, hessian: bool = True) -> dict:
    """Exact quantities of the single self-attention layer at ``inst`` (see module doc), floats."""
    X, WQ, WK, WV, T = inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target
    rank = int(torch.linalg.matrix_rank(sa_forward(X, WQ, WK, WV) - T))
    need = ("A", "M1", "R", "S", "dA", "d2A", "Z1", "Z2") + (("H",) + _SA_BLOCKS if hessian else ())
    return _floats(sa_quantities(X, WQ, WK, WV, T, need, rank, exact=True))


# ----------------------------------------------------------------------------- block
def _pair_norms(fn: Callable, args: list, order, pairs: set) -> dict:
    """``{(i, j): ‖∂²fn/∂W_i∂W_j‖}`` for all pairs of ``order`` (matrices ``(out·n_i) × n_j``; none if no
    ``pairs`` are asked for), as floats.

    One ``jacfwd(jacrev)`` over all of ``order``'s weights at once when the tensor fits
    ``la.DENSE_LIMIT`` entries (the cost is that of ``out`` reverse passes, whatever ``n_i``),
    otherwise per row-block ``i``, otherwise matrix-free per pair.
    """
    if not pairs:
        return {}
    idx = [_BLK_IDX[p] for p in order]
    sizes = [args[k].numel() for k in idx]
    out_n = fn(*args).numel()
    P = sum(sizes)
    res = {}
    if out_n * P * P <= la.DENSE_LIMIT:
        shapes = [args[k].shape for k in idx]

        def g(v):
            a = list(args)
            for k, t, sh in zip(idx, torch.split(v, sizes), shapes):
                a[k] = t.reshape(sh)
            return fn(*a).reshape(-1)

        x = torch.cat([args[k].reshape(-1) for k in idx])
        T = jacfwd(jacrev(g))(x)  # (out, P, P)
        sl = block_slices(order, sizes)
        return {(p, q): la.gram_norm(T[:, sl[p], sl[q]]) for p in order for q in order}
    for a_, p in enumerate(order):
        if out_n * sizes[a_] * P <= la.DENSE_LIMIT:
            Ts = la.second_derivative_tensor(fn, args, idx[a_], tuple(idx))
            for q, Tij in zip(order, Ts):
                res[(p, q)] = la.gram_norm(Tij)
        else:
            for b_, q in enumerate(order):
                res[(p, q)] = la.second_derivative_norm(fn, args, idx[a_], idx[b_], la.DENSE_LIMIT)
    return res


def block_exact(inst: Instance, hessian: bool = True, tensors: bool = True, need=None) -> dict:
    """Exact quantities of the transformer block at ``inst`` (see module doc), floats; ``need``: only the quantity
    groups named (:func:`group_of`; None: every group). Besides the derivative norms, ``H`` is the loss Hessian's
    spectral norm (dense ``eigvalsh`` when ``P · L · d_V ≤ 5·10⁶``, else Lanczos on HVPs), ``ln_U`` and
    ``ln_S`` the LayerNorm inputs' Lemma-4 data."""
    need = [g for g in (_BLOCK_ALL if need is None else need)
            if (hessian or g != "H") and (tensors or g.split("_")[0] not in ("xi", "Htr", "Phi"))]
    return _floats(block_quantities(inst.X, *inst.weights, inst.Target, need, exact=True))


# ----------------------------------------------------------------------------- for the worst-case search
# The search (:mod:`.search`) descends on bound/exact: it needs the quantities as tensors, differentiable and batched
# over starts (``torch.func.vmap``), and only those a bound reads (its groups: :func:`.search.needs`; keys of no group,
# the weights' norms and the shape, are always there). :func:`sa_exact` and :func:`block_exact` are the same functions
# with ``exact=True`` (:data:`_EXACT`): the rows' evaluation, whose norms are :func:`.linalg.spectral_norm` and
# :func:`.linalg.sym_spectral_norm` (Lanczos above ``la.LANCZOS_MIN``), second derivatives :func:`_pair_norms` (per
# block or matrix-free above ``la.DENSE_LIMIT``) and the block's Hessian norm :func:`.derivatives.hessian_norm`.
_SA_GROUPS = {"H": "H", "G_": "G", "dA_dT": "dA", "Z1": "Z1", "Z2": "Z2", "A": "A",
              "attn_uniform_dev": "A", "M1": "M1", "R": "R", "S": "S", "d2A_dT2": "d2A"}
_BLOCK_GROUPS = {"ln_U": "ln", "ln_S": "ln", "J_Y": "ln", "H_Y": "ln", "J_Z": "ln", "H_Z": "ln", "J_SY": "JSY",
                 "G_": "G", "B_": "B", "dZ_": "dZ", "H": "H"}
_LN_GROUPS = {k: k for k in LN_PARTS}


def group_of(part: str, key: str) -> str | None:
    """The group of quantity ``key`` of ``part`` ("sa", "ln", "prop" or "block"; :func:`sa_quantities`,
    :func:`layernorm_quantities`, :func:`block_quantities`), None for one always computed. A pair's second derivative
    (``xi_12``, ``Htr_KQ``, ``Phi_VK``) is a group of its own; ``H_QK`` (a block of the self-attention Hessian) belongs
    to ``H``."""
    if part in ("prop", "block") and key.split("_")[0] in ("xi", "Htr", "Phi"):
        return key
    if part == "sa" and key.split("_")[0] in ("Phi", "H", "Ho", "Hf") and "_" in key:
        return key  # one Φ pair; one block of the Hessian or of its outer-product / functional parts
    groups = {"sa": _SA_GROUPS, "ln": _LN_GROUPS}.get(part, _BLOCK_GROUPS)
    if key in groups:
        return groups[key]
    return next((g for k, g in groups.items() if k.endswith("_") and key.startswith(k)), None)


def sa_quantities(X, W_Q, W_K, W_V, Target, need, rank, exact: bool = False) -> dict:
    """The quantities of :func:`sa_exact` in the groups ``need`` (:func:`group_of`) as tensors, differentiable in
    ``X, W_Q, W_K, W_V, Target`` (each (L, d), (d, d_K), (d, d_K), (d, d), (L, d)) and batchable; ``rank`` is
    ``rank(F − Target)``, piecewise constant, given (the search computes it outside the batched function).
    ``exact``: as the rows evaluate them instead (floats, :data:`_EXACT`)."""
    how = _EXACT if exact else _TENSORS
    norm = how["norm"]  # ‖·‖_2
    L, d = X.shape
    A = attention_matrix(X, W_Q, W_K)
    F = A @ X @ W_V
    q = {"norm_X": norm(X), "norm_Q": norm(W_Q), "norm_K": norm(W_K), "norm_V": norm(W_V), "norm_T": norm(Target),
         "rank_FT": rank, "L": L, "d_V": d, "d_K": W_Q.shape[1]}
    if "A" in need:
        q["A"], q["attn_uniform_dev"] = norm(A), (A - 1.0 / L).abs().max()
    scalars = {"M1": ("M1", lambda: norm(A @ X)), "R": ("R", lambda: how["fro"](F - Target)),
               "S": ("S", lambda: norm(S_shuffle(d, X))), "dA": ("dA_dT", lambda: dA_dT_norm(A)),
               "d2A": ("d2A_dT2", lambda: d2A_dT2_norm(A)), "Z1": ("Z1", lambda: norm(Z1(X, A))),
               "Z2": ("Z2", lambda: Z2_norm(X, A))}  # group -> (key, its value)
    q.update({k: value() for g, (k, value) in scalars.items() if g in need})
    pairs = {(g[4], g[5]) for g in need if g.startswith("Phi_")}  # Φ_kl = ∂²F/∂W_k∂W_l, (L d_V n_k) × n_l
    q.update({f"Phi_{k}{l}": v for (k, l), v in how["pairs"](sa_forward, [X, W_Q, W_K, W_V], SA_ORDER, pairs).items()})
    blocks = {g for g in need if g.split("_")[0] in ("H", "Ho", "Hf") and "_" in g}  # e.g. "H_VQ", "Hf_QK"
    split = any(not g.startswith("H_") for g in blocks)  # the outer-product / functional split needs G
    if "G" in need or split:
        J = jacrev(sa_forward, argnums=(1, 2, 3))(X, W_Q, W_K, W_V)  # G_p = ∂vec_r F/∂vec_r W_pᵀ, (L d_V, n_p)
        G = {p: j.reshape(L * d, -1) for p, j in zip(SA_ORDER, J)}
        q["G_Q"], q["G_K"], q["G_V"] = norm(G["Q"]), norm(G["K"]), norm(G["V"])
    if "H" in need or blocks:
        f, x, sizes = flat_loss(Instance(X, W_Q, W_K, W_V, None, None, Target), SA_ORDER, "sa")
        H = how["hessian"](f, x)
        if "H" in need:
            q["H"] = how["sym"](H)
        sl = block_slices(SA_ORDER, sizes)
        for g in blocks:
            kind, pq = g.split("_")
            B = H[sl[pq[0]], sl[pq[1]]]
            if kind != "H":
                Ho = 2.0 / (L * d) * G[pq[0]].T @ G[pq[1]]
                B = Ho if kind == "Ho" else B - Ho
            q[g] = norm(B)
    return q


def _pair_norm_tensors(fn: Callable, args: list, order, pairs: set) -> dict:
    """``{(i, j): ‖∂²fn/∂W_i∂W_j‖_2}`` (the matrix (out · n_i, n_j)) for the weight pairs ``pairs`` as tensors
    (``order`` unused: the weights are taken in ``fn``'s argument order): one second derivative over the flat vector of
    the weights the pairs touch (forward over reverse when the output is smaller than that vector, else forward over
    forward: the cheaper of out · P and P² passes), each norm the root of the largest eigenvalue of its n_j × n_j
    Gram."""
    used = sorted({n for p in pairs for n in p}, key=_BLK_IDX.get)
    if not used:
        return {}
    W = {n: args[_BLK_IDX[n]] for n in used}
    unflat = flat_view(used, [W[n].shape for n in used])

    def g(v):
        a = list(args)
        for n, w in unflat(v).items():
            a[_BLK_IDX[n]] = w
        return fn(*a).reshape(-1)

    x = torch.cat([W[n].reshape(-1) for n in used])
    out_n = fn(*args).numel()
    T = (jacfwd(jacrev(g)) if out_n < x.numel() else jacfwd(jacfwd(g)))(x)  # (out, P, P)
    sl = offsets(used, [W[n].numel() for n in used])
    out = {}
    for i, j in pairs:
        M = T[:, sl[i], sl[j]].reshape(-1, W[j].numel())
        out[(i, j)] = la.gram_roots(M.mT @ M)
    return out


_TENSORS = dict(norm=la.matrix_norms, fro=lambda M: M.pow(2).sum().sqrt(), hessian=lambda f, x: hessian(f)(x),
                sym=la.sym_abs_max, hessian_norm=lambda f, x, out: la.sym_abs_max(hessian(f)(x)), ln=("J", "H"),
                pairs=_pair_norm_tensors)
_EXACT = dict(norm=la.spectral_norm, fro=lambda M: float(M.norm()), hessian=dense_hessian, sym=la.sym_spectral_norm,
              hessian_norm=lambda f, x, out: hessian_norm(f, x, dense=x.numel() * out <= 5e6), ln=LN_PARTS,
              pairs=_pair_norms)
_PAIRS = (("xi", block_S, 6, BLOCK_ORDER), ("Htr", block_Z, 6, BLOCK_ORDER), ("Phi", sa_forward, 4, SA_ORDER))
_BLOCK_ALL = ("ln", "JSY", "G", "B", "dZ", "H", *(f"{n}_{i}{j}" for n, _, _, o in _PAIRS for i in o for j in o))


def block_quantities(X, W_Q, W_K, W_V, W_1, W_2, Target, need, exact: bool = False) -> dict:
    """The quantities of :func:`block_exact` in the groups ``need`` (:func:`group_of`) as tensors, differentiable
    in the instance (X (L, d_V), W_Q, W_K (d_V, d_K), W_V (d_V, d_V), W_1 (d_V, d_ff), W_2 (d_ff, d_V), Target
    (L, d_V)) and batchable; the same keys, with ``ln_U`` and ``ln_S`` as :func:`layernorm_quantities` of the two
    LayerNorm inputs. Second derivatives are formed densely (the search's shapes are small; ``exact``: as the
    rows evaluate them, :data:`_EXACT`). ``G_k``, ``B_i``, ``dZ_i`` and ``J_SY`` are the Jacobians (L d_V, n_i) of
    F, S, Z and of S w.r.t. Y."""
    how = _EXACT if exact else _TENSORS
    norm = how["norm"]
    args = [X, W_Q, W_K, W_V, W_1, W_2]
    L, d = X.shape
    fw = block_forward(*args)
    Y, S = fw["Y"], fw["S"]
    relu = torch.relu(Y @ W_1)
    q = {"L": L, "d_V": d, "d_K": W_Q.shape[1], "d_ff": W_1.shape[1], "norm_X": norm(X), "norm_Q": norm(W_Q),
         "norm_K": norm(W_K), "norm_V": norm(W_V), "norm_1": norm(W_1), "norm_2": norm(W_2), "norm_Y": norm(Y),
         "norm_S": norm(S), "norm_FFN": norm(relu @ W_2), "norm_relu": norm(relu), "R": how["fro"](fw["Z"] - Target)}
    if "ln" in need:
        q["ln_U"], q["ln_S"] = (layernorm_quantities(V, need=how["ln"]) for V in (fw["U"], S))
        q.update(J_Y=q["ln_U"]["J"], H_Y=q["ln_U"]["H"], J_Z=q["ln_S"]["J"], H_Z=q["ln_S"]["H"])
    if "JSY" in need:
        q["J_SY"] = norm(jacrev(ffn_residual)(Y, W_1, W_2).reshape(L * d, L * d))
    if "G" in need:
        for k in ("Q", "K", "V"):
            q[f"G_{k}"] = norm(jacrev(sa_forward, argnums=_BLK_IDX[k])(*args[:4]).reshape(L * d, -1))
    for i in BLOCK_ORDER:
        for g, fn in (("B", block_S), ("dZ", block_Z)):
            if g in need:
                q[f"{g}_{i}"] = norm(jacrev(fn, argnums=_BLK_IDX[i])(*args).reshape(L * d, -1))
    for name, fn, nargs, order in _PAIRS:
        pairs = {(g[-2], g[-1]) for g in need if g.startswith(name + "_")}
        q.update({f"{name}_{i}{j}": v for (i, j), v in how["pairs"](fn, args[:nargs], order, pairs).items()})
    if "H" in need:
        f, x, _ = flat_loss(Instance(X, W_Q, W_K, W_V, W_1, W_2, Target), BLOCK_ORDER, "block")
        q["H"] = how["hessian_norm"](f, x, L * d)
    return q
