"""Benchmark: exact Hessians of the paper's MNIST ViT (ours vs curvlinops vs torch.func), block pairs,
block spectra of the CIFAR-100-sized model, and the cost of Fig. 6's running-mean losses.

Every measurement runs in a fresh subprocess, so peak memory (VmHWM) belongs to one method and an
out-of-memory failure (under an address-space limit) cannot take the benchmark down (``--quick``: in-process,
its numbers only show that the code runs). Measured per row:
wall seconds (median of ``--repeats`` where stated), CPU seconds of the process, peak resident memory,
and the error ``max |H − H_ref| / max |H_ref|`` against curvlinops at the same batch and dtype.

    python benchmarks/hessian.py            # full run (~20 min on 2 cores)
    python benchmarks/hessian.py --quick    # the same measurements on a 454-parameter ViT, batch 4: seconds

Writes one JSON document (``--out``, default benchmarks/hessian.json; see ``_bench.py``) whose rows
have ``kind`` probe | dense | block | spectra | fig6; ``benchmarks/report.py`` renders them into
RESULTS.md. A row with status ``error`` (a method that failed for another reason than memory) makes
the script exit with status 1 after writing the document.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import peak_mb  # stdlib only: cheap in every worker

HERE = Path(__file__).resolve().parent
NAME = "hessian"


# ====================================================================== worker side


def _worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    if spec.get("tune_alloc"):
        from curvature_gap.hessian._alloc import keep_freed_memory

        keep_freed_memory()
    if spec.get("no_alloc"):  # measure ours without the allocator setting
        import curvature_gap.hessian as chess

        if not callable(getattr(chess, "keep_freed_memory", None)):  # else the patch below would change nothing
            raise AttributeError("curvature_gap.hessian.keep_freed_memory is gone: ours-no-alloc cannot switch it off")
        chess.keep_freed_memory = lambda: False
    import curvature_gap as cg
    from curvature_gap.data import load

    dtype = getattr(torch, spec.get("dtype", "float32"))
    task = spec["task"]
    out: dict = {}
    if task in ("dense", "block", "probe"):
        X, y = _mnist_head(spec["batch"])
        model = cg.build_model("mnist", seed=0, **spec.get("model", {}))
        base = peak_mb()
        times, cpu = [], []
        H = None
        if task == "probe":
            spec = dict(spec, _op=_curvlinops_op(model, X, y, dtype))
        for _ in range(spec.get("repeats", 1)):
            H = None
            t0, c0 = time.perf_counter(), time.process_time()
            H = _run_method(spec, model, X, y, dtype)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out.update(seconds=statistics.median(times), cpu_seconds=statistics.median(cpu), times=times, base_mb=base)
        if spec.get("save") and H is not None:
            torch.save(H.cpu(), spec["save"])
    elif task == "spectra":
        from curvature_gap.hessian.spectra import top_eigenvalues

        torch.manual_seed(0)
        model = cg.build_model("cifar100", seed=0, **spec.get("model", {}))
        X = torch.rand(spec["batch"], 3, 32, 32) * 2 - 1  # CIFAR-shaped inputs (no CIFAR-100 offline)
        y = torch.randint(0, 100, (spec["batch"],))
        t0, c0 = time.perf_counter(), time.process_time()
        sp = top_eigenvalues(model, (X, y), groups=spec["groups"], iters=spec["iters"], overall=spec["overall"])
        out.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                   hvp_calls=sp.hvp_calls, table=sp.table(), params=sum(p.numel() for p in model.parameters()))
    elif task == "fig6":
        from curvature_gap.landscape.losses import per_sample_losses, running_means

        ds = load("mnist", train=True)
        model = cg.build_model("mnist", seed=0, **spec.get("model", {}))
        rows = []
        for n in spec["sizes"]:
            sub = ds.subset(n)
            per_sample_losses(model, sub.images[:1024], sub.labels[:1024], device="cpu")  # warm-up
            ts = []
            for _ in range(spec.get("repeats", 3)):
                t0 = time.perf_counter()
                running_means(per_sample_losses(model, sub.images, sub.labels, device="cpu"))
                ts.append(time.perf_counter() - t0)
            rows.append(dict(n=n, seconds=statistics.median(ts), per_sample_us=1e6 * statistics.median(ts) / n))
        out.update(rows=rows)
    out["peak_mb"] = peak_mb()
    return out


def _curvlinops_op(model, X, y, dtype):
    """curvlinops' Hessian operator, built and warmed up on one chunk (not part of the timed columns)."""
    import torch
    from curvlinops import HessianLinearOperator

    mm = model.to(dtype)
    op = HessianLinearOperator(mm, torch.nn.CrossEntropyLoss(), list(mm.parameters()), [(X.to(dtype), y)])
    E = torch.zeros(op.shape[0], 8, dtype=dtype)
    E[torch.arange(8), torch.arange(8)] = 1
    op @ E
    return op


