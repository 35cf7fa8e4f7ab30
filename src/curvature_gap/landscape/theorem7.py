"""Theorem 7: ``|L_{k+1}(w) − L_k(w)| ≤ 2ℓ_max/(k+1) + M‖w − w*‖²/(k+1)``, on data and adversarially.

``L_k`` is the mean loss of the first k samples, ``ℓ_max`` bounds the per-sample losses at ``w*``
(0 ≤ l_i(w*) ≤ ℓ_max; the paper calls it "L") and ``M`` bounds the per-sample Hessians (Theorem 1 for
a self-attention layer, ``M_tr`` of Theorem 6 for a block).

At ``w = w*`` the inequality is the running-mean identity ``L_{k+1} − L_k = (l_{k+1} − L_k)/(k+1)`` with a
factor 2 to spare: it cannot fail for a bounded loss. Off ``w*`` a violation needs the first-order term the proof
drops by Assumption 1, ``(∇l_{k+1} − ∇L_k)·(w − w*)``, to beat ``2ℓ_max + M‖w − w*‖²``, i.e. roughly
``‖∇l_{k+1} − ∇L_k‖² > 8 ℓ_max M``: with an ``M`` that overestimates the curvature by orders of magnitude the
check tests the running-mean identity, not the curvature analysis. Two settings:

* :func:`vit_check` — the trained MNIST ViT (Fig. 6), per-sample cross-entropy, ``w`` moving inside block 0's
  five matrices, ``M`` the largest exact per-sample Hessian norm at ``w*`` or Theorem 6's ``M_tr`` with the
  cross-entropy factors of :mod:`curvature_gap.bounds.ce`;
* :func:`sa_check` — one self-attention layer with the paper's MSE at an exact minimiser ``w*`` of ``L_N``,
  ``M`` = the largest per-sample Theorem 1 bound at ``w*`` (printed and repaired), and an adversarial search
  for the ``w ≠ w*`` that minimises ``rhs/lhs``.
"""
from __future__ import annotations

import copy
import math
import time
from typing import Callable

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator
from torch.func import grad, hessian, vmap

from ..bounds import formulas as fm
from ..bounds.ce import output_factors
from ..bounds.training import light_bounds
from ..exact import linalg as la
from ..exact.forward import sa_forward, sa_loss
from ..exact.instances import from_model
from ..hessian.hvp import HessianOperator
from ..hessian.loss import model_loss
from ..params import flatten
from .losses import identity_residual, per_sample_losses, running_means

__all__ = ["STATEMENT", "IDENTITY_TOL", "GUARANTEED_FACTOR", "cannot_fail", "T0_FLOOR", "moved", "block_param_names",
           "rhs", "per_sample_hessian_norms", "thm6_M_ce", "path_check", "vit_check", "sa_check", "T_GRID"]

T_GRID = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def block_param_names(model, block: int = 0) -> list[str]:
    """Names of block ``block``'s five matrices in the order ``W_1, W_2, W_K, W_Q, W_V``."""
    p = f"blocks.{block}."
    return [p + "ffn1.weight", p + "ffn2.weight", p + "key", p + "query", p + "value"]


def rhs(k, ell_max: float, M: float, dist2: float):
    """Theorem 7's right-hand side ``2ℓ_max/(k+1) + M‖w − w*‖²/(k+1)`` (``k`` scalar or array)."""
    k = np.asarray(k, dtype=np.float64)
    return (2.0 * ell_max + M * dist2) / (k + 1.0)


T0_FLOOR = 2.0  # at t = 0, rhs/lhs ≥ 2ℓ_max/|l_{k+1} − L_k| ≥ 2 by construction: only t > 0 informs

