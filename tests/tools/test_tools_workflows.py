"""Lint the GitHub Actions workflows and CITATION.cff, offline.

Each workflow under .github/workflows/ goes through

* actionlint (the ``actionlint`` command of the dev extra, found next to ``sys.executable``), with
  ShellCheck (also from the dev extra) checking every ``run:`` script, and
* ``check-jsonschema --builtin-schema vendor.github-workflows`` (the schema ships inside the package);

CITATION.cff goes through ``check-jsonschema --builtin-schema vendor.citation-file-format``. None of
these touches the network. Each lint is also shown to fail on a deliberately broken file, so that a
green run means something.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
CITATION = ROOT / "CITATION.cff"
BIN = Path(sys.executable).parent

# A workflow with three mistakes, one for each kind of check: an expression on a context that does
# not exist here (no strategy, so no matrix.os), a key a job cannot have, and an unquoted variable.
BROKEN_WORKFLOW = """\
name: broken
on:
  push:
jobs:
  build:
    runs-on: ${{ matrix.os }}
    not-a-key: true
    steps:
      - run: echo $FOO
"""


def _tool(name: str) -> str:
    """The executable ``name`` of the dev extra: next to the running interpreter, else on PATH."""
    path = BIN / name
    if path.is_file():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"{name!r} is neither next to {sys.executable} nor on PATH; it comes with the dev "
                f"extra (pyproject.toml): run `make install`")


def _run(cmd: list[str], cwd: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), *cmd], cwd=cwd, capture_output=True, text=True, timeout=180)


def _output(proc: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(map(str, proc.args))}\nexit status {proc.returncode}\n{proc.stdout}{proc.stderr}"


def _actionlint(path: Path) -> list[str]:
    # -pyflakes= : no `shell: python` steps here, and a pyflakes that happens to be on PATH must not
    # change the result.
    return [_tool("actionlint"), "-no-color", f"-shellcheck={_tool('shellcheck')}", "-pyflakes=", str(path)]


def _workflow_schema(path: Path) -> list[str]:
    return [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)]


def _citation_schema(path: Path) -> list[str]:
    return [_tool("check-jsonschema"), "--builtin-schema", "vendor.citation-file-format",
            "--default-filetype", "yaml", str(path)]


def _write_broken_workflow(tmp_path: Path) -> Path:
    wf = tmp_path / ".github" / "workflows" / "broken.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(BROKEN_WORKFLOW)
    return wf


# ------------------------------------------------------------------ the repository's own files
def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "pages.yml"}, WORKFLOWS


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint(workflow):
    proc = _run(_actionlint(workflow), cwd=ROOT)
    assert proc.returncode == 0, _output(proc)


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_schema(workflow):
    proc = _run(_workflow_schema(workflow), cwd=ROOT)
    assert proc.returncode == 0, _output(proc)


def test_citation_cff():
    assert CITATION.is_file(), CITATION
    proc = _run(_citation_schema(CITATION), cwd=ROOT)
    assert proc.returncode == 0, _output(proc)


def test_pages_checks_the_book_before_deploying():
    """pages.yml builds the book, runs `make book-check`, and only then uploads and deploys it."""
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((WORKFLOW_DIR / "pages.yml").read_text())
    steps = wf["jobs"]["build"]["steps"]
    runs = [s.get("run", "").strip() for s in steps]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    book, check = runs.index("make book"), runs.index("make book-check")
    upload = uses.index("actions/upload-pages-artifact")
    assert book < check < upload, steps
    assert wf["jobs"]["deploy"]["needs"] == "build"
    ci = yaml.safe_load((WORKFLOW_DIR / "ci.yml").read_text())
    assert "bash .ci/run" in [s.get("run", "").strip() for s in ci["jobs"]["test"]["steps"]]


# ------------------------------------------------------------------ each lint can fail
def test_actionlint_rejects_a_broken_workflow(tmp_path):
    wf = _write_broken_workflow(tmp_path)
    proc = _run(_actionlint(wf), cwd=tmp_path)
    out = _output(proc)
    assert proc.returncode != 0, out
    assert 'property "os" is not defined' in out, out      # expression check
    assert 'unexpected key "not-a-key"' in out, out          # syntax check
    assert "SC2086" in out, out                              # ShellCheck on the run: script


def test_workflow_schema_rejects_a_broken_workflow(tmp_path):
    wf = _write_broken_workflow(tmp_path)
    proc = _run(_workflow_schema(wf), cwd=tmp_path)
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "not-a-key" in out, out


def test_citation_schema_rejects_a_broken_citation(tmp_path):
    bad = tmp_path / "CITATION.cff"
    bad.write_text('cff-version: 1.2.0\nmessage: "cite me"\ntitle: "no authors"\nauthors: []\n')
    proc = _run(_citation_schema(bad), cwd=tmp_path)
    out = _output(proc)
    assert proc.returncode != 0, out
    assert "authors" in out, out


# ------------------------------------------------------------------ offline
def _no_network_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("unshare is not installed: cannot run without a network here")
    probe = subprocess.run([unshare, "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user and network namespaces are not available (unshare -rn)")
    return [unshare, "-rn"]


@pytest.mark.slow
def test_the_lints_need_no_network():
    """Every lint above, in a network namespace with no interface but loopback."""
    prefix = _no_network_prefix()
    cmds = [_actionlint(w) for w in WORKFLOWS] + [_workflow_schema(w) for w in WORKFLOWS]
    for cmd in [*cmds, _citation_schema(CITATION)]:
        proc = _run(cmd, cwd=ROOT, prefix=prefix)
        assert proc.returncode == 0, _output(proc)
