"""Rows for the claims the paper makes about its figures, as each figure's module declares them.

A figure's claim rows live with the figure (``FigureSpec.rows`` in its module under
:mod:`curvature_gap.experiments`: Figs. 3–4 in ``heatmaps``, Fig. 5 in ``norms``, Fig. 6 in
``convergence``); the verdict rule and the ranking table they share are :mod:`curvature_gap.experiments.claims`.
Verdicts about the experiments come only from the paper profile; a smoke result gives none.
"""
from __future__ import annotations

from ..experiments import SPECS
from ..row import Row

__all__ = ["run_checks", "row_functions", "read_by_rows"]


def row_functions() -> list:
    """Each result's claim-row function, in book order (roots of the verify code hash)."""
    return [s.rows for s in SPECS.values() if s.rows is not None]


def read_by_rows() -> tuple:
    """The results the claim rows read."""
    return tuple(dict.fromkeys(n for s in SPECS.values() for n in s.read_by_rows))


def run_checks(results: dict) -> list[Row]:
    """The claim rows from ``results`` (name -> paper-profile result or None), figure by figure."""
    return [row for fn in row_functions() for row in fn(results)]
