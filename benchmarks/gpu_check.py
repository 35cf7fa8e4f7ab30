"""GPU check: the package's CUDA paths, tested and timed in one call of at most ~9 minutes.

    python benchmarks/gpu_check.py [--out benchmarks/gpu_check.json] [--budget-s 540] [--data-dir data]
    python benchmarks/gpu_check.py --quick     # every step at tiny sizes, seconds; on the CPU without CUDA

Without CUDA (and without ``--quick``) it prints one line saying so, measures and writes nothing, and
exits 0. ``--quick`` runs every step below on tiny models and batches with one CPU thread, on CUDA
where present and otherwise on the CPU (then "GPU" and "CPU" in the step records are both the CPU: the numbers are
meaningless, the code paths ran); it is what the test suite runs on a machine without a GPU.
With CUDA:

a. the device-parametrised tests on the GPU (``pytest -m device --device cuda tests/test_device.py``
   in a subprocess): passed/failed counts and seconds;
b. the MNIST paper profile trained on the GPU from real MNIST (``--data-dir``): seconds, test
   accuracy, steps/s (``skipped: MNIST not in <dir>`` where the files are missing);
c. Fig. 3's Hessian (MNIST model at initialisation, first 128 training images) on the GPU and on
   the CPU in float32, and on the first 16 images in float64: seconds on each device and
   max|H_gpu − H_cpu| / max|H_cpu|;
d. the 8-block CIFAR-100 model (paper profile) trained for ``--cifar-steps`` optimiser steps on a
   CIFAR-format set of random uint8 images written here into a temporary directory: images/s,
   ``torch.cuda.max_memory_allocated`` and the estimated wall time of the full 200-epoch run on
   the 50,000-image set (steps per epoch × epochs / measured steps/s);
e. the block spectra of the 8-block model at batch 128 (``top_eigenvalues`` over every parameter
   group plus the whole Hessian, ``--lanczos-iters`` Lanczos steps): seconds and overall λ_max.

Time budget (``--budget-s``, counted from the start of the script): a step starts only if its
estimate (``ESTIMATE_S``, upper bounds for an H200 host; for the MNIST training, a timed probe of
the run itself) fits in what is left, otherwise it is recorded as ``skipped (budget)``; a timer
stops a step that overruns the budget (``aborted (budget)``). The steps run in the order a, c, d,
e, b: the MNIST training is the longest and least predictable, so it gets what is left and is
sized from its own probe. Every number, the device, the torch/CUDA versions and each step's wall
time go to ``--out`` (the benchmark document of ``_bench.py``, one row per step, rewritten atomically
after every step); ``benchmarks/report.py`` renders it as the section "GPU check" of RESULTS.md.
The exit status is 1 when a step failed or errored (with ``--quick``:
unless every step is ``ok``).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import math
import os
import pickle
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NAME = "gpu_check"
DEFAULT_BUDGET_S = 540.0
CIFAR_FULL_TRAIN = 50_000  # images in the real CIFAR-100 training set
NO_CUDA_LINE = ("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); "
                "nothing was measured and nothing was written (--quick runs the steps on the CPU).")


@dataclass(frozen=True)
class Sizes:
    """What each step measures: :data:`FULL` on a CUDA machine, :data:`QUICK` with ``--quick``."""

    device_tests: tuple = ()  # step a: extra pytest arguments (a selection)
    hessian_batches: tuple = (("float32", 128), ("float64", 16))  # step c: (dtype, first images of MNIST)
    hessian_model: tuple = ()  # step c: overrides of build_model("mnist")
    cifar_overrides: tuple = ()  # step d: overrides of train_config("cifar100", "paper")
    cifar_warmup_steps: int = 10  # step d: untimed steps before the timed ones
    cifar_steps: int = 200  # step d: timed steps (--cifar-steps)
    spectra_batch: int = 128  # step e
    spectra_model: tuple = ()  # step e: overrides of build_model("cifar100")
    lanczos_iters: int = 20  # step e (--lanczos-iters)
    mnist_overrides: tuple = ()  # step b: overrides of train_config("mnist", "paper")
    mnist_subset: tuple | None = None  # step b: (train, test) images; None: all of MNIST
    mnist_probe: tuple = (20, 200)  # step b: (untimed warm-up steps, timed probe steps) that size the full run


_TINY_VIT = (("d_ff", 8), ("d_k", 4), ("d_model", 4), ("patch_size", 7))  # 454 parameters (tests/cases.py)
_SMALL_CIFAR = (("d_ff", 16), ("d_k", 8), ("d_model", 8), ("n_blocks", 2), ("patch_size", 8))
FULL = Sizes()
QUICK = Sizes(
    device_tests=("-k", "test_resolve_device"), hessian_batches=(("float32", 4), ("float64", 2)),
    hessian_model=_TINY_VIT, cifar_overrides=(("batch_size", 8), ("model_overrides", _SMALL_CIFAR)),
    cifar_warmup_steps=1, cifar_steps=2, spectra_batch=2, spectra_model=_SMALL_CIFAR, lanczos_iters=3,
    mnist_overrides=(("batch_size", 32), ("epochs", 1), ("model_overrides", _TINY_VIT)), mnist_subset=(256, 64),
    mnist_probe=(2, 3),
)


def device_test_args(device: str, sizes: Sizes = FULL) -> list[str]:
    """The pytest arguments of step a: the device-parametrised tests on ``device``."""
    return ["-m", "pytest", "-q", "-m", "device", "--device", device, "tests/test_device.py",
            "-p", "no:cacheprovider", *sizes.device_tests]

# Upper-bound seconds per (sub)step on an H200 host with 16 CPU cores; a step starts only if its
# estimate fits the remaining budget.
ESTIMATE_S = {
    "a": 120.0,          # pytest start-up, CUDA initialisation, four small tests
    "b_probe": 45.0,     # MNIST load (md5 + parse) and 220 timed steps; the full run is sized from them
    "c_float32": 120.0,  # dense 4186 x 4186 Hessian at batch 128: GPU, then CPU
    "c_float64": 60.0,   # the same at batch 16 in float64
    "d": 120.0,          # write + read ~54k random CIFAR images, 10 warm-up + 200 timed steps
    "e": 180.0,          # 59 blocks + overall x 20 Lanczos steps = ~1,200 Hessian-vector products
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


def write_cifar_format(root, n_train: int, n_test: int, seed: int = 0) -> Path:
    """Random uint8 images and labels in CIFAR-100's python pickle format: ``root/cifar-100-python``
    with ``train``, ``test`` and ``meta`` (readable by torchvision's and ``curvature_gap.data``'s
    CIFAR-100 loader, which then needs ``verify_md5=False``). Returns ``root``."""
    import numpy as np

    root = Path(root)
    d = root / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, (n, 3 * 32 * 32), dtype=np.uint8)
        fine = rng.integers(0, 100, n)
        entry = {"data": images, "fine_labels": fine.tolist(), "coarse_labels": (fine // 5).tolist(),
                 "filenames": [f"img{i}.png" for i in range(n)]}
        with open(d / name, "wb") as f:
            pickle.dump(entry, f, protocol=4)
    with open(d / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"class{i}" for i in range(100)],
                     "coarse_label_names": [f"super{i}" for i in range(20)]}, f, protocol=4)
    return root


def max_rel_diff(a, b) -> float:
    """max|a − b| / max|b| (float64; on the CPU)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    den = b.abs().max().item()
    num = (a - b).abs().max().item()
    return num / den if den > 0 else num


