"""What the GPU check runs with: the sizes of each step, the time budget and its estimates, the device.

Part of ``benchmarks/gpu_check.py`` (the runner); the steps themselves are in ``_gpu_steps.py``."""
from __future__ import annotations

import math
import os
import platform
import re
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CIFAR_FULL_TRAIN = 50_000  # images in the real CIFAR-100 training set


@dataclass(frozen=True)
class Sizes:
    """What each step measures: :data:`FULL` on a CUDA machine, :data:`QUICK` with ``--quick``."""

    device_tests: tuple = ()  # step a: extra pytest arguments (a selection)
    hessian_batches: tuple = (("float32", 128), ("float64", 16))  # step c: (dtype, first images of MNIST)
    hessian_model: tuple = ()  # step c: overrides of build_model("mnist")
    cifar_overrides: tuple = ()  # step d: overrides of recipe_for("cifar100", "paper")
    cifar_warmup_steps: int = 10  # step d: untimed steps before the timed ones
    cifar_steps: int = 200  # step d: timed steps (--cifar-steps)
    spectra_batch: int = 128  # step e
    spectra_model: tuple = ()  # step e: overrides of build_model("cifar100")
    lanczos_iters: int = 20  # step e (--lanczos-iters)
    mnist_overrides: tuple = ()  # step b: overrides of recipe_for("mnist", "paper")
    mnist_subset: tuple | None = None  # step b: (train, test) images; None: all of MNIST
    mnist_probe: tuple = (20, 200)  # step b: (untimed warm-up steps, timed probe steps) that size the full run
    # step f: training_cost.measure on the device (the authors' CIFAR-100 recipe, float32 and bf16)
    authors_cost: dict = field(default_factory=lambda: dict(steps=200, warmup=10, pass_batches=50))


_TINY_VIT = (("d_ff", 8), ("d_k", 4), ("d_model", 4), ("patch_size", 7))  # 454 parameters (tests/cases.py)
_SMALL_CIFAR = (("d_ff", 16), ("d_k", 8), ("d_model", 8), ("n_blocks", 2), ("patch_size", 8))
FULL = Sizes()
QUICK = Sizes(
    device_tests=("-k", "test_resolve_device"), hessian_batches=(("float32", 4), ("float64", 2)),
    hessian_model=_TINY_VIT, cifar_overrides=(("batch_size", 8), ("model_overrides", _SMALL_CIFAR)),
    cifar_warmup_steps=1, cifar_steps=2, spectra_batch=2, spectra_model=_SMALL_CIFAR, lanczos_iters=3,
    mnist_overrides=(("batch_size", 32), ("epochs", 1), ("model_overrides", _TINY_VIT)), mnist_subset=(256, 64),
    mnist_probe=(2, 3),
    authors_cost=dict(steps=2, warmup=1, pass_batches=2, overrides=(("d_ff", 16), ("d_k", 8), ("d_model", 8),
                                                                 ("n_blocks", 2), ("patch_size", 8)),
                      n_train=256, n_test=64),
)


def device_test_args(device: str, sizes: Sizes = FULL) -> list[str]:
    """The pytest arguments of step a: the device-parametrised tests on ``device``."""
    # addopts cleared: the project's addopts name nbval's options, and these tests need no notebook plugin,
    # so the check also runs in an environment without the dev extra (a GPU image's own torch, say)
    return ["-m", "pytest", "-q", "-m", "device", "--device", device, "tests/test_device.py",
            "-p", "no:cacheprovider", "-o", "addopts=-ra", *sizes.device_tests]

# Upper-bound seconds per (sub)step on an H200 host with 16 CPU cores; a step starts only if its
# estimate fits the remaining budget.
ESTIMATE_S = {
    "a": 120.0,          # pytest start-up, CUDA initialisation, a few small tests (the autocast one: seconds)
    "b_probe": 45.0,     # MNIST load (md5 + parse) and 220 timed steps; the full run is sized from them
    "c_float32": 120.0,  # dense 4186 x 4186 Hessian at batch 128: GPU, then CPU
    "c_float64": 60.0,   # the same at batch 16 in float64
    "d": 120.0,          # write + read ~54k random CIFAR images, 10 warm-up + 200 timed steps
    "e": 180.0,          # 59 blocks + overall x 20 Lanczos steps = ~1,200 Hessian-vector products
    "f": 150.0,          # the authors' CIFAR-100 recipe: 2 x 210 steps, one 391-step epoch on 50,000 images, 2 x 51 pass batches
}


