"""GPU check: the package's CUDA paths, tested and timed in one call of at most ~9 minutes.

    python benchmarks/gpu_check.py [--out benchmarks/gpu.json] [--results benchmarks/RESULTS.md]
                                   [--budget-s 540] [--data-dir data]

Without CUDA it prints one line saying so, measures and writes nothing, and exits 0. With CUDA:

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
time go to ``--out`` (JSON, rewritten atomically after every step) and, at the end, to the section
``## GPU check`` of ``--results`` between ``<!-- gpu-check:start -->`` and ``<!-- gpu-check:end -->``
(replaced in place, or appended).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import pickle
import platform
import re
import shlex
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
SECTION = "## GPU check"
START_MARK = "<!-- gpu-check:start -->"
END_MARK = "<!-- gpu-check:end -->"
DEFAULT_BUDGET_S = 540.0
DEVICE_TEST_ARGS = ["-m", "pytest", "-q", "-m", "device", "--device", "cuda", "tests/test_device.py",
                    "-p", "no:cacheprovider"]
CIFAR_FULL_TRAIN = 50_000  # images in the real CIFAR-100 training set
DEV = "cuda"  # the device every GPU step uses
HESSIAN_BATCHES = (("float32", 128), ("float64", 16))  # step c: (dtype, first images of MNIST)
SPECTRA_BATCH = 128  # step e
CIFAR_WARMUP_STEPS = 10  # step d: untimed steps before the timed ones
MNIST_PROBE = (20, 200)  # step b: (untimed warm-up steps, timed probe steps) that size the full run
NO_CUDA_LINE = ("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); "
                "nothing was measured and nothing was written.")

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


def replace_section(text: str, body: str) -> str:
    """``text`` with the block between the gpu-check markers (markers included) replaced by
    ``START_MARK + body + END_MARK``, or with that block appended when there are no markers.

    Raises ValueError on a damaged block (one marker without the other, end before start, or a
    marker twice) rather than guess what to overwrite.
    """
    block = f"{START_MARK}\n{body.strip()}\n{END_MARK}"
    n_start, n_end = text.count(START_MARK), text.count(END_MARK)
    if n_start == 0 and n_end == 0:
        head = text.rstrip("\n")
        return f"{head}\n\n{block}\n" if head else f"{block}\n"
    if n_start != 1 or n_end != 1:
        raise ValueError(f"expected one {START_MARK} and one {END_MARK}, found {n_start} and {n_end}")
    i, j = text.index(START_MARK), text.index(END_MARK)
    if j < i:
        raise ValueError(f"{END_MARK} comes before {START_MARK}")
    return text[:i] + block + text[j + len(END_MARK):]


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


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path``, then ``os.replace`` it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would outlive the replace
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def command_line(argv: list[str]) -> str:
    """The command as typed: ``python <script path relative to the working directory> args``."""
    script = Path(__file__).resolve()
    try:
        shown = os.path.relpath(script)
    except ValueError:  # another drive (Windows)
        shown = str(script)
    if shown.startswith(".."):
        shown = str(script)
    return " ".join(["python", shlex.quote(shown), *map(shlex.quote, argv)])


def fmt(v, digits: int = 3) -> str:
    """A number for the table: – for None, ints with separators, floats to ``digits`` significant."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) < 1e-3 or abs(v) >= 1e6:
            return f"{v:.{max(digits - 1, 1)}e}"
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"
    return str(v)