STATEMENT = "|L_{k+1}(w) − L_k(w)| ≤ 2ℓ_max/(k+1) + M‖w − w*‖²/(k+1)"  # the inequality as a row names it
IDENTITY_TOL = 1e-12  # float64 rounding of a running mean over ≤ 60,000 terms of size O(1)
# An M this many times the exact curvature at w* cannot fail as checked (for l_i ≥ 0 with ‖∇²l_i‖ ≤ M,
# l_i(w) ≤ 2 l_i(w*) + M‖w − w*‖² gives the statement: the lemma on the Theorem 7 page).
GUARANTEED_FACTOR = 1e3


def cannot_fail(M: float, M_exact: float) -> dict:
    """A statement row's ``details`` when its ``M`` is at least :data:`GUARANTEED_FACTOR` times the exact curvature
    (the check cannot fail, and the row says why); ``{}`` otherwise."""
    if M < GUARANTEED_FACTOR * M_exact:
        return {}
    return {"cannot_fail": f"M is {M / M_exact:.2g}× the exact curvature max_i ‖∇²l_i(w*)‖, and any M that bounds "
                           "‖∇²l_i‖ near w* gives the inequality by l_i(w) ≤ 2l_i(w*) + M‖w − w*‖² (for l_i ≥ 0), "
                           "without Assumption 1 or the Taylor step: this check cannot fail"}


def moved(paths: list[dict]) -> list[dict]:
    """The path entries away from w* (``t > 0``), where the curvature term enters and rhs/lhs can fall below
    :data:`T0_FLOOR`."""
    return [p for p in paths if p["t"] > 0]


def _ratio_over_k(losses, ell_max: float, M: float, dist2: float) -> tuple[float, int, np.ndarray]:
    """(min over k of rhs/lhs, its k, lhs) for per-sample losses at one w."""
    Lk = running_means(losses)
    lhs = np.abs(Lk[1:] - Lk[:-1])
    k = np.arange(1, len(losses))
    ratio = np.where(lhs > 0, rhs(k, ell_max, M, dist2) / np.where(lhs > 0, lhs, 1.0), np.inf)
    j = int(np.argmin(ratio))
    return float(ratio[j]), int(k[j]), lhs


# ----------------------------------------------------------------------------- the trained ViT (Fig. 6 setting)
def _device_of(model, device=None) -> torch.device:
    """``device`` if given, else the device of ``model``'s parameters."""
    return torch.device(device) if device is not None else next(model.parameters()).device


def per_sample_hessian_norms(model, images, labels, names: list[str] | None = None, iters: int = 40,
                             chunk: int = 128, refine: int = 4, seed: int = 0, device=None) -> dict:
    """``‖∇²_w l_i(w*)‖_2`` over block 0's matrices for each sample (float64 copy of ``model``).

    Batched power iteration (``iters`` per-sample Hessian products; ``‖H v‖`` with ``‖v‖ = 1``, a lower
    estimate) for all samples, then Lanczos (ARPACK) for the ``refine`` largest. Returns ``{"norms",
    "rel_change", "refined": {i: value}, "max"}``. Runs on ``device`` (default: the model's); the start vectors
    are drawn on the CPU generator, so every device starts from the same vectors.
    """
    dev = _device_of(model, device)
    m = copy.deepcopy(model).double().to(dev).eval()
    names = names or block_param_names(m)
    images, labels = images.to(dev).double(), labels.to(dev)
    op = HessianOperator(m, (images, labels), names, dtype=torch.float64)
    hvp = op.per_sample()  # (V (b, P), images (b, ...), labels (b,)) -> per-sample H_i V[i]
    g = torch.Generator().manual_seed(seed)
    est, rel = [], []
    for s in range(0, len(labels), chunk):
        im, lb = images[s:s + chunk], labels[s:s + chunk]
        v0 = flatten([torch.randn((len(lb), *op.values[n].shape), generator=g, dtype=torch.float64) for n in names],
                     start_dim=1).to(dev)
        lam, r = la.power_iteration(lambda V, im=im, lb=lb: hvp(V, im, lb), v0, iters)
        est.append(lam)
        rel.append(r)
    norms = torch.cat(est).cpu().numpy()
    relc = torch.cat(rel).cpu().numpy()
    refined = {}
    P = op.shape[0]
    for i in np.argsort(-norms)[:refine]:
        im, lb = images[i:i + 1], labels[i:i + 1]

        def mv(x, im=im, lb=lb):
            return hvp(torch.from_numpy(x).to(dev)[None], im, lb)[0].cpu().numpy()  # ARPACK takes NumPy

        refined[int(i)] = la.arpack_extreme(LinearOperator((P, P), matvec=mv, dtype=np.float64), tol=1e-8,
                                            v0=np.random.default_rng(seed).standard_normal(P))
        norms[i] = max(norms[i], refined[int(i)])
    return {"norms": norms, "rel_change": relc, "refined": refined, "max": float(norms.max())}


