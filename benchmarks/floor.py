"""The exact Hessian of Figs. 3–4 against its floor on this machine.

Every exact dense Hessian needs one Hessian-vector product per column (P = 4,186 tangent directions for
the paper's MNIST ViT), and a Hessian-vector product costs at least one forward and one backward pass of
the batch. So ``P × t(forward + backward)`` is the floor of any method that computes columns one at a
time (curvlinops' ``HessianLinearOperator``, ``torch.func``), and a method beats it only by sharing work
between tangents (batched GEMMs) or by skipping entries known to be zero. This script measures, in one
process and one run, at the figures' batch (the first 128 MNIST training images, float32):

* ``t_fb`` — one forward + backward of the batch (median of many);
* ``t_hvp`` — one Hessian-vector product through curvlinops (median over a few random vectors);
* the package's exact dense Hessian (``curvature_gap.hessian.hessian``, median of ``--repeats``);

and reports the floor ``P · t_fb``, curvlinops' extrapolated ``P · t_hvp``, and the package's time as a
multiple of the floor. Usage::

    python benchmarks/floor.py [--repeats 3] [--threads N] [--json benchmarks/floor.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from curvature_gap import build_model
from curvature_gap.data import load
from curvature_gap.hessian import hessian
from curvature_gap.provenance import host


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--json", default="benchmarks/floor.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    ds = load("mnist", train=True)
    x, y = ds.images[:args.batch], ds.labels[:args.batch]
    model = build_model("mnist", seed=0).eval()
    params = [p for p in model.parameters() if p.requires_grad]
    P = sum(p.numel() for p in params)
    loss_fn = torch.nn.CrossEntropyLoss()

    def fb():
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    for _ in range(5):
        fb()  # warm-up
    t_fb = _median_time(fb, 50)

    from curvlinops import HessianLinearOperator  # noqa: PLC0415 - only this measurement needs it

    op = HessianLinearOperator(model, loss_fn, params, [(x, y)], progressbar=False)
    g = torch.Generator().manual_seed(0)
    vs = [torch.randn(P, generator=g) for _ in range(6)]
    op @ vs[0]  # warm-up
    t_hvp = statistics.median([_median_time(lambda v=v: op @ v, 1) for v in vs[1:]])

    hessian(model, (x, y))  # warm-up
    t_ours = _median_time(lambda: hessian(model, (x, y)), args.repeats)

    out = dict(
        date=time.strftime("%Y-%m-%d %H:%M"), batch=args.batch, parameters=P, dtype="float32",
        threads=torch.get_num_threads(), t_forward_backward=t_fb, t_hvp_curvlinops=t_hvp,
        floor_seconds=P * t_fb, curvlinops_extrapolated_seconds=P * t_hvp, ours_seconds=t_ours,
        ours_over_floor=t_ours / (P * t_fb), hvp_over_fb=t_hvp / t_fb, host=host(), python=platform.python_version(),
        torch=torch.__version__, load_average={"start": load0, "end": os.getloadavg()},
    )
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "host"}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
