"""The book pipeline: notebooks as committed, generated tables, failure propagation, HTML checks."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from curvature_gap import book

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = book.toc_notebooks(ROOT)


# ---------------------------------------------------------------- the committed notebooks
def test_every_toc_entry_exists_and_every_notebook_is_in_the_toc():
    in_toc = {p.name for p in NOTEBOOKS}
    on_disk = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert in_toc == on_disk
    assert len(NOTEBOOKS) >= 13


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_thin_parametrised_and_clean(path):
    nb = nbformat.read(ROOT / path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == book.KERNEL
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "exactly one papermill parameters cell"
    src = params[0].source
    assert 'profile = "smoke"' in src and "device =" in src, "profile defaults to smoke (nbval), device is a parameter"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "a title first"
    checked = 0
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        assert all(o.get("output_type") != "error" for o in c.outputs), "no stored error output"
        if "NBVAL_CHECK_OUTPUT" in c.source:
            checked += 1
            assert c.outputs, "a checked cell stores the output nbval compares against"
            assert c.execution_count is not None, "nbval refuses outputs of a cell marked as never run"
            assert all(o.get("output_type") == "stream" and o.get("name") == "stdout" for o in c.outputs)
        else:
            assert not c.outputs and c.execution_count is None, "only checked cells keep outputs in the repository"
    assert checked >= 1, "at least one cell whose output nbval checks"
    names = [line.split("=")[0].strip() for line in src.splitlines() if "=" in line.split("#")[0]]
    call = "book.setup(" + ", ".join(f"{n}={n}" for n in names)
    code = "".join(c.source for c in nb.cells if c.cell_type == "code").replace("\n           ", " ")
    assert call + ")" in code, f"setup checks every parameter: {call})"


def test_toc_names_a_missing_file(tmp_path):
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/nothing\n")
    with pytest.raises(book.BookError, match="notebooks/nothing"):
        book.toc_notebooks(tmp_path)


# ---------------------------------------------------------------- generated Markdown
ROWS = [
    {"id": "thm2.layernorm.jacobian", "what": "J vs jacrev", "shapes": "s", "max_rel_err": 2e-16,
     "verdict": "verified", "expected": "verified", "note": ""},
    {"id": "thm3.layernorm.dD_dX", "what": "dD/dX | with a bar", "shapes": "s", "max_rel_err": 3e-16,
     "verdict": "corrected", "expected": "corrected", "note": "printed form: max rel err 0.4 | $x$"},
    {"id": "thm3.layernorm.hessian", "what": "H", "shapes": "s", "max_rel_err": 5e-16, "verdict": "verified",
     "expected": "verified", "note": ""},
    {"id": "bounds.thm1.printed", "what": "bound", "shapes": "s", "max_rel_err": None, "verdict": "holds",
     "expected": "holds", "note": ""},
    {"id": "bounds.thm6.block.explicit", "what": "bound", "shapes": "s", "max_rel_err": None, "verdict": "fails",
     "expected": "fails", "note": ""},
    {"id": "newthing.x", "what": "an unknown group", "shapes": "s", "max_rel_err": 1e-12, "verdict": "verified",
     "expected": "verified", "note": ""},
]


def test_summary_counts_every_row_once_with_the_right_verdict():
    s = {r["prefix"]: r for r in book.summarize(ROWS)}
    assert sum(r["checks"] for r in s.values()) == len(ROWS)
    assert s["thm2"]["verdict"] == "verified" and s["thm2"]["verified"] == 1
    assert s["thm3"]["verdict"] == "corrected" and (s["thm3"]["verified"], s["thm3"]["corrected"]) == (1, 1)
    assert s["bounds.thm1"]["verdict"] == "holds" and s["bounds.thm6"]["verdict"] == "fails"
    assert s["newthing"]["checks"] == 1, "rows of an unknown result are not dropped"
    assert s["bounds.thm7"]["verdict"] == "no check yet", "a stated result without rows is listed, not hidden"
    assert all(r["as_expected"] for r in s.values())


def test_summary_flags_a_row_that_is_not_as_expected():
    rows = [dict(ROWS[0], verdict="fails")]
    (s,) = [r for r in book.summarize(rows) if r["prefix"] == "thm2"]
    assert s["verdict"] == "fails" and not s["as_expected"]
    assert "**no**" in book.verify_summary_md(rows)


def test_tables_escape_markdown_and_math():
    md = book.rows_md(ROWS, ("id", "verdict", "max_rel_err", "what", "note"))
    line = next(ln for ln in md.splitlines() if "dD_dX" in ln)
    assert "\\|" in line and "\\$x\\$" in line
    assert line.count(" | ") == 4, "escaped bars do not split cells"
    assert book.rows_md([ROWS[3]]).count("—") == 1, "a bound has no error column"


def test_errata_render_with_the_evidence_rows():
    errata = [{"id": "e1", "where": "Theorem 3 proof", "printed": "∂D/∂X = E A_2 J A_3 G",
               "holds": "∂D/∂X = E ∂σ/∂X", "evidence": "thm3.layernorm.dD_dX", "related": ["thm3.layernorm.hessian"]}]
    md = book.errata_md(errata, ROWS)
    assert "Theorem 3 proof" in md and "`thm3.layernorm.dD_dX`" in md and "`thm3.layernorm.hessian`" in md
    assert "corrected" in md


def test_notation_and_unstated_tables():
    from curvature_gap.config import UNSTATED

    md = book.unstated_md(UNSTATED)
    assert md.count("\n") == len(UNSTATED) + 2
    notation = [{"paper": "G", "code": "layernorm.dM_dX", "meaning": "centering", "clash": "also G_i"}]
    assert "`layernorm.dM_dX`" in book.notation_md(notation) and "also G\\_i" in book.notation_md(notation)


def test_verify_rows_match_whole_id_components(tmp_path, monkeypatch):
    _fake_project(tmp_path, notebooks={})
    got = book.verify_rows("smoke", ["thm3"], root=tmp_path)
    assert [r["id"] for r in got] == ["thm3.layernorm.dD_dX", "thm3.layernorm.hessian"]
    assert book.verify_rows("smoke", ["thm3.layernorm.hessian"], root=tmp_path)[0]["id"] == "thm3.layernorm.hessian"
    assert book.verify_rows("smoke", ["thm"], root=tmp_path) == []
    assert "1 of 1 as expected" in book.verdict_lines(ROWS, ["thm2.layernorm.jacobian"])
    with pytest.raises(KeyError):
        book.verdict_lines(ROWS, ["no.such.row"])


# ---------------------------------------------------------------- failures propagate
GOOD = ["x = 1 + 1", "print('fine', x)"]
BROKEN = ["x = 1", "raise RuntimeError('deliberately broken notebook')", "print('never reached')"]


def _notebook(cells, checked_output: str | None = None):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell('profile = "smoke"\ndevice = "cpu"')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# A page"), p] + [nbformat.v4.new_code_cell(c) for c in cells]
    if checked_output is not None:
        c = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint('checked')")
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=checked_output)]
        c.execution_count = 1
        nb.cells.append(c)
    return nb


def _fake_project(root: Path, notebooks: dict, bad_link: bool = False) -> None:
    """A tiny book: _config.yml, _toc.yml, one page, the given notebooks, and a cached verify JSON."""
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    shutil.copy(ROOT / "_config.yml", root / "_config.yml")
    (root / "book").mkdir(exist_ok=True)
    shutil.copy(ROOT / "book" / "references.bib", root / "book" / "references.bib")
    link = "{doc}`missing-page`" if bad_link else "a page"
    (root / "book" / "intro.md").write_text(f"# Intro\n\nProfile {{{{ profile }}}}; $x^2$; {link}.\n")
    (root / "notebooks").mkdir(exist_ok=True)
    toc = "format: jb-book\nroot: book/intro\nchapters:\n" + "".join(f"  - file: notebooks/{n}\n" for n in notebooks)
    (root / "_toc.yml").write_text(toc)
    for name, nb in notebooks.items():
        nbformat.write(nb, root / "notebooks" / f"{name}.ipynb")
    res = root / "results" / "book"
    res.mkdir(parents=True, exist_ok=True)
    (res / "verify-smoke.json").write_text(json.dumps(ROWS))
    (res / "verify-smoke.meta.json").write_text(json.dumps({"key": book._verify_key(root, True), "seconds": 0}))


def _run_book(root: Path, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "curvature_gap.book", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_execute_notebook_raises_on_an_error(tmp_path):
    src = tmp_path / "broken.ipynb"
    nbformat.write(_notebook(BROKEN), src)
    with pytest.raises(book.BookError, match="deliberately broken"):
        book.execute_notebook(src, tmp_path / "out" / "broken.ipynb", {"profile": "smoke"}, cwd=tmp_path)
    executed = nbformat.read(tmp_path / "out" / "broken.ipynb", as_version=4)
    assert any(o.get("output_type") == "error" for c in executed.cells if c.cell_type == "code" for o in c.outputs)


def test_pipeline_exits_nonzero_on_a_broken_notebook_and_zero_on_a_good_one(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _fake_project(good, {"page": _notebook(GOOD)})
    _fake_project(bad, {"page": _notebook(GOOD), "broken": _notebook(BROKEN)})
    ok = _run_book(good, "--profile", "smoke", "--no-render")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (good / "_build" / "stage" / "notebooks" / "page.ipynb").is_file()
    staged = nbformat.read(good / "_build" / "stage" / "notebooks" / "page.ipynb", as_version=4)
    injected = [c for c in staged.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and 'profile = "smoke"' in injected[0].source, "papermill injected -p profile"
    ko = _run_book(bad, "--profile", "smoke", "--no-render")
    assert ko.returncode != 0
    assert "broken.ipynb" in ko.stderr and "deliberately broken" in ko.stderr


@pytest.mark.slow
def test_render_fails_on_a_sphinx_warning_and_passes_without(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _fake_project(good, {"page": _notebook(GOOD)})
    _fake_project(bad, {"page": _notebook(GOOD)}, bad_link=True)
    ok = _run_book(good, "--profile", "smoke")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    assert "with 0 warnings" in ok.stdout
    html = good / "_build" / "html"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file(), "MathJax is served by the book"
    assert book.check_links(html) == [] and book.check_offline(html) == []
    ko = _run_book(bad, "--profile", "smoke")
    assert ko.returncode != 0 and "warning" in ko.stderr.lower()


def test_nbval_fails_on_a_broken_notebook_and_on_a_changed_checked_output(tmp_path):
    nbformat.write(_notebook(BROKEN), tmp_path / "broken.ipynb")
    nbformat.write(_notebook(GOOD, checked_output="checked\n"), tmp_path / "good.ipynb")
    nbformat.write(_notebook(GOOD, checked_output="something else\n"), tmp_path / "changed.ipynb")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
            "-o", "addopts=", "-o", "testpaths="]
    run = lambda name: subprocess.run(base + [str(tmp_path / name)], cwd=tmp_path, capture_output=True, text=True,
                                      timeout=300)
    assert run("good.ipynb").returncode == 0
    assert run("broken.ipynb").returncode != 0
    assert run("changed.ipynb").returncode != 0


# ---------------------------------------------------------------- checks of built HTML
def test_link_checker_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "a.html").write_text('<p id="here"><a href="b.html#there">x</a><a href="#here">y</a>'
                                     '<img src="img.png"><a href="https://example.org/x">ext</a></p>')
    (tmp_path / "b.html").write_text('<h1 id="there">b</h1><a href="a.html#nowhere">z</a><a href="c.html">w</a>')
    broken = book.check_links(tmp_path)
    assert any("img.png" in b for b in broken)
    assert any("#nowhere" in b for b in broken)
    assert any("c.html" in b for b in broken)
    assert not any("example.org" in b or "#there" in b or "#here" in b for b in broken)


def test_offline_checker_flags_cdn_scripts(tmp_path):
    (tmp_path / "_static" / "mathjax").mkdir(parents=True)
    (tmp_path / "_static" / "mathjax" / "tex-chtml.js").write_text("")
    (tmp_path / "a.html").write_text('<script src="_static/mathjax/tex-chtml.js"></script>')
    assert book.check_offline(tmp_path) == []
    (tmp_path / "b.html").write_text('<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script>')
    assert len(book.check_offline(tmp_path)) == 1


def test_summary_table_check_compares_row_by_row(tmp_path):
    import re

    md = book.verify_summary_md(ROWS)
    html_rows = []
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| result") and "---" not in line:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            cells[0] = re.sub(r"\{doc\}`(.*) </.*>`", r"\1", cells[0]).replace("`", "")
            html_rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{h}</th>" for h in ["result", "checks", "verified", "corrected", "holds",
                                                        "fails", "worst", "verdict", "ok"]) + "</tr>"
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text(f"<table>{header}{''.join(html_rows)}</table>")
    assert book.check_summary_table(tmp_path, ROWS) == []
    changed = [dict(r, verdict="fails") if r["id"].startswith("thm2") else r for r in ROWS]
    assert book.check_summary_table(tmp_path, changed)


def test_built_book_passes_its_checks_when_present():
    """After `make book`, the intro table equals the verify JSON and links are intact (browser part:
    `make book-check`)."""
    html = ROOT / "_build" / "html"
    if not (html / "index.html").exists() or not (html / "_static" / "verify.json").exists():
        pytest.skip("no built book in _build/html (run `make book PROFILE=smoke`)")
    rows = json.loads((html / "_static" / "verify.json").read_text())
    assert book.check_summary_table(html, rows) == []
    assert book.check_links(html) == []
    assert book.check_offline(html) == []
    assert book.check_downloads(html) == []
