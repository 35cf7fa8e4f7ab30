"""Benchmark: exact Hessians of the paper's MNIST ViT (ours vs curvlinops vs torch.func), block pairs,
block spectra of the CIFAR-100-sized model, and the cost of Fig. 6's running-mean losses.

Every measurement runs in a fresh subprocess, so peak memory (``ru_maxrss``) belongs to one method
and an out-of-memory failure (under an address-space limit) cannot take the benchmark down.
Errors are ``max |H − H_ref| / max |H_ref|`` against curvlinops at the same batch and dtype.

    python benchmarks/hessian.py            # full run (~10 min on 2 idle cores, longer when shared)
    python benchmarks/hessian.py --quick    # ~4 min: no full curvlinops run at batch 128

Writes benchmarks/hessian.json (list of rows) and the section "Exact Hessians: ours vs curvlinops
vs torch.func" of benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECTION = "## Exact Hessians: ours vs curvlinops vs torch.func"
DTYPES = {"float32": "float32", "float64": "float64"}


# ====================================================================== worker side
def _peak_mb() -> float:
    """This process's resident-set high-water mark (VmHWM). Unlike ru_maxrss it starts afresh at
    exec, so it does not inherit the driver's footprint through fork."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    if spec.get("tune_alloc"):
        from curvature_gap.hessian._alloc import keep_freed_memory

        keep_freed_memory()
    if spec.get("no_alloc"):  # measure ours without the allocator setting
        import curvature_gap.hessian as chess

        chess.keep_freed_memory = lambda: False
    import curvature_gap as cg
    from curvature_gap.data import load

    dtype = getattr(torch, spec.get("dtype", "float32"))
    task = spec["task"]
    out: dict = {}
    if task in ("dense", "block", "probe"):
        X, y = _mnist_head(spec["batch"])
        model = cg.build_model("mnist", seed=0)
        base = _peak_mb()
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
        model = cg.build_model("cifar100", seed=0)
        X = torch.rand(spec["batch"], 3, 32, 32) * 2 - 1  # CIFAR-shaped inputs (no CIFAR-100 offline)
        y = torch.randint(0, 100, (spec["batch"],))
        t0, c0 = time.perf_counter(), time.process_time()
        sp = top_eigenvalues(model, (X, y), groups=spec["groups"], iters=spec["iters"], overall=spec["overall"])
        out.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                   hvp_calls=sp.hvp_calls, table=sp.table(), params=sum(p.numel() for p in model.parameters()))
    elif task == "fig6":
        from curvature_gap.landscape.losses import per_sample_losses, running_means

        ds = load("mnist", train=True)
        model = cg.build_model("mnist", seed=0)
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
    out["peak_mb"] = _peak_mb()
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


