"""Training: one seeded, resumable loop (:func:`train`) for every :class:`~curvature_gap.config.Recipe`.

Table 1's runs and the authors' are two values of the recipe (``config.RECIPES``). The loop's shape is
nanoGPT's: the batch (:func:`batch_at`: the recipe's order, augmentation and normalisation), the learning
rate (:func:`lr_at`: schedule × warm-up), one step in the recipe's precision (:func:`train_step`).

Determinism (on CPU): the initialisation and the training order (:data:`ORDERS`) are seeded, the augmentation at
step ``s`` by ``(seed, s)``, so a run resumed from any checkpoint replays exactly the batches an uninterrupted run
would see. A run lives in ``runs/<model>-<key>`` (:func:`run_key`). Checkpoints are written atomically and carry the
key; a checkpoint of another key is refused.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import platform
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from . import data as data_mod
from .codehash import code_hash, not_in_code_hash
from .config import DATASET_OF, Recipe, config_hash
from .device import resolve_device
from .io import atomic_write_json, file_lock, load_torch, save_torch, state_sha256
from .model import ViT, build_model
from .precision import arithmetic_for, module_logits, precision_code

CKPT_NAME = "last.pt"
MODEL_NAME = "model.pt"
METRICS_NAME = "metrics.json"
SNAPSHOT_DIR = "snapshots"
# what torch.load(weights_only=True) raises on a truncated, edited or foreign file (not a zip: UnpicklingError)
_UNREADABLE = (OSError, RuntimeError, EOFError, ValueError, KeyError, pickle.UnpicklingError)


class StaleCheckpointWarning(UserWarning):
    """A checkpoint on disk failed its integrity check; the model is being retrained."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or exploded; the message names the step and the last good checkpoint."""


class CheckpointMismatch(RuntimeError):
    """A checkpoint was written by a different run (another recipe or other training code)."""


class RunMissing(RuntimeError):
    """The weights asked of a run are not on disk (:func:`load_run`, which never trains; :func:`ensure` trains)."""


@dataclass
class Datasets:
    train: data_mod.TensorDataset
    test: data_mod.TensorDataset


def load_datasets(recipe: Recipe, root=None, datasets: Datasets | None = None) -> Datasets:
    """Train and test split of the recipe's dataset (``config.DATASET_OF``), subset as the recipe says and normalised
    by ``recipe.normalize``, unaugmented. ``datasets`` (whole splits as the data files give them, normalised to
    [-1, 1]) are used instead of the files when given."""
    if datasets is None:
        name = DATASET_OF[recipe.model]
        datasets = Datasets(data_mod.load(name, root, train=True), data_mod.load(name, root, train=False))
    mean, std = recipe.normalize
    return Datasets(data_mod.renormalised(datasets.train.subset(recipe.train_subset), mean, std),
                    data_mod.renormalised(datasets.test.subset(recipe.test_subset), mean, std))


def _generator(*key: int) -> torch.Generator:
    return torch.Generator().manual_seed(hash(key) & 0x7FFF_FFFF_FFFF)  # ints hash deterministically in CPython


# ----------------------------------------------------------------------------- the training order
class EpochOrder:
    """``shuffle="epoch"``: epoch ``e`` is ``torch.randperm(n)`` seeded by ``(seed, e)``, reached directly."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.seed = n, int(seed)

    def order(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.n, generator=_generator(self.seed, epoch))


class LoaderOrder:
    """``shuffle="dataloader"``: the order of ``DataLoader(range(n), batch_size, shuffle=True, generator=g)``
    with ``g = torch.Generator().manual_seed(seed)``, epoch after epoch, as the authors' loaders (their
    ``src/datasets/mnist.py``, ``cifar_100.py``). One generator runs through all epochs, so epoch ``e`` is
    reached by replaying epochs 0..e−1 (about 20 ms each for 60,000 images)."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self._loader = torch.utils.data.DataLoader(range(n), batch_size=batch_size, shuffle=True, num_workers=0,
                                                   generator=torch.Generator().manual_seed(int(seed)))
        self._epoch = 0  # the epoch the next pass over the loader yields

    def order(self, epoch: int) -> torch.Tensor:
        """(n,) int64: the indices of epoch ``epoch``, in the order they are drawn (only forwards)."""
        if epoch < self._epoch:
            raise ValueError(f"epoch {epoch} was passed already (next: {self._epoch})")
        while True:
            perm = torch.cat(list(self._loader))
            self._epoch += 1
            if self._epoch == epoch + 1:
                return perm


