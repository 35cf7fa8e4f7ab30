"""experiments.spec: the book's order is read from FigureSpec.figure and .section, and a ``paper`` label that
names a figure in an unknown form fails when the result is declared (it never sorts silently)."""
from __future__ import annotations

import pytest

from curvature_gap import experiments
from curvature_gap.experiments.spec import BEYOND_THE_PAPER, CHECK, SECTIONS, FigureSpec, sort_key


def _spec(name: str, paper: str, **kw) -> FigureSpec:
    return FigureSpec(name, paper, "", "t", {"smoke": None}, lambda job: ({}, {}), **kw)


def test_figure_and_section_of_each_label_form():
    assert (_spec("a", "Fig. 12").figure, _spec("a", "Fig. 12").section) == (12, "paper")
    assert _spec("a", "Figs. 7–11").figure == 7 and _spec("a", "Figs. 5, 7-11").figure == 5
    assert _spec("a", "Fig. 6 (MNIST stand-in)").figure == 6
    assert _spec("a", "Fig. 4", figure=4).figure == 4
    for label, section in ((BEYOND_THE_PAPER, BEYOND_THE_PAPER), (CHECK, CHECK), ("a test", CHECK)):
        s = _spec("a", label)
        assert s.figure is None and s.section == section


@pytest.mark.parametrize("paper,kw", [("Figure 3", {}), ("Fig 3", {}), ("Figs. x", {}), ("Fig. 3", {"figure": 4}),
                                      (CHECK, {"figure": 1})])
def test_a_malformed_figure_label_or_a_contradicting_figure_fails_at_declaration(paper, kw):
    with pytest.raises(ValueError):
        _spec("a", paper, **kw)


def test_book_order_reads_the_fields():
    specs = [_spec("z", CHECK), _spec("b", BEYOND_THE_PAPER), _spec("f12", "Fig. 12"), _spec("f3", "Fig. 3"),
             _spec("f3a", "Fig. 3", rank=0)]
    assert [s.name for s in sorted(specs, key=sort_key)] == ["f3a", "f3", "f12", "b", "z"]


def test_the_registry_is_in_book_order():
    specs = list(experiments.SPECS.values())
    assert specs == sorted(specs, key=sort_key)
    sections = [SECTIONS.index(s.section) for s in specs]
    assert sections == sorted(sections) and set(sections) == {0, 1, 2}
