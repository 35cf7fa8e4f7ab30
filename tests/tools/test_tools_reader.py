"""make book-check on what a reader reads (tools.book.html): no check ids or Python reprs outside the every-check
chapter, pages that stay light, one meaning per proof-box number."""
from __future__ import annotations

from pathlib import Path

from curvature_gap.row import Row
from tools.book import html

ROWS = [Row(id="bounds.thm1.printed.maxblock", result="thm1", kind="bound", what="w", verdict="fails")]


def _site(tmp_path: Path, pages: dict) -> Path:
    for rel, body in pages.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"<html><body><article>{body}</article></body></html>")
    return tmp_path


def test_ids_and_reprs_are_reported_where_a_reader_reads_them_and_nowhere_else(tmp_path):
    site = _site(tmp_path, {
        "notebooks/self_attention.html": "<p>The table: <code>bounds.thm1.printed.maxblock</code>, worst block "
                                         "('K', 'K'), x=3.1622776601683795, M is 1.4e+05 times, "
                                         "<code>thm1.printed@admissible</code>.</p>",
        "notebooks/good.html": '<p>The largest block <span class="cg-check" title="check bounds.thm1.printed.maxblock">'
                               'the K–K block</span> <small class="cg-id">(check <code>bounds.thm1.printed.maxblock'
                               '</code>)</small>; 1.4 × 10⁵; <span class="math">x_{1}@y</span></p>'
                               "<pre>thm1.printed@admissible</pre>",
        "book/all_checks.html": "<p><code>bounds.thm1.printed.maxblock</code></p>"})
    problems = html.check_reader_words(site, ROWS)
    assert len(problems) == 1 and problems[0].startswith("notebooks/self_attention.html: a reader reads "), problems
    for shown in ("check id 'bounds.thm1.printed.maxblock'", "Python repr \"('K', 'K')\"",
                  "counter-example name 'thm1.printed@admissible'", "(and 2 more)"):
        assert shown in problems[0], shown


def test_a_page_with_an_inline_figure_is_too_heavy_and_lazy_figure_files_are_not(tmp_path):
    site = _site(tmp_path, {"notebooks/heavy.html": '<img src="data:image/png;base64,' + "A" * 1_100_000 + '">',
                            "notebooks/light.html": '<img src="../_static/f.png" loading="lazy"><img src="../_static/g.png">'})
    (site / "_static").mkdir()
    (site / "_static" / "f.png").write_bytes(b"x" * 4_000_000)
    (site / "_static" / "g.png").write_bytes(b"x" * 1000)
    problems = html.check_page_weight(site)
    assert problems == ["notebooks/heavy.html: the HTML weighs 1.1 MB (at most 1 MB: figures are files, "
                        "curvature_gap.notebook.show_figure)"]
    light = site / "notebooks" / "light.html"
    size, first = html.page_weight(site, light, html.pages(site)[light])
    assert size == light.stat().st_size and first == html._transferred(light) + 1000, (
        "the lazy figure is loaded when scrolled to, the other at once; text is sent compressed, images as they are")
    assert html._transferred(light) < size


def _box(box_id, caption):
    return (f'<div class="proof lemma admonition" id="{box_id}"><p class="admonition-title">'
            f'<span class="caption-number">{caption} </span> (title)</p></div>')


def test_two_boxes_with_one_companion_number_or_an_errata_letter_are_reported(tmp_path):
    site = _site(tmp_path, {"notebooks/a.html": _box("lem-a", "Lemma L2") + _box("asm-1", "Assumption 1"),
                            "notebooks/b.html": _box("lem-b", "Lemma L2") + _box("asm-2", "Assumption 1")
                            + _box("lem-c", "Lemma C1")})
    problems = html.check_labels(site)
    assert problems == ["notebooks/b.html: 'Lemma L2' names two boxes ('lem-a' and 'lem-b')",
                        "notebooks/b.html: the box 'lem-c' is numbered 'Lemma C1', a letter of the errata's series"]
