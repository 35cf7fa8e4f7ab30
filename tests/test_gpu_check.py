"""benchmarks/gpu_check.py: without CUDA it says so in one line and writes nothing; its pure helpers.

The CUDA path itself needs a GPU; here only what runs without one is tested. Its quick mode (every step
on the CPU at tiny sizes) runs in tests/benchmarks/test_bench_quick.py, its table in
tests/benchmarks/test_bench_report.py.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def env(gc):
    """``benchmarks/_gpu_env.py``: sizes, budget, estimates (imported by the runner, so on the path)."""
    import _gpu_env  # noqa: PLC0415

    return _gpu_env


@pytest.fixture(scope="module")
def steps(gc):
    """``benchmarks/_gpu_steps.py``: the five steps and their helpers."""
    import _gpu_steps  # noqa: PLC0415

    return _gpu_steps


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def _no_cuda_env() -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.mark.slow
def test_without_cuda_it_prints_one_line_writes_nothing_and_exits_0(tmp_path):
    out = tmp_path / "out" / "gpu_check.json"
    (tmp_path / "kept").write_text("kept\n")
    listing = sorted(p.name for p in tmp_path.rglob("*"))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--budget-s", "60", "--data-dir", str(tmp_path / "data")],
        cwd=tmp_path, env=_no_cuda_env(), capture_output=True, text=True, timeout=120,
    )
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(lines) == 1, lines
    assert "CUDA is not available" in lines[0] and "nothing was measured" in lines[0]
    assert proc.stderr == ""
    assert not out.exists() and not out.parent.exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == listing  # no temporary files either


@pytest.mark.slow
def test_device_tests_with_cuda_requested_but_absent_fail_loudly(gc, env, tmp_path):
    """The command of step a, where CUDA is missing: every test errors with the reason; none passes."""
    proc = subprocess.run(
        [sys.executable, *env.device_test_args("cuda")],
        cwd=ROOT, env=_no_cuda_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    assert "CUDA is not available" in proc.stdout
    assert " passed" not in proc.stdout.strip().splitlines()[-1]


def test_full_run_estimate_arithmetic(gc, env):
    est = env.estimate_full_run(50_000, 256, 200, steps_per_s=10.0)
    assert est["steps_per_epoch"] == 196  # ceil(50000 / 256): the last batch is partial, as in train()
    assert est["total_steps"] == 196 * 200
    assert est["seconds"] == pytest.approx(3920.0)
    assert est["hours"] == pytest.approx(3920.0 / 3600)
    assert env.estimate_full_run(60_000, 128, 15, 1.0)["total_steps"] == 469 * 15
    for bad in [dict(n_train=0, batch_size=1, epochs=1, steps_per_s=1.0),
                dict(n_train=1, batch_size=1, epochs=1, steps_per_s=0.0)]:
        with pytest.raises(ValueError):
            env.estimate_full_run(**bad)


def test_cifar_format_writer_is_read_by_the_package_loader(gc, steps, tmp_path):
    from curvature_gap import data

    root = steps.write_cifar_format(tmp_path / "cifar", n_train=40, n_test=12, seed=3)
    tr = data.load("cifar100", root, train=True, verify_md5=False)
    te = data.load("cifar100", root, train=False, verify_md5=False)
    assert tuple(tr.images.shape) == (40, 3, 32, 32) and len(te) == 12
    assert tr.images.min() >= -1 and tr.images.max() <= 1
    assert int(tr.labels.min()) >= 0 and int(tr.labels.max()) < 100
    again = steps.write_cifar_format(tmp_path / "again", n_train=40, n_test=12, seed=3)
    assert data.load("cifar100", again, train=True, verify_md5=False).images.equal(tr.images)  # seeded


def test_budget_and_skipped_steps(gc, steps, env, tmp_path):
    now = [100.0]
    b = env.Budget(60, clock=lambda: now[0])
    assert b.remaining() == 60 and b.fits(60) and not b.fits(61)
    now[0] = 130.0
    assert b.elapsed() == 30 and b.remaining() == 30 and not b.fits(45)
    now[0] = 1000.0
    assert b.remaining() == 0

    ctx = steps.Context(data_dir=tmp_path, scratch=tmp_path, budget=b, progress=False)
    report, saved = {"steps": {}}, []
    called = []
    gc.run_step(report, "e", 10.0, lambda c: called.append(1) or {}, ctx, lambda: saved.append(1))
    assert not called and report["steps"]["e"]["status"] == "skipped (budget)" and saved

    ok = env.Budget(60)
    ctx = steps.Context(data_dir=tmp_path, scratch=tmp_path, budget=ok, progress=False)
    gc.run_step(report, "d", 1.0, lambda c: {"images_per_s": 5.0}, ctx, lambda: None)
    assert report["steps"]["d"]["status"] == "ok" and report["steps"]["d"]["images_per_s"] == 5.0
    assert report["steps"]["d"]["wall_s"] >= 0

    def boom(c):
        raise RuntimeError("out of memory")

    gc.run_step(report, "c", 1.0, boom, ctx, lambda: None)
    assert report["steps"]["c"]["status"].startswith("error: RuntimeError: out of memory")

    def overrun(c):
        raise env.BudgetExceeded()

    gc.run_step(report, "a", 1.0, overrun, ctx, lambda: None)
    assert report["steps"]["a"]["status"] == "aborted (budget)"


def test_pytest_summary_parsing(gc, env):
    out = "....F.\n=== short test summary info ===\nFAILED tests/x.py::t\n1 failed, 5 passed, 2 deselected in 12.34s\n"
    r = env.parse_pytest_summary(out)
    assert (r["passed"], r["failed"], r["errors"], r["deselected"], r["seconds"]) == (5, 1, 0, 2, 12.34)
    r = env.parse_pytest_summary("EEEE\n4 errors in 0.05s\n")
    assert (r["passed"], r["errors"], r["seconds"]) == (0, 4, 0.05)
    r = env.parse_pytest_summary("========== 4 passed, 1 warning in 3.10s ==========")
    assert (r["passed"], r["seconds"]) == (4, 3.1)
    assert env.parse_pytest_summary("garbage")["seconds"] is None


def test_quick_sizes_are_the_full_steps_made_small(gc, env):
    full = env.device_test_args("cpu")
    assert env.device_test_args("cpu", env.QUICK)[:len(full)] == full
    assert "--device" in env.device_test_args("cuda") and env.device_test_args("cuda")[6] == "cuda"
    for (dt_q, n_q), (dt_f, n_f) in zip(env.QUICK.hessian_batches, env.FULL.hessian_batches):
        assert dt_q == dt_f and n_q < n_f
    assert env.QUICK.cifar_steps < env.FULL.cifar_steps and env.QUICK.lanczos_iters < env.FULL.lanczos_iters
    assert env.QUICK.spectra_batch < env.FULL.spectra_batch and env.FULL.mnist_subset is None


def test_rows_in_table_order_and_the_exit_status(gc):
    steps = {"e": dict(status="ok"), "a": dict(status="ok"), "c": dict(status="skipped (budget)")}
    rows = gc.step_rows(steps)
    assert [r["step"] for r in rows] == ["a", "c", "e"]
    assert gc.exit_status(rows, quick=False) == 0  # a step left out for the budget is no failure
    assert gc.exit_status(rows, quick=True) == 1  # but a quick run must run every step
    for bad in ("failed", "error: RuntimeError: boom", "aborted (budget)"):
        assert gc.exit_status(gc.step_rows(dict(steps, a=dict(status=bad))), quick=False) == 1
