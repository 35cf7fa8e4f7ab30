"""Shared fixtures: small datasets written by the tests themselves (never the network)."""
from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from curvature_gap.data import TensorDataset
from synthetic import learnable_images  # noqa: F401 - also re-exported for fixtures below


def write_mnist_idx(root: Path, n_train: int = 256, n_test: int = 64) -> Path:
    """Write MNIST-format IDX files under root/MNIST/raw (readable by torchvision's MNIST)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n, seed in (("train", n_train, 0), ("t10k", n_test, 1)):
        imgs, labels = learnable_images(n, 1, 28, 10, seed)
        with open(raw / f"{prefix}-images-idx3-ubyte", "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + imgs[:, 0].tobytes())
        with open(raw / f"{prefix}-labels-idx1-ubyte", "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.astype(np.uint8).tobytes())
    return root


def write_cifar100(root: Path, n_train: int = 64, n_test: int = 32) -> Path:
    """Write a small set in CIFAR-100's python pickle format under root/cifar-100-python."""
    d = root / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", n_train, 0), ("test", n_test, 1)):
        imgs, labels = learnable_images(n, 3, 32, 100, seed)
        entry = {b"data": imgs.reshape(n, 3072), b"fine_labels": labels.tolist(), b"coarse_labels": (labels // 5).tolist()}
        with open(d / name, "wb") as f:
            pickle.dump({k.decode(): v for k, v in entry.items()}, f)
    with open(d / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)], "coarse_label_names": [f"s{i}" for i in range(20)]}, f)
    return root


@pytest.fixture
def mnist_root(tmp_path):
    return write_mnist_idx(tmp_path / "data")


@pytest.fixture
def cifar_root(tmp_path):
    return write_cifar100(tmp_path / "data")


@pytest.fixture
def tiny_datasets():
    """Learnable MNIST-shaped tensors: 512 train, 128 test."""
    from curvature_gap.train import Datasets

    def make(n, seed):
        imgs, labels = learnable_images(n, 1, 28, 10, seed)
        x = torch.from_numpy(imgs).float().div(255).sub(0.5).div(0.5)
        return TensorDataset(x, torch.from_numpy(labels).long())

    return Datasets(make(512, 0), make(128, 1))


def pytest_collection_modifyitems(config, items):
    """Mark every test that declares a fault (``@pytest.mark.fault("<id>")``, ids of
    ``curvature_gap.faults``) and everything under tests/reliability as ``reliability``:
    ``pytest -m reliability`` runs exactly the tests of the book's fault table. A marker naming an
    unknown fault fails the collection."""
    from curvature_gap.faults import FAULT_IDS

    for item in items:
        for m in item.iter_markers("fault"):
            unknown = [a for a in m.args if a not in FAULT_IDS]
            if unknown or not m.args:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.fault names unknown fault(s) {unknown or '(none)'}; "
                                        f"known: {', '.join(sorted(FAULT_IDS))}")
        if item.get_closest_marker("fault") or item.nodeid.startswith("tests/reliability/"):
            item.add_marker(pytest.mark.reliability)


# ---------------------------------------------------------------- device-parametrised tests
def pytest_addoption(parser):
    """``--device cpu|cuda``: where the ``device``-marked tests (tests/test_device.py) run."""
    parser.addoption("--device", action="store", default="cpu", choices=("cpu", "cuda"),
                     help="device for the tests marked 'device' (default: cpu); cuda needs CUDA")


@pytest.fixture(scope="session")
def device(request) -> torch.device:
    """``torch.device`` of ``--device``; fails every test that uses it when cuda is asked for without CUDA."""
    name = request.config.getoption("--device", default="cpu")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.fail("--device cuda was given but CUDA is not available here (torch.cuda.is_available() "
                    "is False); run with --device cpu or on a machine with a GPU", pytrace=False)
    return torch.device(name)
