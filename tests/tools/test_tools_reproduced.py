"""A download reproduces its page (tools.book.downloads): what a reader reads in a notebook's outputs, and
what differs between a page and its re-run download. ``make book-check`` runs the real downloads."""
from __future__ import annotations

import nbformat

from tools.book import downloads


def _nb(*outputs):
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    md = nbformat.v4.new_markdown_cell("prose is not an output")
    return nbformat.v4.new_notebook(cells=[md, cell])


def _html(text):
    return {"output_type": "display_data", "metadata": {}, "data": {"text/html": text, "text/plain": "<HTML>"}}


def _md(text):
    return {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": text, "text/plain": "<Markdown>"}}


PAGE = _nb(_html('<div class="cg-verdict" data-result="thm1"><strong>Verdict: fails.</strong> repaired: smallest '
                 'bound/exact 12</div>'),
           _md("| check | number |\n|---|---|\n| repaired | 12 |"),
           {"output_type": "stream", "name": "stdout", "text": "max relative error 6.4e-16\n"},
           _html('<figure><img src="../_static/figures/f.png" alt="a"><figcaption>The block leads.</figcaption></figure>'))


def test_shown_reads_verdicts_tables_prints_and_captions_without_tags_or_images():
    assert downloads.shown(PAGE) == ["Verdict: fails. repaired: smallest bound/exact 12",
                                     "| check | number | |---|---| | repaired | 12 |",
                                     "max relative error (float64 rounding)", "The block leads."]


def test_a_download_that_inlines_its_figure_reproduces_its_page():
    ran = _nb(*[dict(o) for o in PAGE.cells[1].outputs[:3]],
              _html('<figure><img src="data:image/png;base64,AAAA" alt="a"><figcaption>The block leads.</figcaption>'
                    '</figure>'))
    assert downloads.differences(downloads.shown(PAGE), downloads.shown(ran)) == []


def test_the_quick_numbers_of_the_old_downloads_are_reported():
    """What the reader found: the Theorem 1 download recomputed with --quick and said 405 where its page says 12."""
    ran = _nb(_html('<div class="cg-verdict"><strong>Verdict: fails.</strong> repaired: smallest bound/exact 405</div>'),
              _md("| check | number |\n|---|---|\n| repaired | 4e+02 |"))
    problems = downloads.differences(downloads.shown(PAGE), downloads.shown(ran), "self_attention.ipynb")
    assert any("405" in p and "'Verdict: fails. repaired: smallest bound/exact 12'" in p for p in problems), problems
    assert any("4e+02" in p for p in problems)
    assert problems[-1] == "self_attention.ipynb: the download shows 2 outputs, its page 4"


def test_a_printed_line_cut_into_chunks_reads_as_the_same_line():
    """Where the kernel cuts printed text into stream chunks depends on its timing (the fresh-clone CI run of
    2026-12-04 built `self_attention` with one printed line in two chunks); chunks of one stream in a row are one
    text, a different stream or an output between them is not."""
    line = "thm1.printed@minimiser | loss below 1e-20: True\n"
    whole = _nb({"output_type": "stream", "name": "stdout", "text": line})
    cut = _nb({"output_type": "stream", "name": "stdout", "text": line[:22]},
              {"output_type": "stream", "name": "stdout", "text": line[22:]})
    assert downloads.shown(cut) == downloads.shown(whole) == ["thm1.printed@minimiser | loss below (float64 rounding): True"]
    assert downloads.differences(downloads.shown(whole), downloads.shown(cut)) == []
    other = _nb({"output_type": "stream", "name": "stdout", "text": "a\n"},
                {"output_type": "stream", "name": "stderr", "text": "b\n"}, _md("c"),
                {"output_type": "stream", "name": "stdout", "text": "d\n"})
    assert downloads.shown(other) == ["a", "b", "c", "d"]


def test_a_value_at_float64_rounding_and_a_live_time_are_not_a_pages_numbers():
    """A page that computes live (layernorm_pitfall, your_layer) shows errors at float64 rounding and timings that
    differ from run to run (threads, BLAS, load): read as such; a number above rounding still differs."""
    def page(text):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "x", outputs=[nbformat.v4.new_output("stream", name="stdout", text=text)])])

    built = page("error 8.4 × 10⁻¹⁶ (3.7e-16), closed form 0.014 s / autograd 2.484 s; curvlinops 8.1 × 10⁻²\n")
    rerun = page("error 5.7 × 10⁻¹⁶ (4.0e-16), closed form 0.032 s / autograd 0.138 s; curvlinops 8.1 × 10⁻²\n")
    assert downloads.differences(downloads.shown(built), downloads.shown(rerun)) == []
    moved = page("error 8.4 × 10⁻¹⁶ (3.7e-16), closed form 0.014 s / autograd 2.484 s; curvlinops 8.2 × 10⁻²\n")
    assert len(downloads.differences(downloads.shown(built), downloads.shown(moved))) == 1