STEP_TITLES = {
    "a": "a. device tests on CUDA",
    "b": "b. MNIST paper training",
    "c": "c. Fig. 3 Hessian, GPU vs CPU",
    "d": "d. CIFAR-100 8-block training",
    "e": "e. block spectra, 8-block model",
}



# ====================================================================== the GPU steps
@dataclass
class Context:
    data_dir: Path
    scratch: Path
    budget: Budget
    progress: bool
    cifar_steps: int = 200
    lanczos_iters: int = 20
    device: str = "cuda"  # every "GPU" side runs here; "cpu" only in a quick run without CUDA
    sizes: Sizes = FULL
    _mnist: dict = field(default_factory=dict)

    def mnist(self):
        """(train, test) MNIST datasets from ``data_dir``; the exception from the loader if missing."""
        if "ds" not in self._mnist:
            from curvature_gap import data as data_mod

            try:
                t0 = time.perf_counter()
                tr = data_mod.load("mnist", self.data_dir, train=True)
                te = data_mod.load("mnist", self.data_dir, train=False)
                self._mnist["ds"] = (tr, te)
                self._mnist["load_s"] = time.perf_counter() - t0
            except Exception as exc:  # noqa: BLE001 - any loader failure means "not usable here"
                self._mnist["ds"] = exc
        return self._mnist["ds"]


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _sync(device: str):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    """``torch.cuda.max_memory_allocated`` in GiB; None on the CPU (a quick run without CUDA)."""
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def step_a(ctx: Context) -> dict:
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    args = device_test_args(ctx.device, ctx.sizes)
    cmd = [sys.executable, *args]
    timeout = max(1.0, ctx.budget.remaining())
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        return dict(status="aborted (budget)", command=" ".join(["python", *args]),
                    seconds=time.perf_counter() - t0, tail=out[-2000:])
    seconds = time.perf_counter() - t0
    output = proc.stdout + proc.stderr
    counts = parse_pytest_summary(proc.stdout or output)
    ok = proc.returncode == 0 and counts["failed"] == 0 and counts["errors"] == 0 and counts["passed"] > 0
    rec = dict(status="ok" if ok else "failed", command=" ".join(["python", *args]),
               returncode=proc.returncode, passed=counts["passed"], failed=counts["failed"],
               errors=counts["errors"], skipped=counts["skipped"], pytest_seconds=counts["seconds"],
               seconds=seconds)
    if not ok:
        rec["tail"] = output[-4000:]
    log(f"a. device tests: {rec['passed']} passed, {rec['failed']} failed, {rec['errors']} errors "
        f"({seconds:.1f} s, rc {proc.returncode})")
    return rec


