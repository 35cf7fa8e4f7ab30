"""`curvature-gap reproduce` as a user runs it (real smoke figures on real MNIST, in subprocesses):
determinism, SIGKILL half-way (at a point the worker announces, tests/reliability/hold.py, not after a timer)
and rerun, two runs at once on the same directories.

Figures: fig4 (trains the smoke model, then its exact Hessian) and fig12 (gradients at the trained
model), about 10 s each on two cores.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cases import subprocess_env
from curvature_gap.data import check_mnist_files
from hold import kill_at_hold

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("CURVATURE_GAP_DATA") or ROOT / "data").resolve()
FIGS = "fig4,fig12"
WORKER = Path(__file__).with_name("reproduce_worker.py")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(check_mnist_files(DATA)),
                                 reason=f"needs MNIST under {DATA} (`make data`, which `make test` runs first)")]


def _cmd(work: Path) -> list[str]:
    # with progress: its log lines ("training mnist ...", "waiting for another process ...") are checked
    return [sys.executable, "-m", "curvature_gap", "reproduce", "--profile", "smoke", "--only", FIGS, "--device", "cpu",
            "--data-dir", str(DATA), "--results-dir", str(work / "results"),
            "--figures-dir", str(work / "figures"), "--runs-dir", str(work / "runs")]


def _env():
    return subprocess_env(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _reproduce(work: Path) -> subprocess.CompletedProcess:
    r = subprocess.run(_cmd(work), capture_output=True, text=True, timeout=900, env=_env())
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r


def fingerprint(work: Path) -> dict[str, str]:
    """sha256 of every result array (by figure and name) and of the trained weights.

    The .npz and .json files themselves differ between runs (zip timestamps, creation time, wall
    times); the numbers in them must not."""
    out = {}
    for npz in sorted((work / "results").glob("*/*.npz")):
        with np.load(npz, allow_pickle=False) as z:
            for k in sorted(z.files):
                a = np.ascontiguousarray(z[k])
                out[f"{npz.parent.name}/{k}"] = hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).hexdigest()
    for m in sorted((work / "runs").glob("*/metrics.json")):
        out[f"weights/{m.parent.name}"] = json.loads(m.read_text())["weights_sha256"]
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    work = tmp_path_factory.mktemp("reference")
    _reproduce(work)
    fp = fingerprint(work)
    assert any(k.startswith("fig4/") for k in fp) and any(k.startswith("fig12/") for k in fp)
    assert sum(k.startswith("weights/") for k in fp) == 1
    return fp


@pytest.mark.fault("same-command-twice")
def test_same_command_gives_identical_checkpoints_and_results(reference, tmp_path):
    _reproduce(tmp_path)
    assert fingerprint(tmp_path) == reference


@pytest.mark.fault("reproduce-killed", "killed-while-writing")
def test_sigkill_mid_reproduce_then_rerun_recomputes_only_what_is_missing(reference, tmp_path):
    # killed at the point the worker announces: fig4 finished, fig12's arrays (.npz) written, its record (.json)
    # in a temporary file, not yet renamed into place
    held, out = kill_at_hold([sys.executable, str(WORKER), "fig12", *_cmd(tmp_path)[3:]], _env(),
                             tmp_path / "stderr.txt", timeout_s=900)
    fig12 = tmp_path / "results" / "fig12"
    assert held.startswith(f"writing {fig12}") and held.endswith(".json"), held
    assert "[2/2] fig12" in out
    assert not list(fig12.glob("*.json")) and len(list(fig12.glob("*.npz"))) == 1
    assert len(list(fig12.glob(".*.json.*.tmp"))) == 1, "killed with fig12's record half-way to disk"
    fig4 = {p: p.read_bytes() for p in (tmp_path / "results" / "fig4").iterdir() if not p.name.startswith(".")}
    assert len(fig4) == 2

    r = _reproduce(tmp_path)
    assert "reused" in r.stdout.split("[2/2]")[0], "fig4's numbers are reused, not recomputed"
    assert "wrote " + str(tmp_path / "results" / "fig12") in r.stdout
    assert "training mnist" not in r.stdout + r.stderr, "the finished training run is reused"
    assert {p: p.read_bytes() for p in fig4} == fig4, "finished results are left as they were"
    assert fingerprint(tmp_path) == reference, "interrupted + rerun ends with the numbers of an uninterrupted run"
    manifest = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert {k: v["status"] for k, v in manifest["figures"].items()} == {"fig4": "ok", "fig12": "ok"}


@pytest.mark.fault("concurrent-runs")
def test_two_concurrent_reproduce_runs_train_once_and_agree(reference, tmp_path):
    procs = [subprocess.Popen(_cmd(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    both = "".join(o[0] + o[1] for o in outs)
    assert both.count("training mnist") == 1, "one process trains; the other waits for its lock and reuses the model"
    fig4_json = str(next((tmp_path / "results" / "fig4").glob("*.json")))
    assert [o[0].count("  wrote " + fig4_json) for o in outs] in ([1, 0], [0, 1]), "fig4 is computed once"
    assert [o[0].count("  reused " + fig4_json) for o in outs] in ([0, 1], [1, 0]), "and reused by the other run"
    assert fingerprint(tmp_path) == reference
    assert len(list((tmp_path / "results" / "fig4").glob("*.json"))) == 1
    assert not list(tmp_path.rglob("*.tmp")), "no temporary file is left behind"
    manifest = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert {k: v["status"] for k, v in manifest["figures"].items()} == {"fig4": "ok", "fig12": "ok"}
