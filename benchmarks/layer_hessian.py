"""Time curvature_gap.layer_hessian on the libraries' own layers against the best correct autodiff route.

    python benchmarks/layer_hessian.py [--repeats 3] [--threads 1] [--out PATH]
    python benchmarks/layer_hessian.py --quick      # L=5, d=8, batch 2: seconds

The loss is the MSE ``mean((layer(X) − Target)²)`` of one layer on a batch X (N, L, d), float64, random
parameters (``curvature_gap.exact.layers.instance(seed=0)``), eval mode. Two sizes:

* **the paper's MNIST size** (L = 49 patches, d = 16, one head, d_ff = 64, batch 8), every class
  (``nn.TransformerEncoderLayer``, timm ``Block``, Hugging Face ``ViTLayer``, ``BertLayer``): the dense Hessian;
* **ViT-Tiny-like** (L = 65, d = 192, 3 heads, d_ff = 768, batch 8; ≈ 445k parameters, whose dense
  Hessian — 1.6 TB — cannot be formed), timm's ``Block``: blocks by name, in two tasks,
  ``columns``: every block ``H[θ, norm1.weight]`` (the 445k × 192 column block of the first LayerNorm's γ),
  ``mlp × norm1``: ``H[θ, norm1.weight]`` for the MLP's and second LayerNorm's θ only;
  and ``hvp``: one Hessian-vector product in every parameter (every class).

Methods: ``closed form`` (``layer_hessian`` / ``layer_hvp``: hand-written derivatives, no autograd) and
reverse-over-reverse ``torch.autograd`` through the module under the MATH attention backend
(``torch.func.hessian`` is wrong through LayerNorm and the default CPU attention kernel has no double
backward: ``curvature_gap.exact.encoder_layer``): dense, ``autograd batched, chunk all`` (every unit vector in
one batched call: the fastest route at this size on one sequence, ``benchmarks/encoder_layer_hessian.json``); blocks, ``autograd block by block`` (per pair, the smaller parameter's unit vectors through one
batched second backward into the other parameters it is paired with); HVPs, ``autograd`` (one double
backward). Every measurement runs in a fresh subprocess with ``--threads`` intra-op threads (peak resident
memory VmHWM is its own; ``base_mb`` after imports and building the layer; ``--quick`` runs them in-process,
so its peak is the process's); the median of ``--repeats``
timed runs after one untimed warm-up (HVPs: of 5; the ViT-Tiny block tasks: one run, no warm-up). Per row the error
``max|ours − ref| / max|ref|`` against the case's autograd reference; per case the ratio fastest
autodiff / closed form. At the ViT-Tiny size each method's matrix-product FLOPs are also counted, in one more
untimed call (``_bench.count_flops``): there both routes are bound by the same products.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _bench import Run, count_flops, mark_speedup, max_rel_err, out_path, peak_mb, per_process_args, run_worker, timed

NAME = "layer_hessian"
KINDS = ("torch", "timm", "vit", "bert")
TITLES = {"torch": "nn.TransformerEncoderLayer", "timm": "timm Block", "vit": "HF ViTLayer", "bert": "HF BertLayer"}
# size name -> (N, L, d, heads, d_ff)
FULL_SIZES = {"MNIST size": (8, 49, 16, 1, 64), "ViT-Tiny size": (8, 65, 192, 3, 768)}
QUICK_SIZES = {"MNIST size": (2, 5, 8, 1, 16), "ViT-Tiny size": (2, 5, 8, 2, 16)}
BLOCK_TASKS = ("columns", "mlp × norm1")
HVP_REPEATS = 5     # an HVP takes a fraction of a second: always the median of this many


def _layer(kind: str, size: tuple):
    from curvature_gap.exact import layers as R

    N, L, d, h, dff = size
    cfg = dict(d=d, heads=h)
    if kind == "timm":
        cfg["mlp_ratio"] = dff / d
    else:
        cfg["d_ff"] = dff
    return R.instance(kind, N=N, L=L, seed=0, **cfg)


def _pairs(task: str, names: list[str], shapes: dict) -> list[tuple[str, str]]:
    if task == "columns":
        return [("norm1.weight", n) for n in names]
    if task == "mlp × norm1":
        return [("norm1.weight", n) for n in names if n.startswith(("mlp.", "norm2."))]
    raise ValueError(task)


def _worker(spec: dict) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(spec["threads"])
    from curvature_gap.exact import layers as R
    from curvature_gap.hessian.layers import layer_hessian, layer_hvp

    layer, X, T = _layer(spec["kind"], tuple(spec["size"]))
    names = [n for n, _ in layer.named_parameters()]
    shapes = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    task, method = spec["task"], spec["method"]
    if task == "dense":
        fn = (lambda: layer_hessian(layer, X, target=T).dense) if method == "closed" else \
             (lambda: R.hessian_autograd(layer, X, T, chunk=spec["chunk"]))
    elif task == "hvp":
        g = torch.Generator().manual_seed(1)
        v = {n: torch.randn(s, generator=g, dtype=torch.float64) for n, s in shapes.items()}
        fn = (lambda: layer_hvp(layer, X, v, target=T)) if method == "closed" else \
             (lambda: R.hvp_autograd(layer, X, T, v))
    else:
        pairs = _pairs(task, names, shapes)
        fn = (lambda: layer_hessian(layer, X, target=T, blocks=pairs, chunk=spec["chunk"]).blocks) \
            if method == "closed" else (lambda: R.block_autograd(layer, X, T, pairs, chunk=spec["chunk"]))
    base = peak_mb()
    out, t = timed(fn, spec["repeats"], warmup=spec["warmup"])
    if isinstance(out, dict):
        out = {str(k): v.detach() for k, v in out.items()}
    else:
        out = out.detach()
    torch.save(out, spec["save"])
    peak = peak_mb()
    out = None
    flops = count_flops(fn) if spec.get("flops") else None
    return {"seconds": t["seconds"], "times": t["times"], "base_mb": base, "peak_mb": peak, "flops": flops,
            "parameters": sum(p.numel() for p in layer.parameters()), "status": "ok"}


def plan(quick: bool) -> list[tuple]:
    """``[(size name, kind, task, [(method, chunk), ...], reference method)]``; the first method is the reference."""
    sizes = QUICK_SIZES if quick else FULL_SIZES
    out = []
    for kind in KINDS:
        out.append(("MNIST size", kind, "dense", [("autograd batched, chunk all", None), ("closed form", 128)]))
    for task in BLOCK_TASKS:
        out.append(("ViT-Tiny size", "timm", task, [("autograd block by block", None if quick else 64),
                                                    ("closed form", 32 if not quick else 128)]))
    for kind in KINDS:
        out.append(("ViT-Tiny size", kind, "hvp", [("autograd", None), ("closed form", None)]))
    return [(s, k, t, m) for s, k, t, m in out if s in sizes]


def run(quick: bool, repeats: int, threads: int, tmp: Path) -> list[dict]:
    import torch

    sizes = QUICK_SIZES if quick else FULL_SIZES
    rows = []
    for size, kind, task, methods in plan(quick):
        saved, case_rows = {}, []
        big_blocks = task in BLOCK_TASKS and not quick
        for method, chunk in methods:
            path = tmp / f"{len(rows)}-{len(case_rows)}.pt"
            spec = dict(kind=kind, size=list(sizes[size]), task=task, method="closed" if method == "closed form" else "auto",
                        chunk=chunk, threads=threads, warmup=not big_blocks, flops=size == "ViT-Tiny size",
                        repeats=1 if big_blocks else max(repeats, HVP_REPEATS) if task == "hvp" else repeats,
                        save=str(path))
            res = _worker(spec) if quick else run_worker(__file__, spec)
            N, L, d, h, dff = sizes[size]
            r = dict(size=size, layer=TITLES[kind], kind=kind, task=task, N=N, L=L, d=d, heads=h, d_ff=dff,
                     method=method, chunk=chunk, repeats=spec["repeats"], seconds=res.get("seconds"),
                     times=res.get("times"), peak_mb=res.get("peak_mb"), base_mb=res.get("base_mb"),
                     flops=res.get("flops"),
                     parameters=res.get("parameters"), max_rel_err=None, status=res.get("status", "error"))
            if res.get("error"):
                r["note"] = res["error"]
            if r["status"] == "ok":
                saved[method] = path
            case_rows.append(r)
            print(f"{size} {kind} {task}: {method}: {r['status']} {r['seconds']} s, peak {r['peak_mb']} MB", flush=True)
        ref = methods[0][0]
        if ref in saved:
            R = torch.load(saved[ref])
            for r in case_rows:
                if r["method"] in saved:
                    r["max_rel_err"] = max_rel_err(torch.load(saved[r["method"]]), R)
        mark_speedup(case_rows)
        for p in tmp.glob("*.pt"):
            p.unlink()
        rows += case_rows
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parsed = per_process_args(ap, argv, _worker, "timed runs per method, median taken (default 3; 1 with --quick)")
    if parsed is None:
        return 0
    a, argv = parsed
    bench = Run(NAME, a.quick, argv)
    repeats = 1 if a.quick else a.repeats
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(a.quick, repeats, a.threads, Path(tmp))
    sizes = QUICK_SIZES if a.quick else FULL_SIZES
    bench.write(out_path(NAME, a), rows, dict(repeats=repeats, threads_per_method=a.threads, dtype="float64", seed=0,
                                              sizes={k: dict(zip(("N", "L", "d", "heads", "d_ff"), v)) for k, v in sizes.items()},
                                              loss="mean((layer(X) - Target)^2)", attention_backend="MATH (autograd)"),
                threads=a.threads)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
