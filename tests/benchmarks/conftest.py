"""Fixtures of the benchmark tests: ``benchmarks/report.py`` as a module, the environment a benchmark
script runs in (this checkout's package first, MNIST from ``$CURVATURE_GAP_DATA`` or ``data/``), and each
script's quick run, made once per session for the tests that read it."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cases import once_per_session

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _load(stem: str):
    """``benchmarks/<stem>.py`` as a module, loaded from its file (``benchmarks/`` is no package)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{stem}_under_test", BENCH / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def report():
    """``benchmarks/report.py``: the generator of RESULTS.md (standard library only)."""
    yield _load("report")
    sys.modules.pop("benchmarks_report_under_test", None)


@pytest.fixture(scope="session")
def bench_common():
    """``benchmarks/_bench.py``: the switches and the document every benchmark shares."""
    yield _load("_bench")
    sys.modules.pop("benchmarks__bench_under_test", None)


@pytest.fixture(scope="session")
def bench_env() -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.setdefault("CURVATURE_GAP_DATA", str(ROOT / "data"))
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(scope="session")
def quick_run(bench_env, tmp_path_factory):
    """``quick_run(name)``: ``python benchmarks/<name>.py --quick --out <json>`` run once per session (by one
    worker) for every test that reads it; returns (the completed process's returncode, stdout, stderr, and the
    document it wrote, or None)."""
    def run(name: str) -> tuple:
        def once(folder: Path) -> tuple:
            out = folder / f"{name}.json"
            proc = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--quick", "--out", str(out)],
                                  cwd=ROOT, env=bench_env, capture_output=True, text=True, timeout=240)
            doc = json.loads(out.read_text()) if out.is_file() else None
            return proc.returncode, proc.stdout, proc.stderr, doc

        return once_per_session(tmp_path_factory, f"bench_quick_{name}", once)

    return run
