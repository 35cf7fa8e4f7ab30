"""Post-norm Transformer block: Theorem 4 (Jacobians), Theorem 5 (Hessian), Gauss–Newton assembly.

Block (paper Eq. "transformer", b_1 = b_2 = 0, ReLU, LayerNorm with γ = 1, β = 0, no ε):

    U = X + F(X),  Y = LN(U),  S = ReLU(Y W_1) W_2 + Y,  Z = LN(S),
    loss l(Z) = (1/(L d_V)) ||Z - Target||_F^2.

Parameters ``"1", "2", "K", "Q", "V"`` have sizes ``n_1 = d_V d_ff``, ``n_2 = d_ff d_V``, ``n_Q = n_K = d_V d_K``,
``n_V = d_V^2``.

Theorem 4: ``∂Z/∂W_i = J_Z B_i`` with ``B_1, B_2`` from :mod:`.ffn` and ``B_k = J_SY J_Y G_k``.
Theorem 5 (boxed): ``H_tr^(i,j) = (J_Z ⊗ I_{n_i}) ξ_ij + (I_{L d_V} ⊗ B_i^T) H_Z B_j`` with
``ξ_ij = ∂B_i/∂W_j``.  Loss Hessian (the Gauss–Newton decomposition of §3.2, the paper's Eq. (7)):
``∂²l/∂W_i∂W_j = (J_Z B_i)^T (2/(L d_V)) (J_Z B_j) + (∂l/∂Z ⊗ I_{n_i}) H_tr^(i,j)``.

``*_literal`` builds every Kronecker factor densely, as printed (small shapes only); :func:`loss_hessian` pushes
``∂l/∂Z`` through the same formulas with ``(g^T ⊗ I)(A ⊗ B) = (g^T A) ⊗ B``, forming no (L d_V n_i)-row object.
"""
from __future__ import annotations

import numpy as np
import torch

from ..exact.derivatives import ATTENTION_ORDER, BLOCK_ORDER
from ..exact.forward import block_forward
from ..exact.linalg import sym_spectral_norm
from . import attention as at
from . import ffn as ff
from . import layernorm as ln
from .calculus import apply_commutation, commutation, d_kron_wrt_first, d_kron_wrt_second, eye, kron, vec_r

__all__ = ["BLOCK_PARAMS", "param_sizes", "first_order", "xi", "xi_printed", "H_tr", "loss_hessian_literal",
           "contract_xi", "loss_hessian", "assemble", "dIkronW2T_dW2", "dIkronW2T_dW2_printed",
           "diagonal_norms_under_input_scaling"]

BLOCK_PARAMS = BLOCK_ORDER  # ("1", "2", "K", "Q", "V")
ATTN = ATTENTION_ORDER  # ("K", "Q", "V")


def param_sizes(d_V: int, d_K: int, d_ff: int) -> dict:
    """``{"1": d_V d_ff, "2": d_ff d_V, "K": d_V d_K, "Q": d_V d_K, "V": d_V^2}``."""
    return {"1": d_V * d_ff, "2": d_ff * d_V, "K": d_V * d_K, "Q": d_V * d_K, "V": d_V * d_V}


def first_order(X, W_Q, W_K, W_V, W_1, W_2, with_dZ: bool = True) -> dict:
    """Theorem 4: ``J_Z, J_Y, J_SY``, attention Jacobians ``G_k``, ``dY_dW = J_Y G_k``,
    ``B_i = ∂S/∂W_i`` and (``with_dZ``) ``dZ_dW = J_Z B_i``; plus the forward intermediates."""
    fw = block_forward(X, W_Q, W_K, W_V, W_1, W_2)
    Y, S, U = fw["Y"], fw["S"], fw["U"]
    J_Y = ln.jacobian(U)
    J_Z = ln.jacobian(S)
    J_SY = ff.dS_dY(Y, W_1, W_2)
    G = at.jacobians(X, W_Q, W_K, W_V)
    dY = {k: J_Y @ G[k] for k in ATTN}
    B = {"1": ff.dS_dW1(Y, W_1, W_2), "2": ff.dS_dW2(Y, W_1), **{k: J_SY @ dY[k] for k in ATTN}}
    dZ = {i: J_Z @ B[i] for i in BLOCK_PARAMS} if with_dZ else None
    return {**fw, "J_Y": J_Y, "J_Z": J_Z, "J_SY": J_SY, "G": G, "dY_dW": dY, "B": B, "dZ_dW": dZ}


