"""What the authors' bf16 arithmetic costs on a CPU: one step of their MNIST recipe in float32, in bf16 with
PyTorch's own bf16 matrix kernels, and in bf16 with the matrix products emulated (``precision.EmulatedBF16Gemm``,
what the package runs on a CPU), and one batch of the Fig. 12 pass in each arithmetic.

The emulation computes the same products as a bf16 GEMM (float32 GEMM of the bf16 operands, rounded once) so
that a CPU run does not depend on the CPU's bf16 kernel; this measures what it costs against PyTorch's own bf16
kernels and against float32, in one run. From the step times the report derives what the paper profile's runs cost: the authors' run to
step 20,000 (Fig. 4; Figs. 6 and 12 stand-ins) in each arithmetic, and the two extra bf16 runs that Figs. 4 and
5 and the Fig. 12 stand-in count over (three runs to step 20,000). Usage::

    python benchmarks/bf16_cpu.py [--steps 60] [--threads 1]
    python benchmarks/bf16_cpu.py --quick
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time

import torch

from _bench import Run, add_switches, out_path
from curvature_gap.config import recipe_for
from curvature_gap.cost import random_datasets
from curvature_gap.experiments.running_mean import loader_pass
from curvature_gap.model import build_model
from curvature_gap.train import load_datasets, train

NAME = "bf16_cpu"
MODEL = "authors_mnist"
VARIANTS = (("float32", "float32", False), ("bf16, PyTorch's kernels", "bf16", False), ("bf16, emulated GEMM", "bf16", True))
ROUNDS = 3  # the step times are measured in this many interleaved rounds (median taken)


def _step_seconds(cfg, ds, warmup: int, steps: int) -> float:
    """Seconds per step of ``train`` (``warmup`` untimed steps first), on the CPU."""
    with tempfile.TemporaryDirectory() as d:
        train(cfg, d, "cpu", datasets=ds, max_steps=warmup, progress=False)
        t0 = time.perf_counter()
        train(cfg, d, "cpu", datasets=ds, max_steps=warmup + steps, progress=False)
        return (time.perf_counter() - t0) / steps


def measure(steps: int, warmup: int, pass_batches: int, quick: bool) -> list[dict]:
    cfg = recipe_for(MODEL, "paper")
    if quick:
        cfg = dataclasses.replace(cfg, model_overrides=(("d_ff", 8), ("d_k", 4), ("d_model", 4), ("patch_size", 7)))
    # one epoch longer than the timed steps: no end-of-epoch evaluation inside the timing
    raw = random_datasets(cfg, (warmup + steps + 2) * cfg.batch_size, cfg.batch_size, seed=1)
    ds = raw
    rows = []
    import curvature_gap.train as tr
    # the variants interleaved, ROUNDS rounds of steps/ROUNDS steps each, the order rotated every round, and the
    # median round taken: a change of the machine's load during the run then falls on every variant alike
    times: dict[str, list[float]] = {label: [] for label, _, _ in VARIANTS}
    per_round = max(1, steps // ROUNDS)
    for r in range(ROUNDS):
        for label, precision, emulated in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            run = dataclasses.replace(cfg, precision=precision, snapshot_every=0)
            # PyTorch's own kernels: the step without the emulation (the package always emulates on a CPU)
            patch = contextlib.nullcontext() if emulated or precision == "float32" else _no_emulation(tr)
            with patch:
                times[label].append(_step_seconds(run, ds, warmup, per_round))
    for label, precision, emulated in VARIANTS:
        s = statistics.median(times[label])
        rows.append(dict(what="step", variant=label, precision=precision, emulated=emulated, seconds=s,
                         steps=per_round * ROUNDS, rounds=[round(t, 5) for t in times[label]]))
        print(f"{label}: {s * 1e3:.1f} ms per step (rounds: {', '.join(f'{t * 1e3:.1f}' for t in times[label])})",
              flush=True)
    model = build_model(cfg.model, seed=0, **dict(cfg.model_overrides)).eval()
    rds = load_datasets(cfg, datasets=raw)
    for arithmetic in ("exact", "authors"):
        t0 = time.perf_counter()
        loader_pass(model, cfg, rds, 1_000, 16, True, "cpu", max_batches=pass_batches, arithmetic=arithmetic)
        s = (time.perf_counter() - t0) / pass_batches
        rows.append(dict(what="fig12_pass", variant=arithmetic, seconds=s, batches=pass_batches))
        print(f"Fig. 12 pass, {arithmetic}: {s * 1e3:.1f} ms per batch", flush=True)
    return rows


@contextlib.contextmanager
def _no_emulation(tr):
    """train with PyTorch's own bf16 kernels: its step runs under bf16 autocast without the emulated GEMM for the
    duration."""
    from curvature_gap.precision import autocast_for

    orig = tr.contexts_for
    tr.contexts_for = lambda precision, device: (autocast_for(precision, device), contextlib.nullcontext)
    try:
        yield
    finally:
        tr.contexts_for = orig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--pass-batches", type=int, default=60, help="timed batches of the Fig. 12 pass per arithmetic")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: as reproduce's side-by-side runs)")
    add_switches(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.pass_batches = 2, 1, 2
    torch.set_num_threads(args.threads)
    bench = Run(NAME, args.quick, argv)
    rows = measure(args.steps, args.warmup, args.pass_batches, args.quick)
    bench.write(out_path(NAME, args), rows, dict(model=MODEL, steps=args.steps, warmup=args.warmup,
                                                 pass_batches=args.pass_batches, threads=args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
