"""What the paper profile of Figs. 6 and 12 costs: the authors' 8-block CIFAR-100 model and recipe, measured.

Their configurations train the 8-block CIFAR-100 ViT (1,600,228 parameters) by their recipe (AdamW, batch 128,
crop + flip augmentation) and read the checkpoint at step 10,000: Fig. 6 of the run of seed 42, Fig. 12 of the
run of seed 21; each then runs 26 epochs of the training loader at those weights (Fig. 6 forward only, Fig. 12
forward and backward). CIFAR-100 cannot be had offline, and the compute of a step does not depend on the pixel
values, so every measurement runs the package's own code on random images of CIFAR-100's shape
(``curvature_gap.cost.random_datasets``), on ``--device``:

* ``step`` — seconds per optimiser step of ``train.train`` (``cost.seconds_per_step``: ``--warmup``
  untimed steps, then ``--steps`` timed), for ``--precision`` float32 (the default) and, on CUDA, bf16 (their
  CUDA setting);
* ``epoch`` — one whole epoch of ``train``, measured end to end: 391 steps on 50,000 images and the
  evaluation of the 10,000-image test split it ends with (full mode; ``--no-epoch`` leaves it out);
* ``evaluation`` — that test evaluation alone (``cost.evaluation_seconds``);
* ``fig6_pass`` / ``fig12_pass`` — seconds per batch of the pass at fixed weights
  (``experiments.running_mean.loader_pass``, ``--pass-batches`` batches), without and with the gradient;
* for comparison, ``step`` and ``evaluation`` of the 8-block CIFAR-100 model of Table 1 under this companion's
  recipe (batch 256, 200 epochs: Fig. 6 on the theorem's block).

``benchmarks/report.py`` derives from these rows the cost of the run to step 10,000, of the recipe's 100
epochs, of Figs. 6 and 12 together (two runs to step 10,000 and two passes of 26 epochs), and of the Table 1
run. Usage::

    python benchmarks/training_cost.py [--device cpu|cuda] [--steps 40] [--out benchmarks/training_cost.json]
    python benchmarks/training_cost.py --quick    # a 2-block, 8-wide model, a few steps: seconds

The GPU check (``benchmarks/gpu_check.py``, step d) runs :func:`measure` on CUDA.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

from _bench import Run, add_switches, out_path
from curvature_gap.config import recipe_for
from curvature_gap.cost import (SPLIT_SIZES, evaluation_seconds, model_title, random_datasets, seconds_per_step,
                                synchronize)
from curvature_gap.experiments.assumption import AUTHORS_SETTINGS as FIG12_SETTINGS
from curvature_gap.experiments.convergence import AUTHORS_SETTINGS as FIG6_SETTINGS
from curvature_gap.experiments.running_mean import loader_pass
from curvature_gap.model import build_model
from curvature_gap.train import load_datasets, train

NAME = "training_cost"
MODEL = "authors_cifar100"
# the quick mode's model: the same code path at a size that runs in seconds
QUICK_OVERRIDES = (("d_ff", 16), ("d_k", 8), ("d_model", 8), ("n_blocks", 2), ("patch_size", 8))


def _epoch_seconds(cfg, device: str, n_train: int, n_test: int) -> tuple[float, int]:
    """One whole epoch of ``train`` on random images, timed end to end: its steps and the test
    evaluation it ends with (the run is cut at the first step of the second epoch)."""
    ds = random_datasets(cfg, n_train, n_test, seed=1)
    per_epoch = -(-n_train // cfg.batch_size)
    run = dataclasses.replace(cfg, epochs=2, train_subset=None, test_subset=None, snapshot_every=0,
                              ckpt_every=10 ** 9)
    with tempfile.TemporaryDirectory() as d:
        synchronize(device)
        t0 = time.perf_counter()
        train(run, Path(d), device=device, datasets=ds, max_steps=per_epoch, progress=False)
        synchronize(device)
        return time.perf_counter() - t0, per_epoch


def _pass_seconds(cfg, device: str, settings, batches: int) -> float:
    """Seconds per batch of the Figs. 6/12 pass at fixed weights (one untimed batch first)."""
    model = build_model(cfg.model, seed=0, **dict(cfg.model_overrides)).to(device).eval()
    ds = load_datasets(cfg, datasets=random_datasets(cfg, cfg.batch_size * (batches + 1), 1, seed=2))
    loader_pass(model, cfg, ds, 1, settings.log_every, settings.gradients, device, max_batches=1)
    synchronize(device)
    t0 = time.perf_counter()
    loader_pass(model, cfg, ds, 1, settings.log_every, settings.gradients, device, max_batches=batches + 1)
    synchronize(device)
    return (time.perf_counter() - t0) / (batches + 1)


def measure(device: str, precisions=("float32",), steps: int = 40, warmup: int = 5, epoch: bool = True,
            pass_batches: int = 20, overrides: tuple = (), n_train: int | None = None, n_test: int | None = None,
            table1: bool = True, log=print) -> list[dict]:
    """The rows of this benchmark on ``device`` (see the module docstring); ``overrides`` change the models' size
    (the quick mode), ``n_train``/``n_test`` the epoch's images (default: CIFAR-100's 50,000 and 10,000);
    ``table1`` also times a step and the evaluation of the Table 1 CIFAR-100 model (Fig. 6 on the theorem's block)."""
    full_train, full_test = SPLIT_SIZES["cifar100"]
    n_train, n_test = n_train or full_train, n_test or full_test
    rows = []
    runs = [(MODEL, recipe_for(MODEL, "paper", model_overrides=tuple(overrides)))]
    if table1:
        runs.append(("cifar100", recipe_for("cifar100", "paper", model_overrides=tuple(overrides))))
    for model, base in runs:
        n_params = sum(p.numel() for p in build_model(model, seed=0, **dict(overrides)).parameters())
        common = dict(model=model, title=model_title(model, overrides), parameters=n_params,
                      batch_size=base.batch_size, device=device)
        for precision in precisions if model == MODEL else ("float32",):
            cfg = dataclasses.replace(base, precision=precision) if model == MODEL else base
            s = seconds_per_step(cfg, device, steps, warmup)
            rows.append(dict(common, quantity="step", precision=precision, seconds=s, steps=steps, warmup=warmup,
                             images_per_s=cfg.batch_size / s))
            log(f"{model} {precision}: {s:.4g} s per step ({cfg.batch_size / s:.0f} images/s, {steps} steps after {warmup})")
        ev = evaluation_seconds(base, device, n_test)
        rows.append(dict(common, quantity="evaluation", precision="float32", seconds=ev, images=n_test))
        log(f"{model} test evaluation ({n_test:,} images): {ev:.3g} s")
        if model != MODEL:
            continue
        if epoch:
            secs, per_epoch = _epoch_seconds(base, device, n_train, n_test)
            rows.append(dict(common, quantity="epoch", precision="float32", seconds=secs, steps=per_epoch,
                             images=n_train, test_images=n_test))
            log(f"one epoch ({per_epoch} steps on {n_train:,} images + the test evaluation): {secs:.4g} s")
        for name, settings in (("fig6_pass", FIG6_SETTINGS["paper"]), ("fig12_pass", FIG12_SETTINGS["paper"])):
            t = _pass_seconds(base, device, settings, pass_batches)
            rows.append(dict(common, quantity=name, precision="float32", seconds=t, batches=pass_batches,
                             gradients=settings.gradients, epochs_of_the_figure=settings.epochs, step=settings.step))
            log(f"{name}: {t:.4g} s per batch ({'forward and backward' if settings.gradients else 'forward'})")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--steps", type=int, default=40, help="timed optimiser steps per precision")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    ap.add_argument("--pass-batches", type=int, default=20, help="timed batches of each figure's pass")
    ap.add_argument("--no-epoch", action="store_true", help="leave out the whole measured epoch")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    add_switches(ap)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("training_cost: --device cuda, but CUDA is not available here; nothing was measured", file=sys.stderr)
        return 2
    if args.threads or args.quick:
        torch.set_num_threads(args.threads or 1)
    bench = Run(NAME, args.quick, argv)
    precisions = ("float32", "bf16") if args.device == "cuda" else ("float32",)
    if args.quick:
        rows = measure(args.device, precisions, steps=2, warmup=1, pass_batches=2, overrides=QUICK_OVERRIDES,
                       n_train=256, n_test=64)
    else:
        rows = measure(args.device, precisions, args.steps, args.warmup, not args.no_epoch, args.pass_batches)
    bench.write(out_path(NAME, args), rows,
                dict(model=MODEL, recipe="the authors' CIFAR-100 recipe (config.AUTHORS_RECIPES['cifar100'])",
                     data="random images of CIFAR-100's shape (the dataset is not obtainable offline)",
                     overrides=dict(QUICK_OVERRIDES) if args.quick else {}, device=args.device,
                     fig6=dataclasses.asdict(FIG6_SETTINGS["paper"]), fig12=dataclasses.asdict(FIG12_SETTINGS["paper"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
