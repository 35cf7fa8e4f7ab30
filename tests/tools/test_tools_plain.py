"""One notebook however a reader opens it (tools.book.plain, curvature_gap.myst): the MyST of a page becomes the
Markdown plain Jupyter, Colab and Binder render, in the downloads, in the plain copies Colab and Binder open, and in
what a notebook prints outside the book build."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import nbformat
import pytest

from curvature_gap import myst, notebook
from tools.book import build, numbers, plain
from tools.book.html import RAW_MYST

ROOT = Path(__file__).resolve().parents[2]
PLAIN = myst.from_checkout(ROOT)
MYST = re.compile(r"\{[\w:-]+\}`|^(`{3,}|:{3,})\{", re.M)


def test_a_theorem_box_a_citation_a_page_link_and_a_reference_become_markdown():
    src = ("As {cite:t}`ormaniec2025what` show ({cite}`ba2016layer`), see {doc}`transformer_block` and "
           "{doc}`/book/notation`.\n\n```{prf:theorem} as printed in the paper\n:label: thm-sa-bound-printed\n"
           "Let $x\\in\\R^{n}$ and $\\vecr(X)$ be.\n\n$$\nM=1\n$$ (eq-m)\n```\n\nBy {prf:ref}`thm-sa-bound-printed` and "
           "{eq}`eq-m`; `\\vecr` in code stays. It took {{ t }}.")
    out = myst.to_markdown(src, dataclasses.replace(PLAIN, substitutions={"t": "3 s"}))
    assert out.startswith("As Ormaniec et al. (2025) show ((Ba et al., 2016)), see [transformer block]"
                          "(transformer_block.ipynb) and [notation](../book/notation.md).")
    assert ("**Theorem 1 (as printed in the paper).**\n\n> Let $x\\in\\mathbb{R}^{n}$ and "
            "$\\operatorname{vec}_r(X)$ be.\n>\n> $$\n> M=1\n> $$") in out, "boxes quoted, the book's macros spelt out"
    assert "By Theorem 1 and the equation above; `\\vecr` in code stays. It took 3 s." in out and not MYST.search(out)


@pytest.mark.parametrize("path", build.toc_notebooks(ROOT), ids=lambda p: p.stem)
def test_no_myst_is_left_in_any_page(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    plain_ = dataclasses.replace(PLAIN, substitutions=numbers.substitutions(ROOT))
    for c in nb.cells:
        if c.cell_type == "markdown":
            out = myst.to_markdown(c.source, plain_)
            assert not MYST.search(out) and not RAW_MYST.search(out), out[:400]
            assert "{prf:" not in out and "{cite" not in out and "{doc}" not in out and "{{" not in out


def test_a_download_gets_its_note_once(tmp_path):
    p = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("See {doc}`norm_bounds`.")]), p)
    plain.plain_download(p, PLAIN)
    plain.plain_download(p, PLAIN)
    nb = nbformat.read(p, as_version=4)
    assert [c.source for c in nb.cells] == [plain.FIRST_CELL, "See [norm bounds](norm_bounds.ipynb)."]
    assert "reads the committed results" in plain.FIRST_CELL and '"quick"' in plain.FIRST_CELL


def test_the_plain_copies_colab_and_binder_open_are_current():
    """notebooks/plain/: one per page, as `python -m tools.book plain-notebooks` writes them."""
    assert plain.stale_plain_notebooks(ROOT, build.toc_notebooks(ROOT), numbers.substitutions(ROOT)) == []


def test_a_plain_copy_is_the_page_as_a_reader_runs_it(tmp_path):
    """The paper profile (the committed results) by default, plain Markdown, no outputs; links to the book's chapters
    from notebooks/plain/; a stale, missing or left-over copy is a problem naming the command."""
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# T\n\n```{admonition} Note\n:class: warning\nSee {doc}`/book/errata`.\n```"),
        nbformat.v4.new_code_cell('profile = "paper"', metadata={"tags": ["parameters"]})])
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="x\n")]
    nbformat.write(nb, tmp_path / "notebooks" / "a.ipynb")
    rel = [Path("notebooks/a.ipynb")]
    assert plain.stale_plain_notebooks(tmp_path, rel, {}) == [
        f"notebooks/plain/a.ipynb is missing: run `{plain.COMMAND}`"]
    assert plain.write_plain_notebooks(tmp_path, rel, {}) == [tmp_path / "notebooks/plain/a.ipynb"]
    copy = nbformat.read(tmp_path / "notebooks/plain/a.ipynb", as_version=4)
    assert copy.cells[0].source == plain.FIRST_CELL and copy.cells[2].outputs == []
    assert copy.cells[1].source == "# T\n\n**Note.**\n\n> See [errata](../../book/errata.md)."
    (tmp_path / "notebooks/plain/b.ipynb").write_text("{}")
    nb.cells[0].source = "# U"
    nbformat.write(nb, tmp_path / "notebooks" / "a.ipynb")
    assert plain.stale_plain_notebooks(tmp_path, rel, {}) == [
        f"notebooks/plain/a.ipynb is out of date: run `{plain.COMMAND}`",
        f"notebooks/plain/b.ipynb is the copy of no page of the book: run `{plain.COMMAND}`"]


@pytest.mark.parametrize("path", build.toc_notebooks(ROOT), ids=lambda p: p.stem)
def test_a_clone_colab_binder_and_the_download_open_the_paper_profile(path):
    """Each page's notebook opens on the paper profile (the committed results): the profile its download holds."""
    cell, = [c for c in nbformat.read(ROOT / path, as_version=4).cells if "parameters" in c.metadata.get("tags", [])]
    assert build.parameter_names(cell.source)[0] == "profile"
    assert re.search(r'^profile = "paper"', cell.source, re.M), f"{path.name}: its default profile is not paper"


def test_a_notebook_prints_plain_markdown_outside_the_build(monkeypatch):
    """What Figs. 6 and 12 print outside the book build (a re-run download, Colab, Binder) is plain Markdown; inside
    the build the book renders the MyST itself."""
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj.data))
    text = ("```{admonition} A stand-in\n:class: warning\nMeasured in {doc}`/book/reproducibility`; see "
            "{doc}`fig04_hessian_trained`.\n```")
    monkeypatch.delenv(notebook.STATIC_ENV, raising=False)
    notebook.show_markdown(text)
    monkeypatch.setenv(notebook.STATIC_ENV, "/tmp/static")
    notebook.show_markdown(text)
    assert shown[0] == ("**A stand-in.**\n\n> Measured in [reproducibility](../book/reproducibility.md); see "
                        "[fig04 hessian trained](fig04_hessian_trained.ipynb).")
    assert shown[1] == text
