"""What a result module declares: :class:`FigureSpec`, and the :class:`Job` its compute function gets.

A result (a figure of the paper, a figure beyond it, or a check that needs a trained model) is one module
of this package. The module holds its settings per profile, its compute and plot functions, the claim
rows read from its numbers and the finding they are evidence for, and declares them in a module-level
tuple ``SPECS`` of :class:`FigureSpec`. The registries (``experiments.SPECS``, the results ``verify``
reads, the experiments of ``findings.RESULTS``) are built from those tuples; nothing else lists a result.
The recipe for adding one is in ``CONTRIBUTING.md``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from ..config import PROFILES

__all__ = ["FigureSpec", "Job", "Finding", "sort_key", "BEYOND_THE_PAPER", "CHECK", "SECTIONS"]

# the book's sections, in order: the paper's figures (by number), results beyond the paper, checks that need a
# trained model; ``FigureSpec.paper`` of a result beyond the paper is exactly its name
BEYOND_THE_PAPER = "beyond the paper"
CHECK = "check"
SECTIONS = ("paper", BEYOND_THE_PAPER, CHECK)


# ``FigureSpec.paper`` of a result under a paper figure: "Fig. 12", "Figs. 7–11", "Figs. 5, 7-11",
# "Fig. 6 (MNIST stand-in)"; group 1 is the figure it is placed under
_PAPER_LABEL = re.compile(r"Figs?\. (\d+)(?:(?:, ?|[-–])\d+)*(?: \(.+\))?")


@dataclass(frozen=True)
class Job:
    """What a compute function gets: the context, its settings, its dependencies' results."""

    name: str
    ctx: object  # experiments.context.Context
    settings: object
    deps: dict
    config_hash: str
    store: object  # experiments.store.ResultStore
    reads: dict = field(default_factory=dict)  # name -> settings of each result in FigureSpec.reads


@dataclass(frozen=True)
class Finding:
    """The result of the paper a result's claim rows are evidence for: one line of ``findings.RESULTS``.

    ``claim=False``: the figure's text makes no claim (its verdict is "no claim made")."""

    key: str
    title: str  # the result as the paper names it, with its claim in words
    page: str  # the book page, e.g. "notebooks/fig03_hessian_init"
    claim: bool = True


@dataclass(frozen=True)
class FigureSpec:
    """One result.

    ``settings`` maps each profile the result exists under to its settings (a frozen dataclass: every
    value a named choice with its source); ``compute(job) -> (arrays, meta)`` computes it; ``plots`` maps
    each figure part to ``function(result) -> matplotlib Figure`` and ``messages`` to the one sentence its
    caption opens with (what to see, computed from the numbers); ``rows(results) -> [Row]`` reads the
    claim rows from ``results`` (name -> paper-profile result or None; it reads ``rows_read``, by default
    the result itself); ``verify_reads`` marks a result whose numbers rows of another topic read (the
    trained-model bounds, Theorem 7, Assumption 1); ``finding`` is the entry of ``findings.RESULTS`` its
    rows are evidence for.
    """

    name: str
    paper: str  # the paper's figure number, "beyond the paper", or "check"
    stem: str  # output file stem under figures/ ("" for results without a figure)
    title: str
    settings: dict  # profile -> settings
    compute: Callable[[Job], tuple]
    plots: dict = field(default_factory=dict)  # part -> function(result) -> matplotlib Figure
    messages: dict = field(default_factory=dict)  # part -> function(result) -> the caption's message (str)
    depends: tuple = ()
    reads: tuple = ()  # settings of other results its computation reads (they enter its config)
    finish: Callable | None = None
    needs: str = "MNIST"  # what it needs to run, for reports
    rows: Callable | None = None
    rows_read: tuple = ()  # results its rows read (default: itself)
    verify_reads: bool = False
    finding: Finding | None = None
    key_numbers: Callable | None = None  # result -> {name: number} a reader would cite (the reproduction report)
    override_key: str = ""  # a second name under which Context(settings_overrides=...) reaches its settings
    internal: bool = False  # computed for other results only (no figure of its own, not in RESULT_NAMES)
    rank: int = 1  # order among the results of one paper figure (0: first, the authors' model)
    figure: int | None = None  # the paper's figure the book places it under (None: beyond the paper, a check)

    def __post_init__(self):
        """``figure`` is the book's order; where a declaration leaves it out, it is the first number of a ``paper``
        that names a figure, whose form is checked here (a malformed one fails at import, never sorts silently).
        A label that names no figure places the result beyond the paper (:data:`BEYOND_THE_PAPER`) or, any
        other, with the checks."""
        if not self.paper.startswith("Fig"):
            if self.figure is not None:
                raise ValueError(f"{self.name}: figure={self.figure} given for a result {self.paper!r}")
            return
        m = _PAPER_LABEL.fullmatch(self.paper)
        if m is None:
            raise ValueError(f"{self.name}: paper={self.paper!r} is neither 'Fig. N' nor 'Figs. N, M-K' (optionally "
                             "with a parenthesis)")
        if self.figure is None:
            object.__setattr__(self, "figure", int(m.group(1)))
        elif self.figure != int(m.group(1)):
            raise ValueError(f"{self.name}: figure={self.figure} but paper={self.paper!r}")

    @property
    def section(self) -> str:
        """The book's section of the result: one of :data:`SECTIONS`."""
        if self.figure is not None:
            return "paper"
        return BEYOND_THE_PAPER if self.paper == BEYOND_THE_PAPER else CHECK

    @property
    def profiles(self) -> tuple:
        """The profiles the result exists under, in :data:`curvature_gap.config.PROFILES` order."""
        return tuple(p for p in PROFILES if p in self.settings)

    @property
    def read_by_rows(self) -> tuple:
        """The results its claim rows read."""
        return (self.rows_read or (self.name,)) if self.rows is not None else ()


def sort_key(s: FigureSpec) -> tuple:
    """Book order: the paper's figures by number (the authors' model first: ``rank``), then results beyond the
    paper, then checks (:data:`SECTIONS`)."""
    return (SECTIONS.index(s.section), s.figure or 0, s.rank, s.name)
