"""tools.book.build (``make book``): the rows the book renders, the notebooks as committed, tidying, the
generated pages, and failures that stop the build."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from cases import BROKEN, GOOD, fake_project, notebook, run_book

from curvature_gap import checks
from curvature_gap.row import Row
from curvature_gap.faults import FAULT_IDS
from tools.book import build

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = build.toc_notebooks(ROOT)


# ---------------------------------------------------------------- the committed notebooks
def test_every_toc_entry_exists_and_every_notebook_is_in_the_toc():
    in_toc = {p.name for p in NOTEBOOKS}
    on_disk = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert in_toc == on_disk
    assert len(NOTEBOOKS) >= 13


def _cells(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    return nb, [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_thin_parametrised_and_clean(path):
    nb, code = _cells(path)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == build.KERNEL
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "exactly one papermill parameters cell"
    src = params[0].source
    assert 'profile = "paper"' in src and "device =" in src, "profile defaults to paper (as a reader opens it), device is a parameter"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "a title first"
    for c in code:
        assert all(o.get("output_type") != "error" for o in c.outputs), "no stored error output"
        if build.CHECKED_TAG not in c.metadata.get("tags", []):
            assert not c.outputs and c.execution_count is None, "only checked cells keep outputs in the repository"
    assert any(build.CHECKED_TAG in c.metadata.get("tags", []) for c in code), "at least one cell nbval checks"
    names = [line.split("=")[0].strip() for line in src.splitlines() if "=" in line.split("#")[0]]
    # `recompute` (what a page reads outside the build) is read by nb.setup from the cell that calls it, and checked
    assert "recompute" in names, "every page can recompute, or read the committed results (the default)"
    assert "recompute = None " in src, "by default a page shows the committed results, as the book does"
    names.remove("recompute")
    setup = ".setup(" + ", ".join(f"{n}={n}" for n in names) + ")"
    assert setup in "".join(c.source for c in code).replace("\n           ", " "), f"setup checks every parameter: {setup}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_checked_cells_store_the_output_nbval_compares(path):
    """`python -m tools.book refresh-outputs` stores them; nbval (`pytest notebooks/`) compares against them."""
    _, code = _cells(path)
    for c in code:
        if build.CHECKED_TAG in c.metadata.get("tags", []):
            assert c.outputs, "a checked cell stores the output nbval compares against"
            assert c.execution_count is not None, "nbval refuses outputs of a cell marked as never run"
            assert all(o.get("output_type") == "stream" and o.get("name") == "stdout" for o in c.outputs)


def test_toc_names_a_missing_file(tmp_path):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/nothing\n")
    with pytest.raises(build.BookError, match="notebooks/nothing"):
        build.toc_notebooks(tmp_path)


# ---------------------------------------------------------------- the rows the book renders
def _rows():
    return [Row(id="thm2.layernorm.jacobian", result="thm2", kind="formula", what="J", verdict="verified",
                expected="verified", claim="verified", rel_err=1e-16, tolerance=1e-10)]


def _book_root(tmp_path) -> Path:
    (tmp_path / "published" / "paper").mkdir(parents=True)
    return tmp_path


@pytest.mark.slow
@pytest.mark.fault("stale-published")
def test_the_paper_book_refuses_published_rows_of_other_code_or_results(tmp_path, monkeypatch):
    root = _book_root(tmp_path)
    monkeypatch.setattr(checks, "run", lambda *a, **k: pytest.fail("the paper book never computes its rows"))
    with pytest.raises(build.BookError, match=r"verify.json is missing.*`make reproduce && make publish`"):
        build.book_rows("paper", root)
    good = checks.rows_meta(False)
    path = root / "published" / "paper" / "verify.json"
    stale = dict(good, code="0" * 16, results=dict(good["results"], fig3="000000000000"))
    path.write_text(json.dumps({"meta": stale, "rows": [r.to_json() for r in _rows()]}))
    with pytest.raises(build.BookError) as err:
        build.book_rows("paper", root)
    msg = str(err.value)
    assert "verify.json was computed by other code or from other results (differs in: code, results)" in msg
    assert "`make reproduce && make publish`" in msg
    path.write_text(json.dumps({"meta": good, "rows": [r.to_json() for r in _rows()]}))
    p, rows, source = build.book_rows("paper", root)
    assert p == path and [r.id for r in rows] == ["thm2.layernorm.jacobian"] and source == "published/paper/verify.json"


@pytest.mark.slow
def test_the_smoke_book_caches_its_quick_rows_by_their_meta(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(checks, "run", lambda quick=False, **k: calls.append(quick) or _rows())
    path, rows, source = build.book_rows("smoke", tmp_path, log=lambda *a: None)
    assert calls == [True] and source == "curvature-gap verify --quick" and path.is_file()
    assert json.loads(path.read_text())["meta"] == checks.rows_meta(True)
    _, again, source = build.book_rows("smoke", tmp_path, log=lambda *a: None)
    assert calls == [True] and source.endswith("(cached)") and [r.id for r in again] == [r.id for r in rows]
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, meta=dict(doc["meta"], code="other"))))
    build.book_rows("smoke", tmp_path, log=lambda *a: None)
    assert calls == [True, True], "rows of other code are recomputed"


# ---------------------------------------------------------------- tidying and generated pages
def test_tidy_notebook_merges_the_parameters_shows_them_and_hides_the_checked_cells(tmp_path):
    """One parameters cell, the defaults overridden by the injected values (so the download defines every name
    of the original), a one-line summary on the page in its place, papermill's paths gone; checked cells
    hidden. tests/tools/test_tools_downloads.py runs such a download."""
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell('profile = "smoke"  # which\nseed = 0')
    p.metadata["tags"] = ["parameters"]
    inj = nbformat.v4.new_code_cell('# Parameters\nprofile = "paper"\n')
    inj.metadata["tags"] = ["injected-parameters"]
    chk = nbformat.v4.new_code_cell("print(1)")
    chk.metadata["tags"] = [build.CHECKED_TAG]
    nb.cells = [nbformat.v4.new_markdown_cell("# T"), p, inj, chk]
    nb.metadata["papermill"] = {"input_path": str(tmp_path / "in.ipynb"), "output_path": str(tmp_path / "n.ipynb"),
                                "parameters": {"profile": "paper"}}
    nbformat.write(nb, tmp_path / "n.ipynb")
    build.tidy_notebook(tmp_path / "n.ipynb", tmp_path)
    back = nbformat.read(tmp_path / "n.ipynb", as_version=4)
    cells = back.cells
    assert len(cells) == 4 and cells[2].source == 'profile = "paper"  # which\nseed = 0'
    assert cells[2].metadata["tags"] == ["parameters", "parameters-used", "remove-cell"]
    assert cells[1].cell_type == "markdown" and "<code>seed = 0</code>" in cells[1].source
    assert "remove-cell" in cells[3].metadata["tags"]
    assert back.metadata["papermill"] == {"parameters": {"profile": "paper"}}


def test_fault_tests_reads_the_markers(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_x.py").write_text(
        'import pytest\n\n\n@pytest.mark.fault("a-fault")\ndef test_one():\n    pass\n\n\n'
        '@pytest.mark.parametrize("x", [1, 2])\n@pytest.mark.fault("a-fault", "b-fault")\ndef test_two(x):\n    pass\n\n\n'
        "def test_unmarked():\n    pass\n")
    assert build.fault_tests(tmp_path) == {"a-fault": ["sub/test_x.py::test_one", "sub/test_x.py::test_two"],
                                           "b-fault": ["sub/test_x.py::test_two"]}
    assert set(build.fault_tests(ROOT)) <= FAULT_IDS


def test_generated_pages_are_inlined_in_place_of_their_includes(tmp_path):
    pages = build.generated_pages(_rows(), "smoke", "cpu", {"a.ipynb": 1.5}, "test", ROOT)
    assert {"summary.md", "all_checks.md", "errata.md", "published.md"} <= set(pages)
    assert "faults.md" not in pages, "the fault table is the maintainers' (docs/maintainers.md), not the readers'"
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "p.md").write_text("# P\n\n```{include} _generated/runtimes.md\n```\nafter\n")
    build.inline_generated(tmp_path, pages)
    text = (tmp_path / "book" / "p.md").read_text()
    assert "{include}" not in text and "| executing the 1 notebook | 2 (the slowest, `a.ipynb`: 2) |" in text and text.endswith("after\n")
    (tmp_path / "book" / "q.md").write_text("```{include} _generated/nothing.md\n```\n")
    with pytest.raises(KeyError):
        build.inline_generated(tmp_path, pages)


# ---------------------------------------------------------------- failures propagate
def _run_book(root: Path, *args, timeout=600):
    return run_book(root, "build", *args, timeout=timeout)


@pytest.mark.fault("notebook-raises")
def test_execute_notebook_raises_on_an_error(tmp_path):
    src = tmp_path / "broken.ipynb"
    nbformat.write(notebook(BROKEN), src)
    with pytest.raises(build.BookError, match="broken.ipynb failed in cell .*deliberately broken"):
        build.execute_notebook(src, tmp_path / "out" / "broken.ipynb", {"profile": "smoke"}, cwd=tmp_path)
    executed = nbformat.read(tmp_path / "out" / "broken.ipynb", as_version=4)
    assert any(o.get("output_type") == "error" for c in executed.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.slow
def test_notebooks_run_side_by_side_return_every_time_in_book_order_and_stop_at_a_failure(tmp_path):
    """execute_all with two jobs (worker processes): every notebook executed and tidied, timings in the order
    given; a broken notebook raises its BookError from the worker."""
    for name, cells in (("a", GOOD), ("b", GOOD), ("c", BROKEN)):
        nbformat.write(notebook(cells), tmp_path / f"{name}.ipynb")
    stage = tmp_path / "stage"
    times = build.execute_all([Path("b.ipynb"), Path("a.ipynb")], tmp_path, stage, {"profile": "smoke"}, None, 2,
                              log=lambda s: None)
    assert list(times) == ["b.ipynb", "a.ipynb"] and all(t > 0 for t in times.values())
    ran = nbformat.read(stage / "a.ipynb", as_version=4)
    assert any("fine 2" in o.get("text", "") for c in ran.cells if c.cell_type == "code" for o in c.outputs)
    with pytest.raises(build.BookError, match="deliberately broken"):
        build.execute_all([Path("a.ipynb"), Path("c.ipynb")], tmp_path, stage, {"profile": "smoke"}, None, 2,
                          log=lambda s: None)


def test_book_jobs_reads_the_setting_and_refuses_nonsense(monkeypatch):
    monkeypatch.setenv("BOOK_JOBS", "3")
    assert build.book_jobs() == 3
    monkeypatch.delenv("BOOK_JOBS")
    assert 1 <= build.book_jobs() <= 2
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("BOOK_JOBS", bad)
        with pytest.raises(build.BookError, match="BOOK_JOBS"):
            build.book_jobs()


@pytest.mark.slow
@pytest.mark.fault("notebook-raises")
def test_pipeline_exits_nonzero_on_a_broken_notebook_and_zero_on_a_good_one(tmp_path, good_book):
    bad = tmp_path / "bad"
    bad.mkdir()
    fake_project(bad, {"page": notebook(GOOD), "broken": notebook(BROKEN)})
    assert good_book.returncode == 0, good_book.stderr[-2000:]
    staged = nbformat.read(good_book.root / "_build" / "stage" / "notebooks" / "page.ipynb", as_version=4)
    used = [c for c in staged.cells if "parameters-used" in c.metadata.get("tags", [])]
    assert used and 'profile = "smoke"' in used[0].source, "papermill injected -p profile"
    ko = _run_book(bad, "--profile", "smoke", "--only", "page", "broken")
    assert ko.returncode != 0
    assert "broken.ipynb" in ko.stderr and "deliberately broken" in ko.stderr


@pytest.mark.slow
def test_render_fails_on_a_sphinx_warning_and_passes_without(tmp_path, good_book):
    bad = tmp_path / "bad"
    bad.mkdir()
    fake_project(bad, {"page": notebook(GOOD)}, bad_link=True)
    assert good_book.returncode == 0, good_book.stdout[-3000:] + good_book.stderr[-3000:]
    html = good_book.root / "_build" / "html"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file(), "MathJax is served by the book"
    assert json.loads((good_book.root / "_build" / "book-report.json").read_text())["warnings"] == []
    ko = _run_book(bad, "--profile", "smoke")
    assert ko.returncode != 0 and "warning" in ko.stderr.lower()
