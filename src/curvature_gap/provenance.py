"""Where numbers come from: the machine, the software and the commit (the code hash: :mod:`.codehash`).

One place for the facts every result, benchmark and book page records about its origin.
"""
from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

__all__ = ["host", "software", "git_commit", "PACKAGE_DIR", "load_average"]

PACKAGE_DIR = Path(__file__).resolve().parent

_PACKAGES = ("torch", "torchvision", "curvlinops-for-pytorch", "numpy", "scipy", "matplotlib")


def checkout_root(start=None) -> Path | None:
    """The checkout of this project containing ``start`` (default: the current directory): the first
    directory upwards with ``pyproject.toml`` and ``src/curvature_gap``; None outside one. The one
    project-root finder of the package and its book tooling."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file() and (d / "src" / "curvature_gap").is_dir():
            return d
    return None


def host() -> dict:
    """The CPU model (``/proc/cpuinfo``, else ``platform``), whether it runs under a hypervisor, the
    number of CPUs, the total memory in GiB (``/proc/meminfo``; None where unknown) and the GPU."""
    cpu, virtual, mem = platform.processor() or platform.machine() or "unknown CPU", False, None
    cpuinfo, meminfo = Path("/proc/cpuinfo"), Path("/proc/meminfo")
    if cpuinfo.is_file():
        info = cpuinfo.read_text()
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), cpu)
        virtual = "hypervisor" in info
    if meminfo.is_file():
        kib = next((int(ln.split()[1]) for ln in meminfo.read_text().splitlines() if ln.startswith("MemTotal")), None)
        mem = kib / 2**20 if kib else None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return dict(cpu=cpu, virtual=virtual, cpus=os.cpu_count(), memory_gib=mem, gpu=gpu,
                machine=platform.machine(), system=platform.system())


def load_average() -> float | None:
    """The 1-minute load average, rounded to 0.01 (None where the OS does not report it)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def software() -> dict:
    """Python and the versions of the numerical packages the results depend on."""
    out = {"python": platform.python_version()}
    for p in _PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return dict(out, torch=torch.__version__, numpy=np.__version__)  # the running ones, in their places


def git_commit(root: str | os.PathLike | None = None, ignore: tuple[str, ...] = ()) -> dict:
    """HEAD commit of the checkout containing ``root`` (default: the package's own directory, which is in the checkout
    for an editable install, else the current directory) and whether its tracked files differ from it, leaving out the
    top-level paths ``ignore`` (the rows computed *from* freshly written ``published/`` results are not made dirty by
    them: those results enter by their config hashes); ``{"commit": None, "dirty": None}`` outside a git checkout."""
    for cwd in ([Path(root)] if root else [PACKAGE_DIR, Path.cwd()]):
        try:
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        if head.returncode == 0:
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True,
                                 timeout=20).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."]
                                   + [f":(exclude){p}" for p in ignore], cwd=top or cwd,
                                   capture_output=True, text=True, timeout=20)
            return dict(commit=head.stdout.strip(), dirty=bool(dirty.stdout.strip()))
    return dict(commit=None, dirty=None)
