"""Assumption 1 (the paper's Fig. 12): ``∇L_{k−1}(w*) = ∇L_k(w*) = 0`` at the trained ``w*``.

:func:`gradient_norms` measures ``‖∇L_k(w*)‖_2`` against ``k`` for the cross-entropy of the model on
its training samples (in dataset order and under ``n_perm − 1`` further seeded permutations), with
``params="all"`` (every parameter) or ``"block"`` (block 0's five matrices).  Per-sample gradients
``g_i`` are formed once (``vmap(grad)``), so ``∇L_k = (1/k) Σ_{i≤k} g_{π(i)}``.

Reference curve: drawing ``k`` of the ``n`` samples without replacement gives
``E‖∇L_k‖² = ‖ḡ‖² + (tr Σ / k)(n − k)/(n − 1)`` (``ḡ``, ``Σ``: mean and covariance of the ``g_i``), so a
decrease like ``k^{-1/2}`` is what sampling alone produces; the assumption itself (a zero gradient)
holds only to the extent that ``‖ḡ‖`` is small against the typical ``‖g_i‖``.

The paper's claim "its validity increases with … a larger number of samples" is tested as: the
least-squares slope of ``log ‖∇L_k‖`` (mean over permutations) against ``log k`` on ``k ≤ n/4`` is
negative and ``‖∇L_{k_max}‖ < ‖∇L_1‖``.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

__all__ = ["gradient_norms", "claim_test"]


def _per_sample_grads(model, images, labels, names, chunk: int = 256) -> torch.Tensor:
    m = copy.deepcopy(model).double().eval()
    base = {k: v.detach() for k, v in m.named_parameters()}
    names = names or list(base)

    def f(w, img, lab):
        p = dict(base)
        p.update(zip(names, w))
        return torch.nn.functional.cross_entropy(functional_call(m, p, (img[None],)), lab[None])

    w0 = tuple(base[k] for k in names)
    out = []
    for s in range(0, len(labels), chunk):
        gs = vmap(grad(f), in_dims=(None, 0, 0))(w0, images[s:s + chunk].double(), labels[s:s + chunk])
        out.append(torch.cat([x.flatten(1) for x in gs], dim=1))
    return torch.cat(out)


def gradient_norms(model, dataset, ks=None, n: int | None = None, params: str = "all",
                   n_perm: int = 1, seed: int = 0) -> dict:
    """``‖∇L_k(w*)‖_2`` for ``k`` in ``ks`` (default: ~40 log-spaced values up to ``n``)."""
    from .theorem7 import _as_tensors, block_param_names

    n = n or (max(ks) if ks is not None else None)
    images, labels = _as_tensors(dataset, n)
    n = len(labels)
    cand = ks if ks is not None else np.round(np.logspace(0, math.log10(n), 40))
    ks = np.asarray(sorted({int(k) for k in cand if 1 <= int(k) <= n}))
    names = block_param_names(model) if params == "block" else None
    G = _per_sample_grads(model, images, labels, names)
    gbar = G.mean(0)
    trS = float(((G - gbar) ** 2).sum(1).mean()) * n / max(n - 1, 1)
    g = torch.Generator().manual_seed(seed)
    norms = []
    for p in range(n_perm):
        perm = torch.arange(n) if p == 0 else torch.randperm(n, generator=g)
        cs = torch.cumsum(G[perm], dim=0)
        norms.append((cs[torch.as_tensor(ks - 1)].norm(dim=1) / torch.as_tensor(ks, dtype=torch.float64)).numpy())
    norms = np.array(norms)
    ref = np.sqrt(float(gbar @ gbar) + trS / ks * (n - ks) / max(n - 1, 1))
    out = {"ks": ks.tolist(), "norms": norms.tolist(), "mean": norms.mean(0).tolist(), "reference": ref.tolist(),
           "n": n, "params": params, "n_params": int(G.shape[1]), "n_perm": n_perm,
           "mean_grad_norm": float(gbar.norm()), "per_sample_norm_mean": float(G.norm(dim=1).mean()),
           "trace_cov": trS}
    out.update(claim_test(out))
    return out


def claim_test(res: dict) -> dict:
    """The paper's claim (see module doc): slope, endpoints and the verdict."""
    ks = np.asarray(res["ks"], dtype=float)
    y = np.asarray(res["mean"], dtype=float)
    sel = ks <= max(res["n"] / 4, ks[min(2, len(ks) - 1)])
    slope = float(np.polyfit(np.log(ks[sel]), np.log(y[sel]), 1)[0]) if sel.sum() >= 2 else float("nan")
    decreasing = bool(slope < 0 and y[-1] < y[0])
    return {"slope": slope, "first": float(y[0]), "last": float(y[-1]), "claim_holds": decreasing,
            "relative_gradient_min": float(y.min() / res["per_sample_norm_mean"])}
