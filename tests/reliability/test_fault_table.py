"""The fault table of the book (curvature_gap.faults) names tests that exist, and `-m reliability` runs them."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from curvature_gap import book
from curvature_gap.faults import FAULTS, named_tests

ROOT = Path(__file__).resolve().parents[2]


def test_every_fault_case_names_tests_that_exist():
    assert len(FAULTS) >= 20 and all(f.tests and f.case and f.behaviour for f in FAULTS)
    missing = []
    for nodeid in named_tests():
        path, func = nodeid.split("::")
        src = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
        if not re.search(rf"^def {re.escape(func)}\(", src, flags=re.M):
            missing.append(nodeid)
    assert not missing, f"the fault table names tests that do not exist: {missing}"


def test_the_reliability_marker_selects_exactly_the_table_and_this_folder():
    files = sorted({t.split("::")[0] for t in named_tests()} | {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "reliability").glob("test_*.py")})
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "reliability", "-p", "no:cacheprovider",
                        "-o", "addopts=", *files], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    selected = {line.split("[")[0] for line in r.stdout.splitlines() if "::" in line}
    expected = set(named_tests()) | {s for s in selected if s.startswith("tests/reliability/")}
    assert selected == expected
    assert set(named_tests()) <= selected


def test_the_book_table_lists_every_case_with_its_tests():
    md = book.faults_md()
    rows = [line for line in md.splitlines()[2:] if line.startswith("| ")]
    assert len(rows) == len(FAULTS)
    for f, row in zip(FAULTS, rows):
        for t in f.tests:
            assert f"`{t.removeprefix('tests/')}`" in row
    assert "`make clean`" in md, "inline code stays code"
