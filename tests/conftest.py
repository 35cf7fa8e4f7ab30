"""Shared fixtures: small datasets written by the tests themselves (never the network), one-thread torch for
small dense algebra, the rows of one ``curvature-gap verify --quick`` run per session, and the fault markers."""
from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import SMALL_RUN_SETTINGS, experiments_context, learnable_images, mnist_datasets, once_per_session


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
    return mnist_datasets(512, 128)


@pytest.fixture
def one_thread():
    """One intra-op thread: the small dense products of these tests only lose from thread synchronisation
    on shared CPUs (restored afterwards)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def quick_rows(tmp_path_factory):
    """The rows of ``curvature-gap verify --quick`` (``checks.run(quick=True)``), computed once per session (by
    one worker; the others read them), with an empty results cache and an empty published directory: every
    row that needs a trained model is ``not run``, every other row is computed here."""
    from curvature_gap import checks

    def run(base: Path):
        (base / "published").mkdir(exist_ok=True)
        return checks.run(quick=True, results_dir=base / "results", published_dir=base / "published")

    return once_per_session(tmp_path_factory, "verify_quick", run)


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """(directory, context) of the Hessian figures on the tiny model (454 parameters), shared by the tests of
    the experiments (the model is trained once). Tests that damage or delete results work on a copy."""
    tmp = tmp_path_factory.mktemp("small_run")
    return tmp, experiments_context(tmp, **SMALL_RUN_SETTINGS)


# session fixtures that take more than a few seconds: a test that uses one is ``slow`` (``make test-fast``
# deselects it)
SLOW_FIXTURES = ("quick_rows",)  # every row of `curvature-gap verify --quick`: about a minute on two cores


TESTS = Path(__file__).resolve().parent
# what this session collected under tests/, before any -m/-k deselection, where it collected the whole folder:
# node id -> whether it is marked ``reliability`` (fixture ``collected_reliability``)
COLLECTED_RELIABILITY = pytest.StashKey[dict]()


@pytest.fixture
def collected_reliability(request) -> dict | None:
    """{node id: marked ``reliability``} of every test under tests/ this session collected, or None where it did
    not collect the whole folder (``pytest tests/test_faults.py``): what ``pytest -m reliability tests`` selects,
    without collecting the suite again."""
    return request.config.stash.get(COLLECTED_RELIABILITY, None)


def pytest_collection_modifyitems(config, items):
    """Mark every test that declares a fault (``@pytest.mark.fault("<id>")``, ids of
    ``curvature_gap.faults``) and everything under tests/reliability as ``reliability``:
    ``pytest -m reliability`` runs exactly the tests of the fault table (docs/maintainers.md). A marker
    naming an unknown fault fails the collection. A test using one of :data:`SLOW_FIXTURES` is ``slow``.
    When the session collects the whole tests/ folder, :data:`COLLECTED_RELIABILITY` records the result.
    Then the files are ordered long ones first (:func:`_long_files_first`)."""
    from curvature_gap.faults import FAULT_IDS

    whole = any((config.invocation_params.dir / a).resolve() == TESTS for a in config.args if "::" not in a)
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
        for m in item.iter_markers("fault"):
            unknown = [a for a in m.args if a not in FAULT_IDS]
            if unknown or not m.args:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.fault names unknown fault(s) {unknown or '(none)'}; "
                                        f"known: {', '.join(sorted(FAULT_IDS))}")
        if item.get_closest_marker("fault") or item.nodeid.startswith("tests/reliability/"):
            item.add_marker(pytest.mark.reliability)
    if whole:
        config.stash[COLLECTED_RELIABILITY] = {i.nodeid: i.get_closest_marker("reliability") is not None
                                               for i in items if i.nodeid.startswith("tests/")}
    _long_files_first(items)


def _long_files_first(items) -> None:
    """Order the files so that the long ones start first: the notebooks (each executes its page), then the files
    with a test marked ``slow``, then the rest, each file's tests in their own order (a notebook's cells stay in
    sequence). pytest-xdist (``--dist loadfile``) hands files to its workers in this order, so the short files
    fill the end of the run instead of one long file keeping a worker busy while the other idles."""
    def file_of(item) -> str:
        return item.nodeid.split("::")[0]

    slow_files = {file_of(i) for i in items if i.get_closest_marker("slow")}
    rank = {f: 0 if f.endswith(".ipynb") else 1 if f in slow_files else 2 for f in map(file_of, items)}
    items.sort(key=lambda i: rank[file_of(i)])  # stable: the order within a rank and within a file is kept


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
