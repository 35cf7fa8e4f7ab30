"""The training step of the authors' MNIST recipe on a CPU, without setup: float32, bf16 as the package computes it
(CUDA's autocast emulated, ``precision.autocast_logits``), the same on PyTorch's own bf16 GEMM kernels, and the bf16
arithmetic the package ran before (CPU autocast, every bf16 GEMM emulated by a dispatch mode); optionally each
arithmetic under ``torch.compile``. Also one batch of the Fig. 12 pass in each arithmetic and the setup of a
``train()`` call (what a short ``train()`` call adds to its steps).

What is timed is the loop body of ``train.train``: the batch (``batch_at``: the recipe's order and augmentation)
and ``train_step`` (forward, loss, backward, clipping, AdamW). Each variant owns its model, optimiser and batches,
built before any clock starts; the variants take turns, ``--steps`` steps each per round, for ``--rounds`` rounds
with the order rotated every round, in one process on ``--threads`` threads, and each variant's step time is the
median of its rounds (the first round, compilation included, is not counted). A change of the machine's load then
falls on every variant alike. Usage::

    python benchmarks/bf16_cpu.py [--steps 30] [--rounds 11] [--threads 1] [--compile]
    python benchmarks/bf16_cpu.py --quick

Rows (``what``): ``step`` (``variant``: ``float32``, ``bf16``, ``bf16_native_gemm``, ``bf16_previous``, and with
``--compile`` ``float32_compiled``, ``bf16_compiled``; ``seconds`` per step, ``rounds`` the per-round seconds per
step, ``ratio_to_float32``), ``compile`` (``seconds`` of the first, compiling round beyond its steps),
``train_setup`` (``seconds`` of a ``train()`` call that trains no step), ``fig12_pass`` (``variant`` ``exact`` or
``authors``: ``seconds`` per batch).
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
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from _bench import Run, add_switches, out_path
from curvature_gap import precision
from curvature_gap.config import recipe_for
from curvature_gap.cost import random_datasets
from curvature_gap.experiments.running_mean import loader_pass
from curvature_gap.model import build_model
from curvature_gap.train import (augmentation_for, batch_at, load_datasets, lr_at, make_optimizer, order_for,
                                 train, train_step, zero_pixel)

NAME = "bf16_cpu"
MODEL = "authors_mnist"
QUICK_MODEL = (("d_ff", 8), ("d_k", 4), ("d_model", 4), ("patch_size", 7))
LABELS = {
    "float32": "float32",
    "bf16": "bf16, CUDA's autocast emulated (the package)",
    "bf16_native_gemm": "bf16, the same with PyTorch's own bf16 GEMM kernels",
    "bf16_previous": "bf16, the previous arithmetic (CPU autocast, dispatch-mode GEMM emulation)",
    "float32_compiled": "float32, torch.compile",
    "bf16_compiled": "bf16, CUDA's autocast emulated, torch.compile",
}
_aten = torch.ops.aten
_GEMMS = frozenset({_aten.mm.default, _aten.bmm.default, _aten.addmm.default, _aten.baddbmm.default})


class _PreviousGemm(TorchDispatchMode):
    """The package's bf16 GEMM emulation before CUDA's autocast policy replaced it: every bf16 mm, bmm, addmm,
    baddbmm computed in float32 on the same operands and rounded once, below autograd."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _GEMMS and any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args):
            wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args]
            return func(*wide, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def _previous_logits(model, images):
    with _PreviousGemm(), torch.autocast("cpu", dtype=torch.bfloat16):
        return model(images)


def _previous_cross_entropy(logits, labels, reduction="mean"):
    with _PreviousGemm(), torch.autocast("cpu", dtype=torch.bfloat16):
        return nn.functional.cross_entropy(logits, labels, reduction=reduction)


def _native_bf16_linear(x, W, b=None):
    """``precision.bf16_linear`` on PyTorch's own bf16 kernels: ``F.linear`` of the bf16 operands."""
    return nn.functional.linear(x.to(torch.bfloat16), W.t().to(torch.bfloat16), None if b is None else
                                b.to(torch.bfloat16))


@contextlib.contextmanager
def _native_gemm():
    """``precision.autocast_logits`` with PyTorch's own bf16 GEMM kernels for the duration."""
    emulated = precision.bf16_linear
    precision.bf16_linear = _native_bf16_linear
    try:
        yield
    finally:
        precision.bf16_linear = emulated


@dataclasses.dataclass
class _Variant:
    """One arithmetic's training state: model, optimiser, forward and loss, the steps it has taken."""

    name: str
    model: nn.Module
    opt: torch.optim.Optimizer
    logits: object
    cross_entropy: object
    context: object = contextlib.nullcontext
    step: int = 0


def _variants(cfg, names) -> list[_Variant]:
    out = []
    for name in names:
        prec = "float32" if name.startswith("float32") else "bf16"
        model = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides))
        model = model.to(torch.bfloat16) if prec == "bf16" else model
        logits, cross_entropy = precision.arithmetic_for(prec)
        context = contextlib.nullcontext
        if name == "bf16_previous":
            logits, cross_entropy = _previous_logits, _previous_cross_entropy
        elif name == "bf16_native_gemm":
            context = _native_gemm
        elif name.endswith("_compiled"):
            logits = torch.compile(logits, options={"emulate_precision_casts": True})
        out.append(_Variant(name, model, make_optimizer(model, cfg), logits, cross_entropy, context))
    return out


