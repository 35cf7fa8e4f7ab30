"""tools.book.check (``make book-check``) and ``python -m tools.book``: every check of a built book."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from curvature_gap.findings import RESULTS
from curvature_gap.notebook import verdict_html
from tools.book import __main__ as cli
from tools.book import build, numbers, plain, repository
from tools.book.check import check

ROOT = Path(__file__).resolve().parents[2]


URL, _ = repository.repository_url(ROOT)


def _footer() -> str:
    return (f'<footer class="bd-footer-content"><a href="{repository.ARXIV_ABS}">paper</a> '
            f'<a href="{repository.ARXIV_SOURCE}">source</a>' + (f' <a href="{URL}">repo</a>' if URL else "")
            + "</footer>")


def _download(stem: str, dst: Path) -> None:
    """The page's notebook as the build tidies it (without executing it)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    nbformat.write(nb, dst)
    build.tidy_notebook(dst, ROOT)


def _built(tmp_path, rows, profile="smoke"):
    html_dir = tmp_path / "_build" / "html"
    (html_dir / "_static" / "mathjax").mkdir(parents=True)
    (html_dir / "_static" / "mathjax" / "tex-chtml.js").write_text("")
    (html_dir / "_static" / "verify.json").write_text(json.dumps([r.to_json() for r in rows]))
    (html_dir / "index.html").write_text('<a href="book/intro.html">start</a>')
    (tmp_path / "_build" / "book-report.json").write_text(json.dumps({"profile": profile}))
    (html_dir / "book").mkdir()
    (html_dir / "book" / "intro.html").write_text("".join(verdict_html(k, "paper", rows) for k, *_ in RESULTS)
                                                  + _footer())
    pages = {}
    for key, _, page, _ in RESULTS:
        pages.setdefault(page, []).append(verdict_html(key, profile, rows))
    for page, marks in pages.items():
        p = (html_dir / page).with_suffix(".html")
        p.parent.mkdir(parents=True, exist_ok=True)
        extra = ""
        if p.parent.name == "notebooks":
            (html_dir / "_sources" / "notebooks").mkdir(parents=True, exist_ok=True)
            _download(p.stem, html_dir / "_sources" / "notebooks" / f"{p.stem}.ipynb")
            extra = (f'<a href="../_sources/notebooks/{p.stem}.ipynb">download</a>'
                     f'<p class="{build.PARAMS_CLASS}">Parameters of this build: …</p>'
                     + "".join(f'<a href="{u}">{k}</a>' for k, u in
                               repository.launch_urls(URL, "main", f"notebooks/{p.stem}.ipynb").items()))
        p.write_text("<main>" + "".join(marks) + extra + "</main>" + _footer())
    plain.plain_downloads(html_dir, ROOT, numbers.substitutions(ROOT))  # as the build leaves its downloads
    plain.point_launch_buttons(html_dir)  # and its launch buttons (on notebooks/plain/)
    return html_dir


def test_a_consistent_book_has_no_problem_and_a_broken_one_is_reported(tmp_path, quick_rows):
    html_dir = _built(tmp_path, quick_rows)
    assert check(browser=False, html_dir=html_dir) == []
    (html_dir / "book" / "errata.html").write_text('<p>see $\\frac{a}{b}$ and <a href="nowhere.html">x</a></p>'
                                                   + _footer())
    problems = check(browser=False, html_dir=html_dir)
    assert len(problems) == 2 and any("raw TeX" in p for p in problems) and any("nowhere.html" in p for p in problems)


def test_no_built_book_is_a_clear_error(tmp_path, capsys, monkeypatch):
    with pytest.raises(build.BookError, match="run `make book` first"):
        check(browser=False, html_dir=tmp_path / "_build" / "html")
    monkeypatch.setattr(cli, "check", lambda **k: check(browser=False, html_dir=tmp_path / "none"))
    assert cli.main(["check", "--no-browser"]) == 1
    assert "[book] error: no built book" in capsys.readouterr().err



def test_downloads_that_would_not_run_and_missing_links_are_reported(tmp_path, quick_rows):
    """The defects a reader met: a download without its parameters (NameError) and with the build machine's
    paths, a page that hides the parameters of its build, no footer link to the paper, no launch buttons."""
    html_dir = _built(tmp_path, quick_rows)
    nb = html_dir / "_sources" / "notebooks" / "self_attention.ipynb"
    doc = json.loads(nb.read_text())
    doc["cells"] = [c for c in doc["cells"] if "parameters" not in c["metadata"].get("tags", [])]
    doc["metadata"]["papermill"] = {"input_path": str(ROOT / "notebooks" / nb.name), "parameters": {}}
    nb.write_text(json.dumps(doc))
    page = html_dir / "notebooks" / "self_attention.html"
    page.write_text(page.read_text().replace(build.PARAMS_CLASS, "x").replace(repository.ARXIV_ABS, "#")
                    .replace("mybinder.org", "example.org"))
    problems = check(browser=False, html_dir=html_dir)
    mine = [p for p in problems if "self_attention" in p]
    assert len(mine) == len(problems), problems
    assert any("does not show the parameters of its build" in p for p in mine), mine
    assert any("0 parameters cells" in p for p in mine) and any("keeps papermill's input_path" in p for p in mine)
    assert any(f"absolute path of the build machine: {ROOT}" in p for p in mine), mine
    assert any("no link to the paper on arXiv" in p for p in mine), mine
    if repository.github_slug(URL):
        assert any("no binder launch button opening https://mybinder.org/v2/gh/" in p for p in mine), mine