ORDERS = {"epoch": EpochOrder, "dataloader": LoaderOrder}  # Recipe.shuffle -> the order


@not_in_code_hash("it only picks ORDERS[recipe.shuffle]; run_key hashes the order a recipe picks")
def order_for(recipe: Recipe, n: int):
    """The training order of ``recipe`` over ``n`` images (``ORDERS[recipe.shuffle]``)."""
    return ORDERS[recipe.shuffle](n, recipe.batch_size, recipe.seed)


# ----------------------------------------------------------------------------- augmentation
def zero_pixel(mean, std) -> torch.Tensor:
    """(C,) float32: what ``Normalize(mean, std)`` makes of a pixel 0 (the fill of the crop padding and the
    rotation, which act on the image before ``ToTensor`` and ``Normalize``)."""
    m = torch.tensor(tuple(mean), dtype=torch.float32)
    return torch.zeros_like(m).sub(m).div(torch.tensor(tuple(std), dtype=torch.float32))


def rotate_nearest(images: torch.Tensor, degrees: torch.Tensor, fill: torch.Tensor,
                   flip: torch.Tensor | None = None) -> torch.Tensor:
    """Each image ``images[i]`` (B, C, H, W) rotated counter-clockwise by ``degrees[i]`` about the image
    centre, nearest neighbour, the area from outside filled with ``fill`` (C,): the geometry of
    torchvision's ``rotate`` (``RandomRotation``'s default ``InterpolationMode.NEAREST``, ``expand=False``,
    centre of the image); then flipped left to right where ``flip`` (B,) bool is set. One ``grid_sample``
    (``align_corners=False``) samples the image and a channel of ones beside it, whose zeros mark the pixels
    that came from outside; a flip reverses the sampling grid's columns."""
    b, c, h, w = images.shape
    a = torch.deg2rad(degrees.to(torch.float64))
    cos, sin = torch.cos(a), torch.sin(a)
    theta = torch.zeros(b, 2, 3, dtype=torch.float64)
    # output pixel (x, y), centred, y down -> source (x cos a − y sin a, x sin a + y cos a), in grid units
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin * h / w
    theta[:, 1, 0], theta[:, 1, 1] = sin * w / h, cos
    grid = nn.functional.affine_grid(theta.to(images.dtype), [b, c, h, w], align_corners=False).to(images.device)
    if flip is not None:
        grid = torch.where(flip.to(images.device)[:, None, None, None], grid.flip(2), grid)
    ones = torch.ones(b, 1, h, w, dtype=images.dtype, device=images.device)
    out = nn.functional.grid_sample(torch.cat([images, ones], 1), grid, mode="nearest", padding_mode="zeros",
                                    align_corners=False)
    return torch.where(out[:, c:] > 0.5, out[:, :c], fill.to(images).view(1, c, 1, 1))


def crop_padded(images: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, padding: int, fill: torch.Tensor,
                flip: torch.Tensor | None = None) -> torch.Tensor:
    """Each image ``images[i]`` (B, C, H, W) padded by ``padding`` pixels of ``fill`` (C,) and cropped back to H × W
    at offset (``dy[i]``, ``dx[i]``), flipped left to right where ``flip`` (B,) bool is set: one gather."""
    b, c, h, w = images.shape
    p = padding
    padded = fill.to(images).view(1, c, 1, 1).expand(b, c, h + 2 * p, w + 2 * p).clone()
    padded[:, :, p:p + h, p:p + w] = images
    cols = dx[:, None] + torch.arange(w)[None]
    if flip is not None:
        cols = torch.where(flip[:, None], cols.flip(1), cols)
    index = ((dy[:, None] + torch.arange(h)[None])[:, :, None] * (w + 2 * p) + cols[:, None, :]).reshape(b, 1, h * w)
    return padded.reshape(b, c, -1).gather(2, index.expand(b, c, h * w).to(images.device)).reshape(b, c, h, w)


