"""tools.book.outputs: the committed notebooks keep only the outputs nbval compares; nbval fails on a broken
notebook and on a changed checked output."""
from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from cases import BROKEN, GOOD, fake_project, notebook
from tools.book import build, outputs


def test_strip_outputs_keeps_only_the_checked_cells_outputs(tmp_path):
    nb = notebook(GOOD, checked_output="checked\n")
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    nb.cells[2].execution_count = 3
    nb.metadata["papermill"] = {"x": 1}
    nbformat.write(nb, tmp_path / "n.ipynb")
    outputs.strip_outputs([tmp_path / "n.ipynb"])
    back = nbformat.read(tmp_path / "n.ipynb", as_version=4)
    assert not back.cells[2].outputs and back.cells[2].execution_count is None
    assert outputs.is_checked(back.cells[-1]) and back.cells[-1].outputs[0]["text"] == "checked\n"
    assert "papermill" not in back.metadata and not outputs.is_checked(back.cells[0])


@pytest.mark.slow
def test_refresh_stores_the_stdout_of_the_checked_cells(tmp_path, monkeypatch):
    fake_project(tmp_path, {"page": notebook(GOOD, checked_output="stale\n")})
    monkeypatch.chdir(tmp_path)
    outputs.refresh_checked_outputs(["notebooks/page.ipynb"], log=lambda *a: None)
    nb = nbformat.read(tmp_path / "notebooks" / "page.ipynb", as_version=4)
    checked = [c for c in nb.cells if outputs.is_checked(c)]
    assert checked[0].outputs[0]["text"] == "checked\n" and checked[0].execution_count is not None
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code" and not outputs.is_checked(c))
    nbformat.write(notebook(BROKEN + ["print(1)"], checked_output="x\n"), tmp_path / "notebooks" / "page.ipynb")
    with pytest.raises(build.BookError, match="deliberately broken"):
        outputs.refresh_checked_outputs(["notebooks/page.ipynb"], log=lambda *a: None)


@pytest.mark.slow
@pytest.mark.fault("notebook-raises")
def test_nbval_fails_on_a_broken_notebook_and_on_a_changed_checked_output(tmp_path):
    nbformat.write(notebook(BROKEN), tmp_path / "broken.ipynb")
    nbformat.write(notebook(GOOD, checked_output="checked\n"), tmp_path / "good.ipynb")
    nbformat.write(notebook(GOOD, checked_output="something else\n"), tmp_path / "changed.ipynb")
    nbformat.write(notebook(GOOD, checked_output=""), tmp_path / "unchecked.ipynb")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
            "-o", "addopts=", "-o", "testpaths="]

    def run(name):
        return subprocess.run(base + [str(tmp_path / name)], cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert run("good.ipynb").returncode == 0
    assert run("broken.ipynb").returncode != 0
    assert run("changed.ipynb").returncode != 0
    # with no stored output nbval has nothing to compare: why the committed notebooks must keep theirs
    assert run("unchecked.ipynb").returncode == 0