def _steps(v: _Variant, cfg, ds, perm, per_epoch: int, total: int, fill, aug, n: int) -> float:
    """Wall seconds of ``n`` loop bodies of ``train`` (batch, then ``train_step``) of variant ``v``."""
    with v.context():
        t0 = time.perf_counter()
        for _ in range(n):
            x, y = batch_at(cfg, ds.train, perm, v.step % per_epoch, v.step, fill, aug)
            train_step(v.model, v.opt, x, y, cfg, lr_at(cfg, v.step, total), v.logits, v.cross_entropy)
            v.step += 1
        return time.perf_counter() - t0


def measure_steps(cfg, ds, names, steps: int, rounds: int) -> list[dict]:
    """The step rows (and compile rows) of the variants ``names``, interleaved (see the module docstring)."""
    per_epoch = len(ds.train) // cfg.batch_size
    perm = order_for(cfg, len(ds.train)).order(0)
    fill, aug = zero_pixel(*cfg.normalize), augmentation_for(cfg)
    variants = _variants(cfg, names)
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    first: dict[str, float] = {}
    for r in range(rounds + 1):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            seconds = _steps(v, cfg, ds, perm, per_epoch, per_epoch * cfg.epochs, fill, aug, steps)
            if r:
                times[v.name].append(seconds / steps)
            else:
                first[v.name] = seconds
    f32 = statistics.median(times["float32"])
    rows = []
    for v in variants:
        s = statistics.median(times[v.name])
        rows.append(dict(what="step", variant=v.name, label=LABELS[v.name], seconds=s, ratio_to_float32=s / f32,
                         steps_per_round=steps, rounds=[round(t, 6) for t in times[v.name]]))
        print(f"{LABELS[v.name]}: {s * 1e3:.2f} ms per step ({s / f32:.2f}x float32; rounds "
              f"{', '.join(f'{t * 1e3:.1f}' for t in times[v.name])})", flush=True)
        if v.name.endswith("_compiled"):
            rows.append(dict(what="compile", variant=v.name, seconds=first[v.name] - steps * s))
    return rows


def measure_setup(cfg, raw, calls: int) -> dict:
    """The median seconds of a ``train()`` call that resumes a run at its last step and trains no further: what
    each call adds to the time of its steps (data, model, optimiser, checkpoint)."""
    run = dataclasses.replace(cfg, snapshot_every=0)
    with tempfile.TemporaryDirectory() as d:
        train(run, d, "cpu", datasets=raw, max_steps=1, progress=False)
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            train(run, d, "cpu", datasets=raw, max_steps=1, progress=False)
            times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    print(f"train() setup: {s * 1e3:.0f} ms per call", flush=True)
    return dict(what="train_setup", seconds=s, calls=calls)


def measure_pass(cfg, raw, batches: int) -> list[dict]:
    model = build_model(cfg.model, seed=0, **dict(cfg.model_overrides)).eval()
    rds = load_datasets(cfg, datasets=raw)
    rows = []
    for arithmetic in ("exact", "authors"):
        loader_pass(model, cfg, rds, 1, 16, True, "cpu", max_batches=1, arithmetic=arithmetic)  # warm-up
        t0 = time.perf_counter()
        loader_pass(model, cfg, rds, 1_000, 16, True, "cpu", max_batches=batches, arithmetic=arithmetic)
        s = (time.perf_counter() - t0) / batches
        rows.append(dict(what="fig12_pass", variant=arithmetic, seconds=s, batches=batches))
        print(f"Fig. 12 pass, {arithmetic}: {s * 1e3:.1f} ms per batch", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per variant and round")
    ap.add_argument("--rounds", type=int, default=11, help="timed rounds (after one untimed round)")
    ap.add_argument("--pass-batches", type=int, default=60, help="timed batches of the Fig. 12 pass per arithmetic")
    ap.add_argument("--setup-calls", type=int, default=5, help="train() calls that train no step, timed")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: as reproduce's side-by-side runs)")
    ap.add_argument("--compile", action="store_true", help="also time each arithmetic under torch.compile")
    add_switches(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.rounds, args.pass_batches, args.setup_calls = 2, 2, 2, 1
    torch.set_num_threads(args.threads)
    bench = Run(NAME, args.quick, argv)
    cfg = recipe_for(MODEL, "paper", **({"model_overrides": QUICK_MODEL} if args.quick else {}))
    raw = random_datasets(cfg, (args.steps * (args.rounds + 1) + 2) * cfg.batch_size, cfg.batch_size, seed=1)
    names = ["float32", "bf16", "bf16_native_gemm", "bf16_previous"]
    names += ["float32_compiled", "bf16_compiled"] if args.compile else []
    rows = measure_steps(cfg, load_datasets(cfg, datasets=raw), names, args.steps, args.rounds)
    rows.append(measure_setup(cfg, raw, args.setup_calls))
    rows += measure_pass(cfg, raw, args.pass_batches)
    bench.write(out_path(NAME, args), rows, dict(model=MODEL, steps=args.steps, rounds=args.rounds,
                                                 pass_batches=args.pass_batches, setup_calls=args.setup_calls,
                                                 threads=args.threads, compile=args.compile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