def _mnist_head(n: int):
    """The first n MNIST training images/labels read straight from the IDX files (no full-set copy),
    normalised exactly like ``curvature_gap.data.load`` (ToTensor + Normalize(0.5, 0.5))."""
    import numpy as np
    import torch

    from curvature_gap.data import check_mnist_files, data_dir, mnist_raw_dir

    root = data_dir()
    if check_mnist_files(root):
        from curvature_gap.data import load

        ds = load("mnist", train=True)  # raises DataUnavailable with instructions
        return ds.images[:n].clone(), ds.labels[:n].clone()
    raw = mnist_raw_dir(root)
    with open(raw / "train-images-idx3-ubyte", "rb") as f:
        f.seek(16)
        img = np.frombuffer(f.read(n * 784), dtype=np.uint8).reshape(n, 1, 28, 28)
    with open(raw / "train-labels-idx1-ubyte", "rb") as f:
        f.seek(8)
        lab = np.frombuffer(f.read(n), dtype=np.uint8)
    x = torch.from_numpy(img.copy()).float().div_(255.0).sub_(0.5).div_(0.5)
    return x, torch.from_numpy(lab.astype(np.int64))


def _run_method(spec, model, X, y, dtype):
    import torch

    from curvature_gap.hessian import _generic, hessian, hessian_block

    m = spec["method"]
    if spec["task"] == "probe":  # curvlinops on `cols` columns, in chunks (operator built and warmed up before)
        op = spec["_op"]
        P, ch = op.shape[0], spec["chunk"]
        for s in range(0, spec["cols"], ch):
            E = torch.zeros(P, ch, dtype=dtype)
            E[torch.arange(s, s + ch), torch.arange(ch)] = 1
            op @ E
        return None
    if spec["task"] == "block":
        return hessian_block(model, (X, y), spec["row"], spec["col"], dtype=dtype)
    if m in ("ours", "ours-no-alloc"):
        return hessian(model, (X, y), dtype=dtype)
    if m == "functorch":
        return hessian(model, (X, y), method="functorch", dtype=dtype)
    if m in ("curvlinops", "curvlinops+alloc"):
        return _generic.curvlinops_hessian(model, X, y, dtype=dtype, chunk=spec["chunk"])
    if m == "torch.func.hessian":
        return _generic.torch_func_hessian(model, X, y, dtype=dtype)
    raise ValueError(m)


def _answer(spec: dict) -> dict:
    """:func:`_worker`'s result with its status: ``ok``, or ``oom`` / ``error`` from the exception it raised."""
    try:
        res = _worker(spec)
        res["status"] = "ok"
    except (MemoryError, RuntimeError) as exc:  # torch reports allocation failure as RuntimeError
        msg = str(exc)
        oom = isinstance(exc, MemoryError) or "alloc" in msg.lower() or "memory" in msg.lower()
        res = {"status": "oom" if oom else "error", "error": msg[:300], "peak_mb": peak_mb()}
    return res


