"""The checks that need the trained model: Theorem 7 on the trained ViT, and the bounds at its block.

``theorem7``: :func:`curvature_gap.landscape.theorem7.vit_check` on the first training images (the
Fig. 6 setting with the MNIST model). ``trained_bounds``: Theorems 1 and 6, Lemma 4 and the
Proposition at block 0 of the MNIST ViT, initialised and trained (:mod:`curvature_gap.bounds.training`),
and Theorem 6 for the cross-entropy through the head (:mod:`curvature_gap.bounds.ce`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import captions
from ..bounds.ce import ce_records
from ..bounds.training import training_sweep
from ..exact.instances import from_model
from ..bounds.registry import RTOL
from ..landscape.theorem7 import IDENTITY_TOL, STATEMENT, T0_FLOOR, cannot_fail, moved, vit_check
from ..row import Declared, Row
from .context import Context
from ..plotting import WIDTH, new_axes
from .settings import Variant
from .spec import FigureSpec, Point

__all__ = ["compute_theorem7", "compute_trained_bounds", "plot_theorem7", "vit_rows", "VIT_CHECKS", "Theorem7Settings", "TrainedBoundsSettings", "SPECS"]


@dataclass(frozen=True)
class Theorem7Settings(Variant):
    """Theorem 7 on the trained MNIST ViT (the Fig. 6 setting): both sides along w = w* + t u."""

    n_samples: int = 1024  # training samples in L_k (dataset order); k runs to n_samples - 1
    hessian_samples: int = 64  # samples whose exact Hessian norm enters M = max_i ‖∇²l_i(w*)‖
    power_iters: int = 40  # power-iteration steps per sample before the Lanczos refinement
    refine: int = 4  # samples refined by Lanczos
    seed: int = 0  # direction and power-iteration seed


@dataclass(frozen=True)
class TrainedBoundsSettings(Variant):
    """The bounds at the MNIST ViT's block 0, at initialisation and trained (test images)."""

    n_samples: int = 1  # per-sample instances with every bound (each needs the 2,816-weight loss Hessian)
    n_batch: int = 16  # images in the batch rows (curvlinops Hessian of the mean MSE, Lanczos)
    n_ce: int = 2  # images in the cross-entropy check (dense 2,816-weight Hessian each)


THEOREM7 = {"paper": Theorem7Settings(), "smoke": Theorem7Settings(n_samples=64, hessian_samples=8, power_iters=20, refine=1)}
TRAINED_BOUNDS = {"paper": TrainedBoundsSettings(), "smoke": TrainedBoundsSettings(n_samples=1, n_batch=4, n_ce=1)}


def compute_theorem7(ctx: Context, s: Theorem7Settings) -> tuple[dict, dict]:
    model, info = ctx.model(s)
    tr = ctx.data(s).train
    images, labels = tr.images[:s.n_samples], tr.labels[:s.n_samples]
    res = vit_check(model, images, labels, s.hessian_samples, seed=s.seed, iters=s.power_iters,
                    refine=s.refine, log=ctx.log, device=ctx.torch_device)
    table = res.pop("table")
    arrays = {k: np.array([row[k] for row in table]) for k in table[0] if k != "direction"}
    arrays["direction_is_random"] = np.array([row["direction"] == "random" for row in table])
    meta = dict(profile=ctx.profile, model=s.model_key, checkpoint=info, **res)
    return arrays, meta


def compute_trained_bounds(ctx: Context, s: TrainedBoundsSettings) -> tuple[dict, dict]:
    # On the CPU whatever --device says, by design: every sample becomes a small dense float64 instance of the theory
    # block (L x d_V matrices; targets from the CPU generator, norms by NumPy eigensolves), and the ViT's only work here
    # is one forward pass for the tokens. ctx.device still decides where the model is trained (ctx.model).
    init = ctx.model(s, 0)[0].cpu()
    trained, info = ctx.model(s)
    trained = trained.cpu()
    te = ctx.data(s).test
    rows, _ = training_sweep({"init": init, "trained": trained}, te.images, s.n_samples, s.n_batch, tensors=False,
                             log=ctx.log)
    for name, m in (("init", init), ("trained", trained)):
        insts = from_model(m, te.images[:s.n_ce], target="zero")
        head = m.head.weight.detach().double(), m.head.bias.detach().double()
        for r in ce_records(insts, *head, te.labels[:s.n_ce].tolist()):
            rows.append(dict(r, sweep="training", x=name, seed=r["sub"]))
    records = [{k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in r.items()
                if k in ("check", "sub", "bound", "exact", "ratio", "sweep", "x", "seed", "L", "d_V", "d_K", "d_ff")}
               for r in rows]
    meta = dict(profile=ctx.profile, model=s.model_key, checkpoint=info, records=records,
                instances="block 0 of the ViT: tokens of test images, the five weight matrices (theory block: "
                          "no FFN biases, γ = 1, β = 0); MSE targets: the perturbed layer's output")
    return {"ratio": np.array([r["ratio"] for r in records], dtype=np.float64)}, meta


