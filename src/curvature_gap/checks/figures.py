"""Rows read from the results of trained models, as each figure's module under :mod:`curvature_gap.experiments`
declares them (``FigureSpec.rows``; the shared verdict rule is :mod:`curvature_gap.experiments.claims`). Verdicts
about the experiments come only from the paper profile; a smoke result gives none.
"""
from __future__ import annotations

from ..experiments import SPECS
from ..row import Row
from .battery import Inputs, Topic

__all__ = ["run", "TOPIC", "row_functions", "read_by_rows"]


def row_functions() -> list:
    """Each figure's row function, in book order (roots of the verify code hash)."""
    return [s.rows for s in SPECS.values() if s.rows is not None]


def read_by_rows() -> tuple:
    """The results the figures' rows read."""
    return tuple(dict.fromkeys(n for s in SPECS.values() for n in s.read_by_rows))


def run(inputs: Inputs) -> list[Row]:
    """The figures' rows from ``inputs.results`` (name -> paper-profile result or None), figure by figure."""
    return [row for fn in row_functions() for row in fn(inputs.results)]


TOPIC = Topic("figures", run, reads=read_by_rows)