def thm6_M_ce(model, images, labels) -> np.ndarray:
    """Theorem 6's explicit ``M_tr`` (App. C.6) per sample for the cross-entropy through the head
    (:mod:`curvature_gap.bounds.ce`), with block 0's trained matrices. On the CPU whatever the model's device:
    each sample is a small dense float64 instance whose norms are NumPy eigensolves."""
    W_h, b_h = (t.detach().double().cpu() for t in (model.head.weight, model.head.bias))
    out = []
    for i, inst in enumerate(from_model(model, images, target="zero")):
        f = output_factors(inst, W_h, b_h, int(labels[i]))
        out.append(light_bounds(inst, out_curv=f["out_curv_bound"], grad_norm=f["grad_norm"])["thm6"])
    return np.array(out)


def _direction(m, names, kind: str, images, labels, seed: int) -> dict:
    """A unit direction ``u`` on the device of ``m``'s parameters (random: drawn on the CPU generator, the
    same vector on every device)."""
    base = {k: v.detach() for k, v in m.named_parameters()}
    if kind == "random":
        g = torch.Generator().manual_seed(seed)
        u = {k: torch.randn(base[k].shape, generator=g, dtype=torch.float64).to(base[k].device) for k in names}
    elif kind == "max-grad":  # the largest per-sample gradient
        l = model_loss(m, fixed=base)
        f = lambda w, img, lab: l(dict(zip(names, w)), img[None], lab[None])  # noqa: E731 - one sample's loss
        w0 = tuple(base[k] for k in names)
        dev = w0[0].device
        gs = vmap(grad(f), in_dims=(None, 0, 0))(w0, images.to(dev).double(), labels.to(dev))
        gn = torch.sqrt(sum((x ** 2).flatten(1).sum(1) for x in gs))
        i = int(gn.argmax())
        u = {k: x[i].clone() for k, x in zip(names, gs)}
    else:
        raise ValueError(f"unknown direction {kind!r}; choose random or max-grad")
    nrm = math.sqrt(sum(float((x ** 2).sum()) for x in u.values()))
    return {k: x / nrm for k, x in u.items()}


