"""Time the exact dense Hessian of the authors' MNIST ViT: the hand-written route against curvlinops.

    python benchmarks/authors_hessian.py [--batch 128] [--repeats 3] [--threads 1] [--out PATH]
    python benchmarks/authors_hessian.py --quick      # a ~400-parameter authors' ViT, batch 4: seconds

Model: ``build_model("authors_mnist", seed=0)`` (3,642 parameters: patch embedding with bias, sinusoidal
positions, Q/K/V with biases, W_O with bias, GELU FFN without biases, post-norm LayerNorm with ε = 1e-5,
mean pooling, head with bias) at initialisation; data: the first ``--batch`` MNIST training images,
normalised as the authors' recipe does (``AUTHORS_RECIPES["mnist"]``), or uniform images in [−1, 1] where
MNIST is not on disk (``settings.data`` says which); loss: cross-entropy, batch mean; float32. Both sides
compute the full (P, P) Hessian:

* ``ours``: ``curvature_gap.hessian.hessian(model, data, method="vit")`` (hand-written forward-over-reverse,
  block-triangular, the last FFN in closed form); median of ``--repeats`` runs after one untimed warm-up;
* ``curvlinops``: ``HessianLinearOperator @ I`` in column chunks (what ``_generic.curvlinops_hessian``
  does), one run, with the chunk size that was fastest on ``--probe-cols`` timed columns of each candidate
  (the ``probe`` rows, extrapolated to P columns; operator built and warmed up outside the timing).

Every measurement runs in a fresh subprocess with ``--threads`` intra-op threads, so peak resident memory
(VmHWM) is its own (``base_mb``: the high-water mark after imports and data, before the method). Error:
``max |H_ours − H_curvlinops| / max |H_curvlinops|``. The ``ours`` row carries the speed-up
``curvlinops seconds / ours seconds`` (goal ≥ 4×).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _bench import Run, max_rel_err, out_path, peak_mb, per_process_args, run_worker, timed

NAME = "authors_hessian"
QUICK_MODEL = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)
FULL_CHUNKS = (16, 32, 64)
QUICK_CHUNKS = (8, 16)


def _data(batch: int):
    """(images, labels, description): the first ``batch`` MNIST training images read straight from the IDX
    files (no copy of the whole set in memory), as ToTensor + Normalize(mean, std) of the authors' recipe
    compute them; seeded uniform images in [−1, 1] where the files are not on disk."""
    import numpy as np
    import torch

    from curvature_gap.config import AUTHORS_RECIPES
    from curvature_gap.data import check_mnist_files, data_dir, mnist_raw_dir

    root = data_dir()
    if check_mnist_files(root, verify_md5=False):
        g = torch.Generator().manual_seed(0)
        return (torch.rand(batch, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (batch,), generator=g),
                f"{batch} uniform images in [-1, 1] (MNIST not on disk), seed 0")
    raw = mnist_raw_dir(root)
    with open(raw / "train-images-idx3-ubyte", "rb") as f:
        f.seek(16)
        img = np.frombuffer(f.read(batch * 784), dtype=np.uint8).reshape(batch, 1, 28, 28)
    with open(raw / "train-labels-idx1-ubyte", "rb") as f:
        f.seek(8)
        lab = np.frombuffer(f.read(batch), dtype=np.uint8)
    ((mean,), (std,)) = AUTHORS_RECIPES["mnist"].normalize
    x = torch.from_numpy(img.copy()).float().div_(255.0).sub_(mean).div_(std)
    return x, torch.from_numpy(lab.astype(np.int64)), f"first {batch} MNIST training images, Normalize({mean}, {std})"


def _worker(spec: dict) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(spec["threads"])
    import curvature_gap as cg
    from curvature_gap.hessian import _generic, hessian

    model = cg.build_model("authors_mnist", seed=0, **spec["model"])
    X, y, data = _data(spec["batch"])
    P = sum(p.numel() for p in model.parameters())
    base = peak_mb()
    out = dict(parameters=P, data=data, base_mb=base)
    if spec["method"] == "ours":
        H, t = timed(lambda: hessian(model, (X, y), method="vit"), spec["repeats"])
        out.update(seconds=t["seconds"], cpu_seconds=t["cpu_seconds"], times=t["times"])
        torch.save(H, spec["save"])
    elif spec["method"] == "curvlinops":
        t0, c0 = time.perf_counter(), time.process_time()
        H = _generic.curvlinops_hessian(model, X, y, chunk=spec["chunk"])
        out.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0)
        torch.save(H, spec["save"])
    else:  # probe: the operator built and warmed up first, then `cols` columns timed in chunks
        from curvlinops import HessianLinearOperator

        op = HessianLinearOperator(model, torch.nn.CrossEntropyLoss(), list(model.parameters()), [(X, y)],
                                   progressbar=False, check_deterministic=False)
        ch, cols = spec["chunk"], spec["cols"]
        eye = torch.eye(P, ch)
        op @ eye  # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        for s in range(0, cols, ch):
            E = torch.zeros(P, ch)
            E[torch.arange(s, s + ch) % P, torch.arange(ch)] = 1
            op @ E
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        n = -(-cols // ch) * ch
        out.update(timed_cols=n, seconds=wall * P / n, cpu_seconds=cpu * P / n)
    out.update(peak_mb=peak_mb(), status="ok")
    return out


def _row(kind: str, method: str, spec: dict, res: dict, **extra) -> dict:
    r = dict(kind=kind, method=method, batch=spec["batch"], dtype="float32", chunk=spec.get("chunk"),
             seconds=res.get("seconds"), cpu_seconds=res.get("cpu_seconds"), times=res.get("times"),
             peak_mb=res.get("peak_mb"), base_mb=res.get("base_mb"), parameters=res.get("parameters"),
             max_rel_err=None, status=res.get("status", "error"), **extra)
    if res.get("error"):
        r["note"] = res["error"]
    print(f"{method}: {r['status']} {r['seconds']} s, peak {r['peak_mb']} MB", flush=True)
    return r


def run(batch: int, model: dict, chunks, probe_cols: int, repeats: int, threads: int, tmp: Path):
    import torch

    common = dict(batch=batch, model=model, threads=threads)
    rows, data = [], None
    for ch in chunks:
        spec = dict(common, method="probe", chunk=ch, cols=probe_cols)
        res = run_worker(__file__, spec)
        data = data or res.get("data")
        rows.append(_row("probe", f"curvlinops chunk={ch} (extrapolated)", spec, res,
                         note=f"{res.get('timed_cols')} of {res.get('parameters')} columns timed, scaled to all"
                         if res.get("status") == "ok" else res.get("error", "")))
    probes = [r for r in rows if r["status"] == "ok"]
    best = min(probes, key=lambda r: r["seconds"])["chunk"] if probes else chunks[0]
    spec_c = dict(common, method="curvlinops", chunk=best, save=str(tmp / "curvlinops.pt"))
    cl = _row("dense", f"curvlinops chunk={best} (reference)", spec_c, run_worker(__file__, spec_c), note="one run")
    spec_o = dict(common, method="ours", repeats=repeats, save=str(tmp / "ours.pt"))
    res_o = run_worker(__file__, spec_o)
    data = data or res_o.get("data")
    ours = _row("dense", "ours (method='vit', hand-written forward-over-reverse)", spec_o, res_o,
                note=f"median of {repeats}")
    rows += [cl, ours]
    if cl["status"] == "ok" and ours["status"] == "ok":
        R, H = torch.load(spec_c["save"]), torch.load(spec_o["save"])
        cl["max_rel_err"] = 0.0
        ours["max_rel_err"] = max_rel_err(H, R)
        ours["speedup"] = cl["seconds"] / ours["seconds"]
        ours["speedup_cpu"] = cl["cpu_seconds"] / ours["cpu_seconds"]
    return rows, best, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128, help="images in the batch (default 128; 4 with --quick)")
    ap.add_argument("--probe-cols", type=int, default=128, help="curvlinops columns timed per chunk candidate")
    parsed = per_process_args(ap, argv, _worker, "timed runs of ours, median taken (default 3; 1 with --quick)")
    if parsed is None:
        return 0
    a, argv = parsed
    bench = Run(NAME, a.quick, argv)
    batch = 4 if a.quick else a.batch
    repeats = 1 if a.quick else a.repeats
    model = QUICK_MODEL if a.quick else {}
    chunks = QUICK_CHUNKS if a.quick else FULL_CHUNKS
    probe_cols = 16 if a.quick else a.probe_cols
    with tempfile.TemporaryDirectory() as tmp:
        rows, best, data = run(batch, model, chunks, probe_cols, repeats, a.threads, Path(tmp))
    params = next((r["parameters"] for r in rows if r.get("parameters")), None)
    settings = dict(model="authors_mnist" + (f" {model}" if model else ""), parameters=params, batch=batch,
                    dtype="float32", data=data, repeats=repeats, threads_per_method=a.threads,
                    probe_cols=probe_cols, chunks=list(chunks), best_chunk=best, target_speedup=4.0)
    bench.write(out_path(NAME, a), rows, settings, threads=a.threads)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