# ----------------------------------------------------------------- helpers for ξ
def dIkronW2T_dW2(W_2: torch.Tensor, L: int) -> torch.Tensor:
    """``∂(I_L ⊗ W_2^T)/∂W_2 = (I_L ⊗ K_{d_V,L} ⊗ I_{d_ff})(vec_r I_L ⊗ I_{d_V d_ff}) K_{d_V,d_ff}``.

    ``∂W_2^T/∂W_2 = K_{d_V,d_ff}`` for W_2 of shape (d_ff, d_V); result (L d_V L d_ff, d_ff d_V). The same
    formula with the sizes swapped gives ``∂(I_L ⊗ W_1^T)/∂W_1`` for W_1 (d_V, d_ff).
    """
    d_ff, d_V = W_2.shape
    return d_kron_wrt_second(eye(L, W_2), W_2.T) @ commutation(d_V, d_ff, W_2)


def dIkronW2T_dW2_printed(W_2: torch.Tensor, L: int) -> torch.Tensor:
    """As printed in the proof of Theorem 5 (pair (2,1)): ends with ``K_{d_ff,d_V}``."""
    d_ff, d_V = W_2.shape
    return d_kron_wrt_second(eye(L, W_2), W_2.T) @ commutation(d_ff, d_V, W_2)


def xi(i: str, j: str, X, W_Q, W_K, W_V, W_1, W_2, fo: dict | None = None,
       H_Y: torch.Tensor | None = None) -> torch.Tensor:
    """``ξ_ij = ∂B_i/∂W_j = ∂²S/∂W_i∂W_j`` (Theorem 5, corrected where needed); (L d_V n_i, n_j).

    * ``ξ_11 = ξ_22 = 0``;
    * ``ξ_12 = (I_{L d_V} ⊗ (Y ⊗ I_{d_ff})^T D_σ) ∂(I_L ⊗ W_2^T)/∂W_2``;
    * ``ξ_21 = (I_L ⊗ K_{d_V,d_ff} ⊗ I_{d_V})(I_{L d_ff} ⊗ vec_r I_{d_V}) D_σ (Y ⊗ I_{d_ff})``
      (printed in the paper under the name ξ_12);
    * ``ξ_1k = ((I_L ⊗ W_2^T) D_σ ⊗ I_{n_1})(I_L ⊗ K_{d_ff,d_V} ⊗ I_{d_ff})(I_{L d_V} ⊗ vec_r I_{d_ff}) J_Y G_k``;
    * ``ξ_2k = (I_L ⊗ K_{d_V,d_ff} ⊗ I_{d_V})(I_{L d_ff} ⊗ vec_r I_{d_V}) D_σ (I_L ⊗ W_1^T) J_Y G_k``;
    * ``ξ_k1 = (I_{L d_V} ⊗ (J_Y G_k)^T)((I_L ⊗ W_2^T) D_σ ⊗ I_{L d_V}) ∂(I_L ⊗ W_1^T)/∂W_1``;
    * ``ξ_k2 = (I_{L d_V} ⊗ (J_Y G_k)^T)(I_{L d_V} ⊗ (D_σ (I_L ⊗ W_1^T))^T) ∂(I_L ⊗ W_2^T)/∂W_2``;
    * ``ξ_kl = (J_SY ⊗ I_{n_k})[(I_{L d_V} ⊗ G_k^T)(H_Y G_l) + (J_Y ⊗ I_{n_k}) Φ_kl]``.
    """
    fo = fo or first_order(X, W_Q, W_K, W_V, W_1, W_2)
    L, d_V = X.shape
    d_ff = W_1.shape[1]
    n = param_sizes(d_V, W_Q.shape[1], d_ff)
    Y, J_Y, J_SY, G = fo["Y"], fo["J_Y"], fo["J_SY"], fo["G"]
    Ds = ff.D_sigma(Y, W_1)
    if (i, j) in (("1", "1"), ("2", "2")):
        return torch.zeros(L * d_V * n[i], n[j], dtype=X.dtype, device=X.device)
    if (i, j) == ("1", "2"):
        return kron(eye(L * d_V, X), (Ds @ kron(Y, eye(d_ff, X))).T) @ dIkronW2T_dW2(W_2, L)
    if (i, j) == ("2", "1"):
        return d_kron_wrt_first(ff.relu(Y @ W_1), eye(d_V, X)) @ Ds @ kron(Y, eye(d_ff, X))
    if i == "1":
        return kron(kron(eye(L, X), W_2.T) @ Ds, eye(n["1"], X)) @ d_kron_wrt_first(Y, eye(d_ff, X)) @ J_Y @ G[j]
    if i == "2":
        return d_kron_wrt_first(ff.relu(Y @ W_1), eye(d_V, X)) @ Ds @ kron(eye(L, X), W_1.T) @ J_Y @ G[j]
    if j in ("1", "2"):  # (I ⊗ (J_Y G_k)^T) ∂J_SY/∂W_j
        dJSY = (kron(kron(eye(L, X), W_2.T) @ Ds, eye(L * d_V, X)) @ dIkronW2T_dW2(W_1, L) if j == "1"
                else kron(eye(L * d_V, X), (Ds @ kron(eye(L, X), W_1.T)).T) @ dIkronW2T_dW2(W_2, L))
        return kron(eye(L * d_V, X), (J_Y @ G[i]).T) @ dJSY
    H_Y = ln.hessian(fo["U"]) if H_Y is None else H_Y
    Phi = at.phi(X, W_Q, W_K, W_V, i, j)
    inner = kron(eye(L * d_V, X), G[i].T) @ (H_Y @ G[j]) + kron(J_Y, eye(n[i], X)) @ Phi
    return kron(J_SY, eye(n[i], X)) @ inner