def _mnist_batch(ctx: Context, n: int):
    """The first ``n`` MNIST training images and labels, or deterministic MNIST-shaped noise where
    MNIST is missing (so the GPU-vs-CPU comparison still runs); with a description of which."""
    import torch

    ds = ctx.mnist()
    if isinstance(ds, Exception):
        g = torch.Generator().manual_seed(0)
        X = torch.rand(n, 1, 28, 28, generator=g) * 2 - 1
        y = torch.randint(0, 10, (n,), generator=g)
        return X, y, f"synthetic MNIST-shaped inputs (MNIST not in {ctx.data_dir})"
    tr = ds[0]
    return tr.images[:n].clone(), tr.labels[:n].clone(), f"first {n} MNIST training images"


def step_c(ctx: Context) -> dict:
    import torch

    from curvature_gap.hessian import hessian
    from curvature_gap.model import build_model

    batches, overrides, dev = ctx.sizes.hessian_batches, dict(ctx.sizes.hessian_model), ctx.device
    X, y, source = _mnist_batch(ctx, max(n for _, n in batches))
    rec = dict(data=source, parameters=sum(p.numel() for p in build_model("mnist", seed=0, **overrides).parameters()),
               cpu_threads=torch.get_num_threads(), device=dev, model_overrides=overrides)
    for dtype_name, n in batches:
        est = ESTIMATE_S[f"c_{dtype_name}"]
        if not ctx.budget.fits(est):
            rec[dtype_name] = dict(status="skipped (budget)", batch=n)
            log(f"c. {dtype_name}: skipped (budget)")
            continue
        dt = getattr(torch, dtype_name)
        Xc, yc = X[:n].to(dt), y[:n]
        Xg, yg = Xc.to(dev), yc.to(dev)
        model_cpu = build_model("mnist", seed=0, **overrides).to(dtype=dt)
        model_gpu = build_model("mnist", seed=0, **overrides).to(device=dev, dtype=dt)
        t0 = time.perf_counter()
        hessian(model_gpu, (Xg[:2], yg[:2]))  # warm-up: kernels, cuBLAS handles
        _sync(dev)
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        Hg = hessian(model_gpu, (Xg, yg))
        _sync(dev)
        gpu_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        Hc = hessian(model_cpu, (Xc, yc))
        cpu_s = time.perf_counter() - t0
        Hg_cpu = Hg.cpu()
        diff = max_rel_diff(Hg_cpu, Hc)
        rec[dtype_name] = dict(status="ok", batch=n, shape=list(Hc.shape), gpu_s=gpu_s, gpu_warmup_s=warm,
                               cpu_s=cpu_s, speedup=cpu_s / gpu_s if gpu_s > 0 else None,
                               max_rel_diff=diff, max_abs_h=Hc.abs().max().item(),
                               finite=bool(torch.isfinite(Hg_cpu).all()))
        log(f"c. {dtype_name} batch {n}: GPU {gpu_s:.2f} s, CPU {cpu_s:.2f} s, max rel diff {diff:.2e}")
        del Hg, Hc, Hg_cpu, model_gpu, Xg, yg
        if dev == "cuda":
            torch.cuda.empty_cache()
    statuses = [rec[k]["status"] for k in ("float32", "float64")]
    rec["status"] = "ok" if "ok" in statuses else statuses[0]
    return rec