def _wall(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def _rows_a(s: dict) -> list[tuple[str, str]]:
    return [("passed / failed / errors", f"{s.get('passed', 0)} / {s.get('failed', 0)} / {s.get('errors', 0)}"),
            ("pytest seconds", fmt(s.get("pytest_seconds")))]


def _rows_b(s: dict) -> list[tuple[str, str]]:
    rows = [("test accuracy", f"{100 * s['test_accuracy']:.2f} %" if s.get("test_accuracy") is not None else "–"),
            ("training seconds", fmt(s.get("seconds"))),
            ("steps/s (whole run, with evaluations)", fmt(s.get("steps_per_s"))),
            ("steps/s (steady, probe)", fmt(s.get("probe_steps_per_s")))]
    if s.get("seconds") is None and s.get("estimated_full_s") is not None:
        rows.append(("estimated full run [s]", fmt(s.get("estimated_full_s"))))
    return rows


def _rows_c(s: dict) -> list[tuple[str, str]]:
    rows = []
    for dt in ("float32", "float64"):
        r = s.get(dt) or {}
        if r.get("status", "ok") != "ok":
            rows.append((f"{dt}", r.get("status", "–")))
            continue
        b = r.get("batch")
        rows += [(f"{dt}, batch {b}: GPU / CPU seconds", f"{fmt(r.get('gpu_s'))} / {fmt(r.get('cpu_s'))}"),
                 (f"{dt}, batch {b}: max rel diff", fmt(r.get("max_rel_diff")))]
    return rows


def _rows_d(s: dict) -> list[tuple[str, str]]:
    est = s.get("full_run_estimate") or {}
    return [("images/s", fmt(s.get("images_per_s"))),
            ("steps/s", fmt(s.get("steps_per_s"))),
            ("max memory allocated [GiB]", fmt(s.get("max_memory_allocated_gib"))),
            (f"full run estimate ({fmt(est.get('total_steps'))} steps)",
             f"{fmt(est.get('hours'))} h" if est.get("hours") is not None else "–")]


def _rows_e(s: dict) -> list[tuple[str, str]]:
    return [("seconds", fmt(s.get("seconds"))),
            ("overall λ_max", fmt(s.get("overall_lambda_max"), 4)),
            ("blocks, Hessian-vector products", f"{fmt(s.get('n_blocks'))}, {fmt(s.get('hvp_calls'))}")]


STEP_ROWS = {"a": _rows_a, "b": _rows_b, "c": _rows_c, "d": _rows_d, "e": _rows_e}
STEP_TITLES = {
    "a": "a. device tests on CUDA",
    "b": "b. MNIST paper training",
    "c": "c. Fig. 3 Hessian, GPU vs CPU",
    "d": "d. CIFAR-100 8-block training",
    "e": "e. block spectra, 8-block model",
}


def render_markdown(report: dict) -> str:
    """The ``## GPU check`` section (without markers) for RESULTS.md."""
    dev = report.get("device") or {}
    out = [SECTION, ""]
    out.append(f"Run {report.get('started', '?')} with `{report.get('command', '?')}` "
               f"({fmt(report.get('wall_s'))} s of a {fmt(report.get('budget_s'))} s budget). "
               f"Device: {dev.get('name', '?')} (compute capability {dev.get('capability', '?')}, "
               f"{fmt(dev.get('memory_gib'))} GiB), driver {fmt(dev.get('driver'))}; torch {dev.get('torch', '?')}, "
               f"CUDA {dev.get('cuda', '?')}, cuDNN {dev.get('cudnn', '?')}; host: {dev.get('host_cpu', '?')}, "
               f"{dev.get('cpu_count', '?')} CPUs, {dev.get('torch_threads', '?')} torch threads for the CPU side.")
    out += ["", "| step | status | wall [s] | quantity | value |", "|---|---|---:|---|---:|"]
    steps = report.get("steps") or {}
    for key in ("a", "b", "c", "d", "e"):
        s = steps.get(key)
        title = STEP_TITLES[key]
        if s is None:
            out.append(f"| {title} | not run | – | – | – |")
            continue
        status = str(s.get("status", "?")).replace("|", "\\|").splitlines()[0][:120]
        show = s.get("status") in ("ok", "failed") or (key == "b" and s.get("probe_steps_per_s") is not None)
        rows = STEP_ROWS[key](s) if show else []
        if not rows:
            out.append(f"| {title} | {status} | {_wall(s.get('wall_s'))} | – | – |")
            continue
        for i, (q, v) in enumerate(rows):
            if i == 0:
                out.append(f"| {title} | {status} | {_wall(s.get('wall_s'))} | {q} | {v} |")
            else:
                out.append(f"| | | | {q} | {v} |")
    notes = []
    c = steps.get("c") or {}
    if c.get("data"):
        notes.append(f"c: data {c['data']}; model `build_model(\"mnist\", seed=0)` ({fmt(c.get('parameters'))} parameters).")
    d = steps.get("d") or {}
    if d.get("status") == "ok":
        notes.append(f"d: {fmt(d.get('steps'))} timed steps (after {fmt(d.get('warmup_steps'))} untimed) at batch "
                     f"{fmt(d.get('batch_size'))} on random uint8 images in CIFAR format ({fmt(d.get('n_train'))} written); "
                     f"the estimate is optimiser steps only ({fmt(d.get('full_run_estimate', {}).get('steps_per_epoch'))} "
                     "steps/epoch × 200 epochs on 50,000 images), without per-epoch evaluation.")
    e = steps.get("e") or {}
    if e.get("status") == "ok":
        notes.append(f"e: {fmt(e.get('iters'))} Lanczos steps per block at batch {fmt(e.get('batch'))}, "
                     f"{e.get('data', 'synthetic inputs')}; model at initialisation (seed 0).")
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    json_shown = (report.get("outputs") or {}).get("json_shown", "benchmarks/gpu.json")
    out += ["", f"Every number, with the per-step details, is in `{json_shown}`."]
    return "\n".join(out) + "\n"


# ====================================================================== the GPU steps
@dataclass
class Context:
    data_dir: Path
    scratch: Path
    budget: Budget
    progress: bool
    cifar_steps: int = 200
    lanczos_iters: int = 20
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


def _sync():
    import torch

    torch.cuda.synchronize()


def step_a(ctx: Context) -> dict:
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, *DEVICE_TEST_ARGS]
    timeout = max(1.0, ctx.budget.remaining())
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or "") if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
        return dict(status="aborted (budget)", command=" ".join(["python", *DEVICE_TEST_ARGS]),
                    seconds=time.perf_counter() - t0, tail=out[-2000:])
    seconds = time.perf_counter() - t0
    output = proc.stdout + proc.stderr
    counts = parse_pytest_summary(proc.stdout or output)
    ok = proc.returncode == 0 and counts["failed"] == 0 and counts["errors"] == 0 and counts["passed"] > 0
    rec = dict(status="ok" if ok else "failed", command=" ".join(["python", *DEVICE_TEST_ARGS]),
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

    X, y, source = _mnist_batch(ctx, max(n for _, n in HESSIAN_BATCHES))
    rec = dict(data=source, parameters=sum(p.numel() for p in build_model("mnist", seed=0).parameters()),
               cpu_threads=torch.get_num_threads())
    for dtype_name, n in HESSIAN_BATCHES:
        est = ESTIMATE_S[f"c_{dtype_name}"]
        if not ctx.budget.fits(est):
            rec[dtype_name] = dict(status="skipped (budget)", batch=n)
            log(f"c. {dtype_name}: skipped (budget)")
            continue
        dt = getattr(torch, dtype_name)
        Xc, yc = X[:n].to(dt), y[:n]
        Xg, yg = Xc.to(DEV), yc.to(DEV)
        model_cpu = build_model("mnist", seed=0).to(dtype=dt)
        model_gpu = build_model("mnist", seed=0).to(device=DEV, dtype=dt)
        t0 = time.perf_counter()
        hessian(model_gpu, (Xg[:2], yg[:2]))  # warm-up: kernels, cuBLAS handles
        _sync()
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        Hg = hessian(model_gpu, (Xg, yg))
        _sync()
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

    cfg = train_config("cifar100", "paper")
    warm, steps = CIFAR_WARMUP_STEPS, ctx.cifar_steps
    bs = cfg.batch_size
    n_train = (warm + steps + 1) * bs  # one epoch longer than the run: no evaluation inside the timing
    t0 = time.perf_counter()
    root = write_cifar_format(ctx.scratch / "cifar", n_train, n_test=bs, seed=0)
    ds = Datasets(_load_cifar(root, True), _load_cifar(root, False))
    data_s = time.perf_counter() - t0
    log(f"d. wrote and read {n_train:,} random CIFAR-format images in {data_s:.1f} s")
    out = ctx.scratch / "cifar-run"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    train(cfg, out, device=DEV, datasets=ds, max_steps=warm, progress=False)
    _sync()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(cfg, out, device=DEV, datasets=ds, max_steps=warm + steps, progress=ctx.progress)
    _sync()
    secs = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated()
    sps = steps / secs
    est = estimate_full_run(CIFAR_FULL_TRAIN, bs, cfg.epochs, sps)
    mc = cfg.model_config()
    rec = dict(status="ok", config_hash=cfg.hash(), n_blocks=mc.n_blocks, d_model=mc.d_model,
               parameters=sum(p.numel() for p in build_model("cifar100", seed=0).parameters()),
               batch_size=bs, warmup_steps=warm, steps=steps, n_train=n_train, data_s=data_s, warmup_s=warm_s,
               seconds=secs, steps_per_s=sps, images_per_s=sps * bs, max_memory_allocated_bytes=int(peak),
               max_memory_allocated_gib=peak / 2**30, full_run_estimate=est,
               note="timed call includes resuming from the warm-up checkpoint and writing the final one")
    log(f"d. {steps} steps in {secs:.1f} s: {rec['images_per_s']:.0f} images/s, peak {rec['max_memory_allocated_gib']:.2f} GiB, "
        f"full 200-epoch run ≈ {est['hours']:.2f} h")
    del ds
    return rec


def step_e(ctx: Context) -> dict:
    import torch

    from curvature_gap.hessian.spectra import top_eigenvalues
    from curvature_gap.model import build_model

    g = torch.Generator().manual_seed(0)
    X = (torch.rand(SPECTRA_BATCH, 3, 32, 32, generator=g) * 2 - 1).to(DEV)
    y = torch.randint(0, 100, (SPECTRA_BATCH,), generator=g).to(DEV)
    model = build_model("cifar100", seed=0).to(DEV)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    _sync()
    t0 = time.perf_counter()
    sp = top_eigenvalues(model, (X, y), groups=None, iters=ctx.lanczos_iters)
    _sync()
    secs = time.perf_counter() - t0
    blocks = {n: dict(size=b.size, lambda_max=b.lambda_max, lambda_min=b.lambda_min, iters=b.iters)
              for n, b in sp.blocks.items()}
    top = max(blocks.items(), key=lambda kv: kv[1]["lambda_max"]) if blocks else (None, {})
    rec = dict(status="ok", batch=SPECTRA_BATCH, iters=ctx.lanczos_iters, n_blocks=len(blocks),
               data="synthetic CIFAR-shaped inputs (uniform in [-1, 1], seed 0)",
               parameters=sum(p.numel() for p in model.parameters()), seconds=secs, hvp_calls=sp.hvp_calls,
               overall_lambda_max=sp.overall.lambda_max, overall_lambda_min=sp.overall.lambda_min,
               largest_block=top[0], largest_block_lambda_max=top[1].get("lambda_max"),
               max_memory_allocated_gib=torch.cuda.max_memory_allocated() / 2**30, blocks=blocks)
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
    cfg = train_config("mnist", "paper")
    datasets = Datasets(*ds)
    est = estimate_full_run(len(datasets.train), cfg.batch_size, cfg.epochs, 1.0)
    total = est["total_steps"]
    warm = min(MNIST_PROBE[0], total)
    probe = min(MNIST_PROBE[1], total - warm)
    out = ctx.scratch / "mnist-paper"
    t0 = time.perf_counter()
    train(cfg, out, device=DEV, datasets=datasets, max_steps=warm, progress=False)
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(cfg, out, device=DEV, datasets=datasets, max_steps=warm + probe, progress=False)
    probe_s = time.perf_counter() - t0
    rate = probe / probe_s if probe and probe_s > 0 else None
    rest = total - warm - probe
    # the rest of the steps at the probe's rate, +15 % and 15 s for the per-epoch evaluations
    est_rest = (rest / rate * 1.15 + 15.0) if rate else 60.0
    rec = dict(config_hash=cfg.hash(), epochs=cfg.epochs, batch_size=cfg.batch_size, n_train=len(datasets.train),
               total_steps=total, load_s=ctx._mnist.get("load_s"), probe_steps=probe, probe_steps_per_s=rate,
               estimated_full_s=warm_s + probe_s + est_rest)
    log(f"b. probe: {rate or 0:.1f} steps/s; the remaining {rest} steps need ≈ {est_rest:.0f} s, "
        f"{ctx.budget.remaining():.0f} s left")
    if not ctx.budget.fits(est_rest + 10.0):  # + time to write the outputs
        rec["status"] = "skipped (budget)"
        return rec
    t0 = time.perf_counter()
    metrics = train(cfg, out, device=DEV, datasets=datasets, progress=ctx.progress)
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


def device_info() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    driver = None
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=15)
            driver = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            pass
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return dict(name=torch.cuda.get_device_name(0), capability=f"{p.major}.{p.minor}",
                memory_gib=p.total_memory / 2**30, count=torch.cuda.device_count(), driver=driver,
                torch=torch.__version__, cuda=torch.version.cuda, cudnn=_cudnn_version(),
                python=platform.python_version(), host_cpu=cpu, cpu_count=os.cpu_count(),
                torch_threads=torch.get_num_threads(), platform=platform.platform())


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE / "gpu.json", help="JSON with every number (default: %(default)s)")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md",
                    help="Markdown file whose '## GPU check' section is replaced or appended (default: %(default)s)")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="wall-clock budget in seconds for the whole call (default: %(default)s)")
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CURVATURE_GAP_DATA") or "data"),
                    help="directory holding MNIST/raw (default: $CURVATURE_GAP_DATA or ./data)")
    ap.add_argument("--cifar-steps", type=int, default=200, help="timed optimiser steps of step d (default: %(default)s)")
    ap.add_argument("--lanczos-iters", type=int, default=20, help="Lanczos steps per block in step e (default: %(default)s)")
    ap.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help="tqdm bars during training (default: when stderr is a terminal)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not cuda_available():
        print(NO_CUDA_LINE, flush=True)
        return 0
    budget = Budget(args.budget_s, start=_T_START)
    try:  # a checkout without `pip install -e .`
        import curvature_gap  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "src"))
    out_json, results = args.out.resolve(), args.results.resolve()
    report = dict(command=command_line(argv), started=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                  budget_s=args.budget_s, device=device_info(), data_dir=str(args.data_dir), steps={},
                  outputs=dict(json=str(out_json), json_shown=_in_repo(out_json), results=str(results)),
                  estimates_s=ESTIMATE_S)

    def save():
        report["wall_s"] = budget.elapsed()
        atomic_write_text(out_json, json.dumps(report, indent=2, default=str) + "\n")

    log(f"{report['device']['name']}, torch {report['device']['torch']}, CUDA {report['device']['cuda']}; "
        f"budget {args.budget_s:.0f} s")
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
                          cifar_steps=args.cifar_steps, lanczos_iters=args.lanczos_iters)
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
    report["steps"] = {k: report["steps"][k] for k in ("a", "b", "c", "d", "e") if k in report["steps"]}
    report["finished"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    save()
    rc = 0
    try:
        old = results.read_text(encoding="utf-8") if results.exists() else "# Benchmark results\n"
        atomic_write_text(results, replace_section(old, render_markdown(report)))
        where = f"the '{SECTION}' section of {_shown(results)}"
    except (ValueError, OSError) as exc:
        where = f"NOT {_shown(results)} ({exc})"
        rc = 1
    log(f"done in {budget.elapsed():.0f} s: every number in {_shown(out_json)}; the table in {where}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
