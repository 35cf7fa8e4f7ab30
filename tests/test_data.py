"""Datasets through torchvision's real loaders, from files the tests write; clear errors otherwise."""
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


def test_mnist_wrong_md5_names_the_file_and_the_fix(mnist_root):
    with pytest.raises(DataUnavailable, match=r"train-images-idx3-ubyte has md5 .* Delete the file and run `make data`"):
        data.load("mnist", mnist_root, train=True)


def test_missing_mnist_offline_says_what_to_put_where(tmp_path):
    with pytest.raises(DataUnavailable, match=r"make data.*MNIST/raw"):
        data.load("mnist", tmp_path / "empty", train=True, allow_download=False)


def test_missing_cifar100_offline_says_what_to_put_where(tmp_path):
    with pytest.raises(DataUnavailable, match=r"cifar-100-python.tar.gz.*cifar-100-python/train, test and meta"):
        data.load("cifar100", tmp_path / "empty", train=True, allow_download=False)


def test_truncated_cifar_file_is_a_clear_error(cifar_root):
    p = cifar_root / "cifar-100-python" / "train"
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(DataUnavailable, match="could not be read"):
        data.load("cifar100", cifar_root, train=True, verify_md5=False)


def test_cifar100_wrong_md5_is_a_clear_error(cifar_root):
    with pytest.raises(DataUnavailable, match=r"cifar-100-python/train has md5 .*corrupt or not CIFAR-100"):
        data.load("cifar100", cifar_root, train=True)


def test_data_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("CURVATURE_GAP_DATA", str(tmp_path))
    assert data.data_dir() == tmp_path
    assert data.data_dir("x") == data.data_dir("x")