def xi_printed(i: str, j: str, X, W_Q, W_K, W_V, W_1, W_2, fo: dict | None = None) -> torch.Tensor:
    """The ξ formulas exactly as printed in Theorem 5 (detailed) for (1,2), (2,1), (1,k).

    * printed ξ_12: ``(I_L ⊗ K_{d_V,d_ff} ⊗ I_{d_V})(I_{L d_ff} ⊗ vec_r I_{d_V}) D_σ (Y ⊗ I_{d_ff})``;
    * printed ξ_21: ``(I_L ⊗ W_2^T) D_σ (I_L ⊗ K_{d_ff,d_V} ⊗ I_{d_ff})(I_{L d_V} ⊗ vec_r I_{d_ff})``;
    * printed ξ_1k: ``((I_L ⊗ W_2^T) D_σ ⊗ I_{n_k})(I_L ⊗ K_{d_ff,d_V} ⊗ I_{d_ff})``
      ``(I_{L d_V} ⊗ vec_r I_{d_ff}) J_Y G_k``.
    Raises ``RuntimeError`` (from the matrix product) where the printed form is ill-dimensioned.
    """
    fo = fo or first_order(X, W_Q, W_K, W_V, W_1, W_2)
    L, d_V = X.shape
    d_ff = W_1.shape[1]
    n = param_sizes(d_V, W_Q.shape[1], d_ff)
    Y = fo["Y"]
    Ds = ff.D_sigma(Y, W_1)
    if (i, j) == ("1", "2"):
        return xi("2", "1", X, W_Q, W_K, W_V, W_1, W_2, fo)
    if (i, j) == ("2", "1"):
        return kron(eye(L, X), W_2.T) @ Ds @ d_kron_wrt_first(Y, eye(d_ff, X))
    if i == "1" and j in ATTN:
        C1 = kron(eye(L, X), W_2.T) @ Ds
        return kron(C1, eye(n[j], X)) @ d_kron_wrt_first(Y, eye(d_ff, X)) @ fo["J_Y"] @ fo["G"][j]
    raise KeyError(f"no printed variant for ({i}, {j})")


def H_tr(i: str, j: str, X, W_Q, W_K, W_V, W_1, W_2, fo: dict | None = None,
         H_Z: torch.Tensor | None = None, H_Y: torch.Tensor | None = None,
         xi_ij: torch.Tensor | None = None) -> torch.Tensor:
    """Theorem 5 (boxed): ``H_tr^(i,j) = (J_Z ⊗ I_{n_i}) ξ_ij + (I_{L d_V} ⊗ B_i^T) H_Z B_j``; (L d_V n_i, n_j)."""
    fo = fo or first_order(X, W_Q, W_K, W_V, W_1, W_2)
    L, d_V = X.shape
    n = param_sizes(d_V, W_Q.shape[1], W_1.shape[1])
    H_Z = ln.hessian(fo["S"]) if H_Z is None else H_Z
    xi_ij = xi(i, j, X, W_Q, W_K, W_V, W_1, W_2, fo, H_Y) if xi_ij is None else xi_ij
    B = fo["B"]
    return kron(fo["J_Z"], eye(n[i], X)) @ xi_ij + kron(eye(L * d_V, X), B[i].T) @ H_Z @ B[j]


