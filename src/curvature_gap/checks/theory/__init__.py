"""Rows for every closed form of :mod:`curvature_gap.theory`: each against ``torch.func`` derivatives of the forward
pass (:mod:`curvature_gap.exact`) and finite differences, on random float64 instances (:mod:`.common`). Each check
is one :class:`~.common.FormulaCheck`, declared in its topic's module beside the code that measures it:

* :mod:`.calculus`  — Appendix B's matrix-calculus identities;
* :mod:`.layernorm` — §2 and Theorems 2–3;
* :mod:`.ffn`       — Lemma 1 and the FFN parts of Theorem 4;
* :mod:`.attention` — the softmax Jacobians, the quoted self-attention Hessian, Lemma C1;
* :mod:`.block`     — Lemma 2, Theorems 4–5, the Gauss–Newton decomposition, the MNIST shape.
"""
from __future__ import annotations

from ...row import Row, by_id
from . import attention, block, calculus, ffn, layernorm
from ..battery import Inputs, Topic
from .common import BAD, FD_TOL, TOL, FormulaCheck, Group, checked_instances, quiet_single_thread, rel_err

__all__ = ["run", "TOPIC", "GROUPS", "CHECKS", "run_group", "rel_err", "TOL", "FD_TOL", "BAD", "FormulaCheck",
           "quiet_single_thread"]

# the groups of checks, in the order of the rows
GROUPS: dict[str, Group] = {g.name: g for g in (calculus.GROUP, layernorm.GROUP, ffn.GROUP, attention.GROUP,
                                                block.PHI, block.BLOCK, block.GAUSS_NEWTON, block.MNIST)}
# every closed-form check, by id, in the order of the rows (an id declared twice is refused here, at import)
CHECKS: dict[str, FormulaCheck] = by_id(*(c for g in GROUPS.values() for c in g.checks))


def run_group(name: str, quick: bool = False) -> list[Row]:
    """Run one group of checks (used by the tests)."""
    with quiet_single_thread():
        return GROUPS[name].rows(quick, checked_instances(quick))


def run(inputs: Inputs) -> list[Row]:
    """Every closed-form row; ``inputs.quick`` uses 2 random instances instead of 16 (same row ids)."""
    with quiet_single_thread():
        insts = checked_instances(inputs.quick)
        return [row for g in GROUPS.values() for row in g.rows(inputs.quick, insts)]


TOPIC = Topic("closed forms", run, checks=lambda: tuple(CHECKS.values()))
