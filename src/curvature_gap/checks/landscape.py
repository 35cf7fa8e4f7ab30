"""Rows for Theorem 7 on one self-attention layer at an exact minimiser (synthetic, always run:
:func:`curvature_gap.landscape.theorem7.sa_check`); on the trained ViT it is a figure's row."""
from __future__ import annotations

from ..bounds.registry import RTOL
from ..landscape.theorem7 import IDENTITY_TOL, STATEMENT, T0_FLOOR, cannot_fail, moved, sa_check
from ..row import Declared, Row
from .battery import Inputs, Topic

__all__ = ["run", "TOPIC", "SA_CHECKS", "IDENTITY"]

# Theorem 7 with M from Theorem 1 as printed (the statement), repaired, and exact at w* (the informative reference)
SA_CHECKS = {name: Declared(f"thm7.sa.{name}", "thm7", "bound", role=role, claim=claim, expected="holds")
             for name, role, claim in (("printed", "statement", "holds"), ("repaired", "repair", None),
                                       ("exact_at_w_star", "reference", None))}
IDENTITY = Declared("thm7.identity", "thm7", "identity", role="proof", claim="holds", expected="holds")
_LABELS = {"printed": "M = max_i of Theorem 1 as printed", "repaired": "M = max_i of Theorem 1 repaired",
           "exact_at_w_star": "M = max_i ‖∇²l_i(w*)‖ (exact, at w* only)"}


def run(inputs: Inputs) -> list[Row]:
    """Theorem 7 for one attention layer at an exact minimiser: min rhs/lhs over k, the path and the adversarial search,
    for M from Theorem 1 (printed, repaired) and the exact Hessian at w* (the same rows with ``inputs.quick``)."""
    res = sa_check()
    inst = f"N={res['N']} sequences, L={res['L']}, d_V={res['d_V']}; w* with ‖∇L_N(w*)‖ = {res['grad_norm_full']:.1e}"
    rows = []
    for name, check in SA_CHECKS.items():
        adv = res["adversarial"][name]
        mn = float(min([p[f"min_ratio_{name}"] for p in moved(res["path"])] + [adv["min_ratio"]]))
        rows.append(check.row(
            what=f"{STATEMENT} for one self-attention layer (MSE) at an exact minimiser, {_LABELS[name]} = "
                 f"{res['M'][name]:.3g}; ratio rhs/lhs, min over k, distances along a random direction and an "
                 "adversarial search over w",
            verdict="holds" if mn >= 1 - RTOL else "fails", min_ratio=mn, tolerance=RTOL, profile="synthetic",
            details=(cannot_fail(res["M"][name], res["M"]["exact_at_w_star"]) if check.role != "reference"
                     else {"floor": T0_FLOOR}),
            instances=inst, note=f"adversarial minimum {adv['min_ratio']:.3g} at t = {adv['t']:.2g}, k = {adv['k']}; "
                                 f"ℓ_max = {res['ell_max']:.3g}. Assumption 1 fails here (min_k<N ‖∇L_k(w*)‖ = "
                                 f"{res['grad_norm_k_min']:.2g}), yet no w found violates the inequality"))
    resid = max(p["identity_residual"] for p in res["path"])
    rows.append(IDENTITY.row(what="L_{k+1} − L_k = (l_{k+1} − L_k)/(k+1) in float64; value = max |residual| over k and w",
                             verdict="holds" if resid <= IDENTITY_TOL else "fails", value=resid, tolerance=IDENTITY_TOL,
                             instances=inst))
    return rows


TOPIC = Topic("Theorem 7, one attention layer", run, checks=lambda: (*SA_CHECKS.values(), IDENTITY))
