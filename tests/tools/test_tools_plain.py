"""Downloads read as notebooks (tools.book.plain): the MyST of a page becomes Markdown plain Jupyter renders."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools.book import build, plain

ROOT = Path(__file__).resolve().parents[2]
NUMBERS = plain.proof_numbers(ROOT / "_config.yml")
CITES = plain.bib_names(ROOT / "book" / "references.bib")
MYST = re.compile(r"\{[\w:-]+\}`|^(`{3,}|:{3,})\{", re.M)


def test_a_theorem_box_a_citation_a_page_link_and_a_reference_become_markdown():
    src = ("As {cite:t}`ormaniec2025what` show ({cite}`ba2016layer`), see {doc}`transformer_block` and "
           "{doc}`/book/notation`.\n\n```{prf:theorem} as printed in the paper\n:label: thm-sa-bound-printed\n"
           "Let $x$ be.\n\n$$\nM=1\n$$ (eq-m)\n```\n\nBy {prf:ref}`thm-sa-bound-printed` and {eq}`eq-m`.")
    out = plain.to_markdown(src, NUMBERS, CITES)
    assert out.startswith("As Ormaniec et al. (2025) show ((Ba et al., 2016)), see [transformer block]"
                          "(transformer_block.ipynb) and [notation](../book/notation.md).")
    assert "**Theorem 1 (as printed in the paper).**\n\n> Let $x$ be.\n>\n> $$\n> M=1\n> $$" in out
    assert "By Theorem 1 and the equation above." in out and not MYST.search(out)


@pytest.mark.parametrize("path", build.toc_notebooks(ROOT), ids=lambda p: p.stem)
def test_no_myst_is_left_in_any_page(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "markdown":
            out = plain.to_markdown(c.source, NUMBERS, CITES)
            assert not MYST.search(out), out[:400]
            assert "{prf:" not in out and "{cite" not in out and "{doc}" not in out


def test_a_download_gets_its_note_once(tmp_path):
    p = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("See {doc}`norm_bounds`.")]), p)
    plain.plain_download(p, NUMBERS, CITES)
    plain.plain_download(p, NUMBERS, CITES)
    nb = nbformat.read(p, as_version=4)
    assert [c.source for c in nb.cells] == [plain.FIRST_CELL, "See [norm bounds](norm_bounds.ipynb)."]
    assert "reads the committed results" in plain.FIRST_CELL and '"quick"' in plain.FIRST_CELL
