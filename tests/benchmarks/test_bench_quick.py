"""Every script under benchmarks/ runs in its quick mode and writes a benchmark document that the
generator of RESULTS.md can render: a renamed helper or a changed API fails here, not for a reader.

Each script runs as ``python benchmarks/<name>.py --quick --out <tmp>/<name>.json`` in a subprocess
(the committed JSON is never touched), once per session (conftest.quick_run; tests/benchmarks/
test_layernorm_versions.py reads the same run). No timing is asserted: quick-mode numbers only show that the
code ran.
"""
from __future__ import annotations

import argparse
import datetime as dt

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_") and p.stem != "report")


def test_every_script_has_a_section_in_the_generator(report):
    assert SCRIPTS == sorted(name for name, _ in report.BENCHMARKS)


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_quick_mode_writes_its_rows_with_their_provenance(name, report, quick_run):
    returncode, stdout, stderr, written = quick_run(name)
    assert returncode == 0 and written is not None, stdout[-3000:] + stderr[-3000:]
    doc = report.validate(written, name)
    assert doc["mode"] == "quick" and doc["command"].startswith(f"python benchmarks/{name}.py --quick")
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["cpu"]
    assert all(isinstance(x, float) for x in doc["load_average"])
    assert isinstance(doc["threads"], int) and doc["threads"] >= 1
    assert doc["software"]["torch"] and doc["software"]["python"]
    assert len(doc["git"]["commit"]) == 40 and isinstance(doc["git"]["dirty"], bool)
    assert dt.datetime.fromisoformat(doc["started"]) <= dt.datetime.fromisoformat(doc["finished"])
    assert doc["rows"] and all(isinstance(r, dict) and r for r in doc["rows"])
    assert not [r for r in doc["rows"] if str(r.get("status", "ok")).startswith("error")]
    block = report.render_block(name, doc)  # the generator reads what the script writes today
    assert "**Quick mode**" in block and doc["git"]["commit"][:10] in block


def test_a_quick_run_without_out_leaves_the_committed_json_alone(bench_common):
    """The default destination of a quick run is runs/bench-quick/, never benchmarks/<name>.json."""
    ap = argparse.ArgumentParser()
    bench_common.add_switches(ap)
    for name in SCRIPTS:
        assert bench_common.out_path(name, ap.parse_args(["--quick"])) == ROOT / "runs" / "bench-quick" / f"{name}.json"
        assert bench_common.out_path(name, ap.parse_args([])) == BENCH / f"{name}.json"
        assert bench_common.out_path(name, ap.parse_args(["--quick", "--out", "x.json"])) == Path("x.json")


def test_a_document_without_rows_is_refused(bench_common):
    run = bench_common.Run("floor", quick=True, argv=["--quick"])
    with pytest.raises(ValueError, match="produced no rows"):
        run.document([], {})