def _worker_main(arg: str) -> None:
    spec = json.loads(arg)
    if spec.get("mem_limit_gb"):
        lim = int(spec["mem_limit_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    print("RESULT " + json.dumps(_answer(spec)), flush=True)


# ====================================================================== driver side
# The sizes of a run. The quick run takes every measurement of the full run once, on the test suite's
# 454-parameter MNIST-shaped ViT and a 2-block CIFAR-shaped one, with one batch size per dtype.
FULL = dict(
    model={}, batch=128, small_batch=16, small_dtypes=("float64", "float32"),
    small_methods=("curvlinops", "ours", "functorch", "torch.func.hessian"),
    chunks=(16, 32, 64), probe_cols=64, probe_small_batch=True,
    blocks=(("block0.value", "block0.query"), ("block0.value", "block0.value"), ("block0.ffn1", "block0.ffn1"),
            ("head", "pos")),
    spectra_model={}, spectra_batch=16, spectra_iters=15, fig6_sizes=(1000, 10000, 60000), max_timeout=None,
)
QUICK = dict(
    model=dict(d_model=4, d_k=4, d_ff=8, patch_size=7), batch=4, small_batch=2, small_dtypes=("float64",),
    small_methods=("curvlinops", "ours"), chunks=(32,), probe_cols=32, probe_small_batch=False,
    blocks=(("block0.value", "block0.query"),),
    spectra_model=dict(n_blocks=2, d_model=8, d_k=8, d_ff=16, patch_size=8), spectra_batch=2, spectra_iters=4,
    fig6_sizes=(64, 128), max_timeout=300.0,
)
METHOD_NAMES = {
    "ours": "ours (auto → hand-written ViT forward-over-reverse)",
    "functorch": "ours, generic (block-triangular torch.func)",
    "ours-no-alloc": "ours without the allocator setting",
    "curvlinops": "curvlinops chunk={chunk} (reference)",
    "curvlinops+alloc": "curvlinops chunk={chunk} + our allocator setting",
    "torch.func.hessian": "torch.func.hessian",
}


def run(spec: dict, timeout: float) -> dict:
    """Run one measurement in a fresh interpreter (a quick run: in this one, ``_bench.run_worker``'s rule). A
    failure is returned as the row's status (``oom``, ``skipped`` on timeout, ``error`` with the last lines of
    stderr), never raised."""
    import _bench

    if _bench._IN_PROCESS:
        import curvature_gap.hessian as chess

        keep = chess.keep_freed_memory  # "ours-no-alloc" switches it off for its own measurement only
        try:
            return _answer(spec)
        except Exception as exc:  # noqa: BLE001 - the row's status, as for a failed subprocess
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            chess.keep_freed_memory = keep
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=str(spec["threads"]))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "skipped", "error": f"timeout after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    killed = p.returncode < 0 or p.returncode == 137
    tail = (p.stderr or "").strip().splitlines()[-3:]
    return {"status": "oom" if killed or "MemoryError" in p.stderr else "error", "error": " | ".join(tail)[:300]}


def rel_err(path: str, ref: str) -> float | None:
    import torch

    if not (os.path.exists(path) and os.path.exists(ref)):
        return None
    H, R = torch.load(path), torch.load(ref)
    return ((H.double() - R.double()).abs().max() / R.double().abs().max()).item()


def row(kind, method, batch, dtype, res, err=None, note="", **extra):
    """One JSON row: what was measured (kind, method, batch, dtype), its numbers and its status."""
    r = dict(kind=kind, method=method, batch=batch, dtype=dtype, seconds=res.get("seconds"),
             peak_mb=res.get("peak_mb"), max_rel_err=err, status=res.get("status", "error"), **extra)
    if res.get("cpu_seconds") is not None:
        r["cpu_seconds"] = res["cpu_seconds"]
    if res.get("base_mb") is not None:
        r["base_mb"] = res["base_mb"]
    if note or res.get("error"):
        r["note"] = (note + ("; " if note and res.get("error") else "") + res.get("error", "")).strip()
    return r


def fmt(v, spec="{:.3g}"):
    return "–" if v is None else spec.format(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per method (default 1)")
    ap.add_argument("--batch", type=int, default=None, help="the large batch (default 128; 4 with --quick)")
    ap.add_argument("--small-batch", type=int, default=None, help="the small batch (default 16; 2 with --quick)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of ours, median taken (1 with --quick)")
    ap.add_argument("--mem-limit-gb", type=float, default=12.0, help="address-space limit for torch.func.hessian")
    from _bench import Run, add_switches, out_path

    add_switches(ap)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if args.worker:
        _worker_main(args.worker)
        return 0

    bench = Run(NAME, args.quick, argv)
    size = dict(QUICK if args.quick else FULL)
    size["batch"] = args.batch or size["batch"]
    size["small_batch"] = args.small_batch or size["small_batch"]
    B, b = size["batch"], size["small_batch"]
    reps = 1 if args.quick else args.repeats
    base = dict(threads=args.threads, model=size["model"])

    def timeout(seconds: float) -> float:
        return min(seconds, size["max_timeout"] or seconds)

    tmp = tempfile.mkdtemp(prefix="hessbench-")
    try:
        rows, settings = _measure(size, base, B, b, reps, args, tmp, timeout)
    finally:
        shutil.rmtree(tmp)  # the saved Hessians (~1 GB in a full run)
    bench.write(out_path(NAME, args), rows, settings, threads=args.threads)
    errors = [r for r in rows if r["status"] == "error"]
    for r in errors:
        print(f"ERROR in {r['method']} (batch {r['batch']}, {r['dtype']}): {r.get('note', '')}", file=sys.stderr)
    return 1 if errors else 0


def _measure(size, base, B, b, reps, args, tmp, timeout):
    """Every measurement of the run, each in its own process: (rows, settings)."""
    from curvature_gap import build_model, param_groups
    from curvature_gap.provenance import host

    rows: list[dict] = []

    def say(msg):
        print(msg, flush=True)

    def H(name):
        return os.path.join(tmp, name + ".pt")

    P = sum(p.numel() for p in build_model("mnist", **size["model"]).parameters())
    h = host()
    say(f"machine: {h['cpu']}, {h['cpus']} CPUs, {args.threads} thread(s) per method, {P} parameters; "
        f"load average at start {os.getloadavg()[0]:.1f}")

    # ---- curvlinops: choose the chunk size on the first columns
    cols = size["probe_cols"]
    best = {}
    for batch in ((B, b) if size["probe_small_batch"] else (B,)):
        est = {}
        for ch in size["chunks"]:
            r = run(dict(base, task="probe", method="curvlinops", batch=batch, dtype="float32", chunk=ch, cols=cols,
                         repeats=1), timeout(900))
            if r["status"] == "ok":
                est[ch] = r["seconds"] / cols * P
            cpu = r.get("cpu_seconds") and r["cpu_seconds"] / cols * P
            rows.append(row("probe", f"curvlinops chunk={ch} (extrapolated)", batch, "float32",
                            dict(r, seconds=est.get(ch), cpu_seconds=cpu), chunk=ch, key="curvlinops",
                            note=f"{cols} of {P} columns timed, scaled to {P}"))
            say(f"  curvlinops probe batch {batch} chunk {ch}: {fmt(est.get(ch))} s extrapolated")
        best[batch] = min(est, key=est.get) if est else size["chunks"][-1]
    best.setdefault(b, best[B])
    say(f"best curvlinops chunk: batch {B}: {best[B]}, batch {b}: {best[b]}")

    # ---- dense Hessians: the large batch in float32, the small one in each dtype
    plan = [("curvlinops", B, "float32", 1, dict(chunk=best[B]), 3000),
            ("curvlinops+alloc", B, "float32", 1, dict(chunk=best[B], tune_alloc=True), 3000),
            ("ours", B, "float32", reps, {}, 1800),
            ("ours-no-alloc", B, "float32", 1, dict(no_alloc=True), 1800),
            ("functorch", B, "float32", 1, {}, 1800),
            ("torch.func.hessian", B, "float32", 1, dict(mem_limit_gb=args.mem_limit_gb), 900)]
    small = {"curvlinops": (1, dict(chunk=best[b]), 1800), "ours": (reps, {}, 900), "functorch": (1, {}, 900),
             "torch.func.hessian": (1, dict(mem_limit_gb=args.mem_limit_gb), 900)}
    for dt in size["small_dtypes"]:
        plan += [(m, b, dt, *small[m]) for m in size["small_methods"]]
    for method, batch, dt, rp, extra, tmo in plan:
        key = f"{method}-{batch}-{dt}"
        spec = dict(base, task="dense", method=method, batch=batch, dtype=dt, repeats=rp, save=H(key), **extra)
        say(f"  running {method} batch {batch} {dt} ...")
        res = run(spec, timeout(tmo))
        ref = H(f"curvlinops-{batch}-{dt}")
        err = rel_err(H(key), ref) if method != "curvlinops" else (0.0 if res["status"] == "ok" else None)
        note = f"median of {rp}" if rp > 1 else ""
        if method == "torch.func.hessian":
            note = f"address space limited to {args.mem_limit_gb:g} GB"
        if method.startswith("curvlinops") and batch == B:
            note = "one run"
        if method.startswith("curvlinops+"):
            note = "one run; curvature_gap.hessian._alloc.keep_freed_memory() in the process"
        if method == "ours-no-alloc":
            note = "one run; glibc malloc defaults"
        rows.append(row("dense", METHOD_NAMES[method].format(chunk=extra.get("chunk")), batch, dt, res, err, note,
                        key=method, repeats=rp, chunk=extra.get("chunk")))
        say(f"    -> {res['status']} {fmt(res.get('seconds'))} s, peak {fmt(res.get('peak_mb'), '{:.0f}')} MB, "
            f"err {fmt(err)}")

    # ---- single blocks at the large batch, against the curvlinops Hessian's block
    groups = {g.name: g for g in param_groups(build_model("mnist", **size["model"]))}
    for r_, c_ in size["blocks"]:
        res = run(dict(base, task="block", method="ours", batch=B, dtype="float32", repeats=reps, row=r_, col=c_,
                       save=H(f"blk-{r_}-{c_}")), timeout(900))
        err = None
        if os.path.exists(H(f"curvlinops-{B}-float32")) and res["status"] == "ok":
            import torch

            R = torch.load(H(f"curvlinops-{B}-float32"))[groups[r_].slice, groups[c_].slice].double()
            blk = torch.load(H(f"blk-{r_}-{c_}")).double()
            err = ((blk - R).abs().max() / R.abs().max()).item()
        rows.append(row("block", f"ours block H[{r_}, {c_}]", B, "float32", res, err,
                        f"median of {reps}" if reps > 1 else "", key="ours", repeats=reps, block=[r_, c_]))
        say(f"  block {r_} x {c_}: {fmt(res.get('seconds'))} s")

    # ---- block spectra of the CIFAR-100-sized model (8 blocks, d = 128; 2 small blocks in the quick run)
    last = build_model("cifar100", **size["spectra_model"]).cfg.n_blocks - 1
    spec_groups = ["embed", "block0.query", "block0.value", f"block{last}.value", f"block{last}.ffn2", "head"]
    sb, iters = size["spectra_batch"], size["spectra_iters"]
    res = run(dict(base, task="spectra", batch=sb, groups=spec_groups, iters=iters, overall=True,
                   model=size["spectra_model"]), timeout(1800))
    rows.append(row("spectra", f"ours block spectra, cifar100 model ({len(spec_groups)} blocks + overall, "
                    f"{iters} Lanczos steps)", sb, "float32", res, key="ours", groups=spec_groups, iters=iters,
                    hvp_calls=res.get("hvp_calls"), parameters=res.get("params"), table=res.get("table"),
                    note=f"{res.get('hvp_calls')} block Hessian-vector products; synthetic CIFAR-shaped inputs"))
    say(f"  spectra: {res['status']} {fmt(res.get('seconds'))} s, {res.get('hvp_calls')} products")

    # ---- Fig. 6 running-mean losses: time per sample
    res6 = run(dict(base, task="fig6", sizes=list(size["fig6_sizes"]), repeats=reps), timeout(1800))
    for rr in res6.get("rows", []):
        rows.append(row("fig6", f"per-sample losses + running means N={rr['n']}", rr["n"], "float32",
                        dict(res6, seconds=rr["seconds"], cpu_seconds=None), key="fig6", per_sample_us=rr["per_sample_us"],
                        note=f"{rr['per_sample_us']:.1f} µs per sample"))
    if not res6.get("rows"):
        rows.append(row("fig6", "per-sample losses + running means", None, "float32", res6, key="fig6"))

    settings = dict(batch=B, small_batch=b, parameters=P, repeats=reps, probe_cols=cols, chunks=list(size["chunks"]),
                    best_chunk={str(k): v for k, v in best.items()}, mem_limit_gb=args.mem_limit_gb,
                    model_overrides=size["model"], spectra_model_overrides=size["spectra_model"],
                    spectra_batch=sb, spectra_iters=iters, threads_per_method=args.threads)
    return rows, settings


if __name__ == "__main__":
    sys.exit(main())
