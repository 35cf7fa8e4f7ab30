"""Device selection (``auto`` picks CUDA when present) and a description of the host."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from .config import DEVICES, ConfigError, check_choice


def resolve_device(name: str = "auto") -> torch.device:
    check_choice("device", name, DEVICES)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but CUDA is not available here; use --device cpu or auto")
    return torch.device(name)


def host() -> dict:
    """The CPU model (``/proc/cpuinfo``, else ``platform``), whether it runs under a hypervisor, and the
    total memory in GiB (``/proc/meminfo``; None where unknown). Used by the book and the benchmarks."""
    cpu, virtual, mem = platform.processor() or platform.machine() or "unknown CPU", False, None
    try:
        info = Path("/proc/cpuinfo").read_text()
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), cpu)
        virtual = "hypervisor" in info
    except OSError:
        pass
    try:
        kib = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        mem = kib / 2**20
    except (OSError, StopIteration, ValueError):
        pass
    return dict(cpu=cpu, virtual=virtual, memory_gib=mem)
