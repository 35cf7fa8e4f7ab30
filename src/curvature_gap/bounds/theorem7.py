"""Theorem 7 on a trained model: ``|L_{k+1}(w) − L_k(w)| ≤ 2ℓ_max/(k+1) + M‖w − w*‖²/(k+1)``.

The setting is the paper's Fig. 6 experiment: per-sample cross-entropy ``l_i(w)`` of the whole ViT
on training images in dataset order, ``L_k = (1/k) Σ_{i≤k} l_i`` (math.md §2.11; ℓ_max renames the
paper's loss bound "L").  ``w*`` is the checkpoint; ``w`` moves along ``w = w* + t u`` inside block 0's
five matrices ``{W_1, W_2, W_K, W_Q, W_V}`` (the theorems' parameters; every other parameter stays at
``w*``), ``‖u‖_2 = 1`` so ``‖w − w*‖ = t``.  Directions: ``"random"`` (seeded Gaussian, normalised)
and ``"max-grad"`` (the normalised gradient of the sample with the largest per-sample gradient
at ``w*``: the first-order term that Assumption 1 drops is then largest).

Right-hand side, :func:`rhs`: ``ℓ_max = max_i l_i(w*)`` over the ``n`` samples (measured, so the
theorem's hypothesis ``0 ≤ l_i(w*) ≤ ℓ_max`` holds) and two choices of ``M``:

* ``"exact"`` — ``max_i ‖∇²_w l_i(w*)‖_2`` over the ``n`` samples: batched power iteration on HVPs
  for every sample, refined by Lanczos (``eigsh``) on the largest few;
* ``"thm6"`` — ``max_i M_tr,i`` of Theorem 6 in its explicit form (App. C.6) at the theory block
  with the trained matrices and ``X_i = tokens(x_i)``; Theorem 6 is stated for the MSE
  ``‖Z − Target‖²/(L d_V)``, and the named choice here is ``Target = 0`` (``‖R^tr‖ = ‖Z‖_F = √(L d_V)``).
  The paper prescribes this M for the cross-entropy experiment without stating a target.

The exact identity ``L_{k+1} − L_k = (l_{k+1} − L_k)/(k+1)`` is checked in float64 (:func:`identity_residual`).
"""
from __future__ import annotations

import copy
import math
from typing import Callable

import numpy as np
import torch
from torch.func import functional_call, grad, jvp, vmap

__all__ = ["block_param_names", "per_sample_losses", "running_means", "identity_residual", "rhs",
           "per_sample_hessian_norms", "thm6_M", "path_check", "run", "T_GRID"]

T_GRID = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def block_param_names(model, block: int = 0) -> list[str]:
    """Names of block ``block``'s five matrices in the order ``W_1, W_2, W_K, W_Q, W_V``."""
    p = f"blocks.{block}."
    return [p + "ffn1.weight", p + "ffn2.weight", p + "key", p + "query", p + "value"]


def _as_tensors(dataset, n: int | None):
    if isinstance(dataset, (tuple, list)):
        images, labels = dataset
    else:
        images, labels = dataset.images, dataset.labels
    n = len(labels) if n is None else min(n, len(labels))
    return images[:n], labels[:n]


def _f64(model):
    return copy.deepcopy(model).double().eval()


def per_sample_losses(model, dataset, n: int | None = None, delta: dict | None = None,
                      batch: int = 1024) -> np.ndarray:
    """``l_i(w* + delta)`` (cross-entropy, float64) for the first ``n`` samples; ``delta`` maps
    parameter names to additive changes."""
    m = model if next(model.parameters()).dtype == torch.float64 else _f64(model)
    images, labels = _as_tensors(dataset, n)
    params = {k: v.detach() for k, v in m.named_parameters()}
    if delta:
        params = {k: (v + delta[k] if k in delta else v) for k, v in params.items()}
    out = []
    with torch.no_grad():
        for s in range(0, len(labels), batch):
            logits = functional_call(m, params, (images[s:s + batch].double(),))
            out.append(torch.nn.functional.cross_entropy(logits, labels[s:s + batch], reduction="none"))
    return torch.cat(out).numpy()


def running_means(losses: np.ndarray) -> np.ndarray:
    """``L_k = (1/k) Σ_{i≤k} l_i`` for ``k = 1..n`` (float64)."""
    return np.cumsum(np.asarray(losses, dtype=np.float64)) / np.arange(1, len(losses) + 1)