def _load_cifar(root: Path, train: bool):
    from curvature_gap import data as data_mod

    try:  # the test-written set has not CIFAR-100's md5s
        return data_mod.load("cifar100", root, train=train, verify_md5=False)
    except TypeError:  # a loader without the verify_md5 switch
        return data_mod.load("cifar100", root, train=train)


def step_d(ctx: Context) -> dict:
    import torch

    from curvature_gap.config import train_config
    from curvature_gap.model import build_model
    from curvature_gap.train import Datasets, train

    cfg = train_config("cifar100", "paper", **dict(ctx.sizes.cifar_overrides))
    warm, steps, dev = ctx.sizes.cifar_warmup_steps, ctx.cifar_steps, ctx.device
    bs = cfg.batch_size
    n_train = (warm + steps + 1) * bs  # one epoch longer than the run: no evaluation inside the timing
    t0 = time.perf_counter()
    root = write_cifar_format(ctx.scratch / "cifar", n_train, n_test=bs, seed=0)
    ds = Datasets(_load_cifar(root, True), _load_cifar(root, False))
    data_s = time.perf_counter() - t0
    log(f"d. wrote and read {n_train:,} random CIFAR-format images in {data_s:.1f} s")
    out = ctx.scratch / "cifar-run"
    _reset_peak(dev)
    t0 = time.perf_counter()
    train(cfg, out, device=dev, datasets=ds, max_steps=warm, progress=False)
    _sync(dev)
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(cfg, out, device=dev, datasets=ds, max_steps=warm + steps, progress=ctx.progress)
    _sync(dev)
    secs = time.perf_counter() - t0
    peak = _peak_gib(dev)
    sps = steps / secs
    est = estimate_full_run(CIFAR_FULL_TRAIN, bs, cfg.epochs, sps)
    mc = cfg.model_config()
    rec = dict(status="ok", config_hash=cfg.hash(), n_blocks=mc.n_blocks, d_model=mc.d_model, device=dev,
               parameters=sum(p.numel() for p in build_model("cifar100", seed=0, **dict(cfg.model_overrides)).parameters()),
               batch_size=bs, warmup_steps=warm, steps=steps, n_train=n_train, data_s=data_s, warmup_s=warm_s,
               seconds=secs, steps_per_s=sps, images_per_s=sps * bs,
               max_memory_allocated_bytes=None if peak is None else int(peak * 2**30),
               max_memory_allocated_gib=peak, full_run_estimate=est,
               note="timed call includes resuming from the warm-up checkpoint and writing the final one")
    log(f"d. {steps} steps in {secs:.1f} s: {rec['images_per_s']:.0f} images/s, peak {'–' if peak is None else f'{peak:.2f}'} GiB, "
        f"full 200-epoch run ≈ {est['hours']:.2f} h")
    del ds
    return rec


