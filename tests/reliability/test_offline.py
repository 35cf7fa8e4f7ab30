"""Offline: every command works from local data, or fails within 30 s saying how to provide the data.

The network is removed for real where the kernel allows it (``unshare -rn``: a new network namespace
with no interfaces); elsewhere every proxy variable points at a closed local port, which is what
urllib (torchvision's download) and pip use.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cases import subprocess_env
from curvature_gap.data import check_mnist_files
from curvature_gap.experiments import SPECS

ROOT = Path(__file__).resolve().parents[2]
CG = [sys.executable, "-m", "curvature_gap"]
OFFLINE_LIMIT_S = 30  # the promise in the fault table: no hanging on a missing network


@functools.lru_cache(maxsize=1)
def _offline() -> tuple[list[str], dict]:
    if shutil.which("unshare"):
        try:
            if subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0:
                return ["unshare", "-rn"], {}
        except (OSError, subprocess.TimeoutExpired):
            pass
    closed = "http://127.0.0.1:9"
    return [], {k: closed for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")}


def run_offline(args: list[str], cwd: Path, data: Path, timeout: float = OFFLINE_LIMIT_S):
    prefix, env_extra = _offline()
    env = {k: v for k, v in subprocess_env().items() if k.lower() != "no_proxy"}  # the closed proxy applies to every host
    env.update(CURVATURE_GAP_DATA=str(data), PYTHONUNBUFFERED="1", **env_extra)
    t0 = time.perf_counter()
    r = subprocess.run(prefix + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return r, time.perf_counter() - t0


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["data", "train", "reproduce"])
@pytest.mark.fault("offline")
def test_without_network_each_command_fails_fast_with_instructions(verb, tmp_path):
    empty = tmp_path / "data"
    args = {
        "data": ["data", "--data-dir", str(empty)],
        "train": ["train", "--model", "mnist", "--profile", "smoke", "--device", "cpu", "--no-progress",
                  "--data-dir", str(empty), "--out", str(tmp_path / "run")],
        "reproduce": ["reproduce", "--profile", "paper", "--only", "fig3,fig6", "--device", "cpu", "--no-progress",
                      "--data-dir", str(empty), "--results-dir", str(tmp_path / "results"),
                      "--figures-dir", str(tmp_path / "figures"), "--runs-dir", str(tmp_path / "runs")],
    }[verb]
    r, seconds = run_offline(CG + args, tmp_path, empty)  # TimeoutExpired past 30 s fails the test
    out = r.stdout + r.stderr
    # data and train fail; reproduce reports both results blocked (not a failure) and exits 0
    assert r.returncode == (0 if verb == "reproduce" else 1), out[-2000:]
    assert "MNIST is not available offline. Run `make data`" in out and str(empty / "MNIST" / "raw") in out
    if verb != "train":
        assert "cifar-100-python.tar.gz" in out, "CIFAR-100 says where to download it and where to put it"
    if verb == "train":
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    if verb == "reproduce":
        assert out.count("BLOCKED") == 2 and "0/2 results ok" in out
    print(f"{verb}: exit {r.returncode} after {seconds:.1f} s offline")


@pytest.mark.slow
@pytest.mark.fault("offline")
def test_without_network_reproduce_works_from_local_data(tmp_path):
    data = Path(os.environ.get("CURVATURE_GAP_DATA") or ROOT / "data").resolve()
    if check_mnist_files(data):
        pytest.skip(f"needs MNIST under {data} (`make data`, which `make test` runs first)")
    r, seconds = run_offline(CG + ["reproduce", "--profile", "smoke", "--only", "fig3", "--device", "cpu",
                                   "--no-progress", "--data-dir", str(data),
                                   "--results-dir", str(tmp_path / "results"), "--figures-dir", str(tmp_path / "figures"),
                                   "--runs-dir", str(tmp_path / "runs")], tmp_path, data, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "1/1 results ok" in r.stdout
    assert (tmp_path / "figures" / f"{SPECS['fig3'].stem}_hessian.png").stat().st_size > 0