def path_check(model, images, labels, M: dict, ts=T_GRID, directions=("random", "max-grad"), seed: int = 0,
               ks_table: int = 60, device=None) -> dict:
    """Measured ``|L_{k+1}(w) − L_k(w)|`` along ``w = w* + t u`` against :func:`rhs` for each ``M`` in
    ``M`` (name -> value). Returns per (direction, t): the identity residual, the smallest ``rhs/lhs``
    over ``k = 1..n−1`` for each M with its ``k``, and a table on log-spaced ``k`` plus each minimising ``k``
    (``at_min``). Runs on ``device`` (default: the model's)."""
    m = copy.deepcopy(model).double().to(_device_of(model, device)).eval()
    names = block_param_names(m)
    base = {k: v.detach() for k, v in m.named_parameters()}
    l0 = per_sample_losses(m, images, labels)
    ell_max = float(l0.max())
    ktab = np.unique(np.round(np.logspace(0, math.log10(len(l0) - 1), ks_table)).astype(int))
    res = {"n": len(l0), "ell_max": ell_max, "M": dict(M), "ts": list(ts), "directions": list(directions),
           "paths": [], "table": []}
    for d in directions:
        u = _direction(m, names, d, images, labels, seed)
        for t in ts:
            params = {k: (v + t * u[k] if k in u else v) for k, v in base.items()}
            ls = l0 if t == 0 else per_sample_losses(m, images, labels, params=params)
            entry = {"direction": d, "t": t, "identity_residual": identity_residual(ls), "loss_max": float(ls.max())}
            lhs = None
            for name, Mv in M.items():
                r, k, lhs = _ratio_over_k(ls, ell_max, Mv, t * t)
                entry[f"min_ratio_{name}"], entry[f"argmin_k_{name}"] = r, k
            entry["lhs_max"] = float(lhs.max())
            res["paths"].append(entry)
            at_min = {entry[f"argmin_k_{name}"] for name in M}
            for kk in sorted(set(ktab.tolist()) | at_min):
                row = {"direction": d, "t": t, "k": int(kk), "lhs": float(lhs[kk - 1]), "at_min": kk in at_min}
                for name, Mv in M.items():
                    row[f"rhs_{name}"] = float(rhs(kk, ell_max, Mv, t * t))
                res["table"].append(row)
    return res


def vit_check(model, images, labels, hessian_n: int, ts=T_GRID, seed: int = 0, iters: int = 40, refine: int = 4,
              log: Callable[[str], None] | None = None, device=None) -> dict:
    """Theorem 7 on the trained ViT (see module doc); ``hessian_n`` samples enter the exact M. Runs on
    ``device`` (default: the model's), Theorem 6's M on the CPU (:func:`thm6_M_ce`)."""
    device = _device_of(model, device)
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    hn = min(len(labels), hessian_n)
    hs = per_sample_hessian_norms(model, images[:hn], labels[:hn], seed=seed, iters=iters, refine=refine,
                                  device=device)
    log(f"theorem 7: per-sample Hessian norms of {hn} samples in {time.perf_counter() - t0:.1f}s")
    t1 = time.perf_counter()
    m6 = thm6_M_ce(model, images, labels)
    log(f"theorem 7: Theorem 6 M (cross-entropy) of {len(labels)} samples in {time.perf_counter() - t1:.1f}s")
    res = path_check(model, images, labels, {"exact": hs["max"], "thm6_ce": float(m6.max())}, ts=ts, seed=seed,
                     device=device)
    res["hessian"] = {"n": hn, "max": hs["max"], "median": float(np.median(hs["norms"])),
                      "refined": hs["refined"], "power_rel_change_max": float(np.max(hs["rel_change"]))}
    res["thm6_M_ce"] = {"max": float(m6.max()), "median": float(np.median(m6)), "min": float(m6.min())}
    res["seconds"] = time.perf_counter() - t0
    return res