def identity_residual(losses: np.ndarray) -> float:
    """``max_k |(L_{k+1} − L_k) − (l_{k+1} − L_k)/(k+1)|`` for ``k = 1..n−1``."""
    l = np.asarray(losses, dtype=np.float64)
    Lk = running_means(l)
    k = np.arange(1, len(l))
    lhs = Lk[1:] - Lk[:-1]
    rhs_ = (l[1:] - Lk[:-1]) / (k + 1)
    return float(np.abs(lhs - rhs_).max()) if len(k) else 0.0


def rhs(k, ell_max: float, M: float, dist2: float):
    """Theorem 7's right-hand side ``2ℓ_max/(k+1) + M‖w − w*‖²/(k+1)`` (``k`` scalar or array)."""
    k = np.asarray(k, dtype=np.float64)
    return (2.0 * ell_max + M * dist2) / (k + 1.0)


def _loss1(m, base, names):
    def f(w, img, lab):
        p = dict(base)
        p.update(zip(names, w))
        logits = functional_call(m, p, (img[None],))
        return torch.nn.functional.cross_entropy(logits, lab[None])
    return f


def per_sample_hessian_norms(model, dataset, n: int, names: list[str] | None = None, iters: int = 40,
                             chunk: int = 128, refine: int = 4, seed: int = 0) -> dict:
    """``‖∇²_w l_i(w*)‖_2`` over block 0's matrices for the first ``n`` samples.

    Batched power iteration (``iters`` HVPs per sample, ``‖H v‖`` with ``‖v‖ = 1``, a lower
    estimate) for all samples, then Lanczos (``eigsh``, largest magnitude) for the ``refine``
    samples with the largest estimates.  Returns ``{"norms", "rel_change", "refined": {i: value}, "max"}``.
    """
    from scipy.sparse.linalg import LinearOperator, eigsh

    m = _f64(model)
    names = names or block_param_names(m)
    base = {k: v.detach() for k, v in m.named_parameters()}
    w0 = tuple(base[k] for k in names)
    f = _loss1(m, base, names)

    def hvp(v, img, lab):
        return jvp(lambda *w: grad(lambda ww, a, b: f(ww, a, b))(w, img, lab), w0, v)[1]

    bhvp = vmap(hvp, in_dims=(0, 0, 0))
    images, labels = _as_tensors(dataset, n)
    images = images.double()
    g = torch.Generator().manual_seed(seed)
    est, rel = [], []
    for s in range(0, len(labels), chunk):
        im, lb = images[s:s + chunk], labels[s:s + chunk]
        b = len(lb)
        v = tuple(torch.randn((b, *t.shape), generator=g, dtype=torch.float64) for t in w0)
        prev = None
        for _ in range(iters):
            nv = torch.sqrt(sum((x ** 2).flatten(1).sum(1) for x in v))
            v = tuple(x / nv.view(-1, *[1] * (x.dim() - 1)) for x in v)
            Hv = bhvp(v, im, lb)
            lam = torch.sqrt(sum((x ** 2).flatten(1).sum(1) for x in Hv))
            if prev is not None:
                r = (lam - prev).abs() / lam.clamp_min(1e-300)
            prev, v = lam, Hv
        est.append(lam)
        rel.append(r)
    norms = torch.cat(est).numpy()
    relc = torch.cat(rel).numpy()
    refined = {}
    sizes = [t.numel() for t in w0]
    P = sum(sizes)
    for i in np.argsort(-norms)[:refine]:
        im, lb = images[i], labels[i]

        def mv(x, im=im, lb=lb):
            parts = torch.split(torch.from_numpy(x), sizes)
            v = tuple(p.reshape(t.shape) for p, t in zip(parts, w0))
            return torch.cat([h.reshape(-1) for h in hvp(v, im, lb)]).numpy()

        ev = eigsh(LinearOperator((P, P), matvec=mv, dtype=np.float64), k=1, which="LM", tol=1e-8,
                   return_eigenvectors=False)
        refined[int(i)] = float(abs(ev).max())
        norms[i] = max(norms[i], refined[int(i)])
    return {"norms": norms, "rel_change": relc, "refined": refined, "max": float(norms.max())}


def thm6_M(model, dataset, n: int) -> np.ndarray:
    """Theorem 6's explicit ``M_tr`` (App. C.6) per sample, theory block 0, ``Target = 0``."""
    from .instance import from_block
    from .training import light_bounds

    m = _f64(model)
    images, _ = _as_tensors(dataset, n)
    with torch.no_grad():
        X = m.tokens(images.double())
    return np.array([light_bounds(from_block(m.blocks[0], X[i], target="zero", seed=i))["thm6"]
                     for i in range(len(X))])