def augment(images: torch.Tensor, g: torch.Generator, crop_padding: int, rotation_degrees: float, hflip: bool,
            fill: torch.Tensor) -> torch.Tensor:
    """The training augmentation, per image, from generator ``g``, on normalised images (B, C, H, W).

    In order (the order of the authors' ``_build_transforms``): a random crop of the image padded by ``crop_padding``
    pixels of ``fill`` (offsets uniform on 0..2·padding in each direction, as ``RandomCrop.get_params``); a rotation by
    an angle uniform on [−d, d] degrees, ``d = rotation_degrees`` (as ``RandomRotation(d, fill=0)``); a horizontal flip
    with probability 1/2 (``RandomHorizontalFlip()``). Each step is skipped when its parameter is 0 / False. ``fill``
    (C,) is a zero pixel after normalisation (:func:`zero_pixel`): crop and nearest-neighbour rotation only move and
    fill pixels, so doing them after ``Normalize`` with that fill equals doing them before it, as torchvision does. The
    random numbers are drawn in that order (offsets, angles, flips)."""
    b = images.shape[0]
    p = crop_padding
    dy, dx = (torch.randint(0, 2 * p + 1, (b,), generator=g) for _ in range(2)) if p else (None, None)
    angles = (torch.empty(b, dtype=torch.float64).uniform_(-rotation_degrees, rotation_degrees, generator=g)
              if rotation_degrees else None)
    flip = torch.rand(b, generator=g) < 0.5 if hflip else None
    out = images
    if p:
        out = crop_padded(out, dy, dx, p, fill, flip if angles is None else None)
    if angles is not None:
        out = rotate_nearest(out, angles, fill, flip)
    elif flip is not None and not p:
        out = torch.where(flip.to(images.device)[:, None, None, None], out.flip(-1), out)
    return out


@not_in_code_hash("it only picks augment or nothing; run_key hashes the augmentation a recipe picks")
def augmentation_for(recipe: Recipe):
    """``augment`` when the recipe augments its training batches, else None."""
    return augment if recipe.augments else None


# ----------------------------------------------------------------------------- the batches
def batch_at(recipe: Recipe, train_split, perm: torch.Tensor, b: int, step: int, fill: torch.Tensor, aug=None):
    """Batch ``b`` of the epoch order ``perm`` at training step ``step``: its images and labels, augmented by
    ``aug`` (:func:`augmentation_for`; generator seeded by ``(seed, step)``). What :func:`train` trains on,
    and what the figures read as "the first batch of the loader"."""
    idx = perm[b * recipe.batch_size:(b + 1) * recipe.batch_size]
    x, y = train_split.images[idx], train_split.labels[idx]
    if aug is not None:
        x = aug(x, _generator(recipe.seed, 1_000_003, step), recipe.crop_padding, recipe.rotation_degrees,
                recipe.hflip, fill)
    return x, y


def _epochs(recipe: Recipe, n: int) -> tuple:
    """(batches per epoch, the order, the augmentation, its fill) of ``recipe``'s training over ``n`` images."""
    fill = zero_pixel(*recipe.normalize)
    return math.ceil(n / recipe.batch_size), order_for(recipe, n), augmentation_for(recipe), fill


def loader(recipe: Recipe, ds: Datasets, epochs: int):
    """The recipe's training loader for ``epochs`` epochs, exactly as :func:`train` reads it: yields (step,
    images, labels), in the recipe's order, augmented, normalised (``ds`` from :func:`load_datasets`); the last
    batch of an epoch may be smaller. The authors' Figs. 6 and 12 run over this loader at the trained weights
    (their ``src/experiments/vit_classification/*.py``)."""
    per_epoch, orders, aug, fill = _epochs(recipe, len(ds.train))
    for epoch in range(epochs):
        perm = orders.order(epoch)
        for b in range(per_epoch):
            step = epoch * per_epoch + b
            yield (step, *batch_at(recipe, ds.train, perm, b, step, fill, aug))


