"""The five steps of the GPU check (a–e; see ``gpu_check.py``), each a function of the run's :class:`Context`
returning its record: the device tests, the MNIST training, Fig. 3's Hessian on both devices, the CIFAR-100
training and the block spectra."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _gpu_env import ROOT, CIFAR_FULL_TRAIN, Sizes, FULL, device_test_args, ESTIMATE_S, Budget, estimate_full_run, parse_pytest_summary


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
    "f": "f. the authors' CIFAR-100 recipe (Figs. 6, 12)",
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

    from curvature_gap.config import recipe_for
    from curvature_gap.model import build_model
    from curvature_gap.train import Datasets, train

    cfg = recipe_for("cifar100", "paper", **dict(ctx.sizes.cifar_overrides))
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
    from curvature_gap.config import recipe_for
    from curvature_gap.train import Datasets, train

    ds = ctx.mnist()
    if isinstance(ds, Exception):
        log(f"b. skipped: MNIST not in {ctx.data_dir}")
        return dict(status=f"skipped: MNIST not in {ctx.data_dir}", reason=str(ds)[:500])
    cfg = recipe_for("mnist", "paper", **dict(ctx.sizes.mnist_overrides))
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


def step_f(ctx: Context) -> dict:
    """The cost of the paper profile of Figs. 6 and 12 on the device: ``training_cost.measure`` (the authors'
    8-block CIFAR-100 model and recipe, float32 and bf16; a whole epoch; the figures' passes)."""
    from training_cost import measure

    precisions = ("float32", "bf16") if ctx.device == "cuda" else ("float32",)
    rows = measure(ctx.device, precisions, log=lambda m: log(f"f. {m}"), **ctx.sizes.authors_cost)
    return dict(status="ok", rows=rows)


STEPS = (  # (key, estimate key, function) in execution order
    ("a", "a", step_a),
    ("c", "c_float32", step_c),
    ("f", "f", step_f),  # before d and e: the cost of the paper profile of Figs. 6 and 12 is measured nowhere else
    ("d", "d", step_d),
    ("e", "e", step_e),
    ("b", "b_probe", step_b),
)