def _worker_main(arg: str) -> None:
    spec = json.loads(arg)
    if spec.get("mem_limit_gb"):
        lim = int(spec["mem_limit_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    try:
        res = _worker(spec)
        res["status"] = "ok"
    except (MemoryError, RuntimeError) as exc:  # torch reports allocation failure as RuntimeError
        msg = str(exc)
        oom = isinstance(exc, MemoryError) or "alloc" in msg.lower() or "memory" in msg.lower()
        res = {"status": "oom" if oom else "error", "error": msg[:300], "peak_mb": _peak_mb()}
    print("RESULT " + json.dumps(res), flush=True)


# ====================================================================== driver side
def run(spec: dict, timeout: float) -> dict:
    """Run one measurement in a fresh interpreter; never raises."""
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


def machine() -> dict:
    import torch

    from curvature_gap.provenance import host

    h = host()
    mem = f"{h['memory_gib']:.0f} GB" if h["memory_gib"] else "?"
    from importlib.metadata import PackageNotFoundError, version

    try:
        cl = version("curvlinops-for-pytorch")
    except PackageNotFoundError:
        cl = "?"
    return dict(cpu=h["cpu"] + (" (virtual machine)" if h["virtual"] else ""), cores=os.cpu_count(), memory=mem, python=platform.python_version(), torch=torch.__version__,
                curvlinops=cl, os=platform.platform(), load=os.getloadavg())


def row(method, batch, dtype, res, err=None, note=""):
    r = dict(method=method, batch=batch, dtype=dtype, seconds=res.get("seconds"), peak_mb=res.get("peak_mb"),
             max_rel_err=err, status=res.get("status", "error"))
    if res.get("cpu_seconds") is not None:
        r["cpu_seconds"] = res["cpu_seconds"]
    if note or res.get("error"):
        r["note"] = (note + ("; " if note and res.get("error") else "") + res.get("error", "")).strip()
    return r


def fmt(v, spec="{:.3g}"):
    return "–" if v is None else spec.format(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="short run: curvlinops at batch 128 only extrapolated")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per method (default 1)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--small-batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mem-limit-gb", type=float, default=12.0, help="address-space limit for torch.func.hessian")
    ap.add_argument("--json", default=str(HERE / "hessian.json"))
    ap.add_argument("--results", default=str(HERE / "RESULTS.md"))
    args = ap.parse_args(argv)
    if args.worker:
        _worker_main(args.worker)
        return 0

    t_start = time.time()
    info = machine()
    tmp = tempfile.mkdtemp(prefix="hessbench-")
    B, b = args.batch, args.small_batch
    reps = 1 if args.quick else args.repeats
    base = dict(threads=args.threads)
    rows: list[dict] = []
    lines: list[str] = []

    def say(msg):
        print(msg, flush=True)
        lines.append(msg)

    def H(name):
        return os.path.join(tmp, name + ".pt")

    from curvature_gap import build_model

    P = sum(p.numel() for p in build_model("mnist").parameters())
    say(f"machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, torch {info['torch']}, "
        f"curvlinops {info['curvlinops']}, {args.threads} thread(s); load average at start {info['load'][0]:.1f}")

    # ---- curvlinops: choose the chunk size on the first columns, at batch B and b
    probe_cols = 64
    best = {}
    for batch in (B, b):
        est = {}
        for ch in (16, 32, 64):
            r = run(dict(base, task="probe", method="curvlinops", batch=batch, dtype="float32", chunk=ch, cols=probe_cols, repeats=1), 900)
            if r["status"] == "ok":
                est[ch] = r["seconds"] / probe_cols * P
            rows.append(row(f"curvlinops chunk={ch} (extrapolated)", batch, "float32",
                            dict(r, seconds=est.get(ch), cpu_seconds=r.get("cpu_seconds") and r["cpu_seconds"] / probe_cols * P),
                            note=f"{probe_cols} of {P} columns timed, scaled to {P}"))
            say(f"  curvlinops probe batch {batch} chunk {ch}: {fmt(est.get(ch))} s extrapolated")
        best[batch] = min(est, key=est.get) if est else 64
    say(f"best curvlinops chunk: batch {B}: {best[B]}, batch {b}: {best[b]}")
    # ---- dense Hessians: batch B float32, batch b float32/float64
    plan = []
    if not args.quick:
        plan.append(("curvlinops", B, "float32", 1, dict(chunk=best[B]), 3000))
        plan.append(("curvlinops+alloc", B, "float32", 1, dict(chunk=best[B], tune_alloc=True), 3000))
    plan += [("ours", B, "float32", reps, {}, 1800)]
    if not args.quick:
        plan.append(("ours-no-alloc", B, "float32", 1, dict(no_alloc=True), 1800))
        plan.append(("functorch", B, "float32", 1, {}, 1800))
    plan.append(("torch.func.hessian", B, "float32", 1, dict(mem_limit_gb=args.mem_limit_gb), 900))
    for dt in ("float64", "float32"):
        plan += [("curvlinops", b, dt, 1, dict(chunk=best[b]), 1800), ("ours", b, dt, reps, {}, 900)]
        if not args.quick:
            plan.append(("functorch", b, dt, 1, {}, 900))
        plan.append(("torch.func.hessian", b, dt, 1, dict(mem_limit_gb=args.mem_limit_gb), 900))
    dense = {}
    for method, batch, dt, rp, extra, tmo in plan:
        key = f"{method}-{batch}-{dt}"
        spec = dict(base, task="dense", method=method, batch=batch, dtype=dt, repeats=rp, save=H(key), **extra)
        say(f"  running {method} batch {batch} {dt} ...")
        res = run(spec, tmo)
        dense[key] = res
        ref = H(f"curvlinops-{batch}-{dt}")
        err = rel_err(H(key), ref) if method != "curvlinops" else (0.0 if res["status"] == "ok" else None)
        name = {"ours": "ours (auto → hand-written ViT forward-over-reverse)", "functorch": "ours, generic (block-triangular torch.func)",
                "ours-no-alloc": "ours without the allocator setting",
                "curvlinops": f"curvlinops chunk={extra.get('chunk')} (reference)",
                "curvlinops+alloc": f"curvlinops chunk={extra.get('chunk')} + our allocator setting",
                "torch.func.hessian": "torch.func.hessian"}[method]
        note = f"median of {rp}" if rp > 1 else ""
        if method == "torch.func.hessian":
            note = f"address space limited to {args.mem_limit_gb:g} GB"
        if method.startswith("curvlinops") and batch == B:
            note = "one run"
        if method.startswith("curvlinops+"):
            note = "one run; curvature_gap.hessian._alloc.keep_freed_memory() in the process"
        if method == "ours-no-alloc":
            note = "one run; glibc malloc defaults"
        rows.append(row(name, batch, dt, res, err, note))
        say(f"    -> {res['status']} {fmt(res.get('seconds'))} s, peak {fmt(res.get('peak_mb'), '{:.0f}')} MB, err {fmt(err)}")

    # ---- single blocks at batch B
    for r_, c_ in [("block0.value", "block0.query"), ("block0.value", "block0.value"), ("block0.ffn1", "block0.ffn1"), ("head", "pos")]:
        res = run(dict(base, task="block", method="ours", batch=B, dtype="float32", repeats=reps, row=r_, col=c_, save=H(f"blk-{r_}-{c_}")), 900)
        err = None
        if os.path.exists(H(f"curvlinops-{B}-float32")) and res["status"] == "ok":
            import torch

            from curvature_gap import param_groups

            g = {x.name: x for x in param_groups(build_model("mnist"))}
            R = torch.load(H(f"curvlinops-{B}-float32"))[g[r_].slice, g[c_].slice].double()
            blk = torch.load(H(f"blk-{r_}-{c_}")).double()
            err = ((blk - R).abs().max() / R.abs().max()).item()
        rows.append(row(f"ours block H[{r_}, {c_}]", B, "float32", res, err, f"median of {reps}" if reps > 1 else ""))
        say(f"  block {r_} x {c_}: {fmt(res.get('seconds'))} s")

    # ---- block spectra of the CIFAR-100-sized model (8 blocks, d=128)
    spec_groups = ["embed", "block0.query", "block0.value", "block7.value", "block7.ffn2", "head"]
    sb, iters = (4, 8) if args.quick else (16, 15)
    res = run(dict(base, task="spectra", batch=sb, groups=spec_groups, iters=iters, overall=True), 1800)
    rows.append(row(f"ours block spectra, cifar100 model ({len(spec_groups)} blocks + overall, {iters} Lanczos steps)", sb, "float32", res,
                    note=f"{res.get('hvp_calls')} block Hessian-vector products; synthetic CIFAR-shaped inputs"))
    say(f"  spectra: {res['status']} {fmt(res.get('seconds'))} s, {res.get('hvp_calls')} products")

    # ---- Fig. 6 running-mean losses: time per sample
    sizes = [1000, 10000, 60000]
    res6 = run(dict(base, task="fig6", sizes=sizes, repeats=1 if args.quick else 3), 1800)
    for rr in res6.get("rows", []):
        rows.append(row(f"per-sample losses + running means N={rr['n']}", rr["n"], "float32", dict(res6, seconds=rr["seconds"], cpu_seconds=None),
                        note=f"{rr['per_sample_us']:.1f} µs per sample"))

    info["load_end"] = os.getloadavg()
    elapsed = time.time() - t_start
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    md = render(rows, info, dense, res, res6, best, args, elapsed, spec_groups, iters, sb)
    print("\n" + md)
    update_results(Path(args.results), md)
    shutil.rmtree(tmp, ignore_errors=True)  # the saved Hessians (~1 GB)
    return 0


def render(rows, info, dense, spec_res, fig6, best, args, elapsed, spec_groups, iters, sb) -> str:
    B, b = args.batch, args.small_batch
    out = [SECTION, ""]
    out.append(f"Run {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} with `python benchmarks/hessian.py{' --quick' if args.quick else ''}` "
               f"({elapsed / 60:.1f} min). Machine: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM, "
               f"Python {info['python']}, torch {info['torch']}, curvlinops {info['curvlinops']}; every method in its own "
               f"process with {args.threads} intra-op thread(s). Load average {info['load'][0]:.1f} at the start and "
               f"{info['load_end'][0]:.1f} at the end: the 2 cores were shared with other jobs, so wall-clock seconds are "
               "noisy; CPU seconds (process time) are less so. Compare methods within this run only.")
    out.append("")
    out.append("Model: the paper's 1-block MNIST ViT (4,186 parameters), initialised with seed 0; data: the first images of the "
               "MNIST training set; loss: cross-entropy, batch mean. Error: max |H − H_curvlinops| / max |H_curvlinops| at the "
               "same batch and dtype. Peak memory: the process's resident-set high-water mark (VmHWM), including "
               "~0.7 GB for Python with torch imported.")
    out.append("")
    out.append("| method | batch | dtype | seconds | CPU s | peak MB | max rel err | status | note |")
    out.append("|---|---:|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        out.append(f"| {r['method']} | {r['batch']} | {r['dtype']} | {fmt(r['seconds'])} | {fmt(r.get('cpu_seconds'))} | "
                   f"{fmt(r['peak_mb'], '{:.0f}')} | {fmt(r['max_rel_err'], '{:.1e}')} | {r['status']} | {r.get('note', '')} |")
    out.append("")
    ours = dense.get(f"ours-{B}-float32", {})
    cl = dense.get(f"curvlinops-{B}-float32", {})
    probe = [r for r in rows if r["method"].startswith("curvlinops chunk=") and "allocator" not in r["method"]
             and r["batch"] == B and r["seconds"]]
    best_est = min((r["seconds"] for r in probe), default=None)
    tuned = dense.get(f"curvlinops+alloc-{B}-float32", {})
    noalloc = dense.get(f"ours-no-alloc-{B}-float32", {})
    lines = []
    if ours.get("seconds"):
        if cl.get("seconds"):
            lines.append(f"- Dense, batch {B}, float32: ours {ours['seconds']:.1f} s vs curvlinops (best chunk {best[B]}, full run) "
                         f"{cl['seconds']:.0f} s: **{cl['seconds'] / ours['seconds']:.1f}×** faster (target ≥ 5×); in CPU time "
                         f"{cl['cpu_seconds'] / ours['cpu_seconds']:.1f}×.")
        if tuned.get("seconds"):
            lines.append(f"- With the same allocator setting in both processes: curvlinops {tuned['seconds']:.0f} s, ours "
                         f"{ours['seconds']:.1f} s: {tuned['seconds'] / ours['seconds']:.1f}× ({tuned['cpu_seconds'] / ours['cpu_seconds']:.1f}× in CPU time).")
        if noalloc.get("seconds"):
            lines.append(f"- Ours without the allocator setting: {noalloc['seconds']:.1f} s ({fmt(noalloc.get('cpu_seconds'))} CPU s).")
        if best_est and not cl.get("seconds"):
            lines.append(f"- Dense, batch {B}, float32: ours {ours['seconds']:.1f} s vs the best extrapolated curvlinops chunk "
                         f"{best_est:.0f} s: {best_est / ours['seconds']:.1f}× (no full curvlinops run with --quick).")
        if best_est:
            lines.append(f"- curvlinops chunk sizes were chosen on {64} timed columns (extrapolated rows above); best: {best[B]} at batch {B}, {best[b]} at batch {b}.")
        lines.append(f"- Peak memory of ours at batch {B}: {ours.get('peak_mb', 0):.0f} MB (target ≤ 4096), of which ~{ours.get('base_mb', 0):.0f} MB is the "
                     "interpreter with torch imported.")
    if fig6.get("rows"):
        us = [r["per_sample_us"] for r in fig6["rows"]]
        lines.append("- Fig. 6 running means (MNIST model, forward passes of 1024): " + ", ".join(
            f"N={r['n']}: {r['per_sample_us']:.1f} µs/sample" for r in fig6["rows"]) + f"; max/min ratio {max(us) / min(us):.2f} (target ≤ 1.5).")
    if spec_res.get("table"):
        lines.append(f"- Block spectra, CIFAR-100-sized model ({spec_res.get('params', 0):,} parameters), batch {sb}, "
                     f"{iters} Lanczos steps: {spec_res['seconds']:.0f} s for {len(spec_groups)} blocks + overall on the CPU "
                     f"({spec_res['hvp_calls']} block products, {spec_res['seconds'] / max(1, spec_res['hvp_calls']):.2f} s each).")
        lines.append("")
        lines.append("  | block | size | λ_max | λ_min | ‖·‖₂ |")
        lines.append("  |---|---:|---:|---:|---:|")
        for t in spec_res["table"]:
            lines.append(f"  | {t['block']} | {t['size']:,} | {t['lambda_max']:.3e} | {t['lambda_min']:.3e} | {t['spectral_norm']:.3e} |")
    out += lines
    out.append("")
    out.append("The JSON rows (`benchmarks/hessian.json`) hold the same numbers; `status` is `ok`, `oom` (allocation "
               "failed under the address-space limit) or `skipped` (timed out).")
    return "\n".join(out) + "\n"


def update_results(path: Path, section: str) -> None:
    """Replace (or append) our section of RESULTS.md, leaving other sections untouched."""
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if SECTION in text:
        start = text.index(SECTION)
        nxt = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[nxt + 1:] if nxt != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
