"""Where numbers come from: the machine, the software, the commit, and a hash of the code that made them.

One place for the facts every result, benchmark and book page records about its origin.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

__all__ = ["host", "software", "git_commit", "code_hash", "PACKAGE_DIR", "load_average"]

PACKAGE_DIR = Path(__file__).resolve().parent

_PACKAGES = ("torch", "torchvision", "curvlinops-for-pytorch", "numpy", "scipy", "matplotlib")


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
    out["torch"] = torch.__version__
    out["numpy"] = np.__version__
    return out


def git_commit(root: str | os.PathLike | None = None) -> dict:
    """HEAD commit of the checkout containing ``root`` (default: the package's own directory, which is in
    the checkout for an editable install, else the current directory) and whether its tracked files
    differ from it; ``{"commit": None, "dirty": None}`` outside a git checkout."""
    for cwd in ([Path(root)] if root else [PACKAGE_DIR, Path.cwd()]):
        try:
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        if head.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                   capture_output=True, text=True, timeout=20)
            return dict(commit=head.stdout.strip(), dirty=bool(dirty.stdout.strip()))
    return dict(commit=None, dirty=None)


def code_hash(modules: list[str] | tuple[str, ...]) -> str:
    """sha256 (16 hex digits) of the source of the given package modules, e.g. ``["model.py",
    "hessian/"]`` (a trailing slash takes every ``.py`` below that directory).

    The hash is taken over each module's syntax tree with docstrings removed, so comments, docstrings
    and formatting do not change it; any change to the code does. Results record this hash; a
    published result whose code hash differs from the installed code's was computed by other code and
    must be refreshed. Works the same in an editable and an ordinary install (it reads the installed
    package's files)."""
    h = hashlib.sha256()
    for m in sorted(modules):
        paths = sorted((PACKAGE_DIR / m).rglob("*.py")) if m.endswith("/") else [PACKAGE_DIR / m]
        for p in paths:
            h.update(str(p.relative_to(PACKAGE_DIR)).encode())
            h.update(_code_only(p.read_text()).encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=512)
def _code_only(source: str) -> str:
    """``ast.dump`` of ``source`` without docstrings (module, class and function) and without top-level
    functions whose names start with ``plot`` (drawing code reads results; it never changes numbers)."""
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name.lstrip("_").startswith("plot"))]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)