def pass_batches(recipe: Recipe, ds: Datasets, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first batch of each of the first ``n`` passes over the recipe's training loader: what ``next(iter(loader))``
    gives when called ``n`` times on one seeded loader, as the authors' notebooks do once per section (each ``iter``
    draws the next permutation of the generator). Pass ``j`` is epoch ``j``'s order, its batch augmented as
    :func:`train` sees it at step ``j × batches per epoch``; pass 0 is the first batch :func:`train` trains on."""
    per_epoch, orders, aug, fill = _epochs(recipe, len(ds.train))
    return [batch_at(recipe, ds.train, orders.order(j), 0, j * per_epoch, fill, aug) for j in range(n)]


# ----------------------------------------------------------------------------- the step
def warmup_factor(step: int, warmup_steps: int) -> float:
    """``min(1, step / warmup_steps)`` (1 when ``warmup_steps`` is 0): the learning-rate factor of the step taken
    after ``step`` earlier ones. This is transformers' ``get_constant_schedule_with_warmup`` stepped after
    every optimiser step, as the authors do (``src/train/vit_classification.py``): its first step runs at rate 0."""
    return 1.0 if warmup_steps <= 0 else min(1.0, step / warmup_steps)


def lr_at(recipe: Recipe, step: int, total: int) -> float:
    """The learning rate of the optimiser step taken after ``step`` of ``total`` steps: ``lr`` × the schedule
    (constant, or cosine decay to 0) × the warm-up (:func:`warmup_factor`)."""
    lr = recipe.lr
    if recipe.schedule == "cosine":  # Recipe admits "constant" and "cosine" only
        lr = 0.5 * recipe.lr * (1 + math.cos(math.pi * min(step, total) / max(total, 1)))
    return lr * warmup_factor(step, recipe.warmup_steps)


def make_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """Adam or AdamW with the recipe's lr, betas, eps and weight decay (the authors': their
    ``src/train/vit_classification.py``, ``torch.optim.AdamW(model.parameters(), **optimizer.params)``)."""
    cls = torch.optim.AdamW if recipe.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=recipe.lr, betas=tuple(recipe.betas), eps=recipe.adam_eps,
               weight_decay=recipe.weight_decay)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, recipe: Recipe,
               lr: float, logits=module_logits, cross_entropy=nn.functional.cross_entropy) -> tuple[float, float]:
    """One optimiser step at learning rate ``lr``: the mean cross-entropy of ``logits(model, x)`` (the step's
    arithmetic: ``precision.arithmetic_for``), backward, the gradients clipped to global 2-norm
    ``recipe.grad_clip`` (``clip_grad_norm_``, norm_type 2, as the authors' ``src/train/vit_classification.py``;
    None: not clipped), the step. Returns (loss, the gradients' global 2-norm before clipping)."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = cross_entropy(logits(model, x), y)
    loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    if recipe.grad_clip:
        norm = nn.utils.clip_grad_norm_(params, recipe.grad_clip, norm_type=2.0)
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))
    opt.step()
    return loss.item(), float(norm)


