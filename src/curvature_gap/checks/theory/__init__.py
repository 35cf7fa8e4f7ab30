"""Rows for every closed form of the paper: each formula against automatic differentiation.

Each check evaluates a closed form of :mod:`curvature_gap.theory` on random float64 instances and
compares it with ``torch.func`` derivatives of the one forward pass (:mod:`curvature_gap.exact`) and,
for second derivatives, with central finite differences (tolerances and the error measure:
:mod:`.common`). One module per topic:

* :mod:`.calculus`  — Appendix B's matrix-calculus identities;
* :mod:`.layernorm` — §2 and Theorems 2–3;
* :mod:`.ffn`       — Lemma 1 and the FFN parts of Theorem 4;
* :mod:`.attention` — the softmax Jacobians, the quoted self-attention Hessian, Lemma C1;
* :mod:`.block`     — Lemma 2, Theorems 4–5, the Gauss–Newton decomposition, the MNIST shape.
"""
from __future__ import annotations

from typing import Callable

from ...row import Row
from . import attention, block, calculus, ffn, layernorm
from .common import BAD, FD_TOL, TOL, checked_instances, quiet_single_thread, rel_err, result_of

__all__ = ["run_checks", "GROUPS", "run_group", "rel_err", "TOL", "FD_TOL", "BAD", "result_of", "quiet_single_thread"]

GROUPS: dict[str, Callable[[bool, list], list]] = {
    "calculus": calculus.calculus_rows,
    "layernorm": layernorm.layernorm_rows,
    "ffn": ffn.ffn_rows,
    "attention": attention.attention_rows,
    "phi": block.phi_rows,
    "block": block.block_rows,
    "gauss_newton": block.gauss_newton_rows,
    "mnist": block.mnist_rows,
}



def run_group(name: str, quick: bool = False) -> list[Row]:
    """Run one group of checks (used by the tests)."""
    with quiet_single_thread():
        return GROUPS[name](quick, checked_instances(quick))


def run_checks(quick: bool = False) -> list[Row]:
    """Every closed-form row; ``quick`` uses 2 random instances instead of 16 (same row ids)."""
    rows: list[Row] = []
    with quiet_single_thread():
        insts = checked_instances(quick)
        for fn in GROUPS.values():
            rows.extend(fn(quick, insts))
    return rows
