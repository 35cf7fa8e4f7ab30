"""One notebook however a reader opens it: the book's pages as plain Markdown (:mod:`curvature_gap.myst`).

* **Downloads** — after rendering, the ``.ipynb`` files the download buttons serve
  (``_build/html/_sources/notebooks/``) get their markdown cells and Markdown outputs rewritten, and a first cell
  that says what the download shows and how to recompute it (:func:`plain_downloads`).
* **Colab and Binder** — they open a page's notebook from the repository, where no book renders its MyST (Colab
  cannot load jupyterlab-myst). They open ``notebooks/plain/<page>.ipynb`` instead: the page's notebook with its
  Markdown written as the download's, the same first cell, its default parameters (the ``paper`` profile, the
  committed results), and no outputs (:func:`plain_notebook`; ``python -m tools.book plain-notebooks`` writes
  them, and the test suite fails when one is out of date). The build points the launch buttons at them
  (:func:`point_launch_buttons`).
* **Running** — what a notebook prints is plain Markdown outside the book build
  (:func:`curvature_gap.notebook.show_markdown`), so a re-run download, or a Colab or Binder run, prints what the
  page shows; ``make lab`` renders the MyST of ``notebooks/*.ipynb`` with jupyterlab-myst as the book does.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import nbformat

from curvature_gap.myst import Plain, from_checkout, to_markdown

__all__ = ["FIRST_CELL", "PLAIN_DIR", "plain_download", "plain_downloads", "plain_notebook", "write_plain_notebooks",
           "stale_plain_notebooks", "point_launch_buttons", "COMMAND"]

FIRST_CELL = (
    "> **This notebook is a page of the companion book to “Closing the Curvature Gap” (arXiv:2510.16927).** "
    "Saved into a clone of the companion's repository (or opened on Binder or Colab) and run from the top, it "
    "shows the page's numbers: it reads the committed results (`published/paper/`), as the book build does, and "
    "computes none of them. To recompute, set `recompute` in the parameters cell: `\"quick\"` runs the checks with "
    "fewer random instances and no adversarial search (the smallest ratios it finds are larger than the page's), "
    "`\"full\"` with every search the page's numbers come from; on a figure page either also computes the figure's "
    "results (the cache under `results/`, else it trains).")
NOTE_TAG = "download-note"
PLAIN_DIR = Path("notebooks") / "plain"
COMMAND = "python -m tools.book plain-notebooks"


def _plain_cells(nb, plain: Plain) -> None:
    """Markdown cells and Markdown outputs as plain Markdown, :data:`FIRST_CELL` first (once)."""
    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = to_markdown(c.source, plain)
        elif c.cell_type == "code":
            for o in c.get("outputs", []):
                data = o.get("data") or {}
                if "text/markdown" in data:
                    md = data["text/markdown"]
                    data["text/markdown"] = to_markdown("".join(md) if isinstance(md, list) else md, plain)
    if not (nb.cells and NOTE_TAG in nb.cells[0].metadata.get("tags", [])):
        note = nbformat.v4.new_markdown_cell(FIRST_CELL, metadata={"tags": [NOTE_TAG]})
        note.id = NOTE_TAG  # one id, so that a plain copy written again is the same file
        nb.cells.insert(0, note)


def plain_download(path: Path, plain: Plain) -> None:
    """Rewrite one downloadable notebook in place (:func:`_plain_cells`)."""
    nb = nbformat.read(path, as_version=4)
    _plain_cells(nb, plain)
    nbformat.write(nb, path)


def plain_downloads(html_dir: Path, root: Path, substitutions: dict) -> list[Path]:
    """:func:`plain_download` on every ``_sources/notebooks/*.ipynb`` of a built book (``substitutions``: the
    book's, :func:`tools.book.numbers.substitutions`); returns them."""
    plain = dataclasses.replace(from_checkout(root), substitutions=dict(substitutions))
    done = sorted((Path(html_dir) / "_sources" / "notebooks").glob("*.ipynb"))
    for p in done:
        plain_download(p, plain)
    return done


def plain_notebook(src: Path, plain: Plain) -> str:
    """The plain copy of the notebook ``src`` (its text as :func:`nbformat.writes` gives it): :func:`_plain_cells`,
    no outputs, no execution counts, links to the book's chapters from ``notebooks/plain/``."""
    nb = nbformat.read(src, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nb.metadata.pop("papermill", None)
    _plain_cells(nb, dataclasses.replace(plain, book_href="../" + plain.book_href))
    return nbformat.writes(nb) + "\n"


def _expected(root: Path, notebooks: list[Path], substitutions: dict) -> dict[Path, str]:
    plain = dataclasses.replace(from_checkout(root), substitutions=dict(substitutions))
    return {root / PLAIN_DIR / nb.name: plain_notebook(root / nb, plain) for nb in notebooks}


def write_plain_notebooks(root: Path, notebooks: list[Path], substitutions: dict) -> list[Path]:
    """Write ``notebooks/plain/`` for ``notebooks`` (paths relative to ``root``), removing copies of notebooks
    that are gone; returns the files written or removed."""
    want = _expected(root, notebooks, substitutions)
    changed = []
    for path, text in want.items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    for old in sorted((root / PLAIN_DIR).glob("*.ipynb")):
        if old not in want:
            old.unlink()
            changed.append(old)
    return changed


def stale_plain_notebooks(root: Path, notebooks: list[Path], substitutions: dict) -> list[str]:
    """Problems (empty: none): a plain copy missing, out of date, or left over."""
    want = _expected(root, notebooks, substitutions)
    out = [f"{p.relative_to(root)} is {'out of date' if p.is_file() else 'missing'}: run `{COMMAND}`"
           for p, text in want.items() if not p.is_file() or p.read_text() != text]
    out += [f"{p.relative_to(root)} is the copy of no page of the book: run `{COMMAND}`"
            for p in sorted((root / PLAIN_DIR).glob("*.ipynb")) if p not in want]
    return out


_LAUNCH = re.compile(r'(href="https://(?:colab\.research\.google\.com/github|mybinder\.org/v2/gh)/[^"]*?)'
                     r'notebooks/(?!plain/)([\w-]+\.ipynb)')


def point_launch_buttons(html_dir: Path) -> int:
    """Point the Colab and Binder buttons of every built page at its plain copy (``notebooks/plain/<page>.ipynb``:
    what they render is the download's text); returns how many links were changed."""
    n = 0
    for page in Path(html_dir).rglob("*.html"):
        text = page.read_text()
        new, k = _LAUNCH.subn(r"\1notebooks/plain/\2", text)
        if k:
            page.write_text(new)
            n += k
    return n
