"""Bad input: wrong notebook parameters, wrong-shaped data, failed writes, `make clean`; earlier work survives."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from curvature_gap import cli, data
from curvature_gap import notebook as nb
from curvature_gap.config import ConfigError
from curvature_gap.data import DataUnavailable
from tools.book.build import ensure_kernel

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- notebook parameters
@pytest.mark.parametrize("name, value, needle", [
    ("seed", "abc", "seed='abc' (str) is invalid: it must be a non-negative integer; e.g. papermill ... -p seed 3"),
    ("seed", -1, "seed=-1 (int) is invalid"),
    ("seed", True, "seed=True (bool) is invalid"),
    ("L", 2.5, "L=2.5 (float) is invalid: it must be a positive integer"),
    ("d_V", 0, "d_V=0 (int) is invalid"),
    ("profile", "huge", "profile='huge' (str) is invalid: it must be one of smoke, paper"),
    ("device", "tpu", "device='tpu' (str) is invalid: it must be one of auto, cpu, cuda"),
    ("shape", [12, 6, 4], "shape=[12, 6, 4] (list) is invalid: it must be None or a list of 4 positive integers"),
])
@pytest.mark.fault("bad-notebook-parameter")
def test_check_parameters_names_the_parameter_and_the_fix(name, value, needle):
    with pytest.raises(ConfigError) as err:
        nb.check_parameters({"profile": "smoke", "device": "cpu", "seed": 0, name: value})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_check_parameters_accepts_the_defaults_and_valid_values():
    nb.check_parameters(dict(profile="paper", device="auto", seed=7, L=3, d_V=8, N=64, shape=None))
    nb.check_parameters(dict(profile="smoke", device="cuda", seed=0, shape=[12, 6, 4, 16]))


@pytest.mark.slow
@pytest.mark.fault("bad-notebook-parameter")
def test_papermill_parameter_of_the_wrong_type_stops_the_notebook(tmp_path):
    """What a re-executor types: `papermill nb.ipynb out.ipynb -p seed abc` fails at the first code cell."""
    ensure_kernel(log=lambda *a: None)
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "layernorm.ipynb"),
                        str(tmp_path / "out.ipynb"), "-p", "seed", "abc", "--cwd", str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "notebook parameter seed='abc' (str) is invalid" in r.stderr + r.stdout
    executed = json.loads((tmp_path / "out.ipynb").read_text())
    ran = [c for c in executed["cells"] if c["cell_type"] == "code" and c.get("execution_count")]
    assert len(ran) == 4, ("the Colab set-up cell (a no-op here), parameters, injected parameters, then the failing "
                           "setup cell: nothing else ran")
    assert "colab-setup" in ran[0]["metadata"].get("tags", [])


# ---------------------------------------------------------------- data of the wrong shape
@pytest.mark.fault("dataset-corrupt")
def test_cifar100_images_of_the_wrong_shape_are_refused(tmp_path):
    """64 images of 3x16x16 reshape silently into 16 images of 3x32x32 in torchvision's loader."""
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    rng = np.random.default_rng(0)
    for name in ("train", "test"):
        entry = {"data": rng.integers(0, 256, (64, 3 * 16 * 16), dtype=np.uint8), "fine_labels": list(range(64))}
        (d / name).write_bytes(pickle.dumps(entry))
    (d / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"c{i}" for i in range(100)]}))
    with pytest.raises(DataUnavailable, match=r"16 images but 64 labels \(corrupt or not CIFAR-100\)"):
        data.load("cifar100", tmp_path, train=True, verify_md5=False)


# ---------------------------------------------------------------- earlier work survives
def _tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.fault("bad-input-after-work")
def test_bad_input_leaves_earlier_results_intact(tmp_path, capsys):
    import torch

    work = tmp_path / "work"
    for rel, content in {"results/fig3/abc.json": "{}", "results/fig3/abc.npz": "npz", "runs/mnist-smoke-x/model.pt": "w",
                         "figures/fig03_hessian_entries.png": "png", "figures/manifest.json": json.dumps({"figures": {}})}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(content)
    before = _tree_hashes(work)
    dirs = ["--results-dir", str(work / "results"), "--figures-dir", str(work / "figures"), "--runs-dir", str(work / "runs")]
    cases = [  # (arguments, what the one-line error must name)
        (["reproduce", "--profile", "smoke", "--only", "fig99", *dirs], "unknown figure fig99"),
        (["reproduce", "--profile", "huge", *dirs], "invalid choice: 'huge'"),
        (["reproduce", "--profile", "smoke", "--device", "tpu", *dirs], "invalid choice: 'tpu'"),
        (["train", "--model", "mnist", "--profile", "smoke", "--data-dir", str(tmp_path / "no-data"),
          "--out", str(work / "runs" / "mnist-smoke-x")], "model.pt cannot be loaded"),
    ]
    if not torch.cuda.is_available():
        cases.append((["reproduce", "--profile", "smoke", "--device", "cuda", *dirs], "CUDA is not available"))
    for args, needle in cases:
        try:
            code = cli.main(args)
        except SystemExit as exc:  # argparse's own exit for a bad choice
            code = exc.code
        err = capsys.readouterr().err.strip()
        assert code != 0, args
        assert needle in err and len(err.splitlines()) == 1, (args, err)
        assert _tree_hashes(work) == before, f"{args} changed earlier files"


# ---------------------------------------------------------------- make clean
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.fault("make-clean")
def test_make_clean_removes_caches_and_keeps_data(tmp_path):
    keep = ["data/MNIST/raw/train-images-idx3-ubyte", "data/cifar-100-python/train", "src/curvature_gap/x.py"]
    gone = ["results/fig3/a.json", "runs/mnist-smoke-x/model.pt", "_build/html/index.html", ".pytest_cache/v",
            "src/curvature_gap/__pycache__/x.pyc"]
    for rel in keep + gone:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    r = subprocess.run(["make", "-f", str(ROOT / "Makefile"), "clean"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, MAKEFLAGS=""))
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / rel).is_file() for rel in keep)
    assert not any((tmp_path / rel).exists() for rel in gone)
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()