_T_START = time.monotonic()  # the budget counts from here (imports included)


class BudgetExceeded(BaseException):
    """Raised by the budget timer inside a running step (BaseException: no step swallows it)."""


# ====================================================================== pure helpers (tested on CPU)
class Budget:
    """Wall-clock budget counted from ``start`` (default: now) with ``clock`` (default: monotonic)."""

    def __init__(self, total_s: float, clock=time.monotonic, start: float | None = None):
        self.total_s = float(total_s)
        self.clock = clock
        self.start = clock() if start is None else start

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return max(0.0, self.total_s - self.elapsed())

    def fits(self, estimate_s: float) -> bool:
        return estimate_s <= self.remaining()


def cuda_available() -> bool:
    """torch.cuda.is_available(), with any warning it raises kept off the output."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(torch.cuda.is_available())


def estimate_full_run(n_train: int, batch_size: int, epochs: int, steps_per_s: float) -> dict:
    """Steps per epoch (last batch partial, as in ``train``), total steps, and their wall time at
    ``steps_per_s`` (optimiser steps only: per-epoch evaluation and checkpoints not included)."""
    if n_train <= 0 or batch_size <= 0 or epochs <= 0:
        raise ValueError("n_train, batch_size and epochs must be positive")
    if not steps_per_s > 0:
        raise ValueError("steps_per_s must be positive")
    spe = math.ceil(n_train / batch_size)
    total = spe * epochs
    seconds = total / steps_per_s
    return dict(n_train=n_train, batch_size=batch_size, epochs=epochs, steps_per_epoch=spe,
                total_steps=total, seconds=seconds, hours=seconds / 3600.0)


_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)")
_SECONDS = re.compile(r" in (\d+(?:\.\d+)?)s")


def parse_pytest_summary(output: str) -> dict:
    """Counts and seconds from pytest's final summary line (``4 passed, 1 failed in 3.21s``)."""
    counts = dict(passed=0, failed=0, errors=0, skipped=0, deselected=0)
    seconds = None
    lines = [ln.strip("= ").strip() for ln in output.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        found = _COUNT.findall(ln)
        m = _SECONDS.search(ln)
        if found and m:
            for n, what in found:
                key = {"error": "errors", "warning": "warnings"}.get(what, what)
                counts[key] = counts.get(key, 0) + int(n)
            seconds = float(m.group(1))
            break
        if ln.startswith("no tests ran") and m:
            seconds = float(m.group(1))
            break
    return dict(counts, seconds=seconds)


def _cudnn_version():
    import torch

    try:
        return torch.backends.cudnn.version()
    except Exception as exc:  # noqa: BLE001 - a cuDNN that does not load is worth recording, not fatal
        return f"unavailable ({exc})"[:200]


def device_info(device: str = "cuda") -> dict:
    """The GPU (name, compute capability, memory, driver), torch/CUDA/cuDNN versions and the host's CPU;
    for ``device="cpu"`` (a quick run without CUDA) the GPU fields are None."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    except OSError:
        pass
    common = dict(torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(), host_cpu=cpu,
                  cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(), platform=platform.platform())
    if device != "cuda":
        return dict(common, name="no GPU: the CPU stands in (quick run without CUDA)", capability=None,
                    memory_gib=None, count=0, driver=None, cudnn=None)
    p = torch.cuda.get_device_properties(0)
    driver = None
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=15)
            driver = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            pass
    return dict(common, name=torch.cuda.get_device_name(0), capability=f"{p.major}.{p.minor}",
                memory_gib=p.total_memory / 2**30, count=torch.cuda.device_count(), driver=driver,
                cudnn=_cudnn_version())