def loss_hessian_literal(X, W_Q, W_K, W_V, W_1, W_2, Target) -> dict:
    """The loss-Hessian decomposition (the paper's Eq. (7)) with every factor formed densely (small shapes only).

    ``∂²l/∂W_i∂W_j = (2/(L d_V)) (J_Z B_i)^T (J_Z B_j) + (∂l/∂Z ⊗ I_{n_i}) H_tr^(i,j)``,
    ``∂l/∂Z = (2/(L d_V)) vec_r(Z - Target)^T``.  Returns ``{(i, j): (n_i, n_j) block}``.
    """
    fo = first_order(X, W_Q, W_K, W_V, W_1, W_2)
    L, d_V = X.shape
    n = param_sizes(d_V, W_Q.shape[1], W_1.shape[1])
    H_Z = ln.hessian(fo["S"])
    H_Y = ln.hessian(fo["U"])
    g = 2.0 / (L * d_V) * vec_r(fo["Z"] - Target).reshape(1, -1)
    return {(i, j): (2.0 / (L * d_V) * fo["dZ_dW"][i].T @ fo["dZ_dW"][j]
                     + kron(g, eye(n[i], X)) @ H_tr(i, j, X, W_Q, W_K, W_V, W_1, W_2, fo, H_Z, H_Y))
            for i in BLOCK_PARAMS for j in BLOCK_PARAMS}


# ----------------------------------------------------------------- contracted evaluation
def contract_xi(i: str, j: str, u: torch.Tensor, X, W_Q, W_K, W_V, W_1, W_2, fo: dict,
                hY: torch.Tensor, cache: dict) -> torch.Tensor:
    """``(u^T ⊗ I_{n_i}) ξ_ij = Σ_s u_s ∂²S_s/∂W_i∂W_j``; (n_i, n_j).

    Obtained from :func:`xi` with ``(u^T ⊗ I)(A ⊗ B) = (u^T A) ⊗ B`` and
    ``(u^T ⊗ I) ∂vec_r(N)/∂W = ∂(N^T u)/∂W``; with ``U = unvec_r(u)`` (L, d_V):

    * ``12: (D_σ (Y ⊗ I_{d_ff}))^T (U ⊗ I_{d_ff}) K_{d_V,d_ff}``; ``21``: its transpose;
    * ``1k: (I_{d_V} ⊗ R^T) K_{d_V,L} J_Y G_k`` with ``R = unvec_r(D_σ (I_L ⊗ W_2) u)`` (L, d_ff);
    * ``2k: (I_{d_ff} ⊗ U^T) K_{d_ff,L} D_σ (I_L ⊗ W_1^T) J_Y G_k``; ``k1, k2``: transposes;
    * ``kl: G_k^T [(v^T ⊗ I) H_Y] G_l + (w^T ⊗ I) Φ_kl`` with ``v = J_SY^T u``, ``w = J_Y^T v``.
    """
    L, d_V = X.shape
    d_ff = W_1.shape[1]
    n = param_sizes(d_V, W_Q.shape[1], d_ff)
    if (i, j) in (("1", "1"), ("2", "2")):
        return torch.zeros(n[i], n[j], dtype=X.dtype, device=X.device)
    if j in ("1", "2") and (i in ATTN or (i, j) == ("2", "1")):
        return contract_xi(j, i, u, X, W_Q, W_K, W_V, W_1, W_2, fo, hY, cache).T
    Y = fo["Y"]
    mask = vec_r(ff.relu_mask(Y @ W_1))
    U = u.reshape(L, d_V)
    if (i, j) == ("1", "2"):
        Q = mask[:, None] * kron(Y, eye(d_ff, X))
        # (Q^T (U ⊗ I)) K_{d_V,d_ff}; right-multiplying by K_{m,n} is applying K_{n,m} to the transpose
        return apply_commutation(d_ff, d_V, (Q.T @ kron(U, eye(d_ff, X))).T).T
    V = fo["J_Y"] @ fo["G"][j] if j in ATTN else None
    if i == "1":
        R = (mask * (U @ W_2.T).reshape(-1)).reshape(L, d_ff)
        return kron(eye(d_V, X), R.T) @ apply_commutation(d_V, L, V)
    if i == "2":
        C2V = mask[:, None] * (kron(eye(L, X), W_1.T) @ V)
        return kron(eye(d_ff, X), U.T) @ apply_commutation(d_ff, L, C2V)
    if "v" not in cache:
        cache["v"] = fo["J_SY"].T @ u
        cache["w"] = fo["J_Y"].T @ cache["v"]
        cache["HcY"] = ln.contract_hessian(fo["U"], cache["v"], hY)
    G = fo["G"]
    return (G[i].T @ cache["HcY"] @ G[j]
            + at.contract_phi(X, W_Q, W_K, W_V, cache["w"], i, j, cache.setdefault("phi", {})))


