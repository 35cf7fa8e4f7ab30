"""The committed paper-scale results (published/paper/) are fresh at this commit.

The paper book renders only these files and refuses a stale one, so a commit that changes what
determines a published number (its settings, its training run, the code that computes it) fails
here first, with the command that refreshes them. Reads hashes only: nothing is computed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from curvature_gap import checks
from curvature_gap import experiments
from curvature_gap.findings import paper_dataset

PUBLISHED = Path(__file__).resolve().parents[1] / "published" / "paper"
REFRESH = "make reproduce && make publish (maintainers; then commit published/paper/)"
# the results the paper book needs; those whose paper profile needs CIFAR-100 (Fig. 6 on either model, Fig. 12 on
# the authors': hours of training, a GPU) are not published
CIFAR = tuple(n for n in experiments.RESULT_NAMES if "paper" in experiments.spec(n).profiles and paper_dataset(n) == "CIFAR-100")
NEEDED = tuple(n for n in experiments.RESULT_NAMES if "paper" in experiments.spec(n).profiles and n not in CIFAR)


@pytest.mark.slow
@pytest.mark.parametrize("name", NEEDED)
def test_published_result_is_fresh(name):
    ctx = experiments.Context(profile="paper", progress=False, published_dir=PUBLISHED.parent)
    try:
        experiments.published_check(name, ctx)
    except experiments.UnusableResult as exc:
        pytest.fail(f"stale at this commit: {exc}; refresh: {REFRESH}")


@pytest.mark.slow
def test_published_rows_are_fresh():
    try:
        checks.published_rows(PUBLISHED / "verify.json")
    except experiments.UnusableResult as exc:
        pytest.fail(f"stale at this commit: {exc}; refresh: {REFRESH}")


def test_published_results_name_the_commit_that_computed_them():
    docs = {n: json.loads((PUBLISHED / f"{n}.json").read_text()) for n in NEEDED}
    docs["verify"] = json.loads((PUBLISHED / "verify.json").read_text())
    for name, doc in docs.items():
        git = doc["provenance"]["git"]
        assert git["commit"] and len(git["commit"]) == 40, name
        assert git["dirty"] is False, f"{name} was computed from uncommitted code: its commit does not name its code"


@pytest.mark.slow
def test_a_checkout_without_results_computes_every_data_row_from_the_published_results(tmp_path):
    """What `curvature-gap verify` reads in a fresh clone (no results/): every result of the trained models
    is found among the published ones, and only the CIFAR-100 results (Figs. 6 and 12 at paper scale) are not run."""
    from curvature_gap.checks import Inputs, figures
    ctx = experiments.Context(profile="paper", results_dir=tmp_path / "results", published_dir=PUBLISHED.parent, progress=False)
    res = {n: experiments.find_result(n, ctx=ctx) for n in checks.DATA_RESULTS}
    assert CIFAR == ("fig6_authors", "fig6", "fig12_authors", "fig12")
    assert [n for n, r in res.items() if r is None] == [n for n in checks.DATA_RESULTS if n in CIFAR]
    rows = figures.run(Inputs(results=res))  # Assumption 1 and Theorem 7 on the trained ViT are figures' rows
    assert sorted(r.id for r in rows if not r.ran) == ["fig12.validity_increases", "fig12_authors.validity_increases",
                                                       "fig6.slope", "fig6_authors.slope"]