def step_e(ctx: Context) -> dict:
    import torch

    from curvature_gap.hessian.spectra import top_eigenvalues
    from curvature_gap.model import build_model

    n, dev = ctx.sizes.spectra_batch, ctx.device
    g = torch.Generator().manual_seed(0)
    X = (torch.rand(n, 3, 32, 32, generator=g) * 2 - 1).to(dev)
    y = torch.randint(0, 100, (n,), generator=g).to(dev)
    model = build_model("cifar100", seed=0, **dict(ctx.sizes.spectra_model)).to(dev)
    _reset_peak(dev)
    _sync(dev)
    t0 = time.perf_counter()
    sp = top_eigenvalues(model, (X, y), groups=None, iters=ctx.lanczos_iters)
    _sync(dev)
    secs = time.perf_counter() - t0
    blocks = {n: dict(size=b.size, lambda_max=b.lambda_max, lambda_min=b.lambda_min, iters=b.iters)
              for n, b in sp.blocks.items()}
    top = max(blocks.items(), key=lambda kv: kv[1]["lambda_max"]) if blocks else (None, {})
    rec = dict(status="ok", batch=n, iters=ctx.lanczos_iters, n_blocks=len(blocks), device=dev,
               data="synthetic CIFAR-shaped inputs (uniform in [-1, 1], seed 0)",
               parameters=sum(p.numel() for p in model.parameters()), seconds=secs, hvp_calls=sp.hvp_calls,
               overall_lambda_max=sp.overall.lambda_max, overall_lambda_min=sp.overall.lambda_min,
               largest_block=top[0], largest_block_lambda_max=top[1].get("lambda_max"),
               max_memory_allocated_gib=_peak_gib(dev), blocks=blocks)
    log(f"e. {len(blocks)} blocks + overall, {ctx.lanczos_iters} Lanczos steps: {secs:.1f} s, "
        f"overall λ_max {rec['overall_lambda_max']:.4g}")
    return rec


