"""The first code cell of every notebook: on Colab, fetch the companion before anything else runs.

The book's Colab button opens a page's notebook straight from the repository on GitHub, alone: no package,
no ``published/`` results, no data scripts. This cell (tagged ``colab-setup``; hidden on the book's pages,
kept in the downloads) clones the repository the notebook belongs to into ``/content/companion``,
installs the package from it and works from that checkout, so that the rest of the notebook runs as it
does in a clone. Anywhere else (a clone, Binder, papermill, nbval) it does nothing.

The repository is ``repository-code`` of ``CITATION.cff`` (the one place the source notebooks name; a
fork that wants its own Colab runs sets it there and runs ``python -m tools.book colab-cells``).
``tests/tools/test_tools_colab.py`` checks every notebook of the book carries the cell as this module
writes it.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from . import repository

__all__ = ["TAG", "cell_source", "write_cells", "problems"]

TAG = "colab-setup"
CHECKOUT = "/content/companion"


def cell_source(url: str) -> str:
    """The cell's code for the repository ``url`` (an https URL)."""
    return f'''# On Colab this notebook arrives alone: fetch the companion it belongs to (package, published
# results) and work from its checkout. Anywhere else this cell does nothing.
import os, subprocess, sys
if "google.colab" in sys.modules:
    if not os.path.isdir("{CHECKOUT}"):
        subprocess.run(["git", "clone", "--depth", "1", "{url}", "{CHECKOUT}"], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "{CHECKOUT}"], check=True)
    sys.path.insert(0, "{CHECKOUT}/src")
    os.chdir("{CHECKOUT}")'''


def _url(root: Path) -> str:
    url = repository._citation(root)
    if not url:
        raise ValueError(f"{root / 'CITATION.cff'} names no repository-code: the Colab cell needs the repository's URL")
    return url


def _insert_at(nb) -> int:
    """After the opening Markdown cell (the page's title and statement), before any code."""
    return 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0


def write_cells(root: Path, notebooks: list[Path]) -> list[Path]:
    """Give each notebook the cell for ``CITATION.cff``'s repository (replacing an older one); the paths
    changed."""
    src = cell_source(_url(root))
    changed = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        old = [c for c in nb.cells if TAG in c.metadata.get("tags", [])]
        if len(old) == 1 and old[0].source == src and nb.cells.index(old[0]) == _insert_at(nb):
            continue
        nb.cells = [c for c in nb.cells if TAG not in c.metadata.get("tags", [])]
        cell = nbformat.v4.new_code_cell(src, metadata={"tags": [TAG, "remove-cell"]})
        cell.id = TAG
        nb.cells.insert(_insert_at(nb), cell)
        nbformat.write(nb, path)
        changed.append(path)
    return changed


def problems(root: Path, notebooks: list[Path]) -> list[str]:
    """Notebooks without the cell, with another version of it, or with it in the wrong place."""
    src = cell_source(_url(root))
    out = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if TAG in c.metadata.get("tags", [])]
        fix = "run `python -m tools.book colab-cells`"
        if len(cells) != 1:
            out.append(f"{path.name} has {len(cells)} {TAG} cells (one is needed): {fix}")
        elif cells[0].source != src:
            out.append(f"{path.name}'s {TAG} cell is not the one for {_url(root)}: {fix}")
        elif nb.cells.index(cells[0]) != _insert_at(nb):
            out.append(f"{path.name}'s {TAG} cell is not its first code cell: {fix}")
        elif "remove-cell" not in cells[0].metadata.get("tags", []):
            out.append(f"{path.name}'s {TAG} cell is shown on the page (tag it remove-cell): {fix}")
    return out
