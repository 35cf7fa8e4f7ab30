"""tools.book.html: checks of the built HTML that need no browser (links, offline assets, downloads, one
verdict per result everywhere, raw TeX)."""
from __future__ import annotations

import re

import nbformat

from curvature_gap.findings import RESULTS
from curvature_gap.notebook import verdict_html
from tools.book import html, tables


def test_link_checker_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "a.html").write_text('<p id="here"><a href="b.html#there">x</a><a href="#here">y</a>'
                                     '<img src="img.png"><a href="https://example.org/x">ext</a></p>')
    (tmp_path / "b.html").write_text('<h1 id="there">b</h1><a href="a.html#nowhere">z</a><a href="c.html">w</a>')
    broken = html.check_links(tmp_path)
    assert any("img.png" in b for b in broken)
    assert any("#nowhere" in b for b in broken)
    assert any("c.html" in b for b in broken)
    assert not any("example.org" in b or "#there" in b or "#here" in b for b in broken)
    assert len(broken) == 3


def test_offline_checker_flags_network_assets(tmp_path):
    (tmp_path / "a.html").write_text('<script src="_static/mathjax/tex-chtml.js"></script>')
    assert html.check_offline(tmp_path) == ["_static/mathjax/tex-chtml.js is missing: MathJax is not served from the book"]
    (tmp_path / "_static" / "mathjax").mkdir(parents=True)
    (tmp_path / "_static" / "mathjax" / "tex-chtml.js").write_text("")
    assert html.check_offline(tmp_path) == []
    (tmp_path / "b.html").write_text('<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script>'
                                     '<a href="https://example.org">a link is fine</a>')
    (problem,) = html.check_offline(tmp_path)
    assert problem.startswith("b.html: <script> loads https://cdn.jsdelivr.net")


def test_raw_latex_outside_math_and_code_is_a_problem(tmp_path):
    (tmp_path / "ok.html").write_text('<p>A norm <span class="math">\\(\\frac{a}{b}\\)</span> and <code>x_{i}</code>.</p>')
    (tmp_path / "bad.html").write_text("<p>The bound is $\\frac{a}{b}$ here.</p>")
    (problem,) = html.check_raw_latex(tmp_path)
    assert problem.startswith("bad.html: raw TeX in the text") and "\\frac{a}{b}" in problem


def test_downloads(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "p.html").write_text("<p>no download link</p>")
    problems = html.check_downloads(tmp_path, root=tmp_path)
    assert any("_sources/notebooks/p.ipynb is missing" in p for p in problems)
    (tmp_path / "_sources" / "notebooks").mkdir(parents=True)
    (tmp_path / "_sources" / "notebooks" / "p.ipynb").write_text("{}")
    assert html.check_downloads(tmp_path, root=tmp_path) == [
        "notebooks/p.html has no download link to its notebook",
        "notebooks/p.html does not show the parameters of its build (no p.cg-params line)",
        "_sources/notebooks/p.ipynb has 0 parameters cells (one is needed, holding the values of the build)"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("seed = 0", metadata={"tags": ["parameters"]})]
    nbformat.write(nb, tmp_path / "_sources" / "notebooks" / "p.ipynb")
    (tmp_path / "notebooks" / "p.html").write_text('<a href="../_sources/notebooks/p.ipynb">download</a>'
                                                   '<p class="cg-params">seed = 0</p>')
    (tmp_path / "_sources" / "book").mkdir()
    (tmp_path / "_sources" / "book" / "x.md").write_text("```{include} _generated/summary.md\n```\n")
    assert html.check_downloads(tmp_path, root=tmp_path) == [
        "_sources/book/x.md holds an {include} directive instead of its text"]


def _site(tmp_path, rows, profile, landing: str):
    """A built book reduced to what check_verdicts reads: the landing page and every result's page."""
    (tmp_path / "book").mkdir(parents=True)
    (tmp_path / "book" / "intro.html").write_text(landing)
    pages = {}
    for key, _, page, _ in RESULTS:
        pages.setdefault(page, []).append(verdict_html(key, profile, rows))
    for page, marks in pages.items():
        (tmp_path / page).with_suffix(".html").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).with_suffix(".html").write_text("<main>" + "".join(marks) + "</main>")
    return tmp_path


def _marks(rows, profile):
    return "".join(verdict_html(k, "paper", rows) for k, *_ in RESULTS)


def test_check_verdicts_compares_the_landing_page_and_each_page_with_the_rows(tmp_path, quick_rows):
    site = _site(tmp_path / "ok", quick_rows, "paper", _marks(quick_rows, "paper"))
    assert html.check_verdicts(site, quick_rows, "paper") == []
    changed = [r for r in quick_rows if not (r.result == "thm1" and r.role == "repair")]   # thm1: "fails" now
    problems = html.check_verdicts(site, changed, "paper")
    assert any(p.startswith("landing page: thm1 shows 'fails; repaired version holds', the rows give 'fails'")
               for p in problems)
    assert any(p.startswith("notebooks/self_attention: thm1 shows") for p in problems)
    smoke = _site(tmp_path / "smoke", quick_rows, "smoke", _marks(quick_rows, "smoke"))
    assert html.check_verdicts(smoke, quick_rows, "smoke") == []
    bad = (tmp_path / "smoke" / "notebooks" / "fig03_hessian_init.html")
    bad.write_text(verdict_html("fig3", "paper", quick_rows))
    (problem,) = html.check_verdicts(smoke, quick_rows, "smoke")
    assert problem == "notebooks/fig03_hessian_init: a smoke build states the verdict 'not run' for fig3"


def test_the_generated_landing_page_passes_check_verdicts(tmp_path, quick_rows):
    md = tables.landing_md(quick_rows, "paper")
    cells = [ln.strip("| ").split(" | ") for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]
    landing = "<table>" + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in cells) + "</table>"
    assert re.search(r"cg-badge", landing)
    site = _site(tmp_path, quick_rows, "paper", landing)
    assert html.check_verdicts(site, quick_rows, "paper") == []
    other = [r for r in quick_rows if not (r.result == "thm1" and r.role == "repair")]
    assert any(p.startswith("landing page: thm1 shows") for p in html.check_verdicts(site, other, "paper"))