def step_b(ctx: Context) -> dict:
    from curvature_gap.config import train_config
    from curvature_gap.train import Datasets, train

    ds = ctx.mnist()
    if isinstance(ds, Exception):
        log(f"b. skipped: MNIST not in {ctx.data_dir}")
        return dict(status=f"skipped: MNIST not in {ctx.data_dir}", reason=str(ds)[:500])
    cfg = train_config("mnist", "paper", **dict(ctx.sizes.mnist_overrides))
    sub = ctx.sizes.mnist_subset
    datasets = Datasets(*ds) if sub is None else Datasets(ds[0].subset(sub[0]), ds[1].subset(sub[1]))
    est = estimate_full_run(len(datasets.train), cfg.batch_size, cfg.epochs, 1.0)
    total = est["total_steps"]
    warm = min(ctx.sizes.mnist_probe[0], total)
    probe = min(ctx.sizes.mnist_probe[1], total - warm)
    dev = ctx.device
    out = ctx.scratch / "mnist-paper"
    t0 = time.perf_counter()
    train(cfg, out, device=dev, datasets=datasets, max_steps=warm, progress=False)
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(cfg, out, device=dev, datasets=datasets, max_steps=warm + probe, progress=False)
    probe_s = time.perf_counter() - t0
    rate = probe / probe_s if probe and probe_s > 0 else None
    rest = total - warm - probe
    # the rest of the steps at the probe's rate, +15 % and 15 s for the per-epoch evaluations
    est_rest = (rest / rate * 1.15 + 15.0) if rate else 60.0
    rec = dict(config_hash=cfg.hash(), epochs=cfg.epochs, batch_size=cfg.batch_size, n_train=len(datasets.train), device=dev,
               total_steps=total, load_s=ctx._mnist.get("load_s"), probe_steps=probe, probe_steps_per_s=rate,
               estimated_full_s=warm_s + probe_s + est_rest)
    log(f"b. probe: {rate or 0:.1f} steps/s; the remaining {rest} steps need ≈ {est_rest:.0f} s, "
        f"{ctx.budget.remaining():.0f} s left")
    if not ctx.budget.fits(est_rest + 10.0):  # + time to write the outputs
        rec["status"] = "skipped (budget)"
        return rec
    t0 = time.perf_counter()
    metrics = train(cfg, out, device=dev, datasets=datasets, progress=ctx.progress)
    rest_s = time.perf_counter() - t0
    secs = warm_s + probe_s + rest_s
    steps = metrics.get("steps", total)
    rec.update(status="ok", seconds=secs, steps=steps, steps_per_s=steps / secs,
               test_accuracy=metrics.get("test_accuracy"), train_accuracy=metrics.get("train_accuracy"),
               train_wall_seconds=metrics.get("wall_seconds"), weights_sha256=metrics.get("weights_sha256"))
    log(f"b. MNIST paper: {secs:.1f} s, test accuracy {100 * (rec['test_accuracy'] or 0):.2f} %, "
        f"{rec['steps_per_s']:.1f} steps/s")
    return rec


STEPS = (  # (key, estimate key, function) in execution order
    ("a", "a", step_a),
    ("c", "c_float32", step_c),
    ("d", "d", step_d),
    ("e", "e", step_e),
    ("b", "b_probe", step_b),
)


def run_step(report: dict, key: str, est_s: float, fn, ctx: Context, save) -> None:
    """Run one step unless its estimate does not fit; record status, numbers and wall time; save."""
    budget = ctx.budget
    rec: dict = dict(title=STEP_TITLES[key], estimate_s=est_s)
    if not budget.fits(est_s):
        rec.update(status="skipped (budget)", remaining_s=round(budget.remaining(), 1), wall_s=0.0)
        log(f"{STEP_TITLES[key]}: skipped (budget): needs ≈ {est_s:.0f} s, {budget.remaining():.0f} s left")
    else:
        log(f"{STEP_TITLES[key]} ({budget.remaining():.0f} s of the budget left)")
        t0 = time.perf_counter()
        try:
            rec.update(fn(ctx))
            rec.setdefault("status", "ok")
        except BudgetExceeded:
            rec["status"] = "aborted (budget)"
            log(f"{STEP_TITLES[key]}: aborted (budget)")
        except Exception as exc:  # noqa: BLE001 - one failing step must not lose the others
            rec["status"] = f"error: {type(exc).__name__}: {exc}"[:300]
            rec["traceback"] = traceback.format_exc()[-4000:]
            log(f"{STEP_TITLES[key]}: {rec['status']}")
        rec["wall_s"] = time.perf_counter() - t0
    report["steps"][key] = rec
    save()


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