def loss_hessian(X, W_Q, W_K, W_V, W_1, W_2, Target) -> dict:
    """Gauss–Newton assembly of Theorem 5 without forming (L d_V n_i)-row objects.

    ``∂²l/∂W_i∂W_j = (2/(L d_V)) (J_Z B_i)^T (J_Z B_j) + B_i^T [(g^T ⊗ I) H_Z] B_j + (u^T ⊗ I) ξ_ij
    = B_i^T [(2/(L d_V)) J_Z^T J_Z + (g^T ⊗ I) H_Z] B_j + (u^T ⊗ I) ξ_ij``
    with ``g = (2/(L d_V)) vec_r(Z - Target)``, ``u = J_Z^T g``; ``(g^T ⊗ I) H_Z`` uses the per-row
    LayerNorm Hessians (Theorem 3 on each row).  The (j, i) blocks are the transposes of the
    (i, j) blocks (Hessian of a scalar).  Returns ``{(i, j): (n_i, n_j) block}``.
    """
    fo = first_order(X, W_Q, W_K, W_V, W_1, W_2, with_dZ=False)
    L, d_V = X.shape
    g = 2.0 / (L * d_V) * vec_r(fo["Z"] - Target)
    sandwich = 2.0 / (L * d_V) * fo["J_Z"].T @ fo["J_Z"] + ln.contract_hessian(fo["S"], g)
    hY = ln.hessian_rowwise(fo["U"])
    u = fo["J_Z"].T @ g
    B = fo["B"]
    SB = {i: sandwich @ B[i] for i in BLOCK_PARAMS}
    cache: dict = {}
    out = {}
    for a, i in enumerate(BLOCK_PARAMS):
        for j in BLOCK_PARAMS[a:]:
            out[(i, j)] = blk = B[i].T @ SB[j] + contract_xi(i, j, u, X, W_Q, W_K, W_V, W_1, W_2, fo, hY, cache)
            if i != j:
                out[(j, i)] = blk.T
    return out


def assemble(blocks: dict, order=BLOCK_PARAMS) -> torch.Tensor:
    """Stack ``{(i, j): block}`` into the full matrix in the given parameter order."""
    return torch.cat([torch.cat([blocks[(i, j)] for j in order], dim=1) for i in order], dim=0)


# ----------------------------------------------------------------- how the blocks scale with the input
def diagonal_norms_under_input_scaling(X, W_Q, W_K, W_V, W_1, W_2, Target, scales) -> dict:
    """Spectral norms of the five diagonal blocks ``∂²l/∂W_i²`` of the loss Hessian (:func:`loss_hessian`) when the
    block is fed ``s X`` for each ``s`` in ``scales`` (weights and target fixed).

    Returns NumPy arrays ``scale`` (S,) and ``norms`` ``{i: (S,)}``, and ``decades`` ``{i: log10(max/min)}``. The
    non-attention blocks see the input only through the scale-free ``Y``, which depends on ``s`` only via ``A(sX)``.
    """
    H = [loss_hessian(float(s) * X, W_Q, W_K, W_V, W_1, W_2, Target) for s in scales]
    norms = {p: np.asarray([sym_spectral_norm(h[(p, p)]) for h in H]) for p in BLOCK_PARAMS}
    return {"scale": np.asarray(scales, dtype=float), "norms": norms,
            "decades": {p: float(np.log10(v.max() / v.min())) for p, v in norms.items()}}
