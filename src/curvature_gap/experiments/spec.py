"""What a result module declares: one :class:`FigureSpec` per figure over its grid of variants, and the
:class:`Job` its compute function gets.

A module declares its figures in a module-level tuple ``SPECS``; each :class:`Point` of a figure's grid (the theorem's
block or the authors' model, a stand-in dataset, another arithmetic) is one result, whose id is derived from its
settings (:func:`result_id`), never read back out of it. The registries (``experiments.SPECS``, the results ``verify``
reads, ``findings.RESULTS``) are built from those tuples. The recipe for adding one is in ``CONTRIBUTING.md``.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Callable

from ..config import PROFILES
from .settings import OWN_ARITHMETIC, Variant

__all__ = ["FigureSpec", "Point", "ResultSpec", "Job", "Finding", "result_id", "claimed", "sort_key",
           "BEYOND_THE_PAPER", "CHECK", "SECTIONS", "STANDIN"]

# the book's sections, in order: the paper's figures (by number), results beyond the paper, checks that need a
# trained model; ``FigureSpec.paper`` of a result beyond the paper is exactly its name
BEYOND_THE_PAPER = "beyond the paper"
CHECK = "check"
SECTIONS = ("paper", BEYOND_THE_PAPER, CHECK)


# ``FigureSpec.paper`` of a figure under a paper figure: "Fig. 12", "Figs. 7–11", "Figs. 5, 7-11",
# "Fig. 6 (MNIST stand-in)"; group 1 is the figure it is placed under
_PAPER_LABEL = re.compile(r"Figs?\. (\d+)(?:(?:, ?|[-–])\d+)*(?: \(.+\))?")

# the dataset that stands in for a figure's CIFAR-100 where CIFAR-100 cannot be had (:attr:`Point.standin`)
STANDIN = "mnist"
# what sets a variant apart from its figure's own (:func:`_differences`), as its id and as its title name it; in an
# id, an arithmetic is never "authors": that names the model
_ID_WORDS = ("authors", {"mnist": "mnist", "cifar100": "cifar100"}, {"exact": "exact", "authors": "bf16"})
_TITLE_WORDS = ("the authors' model", {"mnist": "MNIST stand-in", "cifar100": "CIFAR-100 stand-in"},
                {"exact": "float32 run", "authors": "bf16 run"})


def _variant(settings) -> Variant | None:
    return settings if isinstance(settings, Variant) else None


def _differences(v: Variant, dataset: str, words: tuple) -> list:
    """``words``' names of what sets ``v`` apart from the figure's own variant: the authors' model, another
    dataset than the figure's ``dataset`` (a stand-in), another arithmetic than the model's own."""
    model, datasets, arithmetics = words
    return (([model] if v.model == "authors" else []) + ([datasets[v.dataset]] if v.dataset != dataset else [])
            + ([arithmetics[v.arithmetic]] if v.arithmetic != OWN_ARITHMETIC[v.model] else []))


def result_id(figure: str, settings, dataset: str) -> str:
    """The id of the result of ``figure`` computed with ``settings`` (a :class:`~.settings.Variant`; any other
    settings: the figure's name), for a figure whose paper dataset is ``dataset``: the figure's name, then
    ``_authors`` on the authors' model, ``_<dataset>`` on another dataset than the figure's (a stand-in), and
    ``_exact`` / ``_bf16`` in another arithmetic than the model's own (``settings.OWN_ARITHMETIC``): ``fig3``,
    ``fig3_authors``, ``fig4_authors_exact``, ``fig6_mnist``, ``fig12_authors_mnist``."""
    v = _variant(settings)
    return figure if v is None else "_".join([figure] + _differences(v, dataset, _ID_WORDS))


@dataclass(frozen=True)
class Job:
    """What a compute function gets: the context, its settings, its dependencies' results (by the name of their
    figure: the result of that figure on the same variant)."""

    name: str
    ctx: object  # experiments.context.Context
    settings: object
    deps: dict  # figure -> its result on this variant (Point.depends)
    config_hash: str
    store: object  # experiments.store.ResultStore
    reads: dict = field(default_factory=dict)  # figure -> the settings of its result on this variant (Point.reads)


@dataclass(frozen=True)
class Finding:
    """The result of the paper a result's claim rows are evidence for: one line of ``findings.RESULTS``.

    ``claim=False``: the figure's text makes no claim (its verdict is "no claim made"). ``key``: the key of
    ``findings.RESULTS``; by default the id of the result that declares it."""

    title: str  # the result as the paper names it, with its claim in words
    page: str  # the book page, e.g. "notebooks/fig03_hessian_init"
    claim: bool = True
    key: str = ""


@dataclass(frozen=True)
class Point:
    """One variant of a figure's grid: the settings of one result per profile (each a :class:`~.settings.Variant` where
    it reads a trained model; its id is derived from the paper profile's, :func:`result_id`), and what this variant
    alone declares.

    ``finding``: the entry of ``findings.RESULTS`` its claim rows are evidence for; ``standin``: its rows also read the
    same variant on :data:`STANDIN` (the MNIST stand-in of a CIFAR-100 figure); ``needs``: what it needs to run, for
    reports; ``depends`` / ``reads``: figures whose results (``Job.deps``) / settings (``Job.reads``) on the same
    variant its computation reads; ``trains``: False where it reads no run of its own (its numbers are cut from those of
    ``depends``), so the figure's ``runs`` are not trained for it; ``override_key``: a second name under which
    ``Context(settings_overrides=...)`` reaches its settings; ``verify_reads``: its figure's rows read its numbers
    though it states no claim (Theorem 7 on the trained ViT); ``plots``, ``messages``, ``key_numbers``: where this
    variant's result is drawn or cited otherwise than the figure's (another protocol's arrays)."""

    settings: dict
    finding: Finding | None = None
    standin: bool = False
    needs: str = "MNIST"
    depends: tuple = ()
    reads: tuple = ()
    override_key: str = ""
    verify_reads: bool = False
    trains: bool = True
    plots: dict | None = None
    messages: dict | None = None
    key_numbers: Callable | None = None


@dataclass(frozen=True, eq=False)  # a declaration: equal to itself only (hashable, as a key of its results)
class FigureSpec:
    """One figure over its grid of variants.

    ``compute(job) -> (arrays, meta)`` computes any of its results, reading what to compute from ``job.settings``;
    ``runs(settings, ctx) -> [(step, seed), ...]``: the training runs of the settings' variant a computation reads
    (``step`` None: the whole run; 0: the initialisation; ``seed`` None: the recipe's), trained by the runner before
    it starts; ``rows(results) -> [Row]``: the claim rows of all its results (``results``: id -> paper-profile result
    or None); ``key_numbers(result) -> {name: number}``: what a reader would cite (the reproduction report)."""

    name: str
    paper: str  # the paper's figure number, "beyond the paper", or "check"
    stem: str  # output file stem under figures/ ("" for results without a figure)
    title: str
    grid: tuple  # Point, ...: one result each
    compute: Callable[[Job], tuple]
    plots: dict = field(default_factory=dict)  # part -> function(result) -> matplotlib Figure
    messages: dict = field(default_factory=dict)  # part -> function(result) -> the caption's message (str)
    runs: Callable | None = None  # (settings, ctx) -> [(step, seed), ...]
    finish: Callable | None = None
    rows: Callable | None = None
    key_numbers: Callable | None = None
    internal: bool = False  # computed for other results only (no figure of its own)
    dataset: str = "mnist"  # the figure's dataset in the paper (a variant on another is a stand-in)

    def __post_init__(self):
        """The form of a ``paper`` that names a figure is checked here (a malformed one fails at import, never sorts
        silently). Each point's variant is the same under every profile (only its dataset may differ: the smoke
        profile runs a CIFAR-100 figure on MNIST), and no two points share an id."""
        if self.paper.startswith("Fig") and self.figure is None:
            raise ValueError(f"{self.name}: paper={self.paper!r} is neither 'Fig. N' nor 'Figs. N, M-K' "
                             "(optionally with a parenthesis)")
        if not self.grid:
            raise ValueError(f"{self.name}: an empty grid (give one Point per result)")
        for p in self.grid:
            paper = p.settings.get("paper")
            for profile, s in p.settings.items():
                v, w = _variant(s), _variant(paper)
                if paper is None or (v is None) != (w is None) or (
                        v is not None and (v.model, v.arithmetic) != (w.model, w.arithmetic)):
                    raise ValueError(f"{self.name}: a point's {profile} settings are another variant than its paper "
                                     "settings (every point needs paper settings, and one model and arithmetic)")
        ids = [r.name for r in self.results]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.name}: two points of the grid have the same id ({', '.join(ids)})")

    @property
    def figure(self) -> int | None:
        """The paper's figure the book places it under (its order): the first number of a ``paper`` that names figures;
        None for a label that names none: beyond the paper (:data:`BEYOND_THE_PAPER`) or, any other, a check."""
        m = _PAPER_LABEL.fullmatch(self.paper)
        return int(m.group(1)) if m else None

    def id_of(self, settings) -> str:
        """The id of this figure's result computed with ``settings`` (:func:`result_id`)."""
        return result_id(self.name, settings, self.dataset)

    @functools.cached_property
    def results(self) -> tuple:
        """Its results (:class:`ResultSpec`), in book order; the first carries the figure's claim rows."""
        return tuple(sorted((ResultSpec(self, p) for p in self.grid), key=sort_key))

    def claimed(self) -> tuple:
        """Its results whose finding states a claim (their rows are evidence for it)."""
        return tuple(r for r in self.results if r.finding is not None and r.finding.claim)

    def result(self, **variant) -> ResultSpec | None:
        """Its result whose variant has the fields ``variant`` (``model="authors"``, ``dataset="mnist"``, ...) and
        otherwise the paper profile's of the figure's own: e.g. ``result(model="authors", arithmetic="authors")``
        is the figure on the authors' model in their arithmetic; None if the grid has no such point."""
        for r in self.results:
            v = r.variant
            if v is not None and all(getattr(v, k) == x for k, x in variant.items()) and (
                    "dataset" in variant or v.dataset == self.dataset):
                return r
        return None


