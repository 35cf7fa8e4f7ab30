"""experiments.spec: one FigureSpec per figure over its grid of variants; each result's id is derived from its
settings (never read back out of it); the book's order is read from the figure and the variant, and a ``paper``
label that names a figure in an unknown form fails when the figure is declared (it never sorts silently)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from cases import REPO
from curvature_gap import experiments
from curvature_gap.experiments.settings import Variant
from curvature_gap.experiments.spec import (BEYOND_THE_PAPER, CHECK, SECTIONS, FigureSpec, Finding, Point, result_id,
                                            sort_key)


@dataclass(frozen=True)
class _Toy:
    n: int = 1


@dataclass(frozen=True)
class _ToyRun(Variant):
    n: int = 1


def _figure(name: str, paper: str, grid=None, **kw) -> FigureSpec:
    return FigureSpec(name, paper, "", "t", grid or (Point({"paper": _Toy()}),), lambda job: ({}, {}), **kw)


def _result(name: str, paper: str, **kw):
    (r,) = _figure(name, paper, **kw).results
    return r


def test_figure_and_section_of_each_label_form():
    assert (_result("a", "Fig. 12").figure, _result("a", "Fig. 12").section) == (12, "paper")
    assert _figure("a", "Figs. 7–11").figure == 7 and _figure("a", "Figs. 5, 7-11").figure == 5
    assert _figure("a", "Fig. 6 (MNIST stand-in)").figure == 6
    for label, section in ((BEYOND_THE_PAPER, BEYOND_THE_PAPER), (CHECK, CHECK), ("a test", CHECK)):
        r = _result("a", label)
        assert r.figure is None and r.section == section


@pytest.mark.parametrize("paper", ["Figure 3", "Fig 3", "Figs. x"])
def test_a_malformed_figure_label_fails_at_declaration(paper):
    with pytest.raises(ValueError):
        _figure("a", paper)


def test_ids_are_derived_from_the_settings():
    """The figure's name, then _authors, a stand-in dataset, another arithmetic than the model's own: today's ids."""
    assert result_id("fig3", Variant(), "mnist") == "fig3"
    assert result_id("fig3", Variant(model="authors", arithmetic="authors"), "mnist") == "fig3_authors"
    assert result_id("fig4", Variant(model="authors", arithmetic="exact"), "mnist") == "fig4_authors_exact"
    assert result_id("fig6", Variant(dataset="mnist"), "cifar100") == "fig6_mnist"
    assert result_id("fig12", Variant(model="authors", dataset="mnist", arithmetic="authors"), "cifar100") == \
        "fig12_authors_mnist"
    # the theorem's block in bf16 is named by its arithmetic, never like the authors' model
    assert result_id("fig6", Variant(dataset="cifar100", arithmetic="authors"), "cifar100") == "fig6_bf16"
    assert result_id("encoder_family", _Toy(), "mnist") == "encoder_family"
    grid = (Point({"paper": _ToyRun(dataset="cifar100"), "smoke": _ToyRun()}),
            Point({"paper": _ToyRun(model="authors", dataset="cifar100", arithmetic="authors")}),
            Point({"paper": _ToyRun(model="authors", dataset="mnist", arithmetic="exact")}, depends=("dep",)))
    f = FigureSpec("f", "Fig. 6", "f06", "t", grid, lambda job: ({}, {}), dataset="cifar100")
    assert [r.name for r in f.results] == ["f_authors", "f_authors_mnist_exact", "f"]  # the authors' model first
    assert [r.stem for r in f.results] == ["f06_authors", "f06_authors_mnist_exact", "f06"]
    assert f.results[1].depends == ("dep_authors_mnist_exact",) and f.results[1].dep_figures == {
        "dep_authors_mnist_exact": "dep"}
    assert f.results[1].title == "t, the authors' model, MNIST stand-in, float32 run"
    assert f.result(model="authors", arithmetic="authors").name == "f_authors" and f.result(model="table1").name == "f"
    assert f.result(model="authors", arithmetic="exact") is None  # on the figure's dataset there is none


