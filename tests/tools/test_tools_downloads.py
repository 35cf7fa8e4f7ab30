"""Every page's download runs as downloaded (tools.book.build.tidy_notebook, tools.book.html.check_download).

The build executes each notebook with papermill and tidies it: one parameters cell holding the notebook's
defaults overridden by the injected values (so that no name of the original cell goes missing), a one-line
summary of them on the page, and no absolute path of the build machine (papermill records the input and
output paths). One page is built, tidied and then executed as a reader would, with papermill and with
nbconvert from the repository; every notebook of the book is tidied (as papermill would leave it, without
executing it) and checked for the rest.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest
from papermill.parameterize import parameterize_notebook

from cases import subprocess_env

from curvature_gap import myst
from tools.book import build, numbers, plain
from tools.book.html import check_download

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = build.toc_notebooks(ROOT)
BUILD_PARAMS = {"profile": "smoke", "device": "cpu"}  # what `make book PROFILE=smoke` injects
PLAIN = dataclasses.replace(myst.from_checkout(ROOT), substitutions=numbers.substitutions(ROOT))  # as the build


def _original_names(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    cell, = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return build.parameter_names(cell.source)


def _as_papermill_leaves_it(src: Path, dst: Path, params: dict) -> Path:
    """``src`` as papermill writes it after executing it with ``params`` (without executing it): its
    injected cell after the parameters cell, the absolute input and output paths in its metadata, and here
    also an output that names a file by its absolute path under the checkout."""
    nb = nbformat.read(src, as_version=4)
    for c in nb.cells:  # as papermill's execution does first
        c.metadata.setdefault("tags", [])
    nb.metadata["papermill"] = {"input_path": str(src), "output_path": str(dst), "parameters": dict(params),
                                "environment_variables": {}, "version": "2.7.0"}
    nb = parameterize_notebook(nb, params, kernel_name=build.KERNEL, language="python")
    code = [c for c in nb.cells if c.cell_type == "code" and not set(c.metadata.get("tags", [])) & {
        "parameters", "injected-parameters"}]
    code[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"read {ROOT}/results/x/y.json\n")]
    nbformat.write(nb, dst)
    return dst


# ---------------------------------------------------------------------------------------------- the merge
def test_merged_parameters_override_the_defaults_in_place_and_keep_their_comments():
    src = '# Parameters\nprofile = "smoke"   # smoke | paper\nseed = 0            # seed\nL = (6,\n     7)  # tokens'
    out = build.merged_parameters(src, {"profile": "paper", "L": 8, "extra": None})
    assert out == ('# Parameters\nprofile = "paper"   # smoke | paper\nseed = 0            # seed\nL = 8  # tokens\n'
                   "extra = None")
    assert build.parameter_names(out) == ["profile", "seed", "L", "extra"]
    # a statement sharing its line with another is not rewritten in place: the value is set after the cell
    assert build.merged_parameters("a = 1; b = 2", {"b": 3}) == "a = 1; b = 2\nb = 3"
    line = build.parameters_line(out)
    assert line.startswith(f'<p class="{build.PARAMS_CLASS}"><strong>Parameters of this build:</strong>')
    assert "<code>profile = &quot;paper&quot;</code> · <code>seed = 0</code> · <code>L = 8</code>" in line


def test_tidy_keeps_one_merged_parameters_cell_shows_it_and_strips_the_build_machines_paths(tmp_path):
    src = ROOT / "notebooks" / "self_attention.ipynb"
    dst = _as_papermill_leaves_it(src, tmp_path / src.name, {"profile": "paper", "device": "cpu", "L": 7})
    build.tidy_notebook(dst, ROOT)
    nb = nbformat.read(dst, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert not any("injected-parameters" in t for t in tags)
    (i, cell), = [(i, c) for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert build.parameter_names(cell.source) == _original_names(src), "every name of the original cell"
    assert 'profile = "paper"' in cell.source and "L = 7" in cell.source and "d_K = 3" in cell.source
    assert "remove-cell" in cell.metadata["tags"], "the cell is the download's; the page shows its summary line"
    line = nb.cells[i - 1]
    assert line.cell_type == "markdown" and build.PARAMS_CLASS in line.source and "<code>L = 7</code>" in line.source
    assert not set(build.PAPERMILL_MACHINE_KEYS) & set(nb.metadata["papermill"])
    assert nb.metadata["papermill"]["parameters"] == {"profile": "paper", "device": "cpu", "L": 7}
    text = dst.read_text()
    assert str(ROOT) not in text and "read results/x/y.json" in text
    raw, = {p.split(": cell")[0] + ": raw MyST" for p in check_download(dst, ROOT, src)}
    assert raw == "self_attention.ipynb: raw MyST", "tidied, not yet plain: the page's MyST is still there"
    build.tidy_notebook(dst, ROOT)  # tidying twice changes nothing
    assert nbformat.read(dst, as_version=4).cells == nb.cells
    plain.plain_download(dst, PLAIN)  # then, as the build does, its text as plain Markdown
    assert check_download(dst, ROOT, src) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_tidied_notebook_defines_its_parameters_and_names_no_path_of_the_build_machine(tmp_path, path):
    dst = _as_papermill_leaves_it(ROOT / path, tmp_path / path.name, BUILD_PARAMS)
    assert check_download(dst, ROOT, ROOT / path), "as papermill leaves it, the notebook has every problem"
    build.tidy_notebook(dst, ROOT)
    plain.plain_download(dst, PLAIN)
    assert check_download(dst, ROOT, ROOT / path) == []
    nb = nbformat.read(dst, as_version=4)
    cell, = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    names = build.parameter_names(cell.source)
    assert names[:len(_original_names(ROOT / path))] == _original_names(ROOT / path)
    line, = [c for c in nb.cells if "parameters-line" in c.metadata.get("tags", [])]
    assert all(f"<code>{n} = " in line.source for n in names), "the page shows every parameter"


def test_check_download_names_each_defect(tmp_path):
    """What the reviewer found: the defaults' cell deleted (seed, L, … undefined), the injected one kept, and
    the build machine's paths in papermill's metadata."""
    src = ROOT / "notebooks" / "self_attention.ipynb"
    dst = _as_papermill_leaves_it(src, tmp_path / src.name, BUILD_PARAMS)
    nb = nbformat.read(dst, as_version=4)
    nb.cells = [c for c in nb.cells if "parameters" not in c.metadata.get("tags", [])]  # the old tidy step
    nbformat.write(nb, dst)
    problems = check_download(dst, ROOT, src)
    assert any(f"absolute path of the build machine: {ROOT}" in p for p in problems), problems
    assert any("keeps papermill's input_path, output_path" in p for p in problems), problems
    assert any("keeps papermill's injected-parameters cell" in p for p in problems), problems
    assert any("0 parameters cells" in p for p in problems), problems
    injected, = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    injected.metadata["tags"] = ["parameters"]  # the injected cell as the only parameters cell
    nbformat.write(nb, dst)
    missing, = [p for p in check_download(dst, ROOT, src) if "NameError" in p]
    assert "does not define seed, L, d_V, d_K" in missing


# ---------------------------------------------------------------------------------------------- run it
def _run(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def downloads():
    """A folder inside the checkout, as a reader's download saved into the clone (removed afterwards)."""
    d = ROOT / "_build" / "test-downloads" / uuid.uuid4().hex[:8]
    d.mkdir(parents=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_a_built_page_runs_as_downloaded_with_papermill_and_nbconvert(downloads):
    """Theorem 1's page, built with a non-default seed, tidied, then run from the repository's root with no
    parameter by papermill and by `jupyter nbconvert --execute`: both run to the end, with the build's
    values."""
    src = ROOT / "notebooks" / "self_attention.ipynb"
    page = downloads / src.name
    build.ensure_kernel(log=lambda *a: None)
    # recompute="quick": the rows computed here, so that this test of the mechanics does not depend on whether the
    # committed rows are current (make book-check re-runs downloads with the default, against their pages)
    build.execute_notebook(src, page, dict(BUILD_PARAMS, seed=1, recompute="quick"), cwd=ROOT)
    build.tidy_notebook(page, ROOT)
    plain.plain_download(page, PLAIN)  # then, as the build does, its text as plain Markdown
    assert check_download(page, ROOT, src) == []
    bin_dir = Path(sys.executable).parent
    ran = _run([str(bin_dir / "papermill"), str(page), str(downloads / "out.ipynb"), "-k", build.KERNEL,
                "--no-progress-bar"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = json.loads((downloads / "out.ipynb").read_text())
    params, = [c for c in out["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert "seed = 1" in "".join(params["source"]), "the download runs with the values of its build"
    assert "recompute = 'quick'" in "".join(params["source"]) or 'recompute = "quick"' in "".join(params["source"])
    assert not any(o.get("output_type") == "error" for c in out["cells"] for o in c.get("outputs", []))
    conv = _run([str(bin_dir / "jupyter"), "nbconvert", "--to", "notebook", "--execute", str(page),
                 "--output", "nbconvert-out.ipynb", f"--ExecutePreprocessor.kernel_name={build.KERNEL}",
                 "--ExecutePreprocessor.timeout=600"])
    assert conv.returncode == 0, conv.stderr[-3000:]
    assert (downloads / "nbconvert-out.ipynb").is_file()
