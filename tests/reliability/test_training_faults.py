"""Interruption and determinism of training, as a user would hit them.

The worker is killed at a point it announces (tests/reliability/hold.py), not after a timer: every run of
these tests kills at the same step.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cases import subprocess_env
from curvature_gap.io import load_torch
from hold import kill_at_hold

pytestmark = pytest.mark.slow  # training runs in subprocesses
WORKER = Path(__file__).with_name("train_worker.py")


def _run(out: Path, *hold: str) -> str:
    r = subprocess.run([sys.executable, str(WORKER), str(out), *hold], capture_output=True, text=True, timeout=600,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sha256 of the weights of the worker's run, uninterrupted."""
    return _run(tmp_path_factory.mktemp("reference"))


# last.pt is written every 5 steps (and at epoch ends, step 32): killed after step 43 (three steps past the
# checkpoint of step 40, lost), or while the checkpoint of step 45 is being written (its bytes in a temporary
# file, last.pt still the one of step 40), the rerun resumes from step 40
@pytest.mark.parametrize("hold_at, held", [("step:43", "after optimiser step 43"),
                                           ("write:45", "writing last.pt of step 45")])
@pytest.mark.fault("training-killed", "killed-while-writing")
def test_sigkill_mid_training_then_resume_equals_uninterrupted(reference, tmp_path, hold_at, held):
    out = tmp_path / "killed"
    at, _ = kill_at_hold([sys.executable, str(WORKER), str(out), hold_at], subprocess_env(), tmp_path / "stderr.txt")
    assert at == held
    assert not (out / "metrics.json").exists()
    assert load_torch(out / "last.pt")["step"] == 40, "the last checkpoint written whole is that of step 40"
    if hold_at.startswith("write:"):
        assert len(list(out.glob(".last.pt.*.tmp"))) == 1, "killed with the new checkpoint half-way to disk"
    resumed = _run(out)
    assert resumed == reference
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["weights_sha256"] == reference