def test_the_grid_is_checked_at_declaration():
    twice = (Point({"paper": _ToyRun()}), Point({"paper": _ToyRun(n=2)}))
    with pytest.raises(ValueError, match="the same id"):
        FigureSpec("f", "Fig. 3", "", "t", twice, lambda job: ({}, {}))
    other = (Point({"paper": _ToyRun(), "smoke": _ToyRun(model="authors", arithmetic="authors")}),)
    with pytest.raises(ValueError, match="another variant"):
        FigureSpec("f", "Fig. 3", "", "t", other, lambda job: ({}, {}))
    with pytest.raises(ValueError, match="empty grid"):
        FigureSpec("f", "Fig. 3", "", "t", (), lambda job: ({}, {}))


def test_book_order_reads_the_fields():
    results = [_result("z", CHECK), _result("b", BEYOND_THE_PAPER), _result("f12", "Fig. 12"),
               *_figure("f3", "Fig. 3", (Point({"paper": _ToyRun()}),
                                         Point({"paper": _ToyRun(model="authors", arithmetic="authors")}))).results]
    assert [s.name for s in sorted(results, key=sort_key)] == ["f3_authors", "f3", "f12", "b", "z"]


def test_the_registry_is_in_book_order_with_todays_ids():
    specs = list(experiments.SPECS.values())
    assert specs == sorted(specs, key=sort_key)
    sections = [SECTIONS.index(s.section) for s in specs]
    assert sections == sorted(sections) and set(sections) == {0, 1, 2}
    # the published file names: every result keeps its id, now derived from its settings
    published = {p.stem for p in (REPO / "published" / "paper").glob("*.json")} - {"verify", "reproduction"}
    assert published <= set(experiments.SPECS)
    assert {"fig3", "fig3_authors", "fig4_authors_exact", "fig6_mnist", "fig12_authors_mnist_exact"} <= published
    for name, s in experiments.SPECS.items():
        assert s.spec.id_of(s.settings["paper"]) == name and (s.stem == "" or s.stem.endswith(name[len(s.spec.name):]))


def test_a_figures_claim_rows_are_carried_once_and_findings_are_keyed_by_the_result():
    carried = [s for s in experiments.SPECS.values() if s.rows is not None]
    assert len({id(s.rows) for s in carried}) == len(carried) == len({s.spec.name for s in carried})
    assert experiments.spec("fig3_authors").rows is not None and experiments.spec("fig3").rows is None
    assert experiments.spec("fig3").read_by_rows == () and experiments.spec("fig3_authors").read_by_rows == (
        "fig3_authors", "fig3")
    assert experiments.spec("fig6").finding == Finding("Fig. 6: |L_(k+1) − L_k| follows 1/k (CIFAR-100)",
                                                       "notebooks/fig06_loss_convergence", key="fig6")
    assert experiments.spec("fig7").finding.key == "figs7_11"
    assert experiments.spec("fig6").standin == "fig6_mnist" and experiments.spec("fig12_authors").standin == \
        "fig12_authors_mnist"


def test_the_models_of_a_claim_are_read_from_the_settings():
    assert experiments.on_model("fig4", "authors") == "fig4_authors" and experiments.on_model("fig4_authors",
                                                                                               "table1") == "fig4"
    assert experiments.on_model("fig12", "authors") == "fig12_authors" and experiments.on_model("fig7", "authors") == \
        "fig7_authors"
    assert experiments.on_model("encoder_family", "authors") is None
    assert [experiments.compared_model(n) for n in ("fig3", "fig6_authors", "fig4_authors_exact", "fig7", "theorem7",
                                                    "figs7_11")] == ["table1", "authors", None, None, None, None]


# a variant read out of (or pasted into) a result id: name.endswith("_authors"), f"{key}_authors", name + "_authors"
_NAME_PARSING = re.compile(r"""endswith\(\s*["']_(authors|exact|mnist)|\}_(authors|exact|mnist)["']|\+\s*["']_authors""")


def test_no_code_reads_a_variant_out_of_a_result_name():
    """The model, dataset and arithmetic of a result are its settings' fields: no module of the package or of the
    book's tools parses them out of an id (``name.endswith("_authors")``, ``f"{key}_authors"``)."""
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
             for root in ("src", "tools") for p in sorted((REPO / root).rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _NAME_PARSING.search(line)]
    assert not found, "a variant read out of a name: " + "; ".join(found)


def test_the_name_check_can_fail():
    for bad in ('if key.endswith("_authors"):', 'a = f.get(f"{k}_authors")', 'm = name + "_authors"'):
        assert _NAME_PARSING.search(bad), bad
    assert not _NAME_PARSING.search('on_model(key, "authors")')
