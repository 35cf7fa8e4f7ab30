"""The batch-mean cross-entropy ``L = (1/B) Σ_b ℓ(z_b, y_b)`` on logits z (B, K).

Adjoint ``δz = (p − onehot(y)) / B`` with ``p = softmax(z)``; its tangent (the loss Hessian in the logits,
``(diag p − p pᵀ)/B``, applied to ``ż``) is ``δż = p ∘ (ż − ⟨p, ż⟩) / B``.
"""
from __future__ import annotations

import torch

__all__ = ["primal", "vjp_tangent"]


def primal(z: torch.Tensor, labels: torch.Tensor):
    """(p, loss, δz) for logits z (B, K) and labels (B,)."""
    probs = torch.softmax(z, -1)
    loss = torch.nn.functional.cross_entropy(z, labels)
    d_z = (probs - torch.nn.functional.one_hot(labels, z.shape[-1]).to(z.dtype)) / z.shape[0]
    return probs, loss, d_z


def vjp_tangent(probs: torch.Tensor, dz, batch: int):
    """``δż = p ∘ (ż − ⟨p, ż⟩) / B``; probs (B, K), dz (B, c, K) or None. ``batch`` is the B of the mean
    (the whole batch, also when ``probs`` is a slice of it)."""
    if dz is None:
        return None
    pz = probs.unsqueeze(1)
    return pz * (dz - (pz * dz).sum(-1, keepdim=True)) / batch
