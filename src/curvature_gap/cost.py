"""What a training run costs on a device, measured: the run's own trainer timed on random data of its shape.

The one place where the time of a training run is measured (``curvature-gap reproduce``'s long-run guard,
``benchmarks/training_cost.py``, ``benchmarks/gpu_check.py``): a few optimiser steps of
:func:`~curvature_gap.train.train` (the run's recipe, augmentation and precision included) after untimed warm-up steps.
The compute of a step does not depend on the pixel values, so random images cost what the real dataset costs.
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .codehash import not_in_code_hash
from .config import DATASET_OF, MODEL_CONFIGS, Recipe
from .data import TensorDataset
from .model import build_model
from .train import Datasets, evaluate, train

__all__ = ["SPLIT_SIZES", "DATASET_NAMES", "model_title", "random_datasets", "synchronize", "seconds_per_step",
           "evaluation_seconds", "RunCost", "training_cost"]

# images in the training and test splits of each dataset (what a run of a full profile reads)
SPLIT_SIZES = {"mnist": (60_000, 10_000), "cifar100": (50_000, 10_000)}
DATASET_NAMES = {"mnist": "MNIST", "cifar100": "CIFAR-100"}  # as a reader names them
_TIMING = "measures time, never a number of a result"


def model_title(model: str, overrides=()) -> str:
    """The model in words: "the authors' 8-block CIFAR-100 model", "the 1-block MNIST model of Table 1"."""
    mc = dataclasses.replace(MODEL_CONFIGS[model], **dict(overrides))
    what = f"{mc.n_blocks}-block {DATASET_NAMES[DATASET_OF[model]]} model"
    return f"the authors' {what}" if model.startswith("authors_") else f"the {what} of Table 1"


@not_in_code_hash(_TIMING)
def random_datasets(cfg: Recipe, n_train: int, n_test: int = 1, seed: int = 0) -> Datasets:
    """Random images in [-1, 1] and labels of ``cfg``'s model's shape (as the data loaders return them)."""
    mc = cfg.model_config()
    g = torch.Generator().manual_seed(seed)
    shape = (mc.in_channels, mc.image_size, mc.image_size)

    def split(n):
        return TensorDataset(torch.rand((n, *shape), generator=g) * 2 - 1,
                             torch.randint(0, mc.n_classes, (n,), generator=g))

    return Datasets(split(n_train), split(n_test))


def synchronize(device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously), so that a clock reads its end."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@not_in_code_hash(_TIMING)
def seconds_per_step(cfg: Recipe, device, steps: int = 3, warmup: int = 2) -> float:
    """Wall seconds per optimiser step of ``cfg``'s trainer on ``device``: ``warmup`` untimed steps, then
    ``steps`` timed ones, on random images, inside one epoch; the steps' own time as ``train`` measures it (its
    ``loop``: batch and step), without the setup of the call (data, model, checkpoint) or any evaluation."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    ds = random_datasets(cfg, cfg.batch_size * (warmup + steps + 1))
    probe = dataclasses.replace(cfg, epochs=1, train_subset=None, test_subset=None, ckpt_every=10 ** 9,
                                snapshot_every=0)
    with tempfile.TemporaryDirectory() as d:
        if warmup:
            train(probe, Path(d), device=str(device), datasets=ds, max_steps=warmup, progress=False)
        loop = train(probe, Path(d), device=str(device), datasets=ds, max_steps=warmup + steps, progress=False)["loop"]
        return loop["seconds"] / loop["steps"]


@not_in_code_hash(_TIMING)
def evaluation_seconds(cfg: Recipe, device, n_test: int | None = None) -> float:
    """Wall seconds of the test-split evaluation every epoch ends with (``train.evaluate``, float32), on
    ``n_test`` random images (default: the dataset's test split)."""
    n = n_test or SPLIT_SIZES[DATASET_OF[cfg.model]][1]
    m = build_model(cfg.model, seed=0, **dict(cfg.model_overrides)).to(device)
    test = random_datasets(cfg, 1, n).test
    evaluate(m, test.subset(min(n, 1000)), device)  # warm-up
    synchronize(device)
    t0 = time.perf_counter()
    evaluate(m, test, device)
    synchronize(device)
    return time.perf_counter() - t0


@dataclass(frozen=True)
class RunCost:
    """The measured cost of a training run of ``cfg`` on ``device`` up to ``steps`` optimiser steps."""

    title: str  # the model in words (:func:`model_title`)
    recipe: str  # whose training recipe
    seed: int
    device: str
    seconds_per_step: float  # measured (:func:`seconds_per_step`)
    steps_per_epoch: int
    steps: int  # the optimiser steps the run needs
    evaluation_s: float  # one test-split evaluation (0: not measured)

    @property
    def evaluations(self) -> int:
        """Test-split evaluations on the way (one at the end of each whole epoch)."""
        return self.steps // self.steps_per_epoch

    @property
    def epoch_s(self) -> float:
        return self.steps_per_epoch * self.seconds_per_step + self.evaluation_s

    @property
    def seconds(self) -> float:
        return self.steps * self.seconds_per_step + self.evaluations * self.evaluation_s

    def describe(self) -> str:
        """The run and its cost in one sentence."""
        epochs = self.steps / self.steps_per_epoch
        evals = f" + {self.evaluation_s:.0f} s test evaluation" if self.evaluation_s else ""
        return (f"training {self.title} ({self.recipe}, seed {self.seed}) for {self.steps:,} steps "
                f"({epochs:.3g} epochs) would take about {self.seconds / 3600:.1f} h on {self.device}: "
                f"{self.seconds_per_step:.3g} s per step measured now, {self.epoch_s / 60:.1f} min per epoch of "
                f"{self.steps_per_epoch} steps{evals}")


def training_cost(cfg: Recipe, device, run_steps: int | None = None, steps: int = 3, warmup: int = 2) -> RunCost:
    """The cost of ``cfg``'s run on ``device`` up to ``run_steps`` optimiser steps (None: all its epochs):
    :func:`seconds_per_step` times the steps (its test evaluations not measured: ``evaluation_s`` 0)."""
    n_train = cfg.train_subset or SPLIT_SIZES[DATASET_OF[cfg.model]][0]
    per_epoch = math.ceil(n_train / cfg.batch_size)
    total = per_epoch * cfg.epochs if run_steps is None else int(run_steps)
    recipe = "the authors' recipe" if cfg.source == "authors" else "this companion's Table 1 recipe"
    return RunCost(title=model_title(cfg.model, cfg.model_overrides), recipe=recipe, seed=cfg.seed,
                   device=str(device), seconds_per_step=seconds_per_step(cfg, device, steps, warmup),
                   steps_per_epoch=per_epoch, steps=total, evaluation_s=0.0)
