"""tools.book.colab: every notebook of the book opens with the cell that makes it run on Colab.

The cell is checked as written (one per notebook, first code cell, hidden on the page, for CITATION.cff's
repository); executed here with ``google.colab`` absent it does nothing, and with a stand-in ``google.colab``
module it clones, installs and moves into the checkout (the commands recorded, not run)."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import nbformat

from tools.book import build, colab

ROOT = Path(__file__).resolve().parents[2]


def test_every_notebook_of_the_book_has_the_colab_cell():
    assert colab.problems(ROOT, build.toc_notebooks(ROOT)) == []


def test_a_missing_moved_or_stale_cell_is_a_problem_naming_the_fix(tmp_path):
    (tmp_path / "CITATION.cff").write_text("cff-version: 1.2.0\nrepository-code: https://github.com/o/n\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell("x = 1")])
    path = tmp_path / "a.ipynb"
    nbformat.write(nb, path)
    missing, = colab.problems(tmp_path, [path])
    assert "0 colab-setup cells" in missing and "python -m tools.book colab-cells" in missing
    assert colab.write_cells(tmp_path, [path]) == [path]
    assert colab.problems(tmp_path, [path]) == [] and colab.write_cells(tmp_path, [path]) == []
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].metadata["tags"] == ["colab-setup", "remove-cell"] and "https://github.com/o/n" in cells[1].source
    (tmp_path / "CITATION.cff").write_text("cff-version: 1.2.0\nrepository-code: https://github.com/fork/n\n")
    stale, = colab.problems(tmp_path, [path])
    assert "not the one for https://github.com/fork/n" in stale


def test_the_cell_does_nothing_off_colab_and_fetches_the_companion_on_it(monkeypatch, tmp_path):
    src = colab.cell_source("https://github.com/o/n")
    cwd = os.getcwd()
    exec(compile(src, "colab-cell", "exec"), {})  # no google.colab here: nothing happens
    assert os.getcwd() == cwd
    ran = []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", lambda cmd, check: ran.append(cmd))
    monkeypatch.setattr(os, "chdir", lambda d: ran.append(["chdir", d]))
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(src, "colab-cell", "exec"), {})
    assert ran[0] == ["git", "clone", "--depth", "1", "https://github.com/o/n", colab.CHECKOUT]
    assert ran[1][-3:] == ["install", "-q", "-e", colab.CHECKOUT][-3:] and ran[2] == ["chdir", colab.CHECKOUT]
    assert sys.path[0] == f"{colab.CHECKOUT}/src"
