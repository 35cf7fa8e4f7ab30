"""The "Adding a bound" recipe of CONTRIBUTING.md works: its toy bound, taken from the file's own code block, is one
declaration, and every place that lists bounds — the rows of verify and their expected verdicts, the errata page's
titles, the worst-case search, the rows at the trained model — finds it with nothing listed anywhere else."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys

import pytest

from cases import REPO
from curvature_gap.bounds import search
from curvature_gap.bounds import quantities, registry
from curvature_gap.bounds import sweeps as sw
from curvature_gap.bounds.titles import INEQUALITIES, shown, step_title
from curvature_gap.checks import bounds as cb
from curvature_gap.exact.instances import random_instance

pytestmark = pytest.mark.usefixtures("one_thread")
TOY = "toy.Z1_general"


def _recipe_code() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    return re.search(r"## Adding a bound.*?```python\n(.*?)```", text, re.S).group(1)


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    path = tmp_path / "toy_bound.py"
    path.write_text(_recipe_code())
    spec = importlib.util.spec_from_file_location("toy_bound", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    before = dict(registry.BOUNDS)
    spec.loader.exec_module(mod)  # registers the toy bound, as declarations.py registers the paper's
    yield mod
    registry.BOUNDS.clear()
    registry.BOUNDS.update(before)


def test_the_recipe_declares_one_bound(toy):
    (b,) = toy.TOY
    assert list(registry.BOUNDS)[-1] == TOY and registry.BOUNDS[TOY] is b
    with pytest.raises(ValueError, match="declared twice"):
        registry.register(b)


def test_every_registry_and_page_reads_the_toy_bound(toy):
    (b,) = toy.TOY
    assert registry.CHECKS[TOY] == dict(part="sa", ref=b.ref, what=b.what, result="thm1", role="repair", claim=None,
                                        expect="holds", errata=[])
    assert TOY not in registry.known_failures()
    assert registry.BOUNDS[TOY].part == "sa" and not registry.BOUNDS[TOY].tensors
    # the errata page's title and TeX, and the step's title in the evidence of a finding
    assert INEQUALITIES[f"bounds.{TOY}"] == shown(f"bounds.{TOY}") == (b.title, b.tex)
    assert step_title(f"bounds.{TOY}") == "the norm of Z₁ at any attention"
    # the worst-case search: an objective of the attention layer's space, reading ‖Z_1‖ (read off its terms)
    obj = search.objective(TOY)
    assert obj.space.name == "sa" and obj.need == ("Z1",) and TOY in {o.id for o in search.objectives()}
    assert TOY not in cb.trained_checks()


def test_the_toy_bound_is_evaluated_searched_and_given_its_row(toy):
    inst = random_instance(L=4, d_V=3, d_ff=6, seed=0, sharpness=4.0)
    q = quantities.sa_exact(inst)
    (rec,) = [r for r in registry.evaluate(inst, parts=("sa",)) if r["check"] == TOY]
    assert rec["ratio"] == registry.ratio(q["norm_X"] ** 3 / 2, q["Z1"]) and rec["ratio"] >= 1
    # the search descends the row's own ratio, and the bound survives it (‖∂A/∂T‖ ≤ 1/2 holds for every attention)
    obj = search.objective(TOY)
    cells = search.search_all([obj], search.QUICK_BUDGET)[TOY]
    recs = [r for c in cells for r in c.records]
    assert recs and min(r["ratio"] for r in recs) >= 1 - registry.RTOL
    for r in recs[:3]:
        (again,) = [x for x in registry.evaluate(search.instance_of(r["point"]), parts=("sa",)) if x["check"] == TOY]
        assert again["ratio"] == r["ratio"]
    # a sweep of curvature-gap verify records it, and the summary makes its row, with the declared expectation
    (sweep,) = [s for s in sw.definitions(quick=True, mini=True) if s.name == "sharpness"]
    recs, _ = sw.run_sweep(dataclasses.replace(sweep, parts=lambda x: ("sa",)))
    (row,) = [r for r in cb.rows_from_summary(sw.summarize(recs), []) if r.id == f"bounds.{TOY}"]
    assert row.verdict == row.expected == "holds" and row.as_expected and row.role == "repair" and row.claim is None
    assert row.instances.startswith(f"{len([r for r in recs if r['check'] == TOY])} records")
    # declared as a known failure instead, the same evidence is a regression: the verdict is read from the declaration
    registry.BOUNDS[TOY] = dataclasses.replace(registry.BOUNDS[TOY], fails="a reason")
    (wrong,) = [r for r in cb.rows_from_summary(sw.summarize(recs), []) if r.id == f"bounds.{TOY}"]
    assert wrong.expected == "fails" and wrong.verdict == "holds" and not wrong.as_expected
