"""Theorem 6 for the cross-entropy loss the experiments train with (the paper's theory uses the MSE).

The paper states its bounds for the MSE ``l = ‖Z − Target‖²/(L d_V)`` and says the framework
"naturally generalizes to the cross-entropy loss". The Gauss–Newton split (Eq. gauss_decomposition)
holds for any loss: with logits ``z = W_h mean_t(Z) + b_h`` (mean pooling and a linear head, as in the
experiments' ViT), ``l = CE(z, y)`` and ``P = ∂z/∂vec_r(Z) = (1/L)(1_Lᵀ ⊗ W_h)``,

    ∂²l/∂W_i∂W_j = (∂Z/∂W_i)ᵀ Pᵀ (diag p − p pᵀ) P (∂Z/∂W_j) + (∂l/∂Z ⊗ I) H_tr^(i,j),
    ∂l/∂Z = Pᵀ (p − e_y).

So Theorem 6's full bound carries over with the MSE's output curvature ``2/(L d_V)`` replaced by
``‖Pᵀ(diag p − p pᵀ)P‖ ≤ ½ ‖P‖² = ‖W_h‖²/(2L)`` (``‖diag p − p pᵀ‖_2 ≤ 1/2`` by Gershgorin, as for
the attention softmax) and ``‖R^tr‖`` by ``‖∂l/∂Z‖``. :func:`ce_records` checks that bound, with every
other ingredient from App. C.6, against the exact Hessian of the per-sample cross-entropy w.r.t. the
theory block's five matrices. The block is the theory block (γ = 1, β = 0, no FFN biases) with the
trained matrices, followed by mean pooling and the trained head: the same function on both sides.
"""
from __future__ import annotations

import torch
from torch.func import hessian

from ..exact import linalg as la
from ..exact.forward import block_output
from ..exact.instances import Instance
from ..params import flat_view, flatten
from . import registry
from .training import light_bounds

__all__ = ["ce_loss", "output_factors", "ce_records"]


def ce_loss(inst: Instance, W_h: torch.Tensor, b_h: torch.Tensor, y: int, weights=None) -> torch.Tensor:
    """Cross-entropy of ``W_h mean_t(Z) + b_h`` for the theory block at ``inst`` (``weights`` overrides
    ``(W_Q, W_K, W_V, W_1, W_2)``)."""
    w = inst.weights if weights is None else weights
    z = W_h @ block_output(inst.X, *w).mean(0) + b_h
    return torch.nn.functional.cross_entropy(z[None], torch.tensor([y]))


def output_factors(inst: Instance, W_h: torch.Tensor, b_h: torch.Tensor, y: int) -> dict:
    """``‖diag p − p pᵀ‖``, ``‖Pᵀ(diag p − p pᵀ)P‖`` (exact output curvature), its bound ``½‖P‖²`` and
    ``‖∂l/∂Z‖ = ‖Pᵀ(p − e_y)‖`` at ``inst``."""
    L = inst.L
    Z = block_output(inst.X, *inst.weights)
    p = torch.softmax(W_h @ Z.mean(0) + b_h, 0)
    Lam = torch.diag(p) - torch.outer(p, p)
    P = torch.kron(torch.ones(1, L, dtype=Z.dtype) / L, W_h)  # (K, L d_V), vec_r(Z) layout
    e = torch.zeros_like(p)
    e[y] = 1.0
    return {"softmax_factor": la.sym_spectral_norm(Lam), "out_curv": la.sym_spectral_norm(P.T @ Lam @ P),
            "out_curv_bound": 0.5 * la.spectral_norm(P) ** 2, "grad_norm": float((P.T @ (p - e)).norm())}


def ce_records(insts: list[Instance], W_h: torch.Tensor, b_h: torch.Tensor, labels: list[int]) -> list[dict]:
    """For each instance: ``‖diag p − p pᵀ‖ ≤ 1/2`` (``ce.output_factor``) and the exact CE Hessian's norm
    against Theorem 6's explicit bound with the cross-entropy factors (``thm6.full.explicit.ce``)."""
    out = []
    W_h, b_h = W_h.to(torch.float64), b_h.to(torch.float64)
    for i, (inst, y) in enumerate(zip(insts, labels)):
        f = output_factors(inst, W_h, b_h, int(y))
        unflat = flat_view(range(5), [w.shape for w in inst.weights])  # (W_Q, W_K, W_V, W_1, W_2)
        H = hessian(lambda v: ce_loss(inst, W_h, b_h, int(y), list(unflat(v).values())))(flatten(inst.weights))
        exact = la.sym_spectral_norm(H)
        M = light_bounds(inst, out_curv=f["out_curv_bound"], grad_norm=f["grad_norm"])["thm6"]
        for r in registry.records("ce", {**f, "M_tr": M, "H": exact}, sub=f"sample {i}"):
            if r["check"] == "thm6.full.explicit.ce":
                r.update(out_curv=f["out_curv"], out_curv_bound=f["out_curv_bound"], grad_norm=f["grad_norm"])
            out.append(r)
    return out