def _shown(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else str(path)
    except ValueError:
        return str(path)


def _in_repo(path: Path) -> str:
    """``path`` relative to the repository root when inside it (as RESULTS.md cites files), else absolute."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_args(argv):
    from _bench import add_switches

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_switches(ap)
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="wall-clock budget in seconds for the whole call (default: %(default)s)")
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CURVATURE_GAP_DATA") or "data"),
                    help="directory holding MNIST/raw (default: $CURVATURE_GAP_DATA or ./data)")
    ap.add_argument("--cifar-steps", type=int, default=None,
                    help=f"timed optimiser steps of step d (default: {FULL.cifar_steps}; {QUICK.cifar_steps} with --quick)")
    ap.add_argument("--lanczos-iters", type=int, default=None,
                    help=f"Lanczos steps per block in step e (default: {FULL.lanczos_iters}; {QUICK.lanczos_iters} with --quick)")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="tqdm bars during training (default: when stderr is a terminal)")
    return ap.parse_args(argv)


def step_rows(report_steps: dict) -> list[dict]:
    """The step records as the document's rows, in the order of the table (a–e)."""
    return [dict(step=k, **report_steps[k]) for k in ("a", "b", "c", "d", "e") if k in report_steps]


def exit_status(rows: list[dict], quick: bool) -> int:
    """1 when a step failed, errored or was aborted; with ``quick`` also when any step is not ``ok``."""
    bad = [r for r in rows if str(r.get("status")).startswith(("error", "failed", "aborted"))
           or (quick and r.get("status") != "ok")]
    for r in bad:
        print(f"gpu_check: step {r['step']} ({r.get('title', '')}): {r.get('status')}", file=sys.stderr, flush=True)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    cuda = cuda_available()
    if not cuda and not args.quick:
        print(NO_CUDA_LINE, flush=True)
        return 0
    budget = Budget(args.budget_s, start=_T_START)
    try:  # a checkout without `pip install -e .`
        import curvature_gap  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "src"))
    from _bench import Run, out_path

    from curvature_gap.io import atomic_write_json

    device, sizes = ("cuda" if cuda else "cpu"), (QUICK if args.quick else FULL)
    if args.quick:  # tiny products only lose from thread synchronisation (badly so on shared cores)
        import torch

        torch.set_num_threads(1)
    bench = Run(NAME, args.quick, argv)
    out_json = out_path(NAME, args).resolve()
    report = dict(budget_s=args.budget_s, device=device_info(device), data_dir=str(args.data_dir), steps={},
                  outputs=dict(json=str(out_json), json_shown=_in_repo(out_json)), estimates_s=ESTIMATE_S)

    def save():
        import torch

        doc = bench.document(step_rows(report["steps"]),  # saved after each step: never empty
                             dict(budget_s=args.budget_s, device=device, sizes=dataclasses.asdict(sizes),
                                  data_dir=str(args.data_dir)), threads=torch.get_num_threads())
        doc.update({k: v for k, v in report.items() if k != "steps"}, wall_s=budget.elapsed())
        atomic_write_json(out_json, doc)

    log(f"{report['device']['name']}, torch {report['device']['torch']}, CUDA {report['device']['cuda']}; "
        f"budget {args.budget_s:.0f} s{'; quick sizes' if args.quick else ''}")
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    armed = {"on": True}

    def on_alarm(signum, frame):
        if armed["on"]:
            raise BudgetExceeded()

    have_alarm = hasattr(signal, "SIGALRM")
    if have_alarm:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(budget.remaining(), 0.01))
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
            ctx = Context(data_dir=args.data_dir, scratch=Path(scratch), budget=budget, progress=progress,
                          cifar_steps=args.cifar_steps or sizes.cifar_steps,
                          lanczos_iters=args.lanczos_iters or sizes.lanczos_iters, device=device, sizes=sizes)
            try:
                for key, est_key, fn in STEPS:
                    run_step(report, key, ESTIMATE_S[est_key], fn, ctx, save)
            except BudgetExceeded:  # fired between steps (while saving)
                for key, _, _ in STEPS:
                    report["steps"].setdefault(key, dict(title=STEP_TITLES[key], status="skipped (budget)", wall_s=0.0))
            finally:
                armed["on"] = False
                if have_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        armed["on"] = False
    report["finished"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    save()
    log(f"done in {budget.elapsed():.0f} s: every number in {_shown(out_json)} "
        "(`python benchmarks/report.py` renders it into RESULTS.md)")
    return exit_status(step_rows(report["steps"]), args.quick)


if __name__ == "__main__":
    sys.exit(main())
