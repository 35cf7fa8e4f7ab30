"""What a reader is shown of a bound: its title in words and the inequality in TeX.

Both are part of the bound's declaration (:class:`~curvature_gap.bounds.bound.Bound` ``title`` and ``tex``,
:mod:`curvature_gap.bounds.declarations`); :data:`INEQUALITIES` reads them, keyed by the ``curvature-gap verify`` id
of the bound row (the errata page keeps the id as a small reference; the evidence of :mod:`curvature_gap.findings`
names a step by its title, never by its id). Presentation only: what is computed, and whether it fails, is the
row's. A failing bound row without a title stops the errata page from being written (:func:`shown`), so a new
failure cannot reach a reader as a bare id.
"""
from __future__ import annotations

from .registry import INEQUALITIES

__all__ = ["INEQUALITIES", "shown", "step_title"]


def shown(row_id: str) -> tuple[str, str]:
    """(title in words, inequality in TeX) of a failing bound row; a row without one is an error naming the fix."""
    try:
        return INEQUALITIES[row_id]
    except KeyError:
        raise KeyError(f"the bound row {row_id!r} fails but has no title and TeX for the errata page: give its "
                       "declaration title= and tex= (curvature_gap/bounds/declarations.py); the errata page reads "
                       "them as INEQUALITIES in curvature_gap/bounds/titles.py") from None


def step_title(row_id: str) -> str:
    """A step's title without the result it belongs to ("the Q–Q term" of "Theorem 1, proof: the Q–Q term");
    the words of the row's ``what`` where the row has no entry."""
    title = INEQUALITIES[row_id][0]
    return title.split(": ", 1)[1] if ": " in title else title
