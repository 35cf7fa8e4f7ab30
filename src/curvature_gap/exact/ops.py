"""The reference for one operation of the Hessian engine (:class:`curvature_gap.hessian.ops.Op`): autograd of its
own forward, twice in reverse mode, and central differences.

:func:`op_errors` puts every rule of an op to the test at once. With a fixed random quadratic test function
``φ(y) = Σ w y + ½ Σ w₂ y²`` after the op (a loss op, whose value is a scalar, is its own φ), the op's rules give

* the adjoints ``δx_i`` (``vjp``) with ``δy = ∂φ/∂y``: the gradient of ``φ(op(x; θ))`` in each input;
* the forward tangent ``ẏ`` (``jvp``) along random directions of every input and parameter at once;
* the adjoint tangents ``δẋ_i`` (``vjp_tangent``, with ``δẏ = w₂ ∘ ẏ``) and the parameter rows (``rows``): together
  the Hessian-vector product of ``φ(op(x; θ))`` along those directions, so both the op's own curvature and the
  curvature coming from downstream enter;
* the parameters' gradient (``grads``),

each compared with reverse-over-reverse ``torch.autograd`` of ``op.forward`` and, for the products, with central
differences of its autograd gradient. Inputs are token tensors (B, n, k), tangents the engine's layout (B, n, c, k).
Nothing here imports the engine: ``op`` is any object with its protocol.
"""
from __future__ import annotations

import torch

__all__ = ["op_errors"]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-300))


def op_errors(op, xs: list, params: dict, c: int = 3, seed: int = 0, h: float = 1e-5) -> dict[str, float]:
    """The largest relative error of each rule of ``op`` on the inputs ``xs`` (its first ``op.n_in`` (all if None)
    are differentiated, the rest are data) and parameters ``params`` ({slot: tensor}), float64, ``c`` random
    directions: ``{"vjp", "jvp", "hvp", "grads"}`` against autograd (reverse over reverse) and
    ``{"jvp_fd", "hvp_fd"}`` against central differences with step ``h``."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    n_in = len(xs) if op.n_in is None else op.n_in
    data = list(xs[n_in:])
    slots = list(params)
    args = list(xs[:n_in]) + [params[s] for s in slots]

    y, ctx = op.forward(list(xs), dict(params))
    scalar = y.dim() == 0
    w, w2 = (None, None) if scalar else (r(*y.shape), r(*y.shape))

    def F(*a):
        y, _ = op.forward(list(a[:n_in]) + data, dict(zip(slots, a[n_in:])))
        return y if scalar else (w * y).sum() + 0.5 * (w2 * y * y).sum()

    def grad_at(a):
        a = [t.detach().requires_grad_() for t in a]
        return torch.autograd.grad(F(*a), a, allow_unused=True, materialize_grads=True)

    dirs = [r(c, *t.shape) for t in args]
    # the op's rules
    d_y = None if scalar else w + w2 * y
    need = [True] * n_in
    vjp = op.vjp(ctx, dict(params), d_y, need)
    dp = dict(zip(slots, dirs[n_in:]))
    # directions (c, B, n, ...) in the engine's layout (B, n, c, ...): movedim(0, 2), and back: movedim(2, 0)
    ydot, t = op.jvp(ctx, dict(params), [d.movedim(0, 2) for d in dirs[:n_in]], dp, c)
    dd_y = None if scalar else w2.unsqueeze(2) * ydot
    ddx = op.vjp_tangent(ctx, dict(params), t, dd_y, dp, c, need)
    rows = op.rows(ctx, dict(params), t, dd_y, dp, c, tuple(slots)) if slots else {}
    grads = op.grads(ctx, dict(params), tuple(slots)) if slots else {}
    ours = [d.movedim(2, 0) for d in ddx] + [rows[s].reshape(c, *params[s].shape) for s in slots]

    ref_grad = grad_at(args)
    err = {"vjp": max([_rel(a, b) for a, b in zip(vjp, ref_grad[:n_in])], default=0.0),
           "grads": max([_rel(grads[s].reshape(params[s].shape), ref_grad[n_in + i]) for i, s in enumerate(slots)],
                        default=0.0),
           "jvp": 0.0, "jvp_fd": 0.0, "hvp": 0.0, "hvp_fd": 0.0}
    fwd = lambda *a: op.forward(list(a[:n_in]) + data, dict(zip(slots, a[n_in:])))[0]  # noqa: E731
    for j in range(c):
        v = tuple(d[j] for d in dirs)
        _, hv = torch.autograd.functional.hvp(F, tuple(args), v)
        gp, gm = grad_at([a + h * d for a, d in zip(args, v)]), grad_at([a - h * d for a, d in zip(args, v)])
        for o, ref, p_, m_ in zip(ours, hv, gp, gm):
            err["hvp"] = max(err["hvp"], _rel(o[j], ref))
            err["hvp_fd"] = max(err["hvp_fd"], _rel(o[j], (p_ - m_) / (2 * h)))
        if not scalar:
            _, jv = torch.autograd.functional.jvp(fwd, tuple(args), v)
            with torch.no_grad():
                fd = (fwd(*[a + h * d for a, d in zip(args, v)]) - fwd(*[a - h * d for a, d in zip(args, v)])) / (2 * h)
            err["jvp"] = max(err["jvp"], _rel(ydot.movedim(2, 0)[j], jv))
            err["jvp_fd"] = max(err["jvp_fd"], _rel(ydot.movedim(2, 0)[j], fd))
    return err
