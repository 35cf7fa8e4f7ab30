"""curvature_gap.faults: every fault case has a test that proves it, markers name only known faults, and
``pytest -m reliability`` selects exactly the marked tests and tests/reliability."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cases import subprocess_env
from curvature_gap.faults import FAULT_IDS, FAULTS, Fault
from tools.book.build import fault_tests

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts="]


def test_the_fault_table():
    assert len(FAULTS) >= 25 and len(FAULT_IDS) == len(FAULTS)
    assert all(isinstance(f, Fault) and f.id and f.area and f.case and f.behaviour for f in FAULTS)
    assert {"stale-published", "long-run"} <= FAULT_IDS


def test_every_fault_has_a_test_and_markers_name_only_known_faults():
    tests = fault_tests(ROOT)
    assert set(tests) <= FAULT_IDS, f"unknown fault ids in markers: {sorted(set(tests) - FAULT_IDS)}"
    missing = sorted(FAULT_IDS - set(tests))
    assert not missing, f"faults without a test: {missing}"
    for fid, names in tests.items():
        for t in names:
            path, func = t.split("::")
            assert f"def {func}(" in (ROOT / "tests" / path).read_text(), t


def _pytest_on(tmp_path, marker: str):
    """Run a one-test file with ``marker`` under a copy of tests/conftest.py."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_marked.py").write_text(f"import pytest\n\n\n{marker}\ndef test_it():\n    pass\n")
    return subprocess.run([*PYTEST, "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_marked.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=subprocess_env())


@pytest.mark.slow
def test_a_marker_naming_an_unknown_fault_fails_the_collection(tmp_path):
    bad = _pytest_on(tmp_path, '@pytest.mark.fault("no-such-fault")')
    assert bad.returncode not in (0, 1), bad.stdout[-2000:] + bad.stderr[-2000:]     # a usage error, not a test failure
    out = bad.stdout + bad.stderr
    assert "@pytest.mark.fault names unknown fault(s) ['no-such-fault']" in out and "known: " in out
    good = _pytest_on(tmp_path, '@pytest.mark.fault("make-clean")')
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]


def _reliability_selection(collected: dict | None) -> set:
    """The tests ``pytest -m reliability tests`` selects (their ids without parameters): read from this session's
    collection where it covered all of tests/ (``make test``), else collected again in a subprocess."""
    if collected is not None:
        return {nodeid.split("[")[0] for nodeid, marked in collected.items() if marked}
    r = subprocess.run([*PYTEST, "--collect-only", "-q", "-m", "reliability", "tests"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env=subprocess_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {line.split("[")[0] for line in r.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_the_reliability_marker_selects_exactly_the_marked_tests_and_the_reliability_folder(collected_reliability):
    selected = _reliability_selection(collected_reliability)
    marked = {f"tests/{t}" for names in fault_tests(ROOT).values() for t in names}
    folder = {s for s in selected if s.startswith("tests/reliability/")}
    assert folder and selected == marked | folder
    assert not any(s.startswith("tests/test_faults.py") for s in selected)