class ResultSpec:
    """One result, as the registry (``experiments.SPECS``) serves it: what its :class:`FigureSpec` and its
    :class:`Point` declare, with its id, and the ids of the results it depends on, derived from its settings.

    ``rows`` is the figure's claim-row function on the figure's first result only (it reads every result of the
    figure: ``read_by_rows``), so that iterating the registry yields each row once."""

    def __init__(self, figure: FigureSpec, point: Point):
        self.spec, self.point = figure, point
        self.name = figure.id_of(point.settings["paper"])
        # the ids of the results (of the point's ``depends`` / ``reads`` on its variant) -> their figure
        self.dep_figures, self.read_figures = ({result_id(d, point.settings["paper"], figure.dataset): d for d in ds}
                                               for ds in (point.depends, point.reads))
        self.depends, self.reads = tuple(self.dep_figures), tuple(self.read_figures)

    def __repr__(self) -> str:
        return f"ResultSpec({self.name!r} of {self.spec.name!r})"

    def __getattr__(self, k):
        """What its point declares (``settings``, ``needs``, ``override_key``, ``verify_reads``, ...) and, where the
        point declares nothing (no such field, or ``plots`` / ``messages`` / ``key_numbers`` None), its figure
        (``paper``, ``figure``, ``compute``, ``finish``, ``internal``, ...)."""
        if k.startswith("_") or "point" not in self.__dict__:  # dunders, and a copy not yet initialised
            raise AttributeError(k)
        own = getattr(self.point, k, None)
        return own if own is not None else getattr(self.spec, k)

    runs = property(lambda self: self.spec.runs if self.point.trains else None)

    @property
    def variant(self) -> Variant | None:
        """The variant it is computed on (its paper settings), None for settings of no trained model."""
        return _variant(self.point.settings["paper"])

    @property
    def stem(self) -> str:
        """Its output file stem under figures/ ("" without a figure): the figure's, with the id's suffix."""
        return self.spec.stem + self.name[len(self.spec.name):] if self.spec.stem else ""

    @property
    def title(self) -> str:
        """The figure's title, with what sets its variant apart: ", the authors' model, MNIST stand-in, float32 run"."""
        v = self.variant
        words = _differences(v, self.spec.dataset, _TITLE_WORDS) if v is not None else []
        return self.spec.title + "".join(f", {w}" for w in words)

    @property
    def finding(self) -> Finding | None:
        f = self.point.finding
        return None if f is None else (f if f.key else replace(f, key=self.name))

    @property
    def standin(self) -> str | None:
        """The id of its stand-in (the same variant on :data:`STANDIN`) where its rows read one."""
        return self.spec.id_of(replace(self.variant, dataset=STANDIN)) if self.point.standin else None

    @property
    def rows(self) -> Callable | None:
        return self.spec.rows if self.spec.results[0] is self else None

    @property
    def read_by_rows(self) -> tuple:
        """The results the figure's rows read (on its first result): each claimed result and its stand-in, and each
        declared ``verify_reads``."""
        if self.rows is None:
            return ()
        read = [r for r in self.spec.results if r in self.spec.claimed() or r.verify_reads]
        return tuple(dict.fromkeys(n for r in read for n in (r.name, r.standin) if n))

    @property
    def section(self) -> str:
        """The book's section of the result: one of :data:`SECTIONS`."""
        return "paper" if self.figure is not None else BEYOND_THE_PAPER if self.paper == BEYOND_THE_PAPER else CHECK

    @property
    def profiles(self) -> tuple:
        """The profiles the result exists under, in :data:`curvature_gap.config.PROFILES` order."""
        return tuple(p for p in PROFILES if p in self.settings)


def claimed(figure: str) -> tuple:
    """The results of the registered figure ``figure`` (by its name) whose finding states a claim
    (:meth:`FigureSpec.claimed`): what a figure's ``rows`` function iterates. Read from the registry at call time, so
    that the code hash of the rows reaches the row functions and not the figure's declaration (its computation)."""
    from . import FIGURES  # noqa: PLC0415 - the registry is built from the modules that declare the rows

    return FIGURES[figure].claimed()


def sort_key(s: ResultSpec) -> tuple:
    """Book order: the paper's figures by number (of one figure, the authors' model first), then results beyond the
    paper, then checks (:data:`SECTIONS`)."""
    v = s.variant
    return (SECTIONS.index(s.section), s.figure or 0, v is None or v.model != "authors", s.name)