# ----------------------------------------------------------------------------- one attention layer at w*
def sa_check(N: int = 64, L: int = 4, d_V: int = 3, seed: int = 0, ts=(0.0, 0.03, 0.3, 1.0, 3.0),
             steps: int = 150, lr: float = 0.05) -> dict:
    """Theorem 7 for one attention layer at an exact minimiser (see module doc): along a seeded random
    direction at the distances ``ts``, then Adam over a direction ``u`` and ``log t`` minimising ``min_k rhs/lhs``
    (each proposed point re-evaluated exactly), for each ``M``. Also the gradients Assumption 1 says vanish.

    The problem: ``N`` random sequences ``X_i`` (L × d_V) with targets from a "teacher" layer plus noise (0.1), the
    exact minimiser ``w*`` of ``L_N`` (the mean MSE) found by L-BFGS in float64; ``per_sample(w)`` is
    ``(l_1(w), …, l_N(w))`` for the flat weights ``w = (vec_r W_Q, vec_r W_K, vec_r W_V)``."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    X = r(N, L, d_V)
    teacher = [r(d_V, d_V) / d_V ** 0.5 for _ in range(3)]  # d_K = d_V
    with torch.no_grad():
        T = vmap(lambda x: sa_forward(x, *teacher))(X) + 0.1 * r(N, L, d_V)
    n = d_V * d_V

    def unflat(w):
        return w[:n].view(d_V, d_V), w[n:2 * n].view(d_V, d_V), w[2 * n:].view(d_V, d_V)

    def per_sample(w):
        return vmap(lambda x, t: sa_loss(x, *unflat(w), t))(X, T)

    w = torch.cat([0.5 * t.reshape(-1) for t in teacher]).clone().requires_grad_(True)
    opt = torch.optim.LBFGS([w], lr=1, max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = per_sample(w).mean()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    w_star = w.detach().clone()
    gn = float(grad(lambda v: per_sample(v).mean())(w_star).norm())
    with torch.no_grad():
        l_star = per_sample(w_star).numpy()
    ell_max = float(l_star.max())
    J = torch.func.jacrev(per_sample)(w_star)  # (N, P) per-sample gradients
    grad_k = torch.cumsum(J, 0) / torch.arange(1, N + 1, dtype=torch.float64)[:, None]
    H_max = float(la.matrix_norms(vmap(hessian(lambda w, x, t: sa_loss(x, *unflat(w), t)),
                                       in_dims=(None, 0, 0))(w_star, X, T)).max())
    sn = lambda A: float(la.matrix_norms(A))  # noqa: E731
    nQ, nK, nV = map(sn, unflat(w_star))
    # Theorem 1's M (printed and repaired) at w*, the largest over the samples
    Ms = {v: max(fm.theorem1(sn(x), nQ, nK, nV, sn(t), L, d_V, d_V, variant=v)["M"]
                 for x, t in zip(X, T)) for v in ("printed", "repaired")}
    Ms["exact_at_w_star"] = H_max
    u0 = torch.randn(w_star.numel(), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    u0 /= u0.norm()
    out = {"N": N, "L": L, "d_V": d_V, "ell_max": ell_max, "grad_norm_full": gn,
           "grad_norm_k_min": float(grad_k[:-1].norm(dim=1).min()), "grad_norm_k": grad_k.norm(dim=1).numpy(),
           "M": Ms, "path": [], "adversarial": {}}
    for t in ts:
        with torch.no_grad():
            ls = per_sample(w_star + t * u0).numpy()
        row = {"t": t, "identity_residual": identity_residual(ls)}
        for name, M in Ms.items():
            row[f"min_ratio_{name}"], row[f"argmin_k_{name}"], _ = _ratio_over_k(ls, ell_max, M, t * t)
        out["path"].append(row)
    k = torch.arange(1, N, dtype=torch.float64)
    for name, M in Ms.items():
        u = u0.clone().requires_grad_(True)
        log_t = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([u, log_t], lr=lr)
        best = (math.inf, None, None)
        for _ in range(steps):
            t = log_t.exp()
            d = t * u / u.norm()
            ls = per_sample(w_star + d)
            Lk = torch.cumsum(ls, 0) / torch.arange(1, N + 1, dtype=torch.float64)
            lhs = (Lk[1:] - Lk[:-1]).abs()
            ratio = (2 * ell_max + M * t ** 2) / (k + 1) / lhs.clamp_min(1e-300)
            with torch.no_grad():
                tv = float(t.detach())
                exact_val, kk, _ = _ratio_over_k(per_sample(w_star + d.detach()).numpy(), ell_max, M, tv ** 2)
            if exact_val < best[0]:
                best = (exact_val, tv, kk)
            opt.zero_grad()
            torch.log(ratio.min()).backward()
            opt.step()
        out["adversarial"][name] = {"min_ratio": best[0], "t": best[1], "k": best[2], "steps": steps}
    return out
