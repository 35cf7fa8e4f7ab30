"""Interruption and determinism of training, as a user would hit them."""
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cases import subprocess_env
from curvature_gap.io import load_torch

pytestmark = pytest.mark.slow  # two training runs in subprocesses
WORKER = Path(__file__).with_name("train_worker.py")


def _run(out: Path) -> str:
    r = subprocess.run([sys.executable, str(WORKER), str(out)], capture_output=True, text=True, timeout=600,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.fault("training-killed")
def test_sigkill_at_random_step_then_resume_equals_uninterrupted(tmp_path):
    reference = _run(tmp_path / "ref")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(WORKER), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env())
    deadline = time.time() + 300
    while not (out / "last.pt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.3))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists(), "the run finished before it could be killed"
    killed_at = load_torch(out / "last.pt")["step"]
    assert 0 < killed_at < 128
    resumed = _run(out)
    assert resumed == reference
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["weights_sha256"] == reference