@torch.no_grad()
def evaluate(model: nn.Module, ds: data_mod.TensorDataset, device, batch_size: int = 1000, logits=module_logits,
             cross_entropy=nn.functional.cross_entropy) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``ds`` in the arithmetic of ``precision.arithmetic_for``."""
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(ds), batch_size):
        x = ds.images[i : i + batch_size].to(device)
        y = ds.labels[i : i + batch_size].to(device)
        out = logits(model, x)
        loss += cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(-1) == y).sum().item()
    model.train()
    return loss / len(ds), correct / len(ds)


# ----------------------------------------------------------------------------- the loop
def _read_owned(path: Path, key: str, step: int | None = None) -> dict:
    """The checkpoint at ``path`` when the run of key ``key`` wrote it (after ``step`` steps, when given); else a
    :class:`CheckpointMismatch` saying why (raised: its wording is no part of the run's code hash)."""
    try:
        state = load_torch(path)
    except _UNREADABLE as exc:  # truncated, edited or not a checkpoint
        raise CheckpointMismatch(f"{path} cannot be loaded ({type(exc).__name__})") from exc
    meta = state if isinstance(state, dict) else {}
    if meta.get("config_hash") != key or (step is not None and meta.get("step") != step):
        raise CheckpointMismatch(
            f"{path} is not {'' if step is None else f'step {step} of '}run {key} (it is step {meta.get('step')} of "
            f"run {meta.get('config_hash')}: "
            f"{'another step' if meta.get('config_hash') == key else 'another recipe, or other training code'})")
    return state


def train(recipe: Recipe, out_dir, device: str = "auto", data_root=None, datasets: Datasets | None = None,
          max_steps: int | None = None, progress: bool = True, explode_factor: float = 1e3,
          snapshot_steps: tuple[int, ...] = ()) -> dict:
    """Train ``recipe`` into ``out_dir`` (resuming from ``out_dir/last.pt``); returns the metrics.

    Per step: the batch (:func:`batch_at`), then :func:`train_step` at :func:`lr_at`. ``last.pt`` is written
    every ``recipe.ckpt_every`` steps and after each epoch, when the test split is evaluated; the weights after
    every ``recipe.snapshot_every`` steps and after each of ``snapshot_steps`` (0: the initialisation) are kept
    in ``snapshots/`` (bf16 widened exactly to float32). ``max_steps`` stops after that many steps in total and
    returns ``{"interrupted_at_step": step, "loop": ...}`` (a later call continues). ``datasets``: whole splits
    as ``data.load`` gives them. ``loop`` (also in the metrics): the steps this call took and the wall seconds
    of their loop bodies (batch and :func:`train_step`; no setup, checkpoint, snapshot or evaluation)."""
    if not isinstance(recipe, Recipe):
        raise TypeError(f"train runs a config.Recipe, got {type(recipe).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    key = run_key(recipe)
    ckpt_path, final = out / CKPT_NAME, out / MODEL_NAME
    try:  # checkpoints first (before the data): a directory of another run is refused within seconds
        if final.exists() and not ckpt_path.exists():  # a finished model of another run is never overwritten
            _read_owned(final, key)
        state = _read_owned(ckpt_path, key) if ckpt_path.exists() else None
    except CheckpointMismatch as exc:
        raise CheckpointMismatch(f"{exc}; use another --out directory or delete it to start over") from exc
    ds = load_datasets(recipe, data_root, datasets=datasets)
    steps_per_epoch, orders, aug, fill = _epochs(recipe, len(ds.train))
    total_steps = steps_per_epoch * recipe.epochs

    model = build_model(recipe.model, seed=recipe.seed, **dict(recipe.model_overrides))
    model = model.to(dev, torch.bfloat16) if recipe.precision == "bf16" else model.to(dev)
    logits, cross_entropy = arithmetic_for(recipe.precision)
    if recipe.torch_compile:
        logits = torch.compile(logits, options={"emulate_precision_casts": True})
    opt = make_optimizer(model, recipe)
    step, history, wall_before, running = 0, [], 0.0, None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, history, wall_before = state["step"], list(state["history"]), float(state["wall_s"])
        running = state.get("running")
    keep = set(int(s) for s in snapshot_steps)
    loop = dict(steps=0, seconds=0.0)
    t0 = time.perf_counter()

    def save_ckpt():
        save_torch(ckpt_path, dict(config_hash=key, config=recipe.to_dict(), model=model.state_dict(),
                                   optimizer=opt.state_dict(), step=step, history=history, running=running,
                                   wall_s=wall_before + time.perf_counter() - t0))

    def kept_weights() -> dict:
        # bf16 weights are widened to float32, exactly (io.state_sha256 hashes numpy bytes: no bfloat16)
        return {k: (v.detach().float() if v.dtype == torch.bfloat16 else v.detach()).cpu()
                for k, v in model.state_dict().items()}

    def save_snapshot():
        wanted = step in keep or (recipe.snapshot_every and step > 0 and step % recipe.snapshot_every == 0)
        p = out / SNAPSHOT_DIR / f"step_{step:07d}.pt"
        if wanted and not p.exists():
            save_torch(p, dict(config_hash=key, step=step, model=kept_weights()))

    last_good = step
    save_snapshot()
    bar = tqdm(total=total_steps, initial=step, disable=not progress, desc=f"train {recipe.model}/{recipe.profile}",
               unit="step")
    while step < total_steps:
        epoch, pos = divmod(step, steps_per_epoch)
        perm = orders.order(epoch)
        for b in range(pos, steps_per_epoch):
            if max_steps is not None and step >= max_steps:
                bar.close()
                save_ckpt()
                return {"interrupted_at_step": step, "loop": loop}
            t_step = time.perf_counter()
            x, y = batch_at(recipe, ds.train, perm, b, step, fill, aug)
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            lv, _ = train_step(model, opt, x, y, recipe, lr_at(recipe, step, total_steps), logits, cross_entropy)
            loop["steps"] += 1
            loop["seconds"] += time.perf_counter() - t_step  # train_step's loss.item() waits for the device
            if not math.isfinite(lv) or (running is not None and lv > explode_factor * max(running, 1e-3)):
                bar.close()
                raise TrainingDiverged(f"loss became {lv:.4g} at step {step} (epoch {epoch}); the last good "
                                       f"checkpoint is {ckpt_path} at step {last_good}. Lower the learning rate or "
                                       "enable grad_clip.")
            running = lv if running is None else 0.98 * running + 0.02 * lv
            step += 1
            save_snapshot()
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}")
            if step % recipe.ckpt_every == 0 and step % steps_per_epoch != 0:
                save_ckpt()
                last_good = step
        test_loss, test_acc = evaluate(model, ds.test, dev, logits=logits, cross_entropy=cross_entropy)
        history.append(dict(epoch=epoch + 1, step=step, train_loss_ema=running, test_loss=test_loss, test_acc=test_acc))
        if progress:
            bar.write(f"epoch {epoch + 1}/{recipe.epochs}: train loss {running:.4f}  test loss {test_loss:.4f}  "
                      f"test acc {test_acc:.4f}")
        save_ckpt()
        last_good = step
    bar.close()

    train_loss, train_acc = evaluate(model, ds.train, dev, logits=logits, cross_entropy=cross_entropy)
    weights = kept_weights()
    wall = wall_before + time.perf_counter() - t0
    save_torch(final, dict(config_hash=key, config=recipe.to_dict(), model=weights, step=step, history=history,
                           wall_s=wall))
    metrics = dict(
        model=recipe.model, profile=recipe.profile, source=recipe.source, config_hash=key, epochs=recipe.epochs,
        steps=step, final_train_loss=train_loss, train_accuracy=train_acc,
        test_loss=history[-1]["test_loss"], test_accuracy=history[-1]["test_acc"],
        wall_seconds=round(wall, 2), device=str(dev), precision=recipe.precision, torch_version=torch.__version__,
        python=platform.python_version(), weights_sha256=state_sha256(weights),
        n_parameters=sum(p.numel() for p in model.parameters()), history=history, loop=loop,
    )
    atomic_write_json(out / METRICS_NAME, metrics)
    return metrics


# ----------------------------------------------------------------------------- finding a run
@not_in_code_hash("it names the roots of a run's key; the loop does not run it")
def training_code(recipe: Recipe) -> tuple:
    """The roots of the code that determines a run's weights: the loop and what the recipe picks (its order,
    its augmentation, its precision's forward and loss)."""
    aug = augmentation_for(recipe)
    return (train, ORDERS[recipe.shuffle]) + ((aug,) if aug is not None else ()) + precision_code(recipe.precision)


@not_in_code_hash("it names a run (a hash of its recipe and its training code); a result records the key itself")
def run_key(recipe: Recipe) -> str:
    """The key of a run: a hash of what determines its weights, the recipe's values (``Recipe.weights_dict``)
    and the code that trains it (:func:`training_code`). Two recipes that differ only in names or checkpoint
    intervals share a run; an edit of the loop, the model or the order a recipe uses gives a new one."""
    return config_hash(dict(recipe=recipe.weights_dict(), code=code_hash(*training_code(recipe))))


def run_dir(recipe: Recipe, runs_dir="runs") -> Path:
    """``runs_dir/<model>-<run key>``: where ``recipe`` is trained."""
    return Path(runs_dir) / f"{recipe.model}-{run_key(recipe)}"


def verify_checkpoint(directory, key: str) -> tuple[dict | None, str]:
    """(saved state, "") when ``directory/model.pt`` is intact and belongs to the run of key ``key``: it loads,
    carries that key, and its weights hash equals the one in ``metrics.json``; else (None, why)."""
    mp, metrics_path = Path(directory) / MODEL_NAME, Path(directory) / METRICS_NAME
    if not mp.exists():
        return None, "missing"
    try:
        state = _read_owned(mp, key)
        metrics = json.loads(metrics_path.read_text())
    except CheckpointMismatch as exc:
        return None, str(exc)
    except (OSError, ValueError) as exc:
        return None, f"{metrics_path} cannot be read ({exc})"
    if metrics.get("weights_sha256") != state_sha256(state["model"]):
        return None, f"the weights in {mp} do not match the sha256 in {metrics_path} (edited?)"
    return state, ""


def load_snapshot(directory, step: int, key: str) -> dict | None:
    """The weights saved after ``step`` training steps by the run of key ``key``, or None: when there is no such file,
    or (with a :class:`StaleCheckpointWarning` naming it) when it cannot be read or belongs to another run or step."""
    p = Path(directory) / SNAPSHOT_DIR / f"step_{step:07d}.pt"
    if not p.exists():
        return None
    try:
        return _read_owned(p, key, step)["model"]
    except CheckpointMismatch as exc:
        warnings.warn(f"unusable training snapshot: {exc}; training is replayed to that step instead. Delete the "
                      "file to silence this.", StaleCheckpointWarning, stacklevel=2)
        return None


@not_in_code_hash("it finds a run; its weights are named by its key (run_key), which every result records")
def load_run(recipe: Recipe, runs_dir="runs", step: int | None = None) -> tuple[dict, dict]:
    """(the weights of ``recipe``'s run, a description of them) after the whole run (``step=None``: its intact
    ``model.pt``), after ``step`` steps (its intact snapshot) or at its seeded initialisation (``step=0``), from
    disk: it never trains. :class:`RunMissing` names the run and the step when they are not there."""
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise TypeError(f"step must be None (the whole run) or an integer >= 0, got {step!r}; pass the device as "
                        "device=...")
    key, out = run_key(recipe), run_dir(recipe, runs_dir)
    if step is not None:
        if step == 0:
            state = build_model(recipe.model, seed=recipe.seed, **dict(recipe.model_overrides)).state_dict()
        elif (state := load_snapshot(out, step, key)) is None:
            raise RunMissing(f"{out} holds no snapshot of step {step} of run {key} ({recipe.model}, seed "
                             f"{recipe.seed})")
        info = dict(config_hash=key, step=step, weights_sha256=state_sha256(state), run=str(out), source=recipe.source)
        return state, dict(info, note="initialisation of the run") if step == 0 else info
    state, why = verify_checkpoint(out, key)
    if state is None:
        raise RunMissing(f"run {key} ({recipe.model}, seed {recipe.seed}) has no usable weights in {out}: {why}")
    metrics = json.loads((out / METRICS_NAME).read_text())
    described = ("steps", "test_accuracy", "train_accuracy", "final_train_loss", "wall_seconds", "device")
    return state["model"], dict(run_dir=str(out), config_hash=key, weights_sha256=metrics["weights_sha256"],
                                **{k: metrics.get(k) for k in described})


@not_in_code_hash("it finds or trains a run; its weights are named by its key (run_key), which every result records")
def ensure(recipe: Recipe, runs_dir="runs", step: int | None = None, device: str = "auto",
           datasets: Datasets | None = None, progress: bool = True, snapshot_steps: tuple[int, ...] = (),
           log: Callable[[str], None] = lambda msg: None) -> tuple[dict, dict]:
    """:func:`load_run`'s (weights, description) of ``recipe``'s run, trained (or resumed) first when needed.

    * ``step=None``: ``run_dir(recipe)/model.pt`` when :func:`verify_checkpoint` accepts it, else the run is
      trained (with a warning when a damaged or foreign file was found), saving ``snapshot_steps`` on the way;
    * ``step=0``: the run's seeded initialisation (nothing is trained);
    * ``step=k``: the run's snapshot of step ``k`` when intact, else the run is trained up to ``k`` (a later call
      continues it), saving ``snapshot_steps`` too. A run already past ``k`` without that snapshot is replayed
      to ``k`` apart, its snapshot kept and the replay dropped.

    ``datasets``: whole splits (as ``data.load`` gives them), else the files under ``./data``. Safe to call from several
    processes at once (a file lock). Where this call trained, the description has :func:`train`'s ``loop``."""
    if step == 0:
        return load_run(recipe, runs_dir, 0)
    key, out = run_key(recipe), run_dir(recipe, runs_dir)
    kw = dict(device=device, datasets=datasets, progress=progress)
    loop = None  # the loop timing of the training this call did (train's "loop"), if it trained
    with file_lock(out / ".lock", f"training {out}"):
        if step is not None and load_snapshot(out, step, key) is None:
            ckpt = out / CKPT_NAME
            past = ckpt.exists() and int(load_torch(ckpt).get("step", 0)) > step
            where = out / "replay" if past else out
            log(f"training {recipe.model}/{recipe.profile} (run {key}) to step {step} in {where}")
            loop = train(recipe, where, max_steps=step, snapshot_steps=tuple(sorted({step, *snapshot_steps})),
                         **kw)["loop"]
            if past:
                name = Path(SNAPSHOT_DIR) / f"step_{step:07d}.pt"
                if (where / name).exists():
                    (out / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
                    os.replace(where / name, out / name)
                shutil.rmtree(where, ignore_errors=True)
        elif step is None and (why := verify_checkpoint(out, key)[1]):
            if why != "missing":
                warnings.warn(f"checkpoint unusable: {why}; retraining", StaleCheckpointWarning, stacklevel=2)
                (out / MODEL_NAME).unlink(missing_ok=True)
            log(f"training {recipe.model} ({recipe.profile}) into {out}/")
            try:
                loop = train(recipe, out, snapshot_steps=snapshot_steps, **kw)["loop"]
            except CheckpointMismatch as exc:
                warnings.warn(f"{exc}; training from scratch", StaleCheckpointWarning, stacklevel=2)
                (out / CKPT_NAME).unlink(missing_ok=True)
                loop = train(recipe, out, snapshot_steps=snapshot_steps, **kw)["loop"]
        elif step is None:
            log(f"reusing trained {recipe.model} from {out}/{MODEL_NAME}")
        try:
            state, info = load_run(recipe, runs_dir, step)
        except RunMissing as exc:
            raise RunMissing(f"{exc}, after training it (does the run have {step} steps?)" if step is not None else
                             f"training did not leave usable weights: {exc}") from exc
    return state, dict(info, **({"loop": loop} if loop else {}))


def recipe_from_dict(d: dict) -> Recipe:
    """The Recipe whose ``to_dict()`` is ``d``."""
    d = {k: v for k, v in d.items() if k != "model_config"}
    d["model_overrides"] = tuple(sorted(dict(d.get("model_overrides", ())).items()))
    d["betas"] = tuple(d["betas"])
    d["normalize"] = tuple(tuple(x) for x in d["normalize"])
    return Recipe(**d)


def load_model(path, device="cpu") -> tuple[ViT, dict]:
    """A trained model and its saved config dict from ``model.pt`` or ``last.pt``."""
    state = load_torch(path, map_location="cpu")
    recipe = recipe_from_dict(state["config"])
    model = build_model(recipe.model, seed=None, **dict(recipe.model_overrides))
    model.load_state_dict(state["model"])
    return model.to(device), state
