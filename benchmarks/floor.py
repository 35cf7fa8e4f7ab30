"""The exact Hessian of Figs. 3–4 against its floor on this machine.

Every exact dense Hessian needs one Hessian-vector product per column (P = 4,186 tangent directions for
the paper's MNIST ViT), and a Hessian-vector product costs at least one forward and one backward pass of
the batch. So ``P × t(forward + backward)`` is the floor of any method that computes columns one at a
time (curvlinops' ``HessianLinearOperator``, ``torch.func``), and a method beats it only by sharing work
between tangents (batched GEMMs) or by skipping entries known to be zero. This script measures, in one
process and one run, on the first ``--batch`` MNIST training images (float32, the model at seed 0):

* ``forward_backward`` — one forward + backward of the batch (median of 50 runs after 5 warm-ups);
* ``curvlinops_hvp`` — one Hessian-vector product through curvlinops (median over 5 random vectors,
  after one warm-up product);
* ``ours_dense`` — the package's exact dense Hessian (``curvature_gap.hessian.hessian``, median of
  ``--repeats`` after one warm-up).

``benchmarks/report.py`` derives the floor ``P · t_fb``, curvlinops' extrapolated ``P · t_hvp`` and the
package's time as a multiple of the floor from these rows. Usage::

    python benchmarks/floor.py [--repeats 3] [--threads N] [--out benchmarks/floor.json]
    python benchmarks/floor.py --quick       # batch 4, fewer runs, 1 thread: seconds
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from _bench import Run, add_switches, out_path
from curvature_gap import build_model
from curvature_gap.data import load
from curvature_gap.hessian import hessian

NAME = "floor"
QUICK = dict(batch=4, fb_runs=5, hvp_vectors=3, repeats=1)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's; 1 with --quick, where tiny products only lose "
                         "from thread synchronisation)")
    add_switches(ap)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    threads = args.threads or (1 if args.quick else None)
    if threads:
        torch.set_num_threads(threads)
    bench = Run(NAME, args.quick, argv)
    size = QUICK if args.quick else dict(batch=args.batch, fb_runs=50, hvp_vectors=5, repeats=args.repeats)
    ds = load("mnist", train=True)
    x, y = ds.images[:size["batch"]], ds.labels[:size["batch"]]
    model = build_model("mnist", seed=0).eval()
    params = [p for p in model.parameters() if p.requires_grad]
    P = sum(p.numel() for p in params)
    loss_fn = torch.nn.CrossEntropyLoss()

    def fb():
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    for _ in range(5):
        fb()  # warm-up
    t_fb = _median_time(fb, size["fb_runs"])

    from curvlinops import HessianLinearOperator  # noqa: PLC0415 - only this measurement needs it

    op = HessianLinearOperator(model, loss_fn, params, [(x, y)], progressbar=False)
    g = torch.Generator().manual_seed(0)
    vs = [torch.randn(P, generator=g) for _ in range(size["hvp_vectors"] + 1)]
    op @ vs[0]  # warm-up
    t_hvp = statistics.median([_median_time(lambda v=v: op @ v, 1) for v in vs[1:]])

    hessian(model, (x, y))  # warm-up
    t_ours = _median_time(lambda: hessian(model, (x, y)), size["repeats"])

    rows = [
        dict(quantity="forward_backward", seconds=t_fb, runs=size["fb_runs"],
             what="one forward + backward of the batch (cross-entropy, batch mean)"),
        dict(quantity="curvlinops_hvp", seconds=t_hvp, runs=size["hvp_vectors"],
             what="one Hessian-vector product, curvlinops HessianLinearOperator"),
        dict(quantity="ours_dense", seconds=t_ours, runs=size["repeats"],
             what="curvature_gap.hessian.hessian, the dense P x P Hessian"),
    ]
    for r in rows:
        print(f"{r['quantity']}: {r['seconds']:.4g} s (median of {r['runs']})", flush=True)
    bench.write(out_path(NAME, args), rows,
                dict(batch=size["batch"], parameters=P, dtype="float32", model="mnist, seed 0",
                     data=f"first {size['batch']} MNIST training images"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