def _direction(m, names, kind: str, dataset, n: int, seed: int) -> dict:
    base = {k: v.detach() for k, v in m.named_parameters()}
    if kind == "random":
        g = torch.Generator().manual_seed(seed)
        u = {k: torch.randn(base[k].shape, generator=g, dtype=torch.float64) for k in names}
    elif kind == "max-grad":
        f = _loss1(m, base, names)
        images, labels = _as_tensors(dataset, n)
        w0 = tuple(base[k] for k in names)
        gs = vmap(grad(f), in_dims=(None, 0, 0))(w0, images.double(), labels)
        gn = torch.sqrt(sum((x ** 2).flatten(1).sum(1) for x in gs))
        i = int(gn.argmax())
        u = {k: x[i].clone() for k, x in zip(names, gs)}
    else:
        raise ValueError(f"unknown direction {kind!r}; choose random or max-grad")
    nrm = math.sqrt(sum(float((x ** 2).sum()) for x in u.values()))
    return {k: x / nrm for k, x in u.items()}


def path_check(model, dataset, n: int, M: dict, ts=T_GRID, directions=("random", "max-grad"),
               seed: int = 0, ks_table: int = 60) -> dict:
    """Measured ``|L_{k+1}(w) − L_k(w)|`` along ``w = w* + t u`` against :func:`rhs` for each
    ``M`` in ``M`` (name -> value).  Returns per (direction, t): the identity residual, the smallest
    ``rhs/lhs`` over ``k = 1..n−1`` for each M with its ``k``, and a table on log-spaced ``k``."""
    m = _f64(model)
    names = block_param_names(m)
    l0 = per_sample_losses(m, dataset, n)
    ell_max = float(l0.max())
    k = np.arange(1, len(l0))
    ktab = np.unique(np.round(np.logspace(0, math.log10(len(l0) - 1), ks_table)).astype(int))
    res = {"n": len(l0), "ell_max": ell_max, "M": dict(M), "ts": list(ts), "directions": list(directions),
           "paths": [], "table": []}
    for d in directions:
        u = _direction(m, names, d, dataset, n, seed)
        for t in ts:
            l = l0 if t == 0 else per_sample_losses(m, dataset, n, delta={kk: t * v for kk, v in u.items()})
            Lk = running_means(l)
            lhs = np.abs(Lk[1:] - Lk[:-1])
            entry = {"direction": d, "t": t, "identity_residual": identity_residual(l),
                     "lhs_max": float(lhs.max()), "loss_max": float(l.max())}
            for name, Mv in M.items():
                r = rhs(k, ell_max, Mv, t * t)
                with np.errstate(divide="ignore"):
                    ratio = np.where(lhs > 0, r / np.where(lhs > 0, lhs, 1.0), np.inf)
                j = int(np.argmin(ratio))
                entry[f"min_ratio_{name}"] = float(ratio[j])
                entry[f"argmin_k_{name}"] = int(k[j])
            res["paths"].append(entry)
            for kk in ktab:
                row = {"direction": d, "t": t, "k": int(kk), "lhs": float(lhs[kk - 1])}
                for name, Mv in M.items():
                    row[f"rhs_{name}"] = float(rhs(kk, ell_max, Mv, t * t))
                res["table"].append(row)
    return res


def run(model, dataset, n: int = 1024, hessian_n: int | None = None, ts=T_GRID,
        log: Callable[[str], None] | None = None, seed: int = 0, iters: int = 40, refine: int = 4) -> dict:
    """Everything the book shows for Theorem 7 (used by ``curvature-gap bounds`` and Fig. 6)."""
    import time

    t0 = time.perf_counter()
    hn = min(n, hessian_n or n)
    hs = per_sample_hessian_norms(model, dataset, hn, seed=seed, iters=iters, refine=refine)
    if log:
        log(f"  theorem 7: per-sample Hessian norms of {hn} samples in {time.perf_counter() - t0:.1f}s")
    t1 = time.perf_counter()
    m6 = thm6_M(model, dataset, n)
    if log:
        log(f"  theorem 7: Theorem-6 M of {n} samples in {time.perf_counter() - t1:.1f}s")
    M = {"exact": hs["max"], "thm6": float(m6.max())}
    res = path_check(model, dataset, n, M, ts=ts, seed=seed)
    res["hessian"] = {"n": hn, "max": hs["max"], "median": float(np.median(hs["norms"])),
                      "refined": hs["refined"], "power_rel_change_max": float(np.max(hs["rel_change"]))}
    res["thm6_M"] = {"max": float(m6.max()), "median": float(np.median(m6)), "min": float(m6.min())}
    res["exact_M_note"] = ("max over the first hessian_n samples" if hn < n else "max over all n samples")
    res["seconds"] = time.perf_counter() - t0
    return res
