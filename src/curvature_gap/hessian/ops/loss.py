"""The losses that end a program, each a function of the output z and data (labels, a target):

* :class:`CrossEntropy` — ``L = (1/B) Σ_b ℓ(z_b, y_b)`` on logits z (B, 1, K) (``nn.CrossEntropyLoss()``):
  ``δz = (p − onehot(y)) / B`` with ``p = softmax(z)``; its tangent (the loss Hessian in the logits,
  ``(diag p − p pᵀ)/B``, applied to ``ż``) is ``δż = p ∘ (ż − ⟨p, ż⟩) / B``;
* :class:`MSE` — ``L = mean((z − target)²)`` over all N entries (``nn.MSELoss()``): ``δz = 2 (z − target)/N``,
  ``δż = 2 ż / N``;
* :class:`GivenLoss` — any loss given by ``∂L/∂Z`` and ``∂²L/∂Z²`` of the stacked output rows Z (B·n, k), as
  tensors or callables of Z: ``δż = (∂²L/∂Z²) ż`` (it may couple samples: no sample chunks).

Each is a sum over samples except :class:`GivenLoss`, so a pass may take the samples in chunks (``separable``).
"""
from __future__ import annotations

import torch

from . import Op

__all__ = ["CrossEntropy", "MSE", "GivenLoss"]


class _Loss(Op):
    """A loss of the output z (the first input) and data: the program's last op. Its forward tangent is ż itself
    (kept for the backward), its adjoint tangent ``δż = (∂²L/∂z²) ż`` (:meth:`curvature`)."""

    n_in = 1
    separable = True  # a sum over samples: a pass may take them in chunks

    def jvp(self, ctx, p, dxs, dp, c):
        return None, {"dz": dxs[0]}

    def vjp_tangent(self, ctx, p, t, dd_y, dp, c, need):
        dz = t.get("dz")
        return [None if dz is None else self.curvature(ctx, dz, c)]


class CrossEntropy(_Loss):
    """The batch-mean cross-entropy of logits z (B, 1, K) at the (data) labels (B,)."""

    def forward(self, xs, p):
        z, labels = xs
        z = z.reshape(z.shape[0], -1)
        probs = torch.softmax(z, -1)
        return torch.nn.functional.cross_entropy(z, labels), {"p": probs, "labels": labels, "batch": z.shape[0]}

    def vjp(self, ctx, p, d_y, need):
        probs = ctx["p"]
        d_z = (probs - torch.nn.functional.one_hot(ctx["labels"], probs.shape[-1]).to(probs.dtype)) / ctx["batch"]
        return [d_z[:, None]]

    def curvature(self, ctx, dz, c):
        pz = ctx["p"].unsqueeze(1)  # (B, 1, K)
        dz = dz.reshape(dz.shape[0], c, -1)
        return (pz * (dz - (pz * dz).sum(-1, keepdim=True)) / ctx["batch"])[:, None]


class MSE(_Loss):
    """``mean((z − target)²)`` over every entry; the target is data of z's shape."""

    def forward(self, xs, p):
        z, target = xs
        if tuple(target.shape) != tuple(z.shape):
            raise ValueError(f"target of shape {tuple(target.shape)} must have the output's shape {tuple(z.shape)}")
        r = z - target
        return r.pow(2).mean(), {"r": r, "count": z.numel()}

    def vjp(self, ctx, p, d_y, need):
        return [2.0 / ctx["count"] * ctx["r"]]

    def curvature(self, ctx, dz, c):
        return (2.0 / ctx["count"]) * dz


class GivenLoss(_Loss):
    """A loss given by ``(dl_dZ, d2l_dZ2)``: tensors, or callables of the stacked rows Z (B·n, k), giving ∂L/∂Z
    (B·n, k) and ∂²L/∂Z² (B·n·k, B·n·k) (row-major)."""

    separable = False
    unbatched = ("H2",)

    def __init__(self, dl_dZ, d2l_dZ2):
        self.dl, self.d2l = dl_dZ, d2l_dZ2

    def forward(self, xs, p):
        z = xs[0]
        rows = z.reshape(-1, z.shape[-1])
        g, H2 = (f(rows) if callable(f) else f for f in (self.dl, self.d2l))
        if g.numel() != z.numel():
            raise ValueError(f"dl_dZ has {g.numel()} entries; the output has {z.numel()} ({tuple(rows.shape)})")
        if tuple(H2.shape) != (z.numel(), z.numel()):
            raise ValueError(f"d2l_dZ2 must have shape (B n k, B n k) = ({z.numel()}, {z.numel()}), not "
                             f"{tuple(H2.shape)}")
        return None, {"g": g.reshape(z.shape).to(z), "H2": H2.to(z)}

    def vjp(self, ctx, p, d_y, need):
        return [ctx["g"]]

    def curvature(self, ctx, dz, c):
        B, n, _, k = dz.shape
        flat = dz.permute(2, 0, 1, 3).reshape(c, -1)  # (c, B n k)
        return (flat @ ctx["H2"].T).view(c, B, n, k).permute(1, 2, 0, 3)
