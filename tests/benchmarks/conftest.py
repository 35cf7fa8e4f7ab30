"""Fixtures of the benchmark tests: ``benchmarks/report.py`` as a module, and the environment a benchmark
script runs in (this checkout's package first, MNIST from ``$CURVATURE_GAP_DATA`` or ``data/``)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

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