def plot_theorem7(result):
    """Smallest rhs/lhs over k along w = w* + t u, per direction and choice of M."""
    meta = result.meta
    fig, ax = new_axes(WIDTH, 4.6)
    names = {"exact": r"$M = \max_i\,\|\nabla^2 l_i(w^*)\|_2$", "thm6_ce": r"$M$ of Theorem 6 (cross-entropy)"}
    for name, ls in (("exact", "-"), ("thm6_ce", "--")):
        for d, color in (("random", "tab:blue"), ("max-grad", "tab:orange")):
            pts = [(p["t"], p[f"min_ratio_{name}"]) for p in meta["paths"] if p["direction"] == d and p["t"] > 0]
            t, r = zip(*pts)
            ax.plot(t, r, ls=ls, marker="o", ms=3, color=color, label=f"{d}, {names[name]}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"distance $t = \|w - w^*\|_2$")
    ax.set_ylabel("smallest rhs / lhs over k")
    ax.grid(alpha=0.3, which="major")
    ax.set_title("Theorem 7 on the trained MNIST ViT (holds where ≥ 1)")
    fig.legend(loc="outside lower center", ncol=2, frameon=False)
    return fig


def theorem7_numbers(r) -> dict:
    m = r.meta
    out = {"ℓ_max": m["ell_max"], "M exact": m["M"]["exact"], "M (Theorem 6, cross-entropy)": m["M"]["thm6_ce"]}
    for name in ("exact", "thm6_ce"):
        out[f"min rhs/lhs, M = {name}"] = min(p[f"min_ratio_{name}"] for p in m["paths"])
    return out


def trained_bounds_numbers(r) -> dict:
    out = {}
    for rec in r.meta["records"]:
        k = f"min bound/exact {rec['check']}"
        out[k] = min(out.get(k, math.inf), rec["ratio"])
    return out


# Theorem 7 on the trained ViT: M exact at w* (the informative reference) and M of Theorem 6 (the statement)
VIT_CHECKS = {n: (Declared(f"thm7.vit.{n}", "thm7", "bound", role=role, claim=claim), label) for n, role, claim, label in (
    ("exact", "reference", None, "M = max_i ‖∇²l_i(w*)‖ over block 0's matrices (exact at w*)"),
    ("thm6_ce", "statement", "holds", "M = max_i M_tr of Theorem 6 (App. C.6) with the cross-entropy factors"))}
VIT_IDENTITY = Declared("thm7.vit.identity", "thm7", "identity", role="proof", claim="holds", expected="holds")


def vit_rows(result) -> list[Row]:
    """Theorem 7 on the trained MNIST ViT, from the ``theorem7`` result; ``not run`` rows naming the command without."""
    if result is None:
        return [check.row(verdict="not run", what=f"{STATEMENT} on the trained MNIST ViT, {label}", profile="paper",
                          command="curvature-gap reproduce --only theorem7 (needs MNIST; trains the model if needed)")
                for check, label in VIT_CHECKS.values()]
    m = result.meta
    rows = []
    for n, (check, label) in VIT_CHECKS.items():
        away = moved(m["paths"])  # t > 0: at t = 0 rhs/lhs ≥ 2 by construction
        worst = min(away, key=lambda p: p[f"min_ratio_{n}"])
        mn = float(worst[f"min_ratio_{n}"])
        rows.append(check.row(
            what=f"{STATEMENT} on the trained MNIST ViT (cross-entropy, w = w* + t u in block 0's matrices), {label} = "
                 f"{m['M'][n]:.3g}; ratio rhs/lhs, min over k, t and two directions",
            verdict="holds" if mn >= 1 - RTOL else "fails", min_ratio=mn, tolerance=RTOL, profile=result.config["profile"],
            details=cannot_fail(m["M"][n], m["M"]["exact"]) if check.role != "reference" else {"floor": T0_FLOOR},
            instances=f"first {m['n']} training images, t ∈ {m['ts']}", evidence=[str(result.json_path)],
            note=f"smallest over t > 0 (at t = 0 rhs/lhs ≥ {T0_FLOOR:g} by construction); worst at direction "
                 f"{worst['direction']}, t = {worst['t']}, k = {worst[f'argmin_k_{n}']}; ℓ_max = {m['ell_max']:.3g}"))
    resid = max(p["identity_residual"] for p in m["paths"])
    rows.append(VIT_IDENTITY.row(what="the running-mean identity on the trained ViT's per-sample losses, max |residual|",
                                 verdict="holds" if resid <= IDENTITY_TOL else "fails", value=resid,
                                 tolerance=IDENTITY_TOL, profile=result.config["profile"],
                                 evidence=[str(result.json_path)]))
    return rows


# ----------------------------------------------------------------------------- the results of this module
# Theorem 7's rows are its figure's (vit_rows); the trained bounds' rows are curvature_gap.checks.bounds'
SPECS = (
    FigureSpec("theorem7", "check", "check_theorem7", "Theorem 7 on the trained ViT",
               (Point(THEOREM7, verify_reads=True),), lambda j: compute_theorem7(j.ctx, j.settings), {"ratios": plot_theorem7}, {"ratios": captions.theorem7},
               runs=lambda s, ctx: [(None, None)], key_numbers=theorem7_numbers,
               rows=lambda res: vit_rows(res.get("theorem7"))),
    FigureSpec("trained_bounds", "check", "", "the bounds at the trained ViT's block",
               (Point(TRAINED_BOUNDS),), lambda j: compute_trained_bounds(j.ctx, j.settings),
               runs=lambda s, ctx: [(0, None), (None, None)], key_numbers=trained_bounds_numbers),
)
