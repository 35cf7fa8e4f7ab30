"""The book's search page (book/_search/cg-search.js, Sphinx's html_search_scorer): a title holding the whole query
ranks first, and a snippet shows a formula as text, not as TeX. Run in headless Chromium (skipped without it,
except under CI)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tools.book import html as static
from tools.book import server

ROOT = Path(__file__).resolve().parents[2]

# a stand-in for Sphinx's searchtools.js: its Search object, whose htmlToText returns a page's text with its TeX
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<script>const Search = {htmlToText: (html, anchor) => new DOMParser().parseFromString(html, "text/html").body.textContent};
</script><script src="cg-search.js"></script></head><body><p>search</p></body></html>"""


def _page(tmp_path: Path, query: str):
    if server.find_chromium() is None:
        why = f"Chromium is not installed: `{server.INSTALL_HINT}`"
        if os.environ.get("CI"):
            pytest.fail(why + " — CI must install it before `make test`")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a dev dependency

    shutil.copy2(ROOT / "book" / "_search" / "cg-search.js", tmp_path / "cg-search.js")
    (tmp_path / "search.html").write_text(PAGE)
    with server.serve(tmp_path) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=server.find_chromium(), args=server.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}search.html?q={query}", wait_until="load")
            yield page
            assert errors == []
        finally:
            browser.close()


@pytest.mark.slow
def test_a_title_holding_the_whole_query_ranks_first_a_page_before_its_sections(tmp_path):
    for page in _page(tmp_path, "Theorem%206"):
        score = lambda title, anchor="", base=15: page.evaluate(  # noqa: E731
            "([t, a, s]) => Scorer.score(['doc', t, a, '', s, 'doc.html'])", [title, anchor, base])
        page_score = score("The norm bounds: Lemma 4, the Proposition, Theorem 6 and cross-entropy")
        section = score("C15. Theorem 6, proof: the bound on G_Q", "#errata-c15", base=30)
        assert page_score > section > score("Theorem 7: convergence of the loss landscape", base=40)
        assert score("Theorem 60", base=15) == 15, "the phrase, not a longer number"
        assert page.evaluate("Scorer.title") == 15, "Sphinx's own weights are kept"
    for page in _page(tmp_path, "theorem"):
        assert page.evaluate("Scorer.score(['d', 'Theorem 6', '', '', 15, 'd.html'])") == 15, "one word: Sphinx's score"


@pytest.mark.slow
def test_a_snippet_shows_a_formula_as_text(tmp_path):
    for page in _page(tmp_path, "Theorem%206"):
        html = ('<p>The bound <span class="math notranslate nohighlight">\\(\\lVert\\mathbf G_Q\\rVert_2\\le\\frac{1}{L'
                '\\sqrt{d_K}}\\lVert\\boldsymbol\\Phi_{QK}\\rVert\\)</span> fails.</p><div class="math">\\[\\begin{aligned}'
                'x&amp;=\\partial^2 y\\\\ \\xi_{21}\\end{aligned}\\]</div>')
        text = page.evaluate("(h) => Search.htmlToText(h, '')", html)
        assert "‖G_Q‖_2≤(1)/(L√(d_K))‖Φ_QK‖" in text.replace(" ", "") and "∂^2" in text and "ξ_21" in text
        assert not static.RAW_LATEX.search(text) and "\\" not in text, text
