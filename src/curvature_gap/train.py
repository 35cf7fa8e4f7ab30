"""Training: seeded, resumable, deterministic on CPU.

Determinism: the initialisation is seeded; epoch ``e`` shuffles with a generator seeded by
``(seed, e)`` and augmentation at step ``s`` with ``(seed, s)``, so a run resumed from any
checkpoint replays exactly the batches an uninterrupted run would see. Checkpoints are written
atomically and carry the config hash; a checkpoint of another config is refused.

``train`` trains the Table-1 profiles (``TrainConfig``); ``train_recipe`` the authors' recipe
(``RecipeConfig``: AdamW betas/eps, warm-up, their augmentation, normalisation and DataLoader order).
"""
from __future__ import annotations

import contextlib
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
from .config import DATASET_OF, RecipeConfig, TrainConfig
from .device import resolve_device
from .io import atomic_write_json, file_lock, load_torch, save_torch, state_sha256
from .model import ViT, build_model
from .precision import autocast_for, gemm_for

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
    """A checkpoint was written by a different configuration."""


@dataclass
class Datasets:
    train: data_mod.TensorDataset
    test: data_mod.TensorDataset


def load_datasets(cfg: TrainConfig, root=None, allow_download: bool = False) -> Datasets:
    name = "mnist" if cfg.model == "mnist" else "cifar100"
    train = data_mod.load(name, root, train=True, allow_download=allow_download).subset(cfg.train_subset)
    test = data_mod.load(name, root, train=False, allow_download=allow_download).subset(cfg.test_subset)
    return Datasets(train, test)


def _generator(*key: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(hash(key) & 0x7FFF_FFFF_FFFF)  # ints hash deterministically in CPython
    return g


def augment(images: torch.Tensor, g: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop (zero padding ``pad``) and horizontal flip, per image, from generator ``g``."""
    b, c, h, w = images.shape
    padded = nn.functional.pad(images, (pad, pad, pad, pad))
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=g)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=g)
    flip = torch.rand(b, generator=g) < 0.5
    rows = (dy[:, None] + torch.arange(h)[None]).to(images.device)
    cols = (dx[:, None] + torch.arange(w)[None]).to(images.device)
    cols = torch.where(flip.to(images.device)[:, None], cols.flip(1), cols)
    idx_b = torch.arange(b, device=images.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[idx_b, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous()


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; choose adam or adamw")


def lr_at(cfg: TrainConfig, step: int, total: int) -> float:
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "cosine":
        return 0.5 * cfg.lr * (1 + math.cos(math.pi * min(step, total) / max(total, 1)))
    raise ValueError(f"unknown schedule {cfg.schedule!r}; choose constant or cosine")


@torch.no_grad()
def evaluate(model: nn.Module, ds: data_mod.TensorDataset, device, batch_size: int = 1000) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``ds``."""
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(ds), batch_size):
        x = ds.images[i : i + batch_size].to(device)
        y = ds.labels[i : i + batch_size].to(device)
        logits = model(x)
        loss += nn.functional.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
    model.train()
    return loss / len(ds), correct / len(ds)


def config_from_dict(d: dict) -> TrainConfig:
    """The TrainConfig (a RecipeConfig when ``d`` has its fields) whose ``to_dict()`` is ``d``."""
    d = {k: v for k, v in d.items() if k != "model_config"}
    d["model_overrides"] = tuple(sorted(dict(d.get("model_overrides", ())).items()))
    if "recipe" in d:
        d["betas"] = tuple(d["betas"])
        d["normalize"] = tuple(tuple(x) for x in d["normalize"])
        return RecipeConfig(**d)
    return TrainConfig(**d)


def load_model(path, device="cpu") -> tuple[ViT, dict]:
    """A trained model and its saved config dict from ``model.pt`` or ``last.pt``."""
    state = load_torch(path, map_location="cpu")
    cfg = config_from_dict(state["config"])
    model = build_model(cfg.model, seed=None, **dict(cfg.model_overrides))
    model.load_state_dict(state["model"])
    return model.to(device), state


def _check_owner(path: Path, chash: str) -> dict:
    """The checkpoint at ``path`` if this config (hash ``chash``) wrote it; CheckpointMismatch otherwise."""
    try:
        state = load_torch(path)
    except _UNREADABLE as exc:  # truncated or not a checkpoint
        raise CheckpointMismatch(f"{path} is unreadable ({type(exc).__name__}); use another --out directory "
                                 "or delete it to start over") from exc
    if not isinstance(state, dict) or state.get("config_hash") != chash:
        raise CheckpointMismatch(
            f"{path} was written by config {state.get('config_hash') if isinstance(state, dict) else None}, not {chash}; "
            "use another --out directory or delete the old one"
        )
    return state


def train(
    cfg: TrainConfig,
    out_dir,
    device: str = "auto",
    data_root=None,
    datasets: Datasets | None = None,
    max_steps: int | None = None,
    progress: bool = True,
    explode_factor: float = 1e3,
    snapshot_steps: tuple[int, ...] = (),
) -> dict:
    """Train ``cfg`` into ``out_dir`` (resuming from ``out_dir/last.pt``); returns the metrics.

    ``max_steps`` stops early after that many optimiser steps in total (for tests of
    interruption); the checkpoint then lets a later call finish the run. ``snapshot_steps`` saves
    the weights after each of those steps (0: the initialisation) to ``out_dir/snapshots/`` (the
    training-dynamics figures read them instead of replaying the run); they do not change training.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    chash = cfg.hash()
    # checkpoints first (before the data): a directory of another run is refused within seconds
    ckpt_path = out / CKPT_NAME
    final = out / MODEL_NAME
    if final.exists() and not ckpt_path.exists():  # a finished model of another run is never overwritten
        _check_owner(final, chash)
    state = _check_owner(ckpt_path, chash) if ckpt_path.exists() else None
    ds = datasets or load_datasets(cfg, data_root)
    n_train = len(ds.train)
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs

    model = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides)).to(dev)
    opt = make_optimizer(model, cfg)
    step, history, wall_before, running = 0, [], 0.0, None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, history, wall_before = state["step"], list(state["history"]), float(state["wall_s"])
        running = state.get("running")

    def save_ckpt():
        save_torch(ckpt_path, dict(
            config_hash=chash, config=cfg.to_dict(), model=model.state_dict(),
            optimizer=opt.state_dict(), step=step, history=history, running=running,
            wall_s=wall_before + time.perf_counter() - t0,
        ))

    snaps = out / SNAPSHOT_DIR
    snapshot_steps = set(int(x) for x in snapshot_steps)

    def save_snapshot():
        if step in snapshot_steps and not (snaps / f"step_{step:07d}.pt").exists():
            save_torch(snaps / f"step_{step:07d}.pt", dict(config_hash=chash, step=step,
                                                           model={k: v.detach().cpu() for k, v in model.state_dict().items()}))

    t0 = time.perf_counter()
    last_good = step
    save_snapshot()
    bar = tqdm(total=total_steps, initial=step, disable=not progress, desc=f"train {cfg.model}/{cfg.profile}", unit="step")
    while step < total_steps:
        epoch, pos = divmod(step, steps_per_epoch)
        perm = torch.randperm(n_train, generator=_generator(cfg.seed, epoch))
        for b in range(pos, steps_per_epoch):
            if max_steps is not None and step >= max_steps:
                bar.close()
                save_ckpt()
                return {"interrupted_at_step": step}
            idx = perm[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            x, y = ds.train.images[idx], ds.train.labels[idx]
            if cfg.augment:
                x = augment(x, _generator(cfg.seed, 1_000_003, step))
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step, total_steps)
            loss = nn.functional.cross_entropy(model(x), y)
            lv = loss.item()
            if not math.isfinite(lv) or (running is not None and lv > explode_factor * max(running, 1e-3)):
                bar.close()
                raise TrainingDiverged(
                    f"loss became {lv:.4g} at step {step} (epoch {epoch}); the last good checkpoint is "
                    f"{ckpt_path} at step {last_good}. Lower the learning rate or enable grad_clip."
                )
            running = lv if running is None else 0.98 * running + 0.02 * lv
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            save_snapshot()
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}")
            if step % cfg.ckpt_every == 0 and step % steps_per_epoch != 0:
                save_ckpt()
                last_good = step
        test_loss, test_acc = evaluate(model, ds.test, dev)
        history.append(dict(epoch=epoch + 1, step=step, train_loss_ema=running, test_loss=test_loss, test_acc=test_acc))
        if progress:
            bar.write(f"epoch {epoch + 1}/{cfg.epochs}: train loss {running:.4f}  test loss {test_loss:.4f}  "
                      f"test acc {test_acc:.4f}")
        save_ckpt()
        last_good = step
    bar.close()

    train_loss, train_acc = evaluate(model, ds.train, dev)
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    wall = wall_before + time.perf_counter() - t0
    save_torch(out / MODEL_NAME, dict(config_hash=chash, config=cfg.to_dict(), model=weights, step=step, history=history, wall_s=wall))
    metrics = dict(
        model=cfg.model, profile=cfg.profile, config_hash=chash, epochs=cfg.epochs, steps=step,
        final_train_loss=train_loss, train_accuracy=train_acc,
        test_loss=history[-1]["test_loss"], test_accuracy=history[-1]["test_acc"],
        wall_seconds=round(wall, 2), device=str(dev), torch_version=torch.__version__,
        python=platform.python_version(), weights_sha256=state_sha256(weights),
        n_parameters=sum(p.numel() for p in model.parameters()), history=history,
    )
    atomic_write_json(out / METRICS_NAME, metrics)
    return metrics


# ----------------------------------------------------------------------------- finding the trained model
def run_dir(cfg: TrainConfig, runs_dir="runs") -> Path:
    """``runs_dir/<model>-<profile>-<config hash>``: where ``cfg`` is trained."""
    return Path(runs_dir) / f"{cfg.model}-{cfg.profile}-{cfg.hash()}"


def verify_checkpoint(directory, chash: str) -> tuple[dict | None, str]:
    """(saved state, "") when ``directory/model.pt`` is intact and belongs to config ``chash``: it loads,
    carries that hash, and its weights hash equals the one in ``metrics.json``; else (None, why)."""
    directory = Path(directory)
    mp, metrics_path = directory / MODEL_NAME, directory / METRICS_NAME
    if not mp.exists():
        return None, "missing"
    try:
        state = load_torch(mp)
    except _UNREADABLE as exc:  # truncated or edited files
        return None, f"{mp} cannot be loaded ({type(exc).__name__}: {exc})"
    if not isinstance(state, dict) or state.get("config_hash") != chash:
        return None, f"{mp} was written by config {state.get('config_hash') if isinstance(state, dict) else None}, not {chash}"
    try:
        metrics = json.loads(metrics_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{metrics_path} cannot be read ({exc})"
    if metrics.get("weights_sha256") != state_sha256(state["model"]):
        return None, f"the weights in {mp} do not match the sha256 in {metrics_path} (edited?)"
    return state, ""


def ensure_trained(cfg: TrainConfig, runs_dir="runs", device: str = "auto", data_root=None,
                   datasets: Datasets | None = None, progress: bool = True, snapshot_steps: tuple[int, ...] = (),
                   log: Callable[[str], None] | None = None) -> tuple[dict, dict]:
    """The trained weights of ``cfg`` and a description of them, training (or resuming) when needed.

    The one way the package finds a trained model: ``run_dir(cfg, runs_dir)/model.pt`` is used only
    when :func:`verify_checkpoint` accepts it; otherwise it is retrained (with a warning when a damaged
    or foreign file was found). Safe to call from several processes at once (a file lock)."""
    chash = cfg.hash()
    out = run_dir(cfg, runs_dir)
    log = log or (lambda msg: None)
    with file_lock(out / ".lock", f"training {out}"):
        state, why = verify_checkpoint(out, chash)
        if state is None:
            if why != "missing":
                warnings.warn(f"checkpoint unusable: {why}; retraining", StaleCheckpointWarning, stacklevel=2)
                (out / MODEL_NAME).unlink(missing_ok=True)
            log(f"training {cfg.model} ({cfg.profile}) into {out}/")
            try:
                train(cfg, out, device=device, data_root=data_root, datasets=datasets, progress=progress,
                      snapshot_steps=snapshot_steps)
            except CheckpointMismatch as exc:
                warnings.warn(f"{exc}; training from scratch", StaleCheckpointWarning, stacklevel=2)
                (out / CKPT_NAME).unlink(missing_ok=True)
                train(cfg, out, device=device, data_root=data_root, datasets=datasets, progress=progress,
                      snapshot_steps=snapshot_steps)
            state, why = verify_checkpoint(out, chash)
            if state is None:
                raise RuntimeError(f"training {cfg.model} did not leave a usable checkpoint: {why}")
        else:
            log(f"reusing trained {cfg.model} from {out}/{MODEL_NAME}")
    metrics = json.loads((out / METRICS_NAME).read_text())
    info = dict(run_dir=str(out), config_hash=chash, weights_sha256=metrics["weights_sha256"],
                steps=metrics.get("steps"), test_accuracy=metrics.get("test_accuracy"),
                train_accuracy=metrics.get("train_accuracy"), final_train_loss=metrics.get("final_train_loss"),
                wall_seconds=metrics.get("wall_seconds"), device=metrics.get("device"))
    return state["model"], info


def load_snapshot(directory, step: int, chash: str) -> dict | None:
    """The weights saved after ``step`` training steps by a run of config ``chash``, or None: when there is
    no such file, or (with a :class:`StaleCheckpointWarning` naming the file) when it cannot be read or
    belongs to another run or step."""
    p = Path(directory) / SNAPSHOT_DIR / f"step_{step:07d}.pt"
    if not p.exists():
        return None
    try:
        state = load_torch(p)
    except _UNREADABLE as exc:
        warnings.warn(f"the training snapshot {p} cannot be read ({type(exc).__name__}: {exc}); training is "
                      "replayed to that step instead. Delete the file to silence this.", StaleCheckpointWarning,
                      stacklevel=2)
        return None
    if not isinstance(state, dict) or state.get("config_hash") != chash or state.get("step") != step:
        warnings.warn(f"the training snapshot {p} is not step {step} of run {chash}; training is replayed to "
                      "that step instead. Delete the file to silence this.", StaleCheckpointWarning, stacklevel=2)
        return None
    return state["model"]


# ----------------------------------------------------------------------------- the authors' recipe
# `train_recipe` trains a RecipeConfig (the authors' recipe: config.AUTHORS_RECIPES, RECIPE_PROFILE_CONFIGS).
# It is a function of its own so that `train` above, and with it the code hash of every published result,
# stays as it was.
def warmup_factor(step: int, warmup_steps: int) -> float:
    """The learning-rate factor of the optimiser step taken after ``step`` earlier steps: ``min(1, step /
    warmup_steps)`` (1 when ``warmup_steps`` is 0).

    This is transformers' ``get_constant_schedule_with_warmup(optimizer, num_warmup_steps=W)`` as the
    authors step it (their ``src/train/vit_classification.py``: ``scheduler.step()`` after every
    ``optimizer.step()``). That schedule is ``LambdaLR`` with ``f(t) = t / max(1, W)`` for ``t < W`` and
    ``f(t) = 1`` for ``t >= W``, where ``t`` counts the ``scheduler.step()`` calls so far; constructing it
    sets the rate to ``lr · f(0) = 0``. The optimiser step taken after ``s`` earlier steps therefore runs
    with ``lr · f(s)``, which is ``lr · min(1, s / W)``: with W = 100 and lr = 1e-3, step s = 0 (the first)
    runs at 0 — AdamW then only updates its moment estimates and step count, and with weight decay 0 the
    weights do not move —, s = 1 at 1e-5, s = 50 at 5e-4, s = 99 at 9.9e-4, and every step from s = 100
    on at 1e-3.
    """
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, step / warmup_steps)


def recipe_lr(cfg: RecipeConfig, step: int, total: int) -> float:
    """The learning rate of the optimiser step taken after ``step`` steps: the schedule (``lr_at``) times
    the warm-up (:func:`warmup_factor`)."""
    return lr_at(cfg, step, total) * warmup_factor(step, cfg.warmup_steps)


def make_recipe_optimizer(model: nn.Module, cfg: RecipeConfig) -> torch.optim.Optimizer:
    """Adam or AdamW with the config's lr, betas, eps and weight decay (the authors': their
    ``src/train/vit_classification.py``, ``torch.optim.AdamW(model.parameters(), **optimizer.params)``)."""
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)


def zero_pixel(mean, std) -> torch.Tensor:
    """(C,) float32: what ``Normalize(mean, std)`` makes of a pixel 0 (the fill of the authors' crop padding
    and rotation, which act on the image before ``ToTensor`` and ``Normalize``)."""
    m = torch.tensor(tuple(mean), dtype=torch.float32)
    return torch.zeros_like(m).sub(m).div(torch.tensor(tuple(std), dtype=torch.float32))


def rotate_nearest(images: torch.Tensor, degrees: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Each image ``images[i]`` (B, C, H, W) rotated counter-clockwise by ``degrees[i]`` about the image
    centre, nearest neighbour, the area from outside filled with ``fill`` (C,): the geometry of
    torchvision's ``rotate`` (``RandomRotation``'s default ``InterpolationMode.NEAREST``, ``expand=False``,
    centre of the image). Sampling and mask are ``grid_sample`` with ``align_corners=False``."""
    b, c, h, w = images.shape
    a = torch.deg2rad(degrees.to(torch.float64))
    cos, sin = torch.cos(a), torch.sin(a)
    theta = torch.zeros(b, 2, 3, dtype=torch.float64)
    # output pixel (x, y), centred, y down -> source (x cos a − y sin a, x sin a + y cos a), in grid units
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin * h / w
    theta[:, 1, 0], theta[:, 1, 1] = sin * w / h, cos
    grid = nn.functional.affine_grid(theta.to(images.dtype), [b, c, h, w], align_corners=False).to(images.device)
    out = nn.functional.grid_sample(images, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    inside = nn.functional.grid_sample(torch.ones(b, 1, h, w, dtype=images.dtype, device=images.device), grid,
                                       mode="nearest", padding_mode="zeros", align_corners=False) > 0.5
    return torch.where(inside, out, fill.to(images).view(1, c, 1, 1))


def augment_recipe(images: torch.Tensor, g: torch.Generator, crop_padding: int, rotation_degrees: float,
                   hflip: bool, fill: torch.Tensor) -> torch.Tensor:
    """The authors' training augmentation, per image, from generator ``g``, on normalised images.

    In order (the order of their ``_build_transforms``): a random crop of the image padded by ``crop_padding``
    pixels of ``fill`` (offsets uniform on 0..2·padding in each direction, as ``RandomCrop.get_params``); a
    rotation by an angle uniform on [−d, d] degrees, ``d = rotation_degrees`` (:func:`rotate_nearest`, as
    ``RandomRotation(d, fill=0)``); a horizontal flip with probability 1/2 (``RandomHorizontalFlip()``).
    Each step is skipped when its parameter is 0 / False. ``fill`` (C,) is a zero pixel after
    normalisation (:func:`zero_pixel`): crop and nearest-neighbour rotation only move and fill pixels, so
    doing them after ``Normalize`` with that fill equals doing them before it, as the authors do.
    """
    b, c, h, w = images.shape
    fill = fill.to(images).view(1, c, 1, 1)
    out = images
    if crop_padding:
        p = crop_padding
        padded = fill.expand(b, c, h + 2 * p, w + 2 * p).clone()
        padded[:, :, p:p + h, p:p + w] = images
        dy = torch.randint(0, 2 * p + 1, (b,), generator=g)
        dx = torch.randint(0, 2 * p + 1, (b,), generator=g)
        rows = (dy[:, None] + torch.arange(h)[None]).to(images.device)
        cols = (dx[:, None] + torch.arange(w)[None]).to(images.device)
        idx_b = torch.arange(b, device=images.device)[:, None, None]
        out = padded.permute(0, 2, 3, 1)[idx_b, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()
    if rotation_degrees:
        angles = torch.empty(b, dtype=torch.float64).uniform_(-rotation_degrees, rotation_degrees, generator=g)
        out = rotate_nearest(out, angles, fill.view(c))
    if hflip:
        flip = (torch.rand(b, generator=g) < 0.5).to(images.device)
        out = torch.where(flip[:, None, None, None], out.flip(-1), out)
    return out


class LoaderOrder:
    """The training order of ``DataLoader(dataset of length n, batch_size, shuffle=True, generator=g)`` with
    ``g = torch.Generator().manual_seed(seed)``, epoch after epoch: what the authors' loaders yield (their
    ``src/datasets/mnist.py`` and ``cifar_100.py``, ``generator.manual_seed(int(conf.seed))``). One generator
    runs through all epochs, so epoch ``e`` is reached by replaying epochs 0..e−1 (about 20 ms each for
    60,000 images); the order is torch's own (the DataLoader itself draws it)."""

    def __init__(self, n: int, batch_size: int, seed: int):
        g = torch.Generator()
        g.manual_seed(int(seed))
        self._loader = torch.utils.data.DataLoader(range(n), batch_size=batch_size, shuffle=True, generator=g,
                                                   num_workers=0)
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


def load_recipe_datasets(cfg: RecipeConfig, root=None, allow_download: bool = False,
                         datasets: Datasets | None = None) -> Datasets:
    """Train and test split of ``cfg``'s dataset (``config.DATASET_OF``), subset as ``cfg`` says and
    normalised by ``cfg.normalize``. ``datasets`` (as :func:`load_datasets` returns them) is used instead of
    the files when given. Neither split is augmented here (the training loop augments its batches)."""
    if datasets is None:
        name = DATASET_OF[cfg.model]
        datasets = Datasets(data_mod.load(name, root, train=True, allow_download=allow_download),
                            data_mod.load(name, root, train=False, allow_download=allow_download))
    mean, std = cfg.normalize
    return Datasets(data_mod.renormalised(datasets.train.subset(cfg.train_subset), mean, std),
                    data_mod.renormalised(datasets.test.subset(cfg.test_subset), mean, std))


def recipe_batch(cfg: RecipeConfig, train_split, perm: torch.Tensor, b: int, step: int, fill: torch.Tensor):
    """Batch ``b`` of the epoch order ``perm`` at training step ``step``: its images and labels, augmented
    when ``cfg.augment`` (:func:`augment_recipe`, generator seeded by ``(seed, step)``). What
    :func:`train_recipe` trains on, and what the figures read as "the first batch of the loader"."""
    idx = perm[b * cfg.batch_size:(b + 1) * cfg.batch_size]
    x, y = train_split.images[idx], train_split.labels[idx]
    if cfg.augment:
        x = augment_recipe(x, _generator(cfg.seed, 1_000_003, step), cfg.crop_padding, cfg.rotation_degrees,
                           cfg.hflip, fill)
    return x, y


def recipe_first_batch(cfg: RecipeConfig, ds: Datasets) -> tuple[torch.Tensor, torch.Tensor]:
    """The first batch the authors' training loader yields (epoch 0, batch 0, step 0), as :func:`train_recipe`
    sees it: shuffled by the recipe's seed, augmented, normalised by the recipe; ``ds`` from
    :func:`load_recipe_datasets`."""
    _, x, y = next(recipe_loader(cfg, ds, 1))
    return x, y


def recipe_pass_batches(cfg: RecipeConfig, ds: Datasets, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first batch of each of the first ``n`` passes over the authors' training loader: what ``next(iter(
    loader))`` gives when called ``n`` times on one seeded loader, as their notebooks do once per section (each
    ``iter`` draws the next permutation of the generator). Pass ``j`` is epoch ``j``'s order, its batch augmented
    as :func:`train_recipe` sees it at step ``j × batches per epoch``; pass 0 is :func:`recipe_first_batch`."""
    n_train = len(ds.train)
    per_epoch = math.ceil(n_train / cfg.batch_size)
    orders = LoaderOrder(n_train, cfg.batch_size, cfg.seed) if cfg.shuffle == "dataloader" else None
    fill = zero_pixel(*cfg.normalize)
    return [recipe_batch(cfg, ds.train, _epoch_order(cfg, n_train, j, orders), 0, j * per_epoch, fill)
            for j in range(n)]


def _epoch_order(cfg: RecipeConfig, n_train: int, epoch: int, orders) -> torch.Tensor:
    """The order of the training images in ``epoch``: the authors' DataLoader's (``orders``, a LoaderOrder),
    else a permutation seeded by (seed, epoch)."""
    return orders.order(epoch) if orders is not None else torch.randperm(n_train, generator=_generator(cfg.seed, epoch))


def recipe_loader(cfg: RecipeConfig, ds: Datasets, epochs: int):
    """The authors' training loader for ``epochs`` epochs, exactly as :func:`train_recipe` reads it: yields
    (step, images, labels), shuffled by the recipe's seed, augmented, normalised by the recipe (``ds`` from
    :func:`load_recipe_datasets`); the last batch of an epoch may be smaller. Their Figs. 6 and 12 run over
    this loader at the trained weights (their ``src/experiments/vit_classification/*.py``)."""
    n = len(ds.train)
    per_epoch = math.ceil(n / cfg.batch_size)
    orders = LoaderOrder(n, cfg.batch_size, cfg.seed) if cfg.shuffle == "dataloader" else None
    fill = zero_pixel(*cfg.normalize)
    for epoch in range(epochs):
        perm = _epoch_order(cfg, n, epoch, orders)
        for b in range(per_epoch):
            step = epoch * per_epoch + b
            x, y = recipe_batch(cfg, ds.train, perm, b, step, fill)
            yield step, x, y


def ensure_recipe_step(cfg: RecipeConfig, runs_dir, step: int, device: str = "auto", datasets: Datasets | None = None,
                       progress: bool = True, log: Callable[[str], None] = print) -> tuple[dict, dict]:
    """(the weights after ``step`` training steps of ``cfg``, info): from the run's snapshot when it is there
    and intact, else trained (resuming the run in ``run_dir(cfg, runs_dir)``) up to ``step`` first; the run
    stops at ``step`` and a later call for a later step continues it."""
    d, chash = run_dir(cfg, runs_dir), cfg.hash()
    if step == 0:  # the initialisation train_recipe starts from (seeded by cfg.seed): nothing to train
        state = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides)).state_dict()
        return state, dict(config_hash=chash, step=0, weights_sha256=state_sha256(state), run=str(d),
                           recipe="the authors' (config.AUTHORS_RECIPES)", note="initialisation of the run")
    state = load_snapshot(d, step, chash)
    if state is None:
        ckpt = d / CKPT_NAME
        past = ckpt.exists() and int(load_torch(ckpt).get("step", 0)) > step
        # a run already past ``step`` without its snapshot: replay it to ``step`` apart (same seed, same
        # weights), keep that snapshot in the run, drop the replay
        out = d / "replay" if past else d
        log(f"training {cfg.model}/{cfg.profile} (the authors' recipe, config {chash}) to step {step} in {out}")
        train_recipe(cfg, out, device, datasets=datasets, max_steps=step, progress=progress, snapshot_steps=(step,))
        if past:
            name = Path(SNAPSHOT_DIR) / f"step_{step:07d}.pt"
            if (out / name).exists():
                (d / SNAPSHOT_DIR).mkdir(parents=True, exist_ok=True)
                os.replace(out / name, d / name)
            shutil.rmtree(out, ignore_errors=True)
        state = load_snapshot(d, step, chash)
    if state is None:
        raise RuntimeError(f"{d}: no snapshot of step {step} after training to it (does the run have {step} steps?)")
    return state, dict(config_hash=chash, step=step, weights_sha256=state_sha256(state), run=str(d),
                       recipe="the authors' (config.AUTHORS_RECIPES)")


def recipe_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, cfg: RecipeConfig,
                lr: float, autocast=contextlib.nullcontext, gemm=contextlib.nullcontext) -> tuple[float, float]:
    """One optimiser step at learning rate ``lr``: mean cross-entropy (under ``autocast()``), backward (both
    under ``gemm()``: ``precision.gemm_for``), the gradients clipped to global 2-norm ``cfg.grad_clip``
    (``clip_grad_norm_``, norm_type 2, as the authors' ``src/train/vit_classification.py``; None: not
    clipped), the step. Returns (loss, the gradients' global 2-norm before clipping)."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    with gemm():
        with autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
    params = [p for p in model.parameters() if p.grad is not None]
    if cfg.grad_clip:
        norm = nn.utils.clip_grad_norm_(params, cfg.grad_clip, norm_type=2.0)
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))
    opt.step()
    return loss.item(), float(norm)


def train_recipe(
    cfg: RecipeConfig,
    out_dir,
    device: str = "auto",
    data_root=None,
    datasets: Datasets | None = None,
    max_steps: int | None = None,
    progress: bool = True,
    explode_factor: float = 1e3,
    snapshot_steps: tuple[int, ...] = (),
) -> dict:
    """Train a :class:`~curvature_gap.config.RecipeConfig` into ``out_dir`` (resuming from ``out_dir/last.pt``);
    returns the metrics. The files are those of :func:`train` (``last.pt``, ``model.pt``, ``metrics.json``,
    ``snapshots/step_<n>.pt``, read by :func:`load_model`, :func:`verify_checkpoint`, :func:`load_snapshot`).

    Per step: the batch of the shuffled order (``cfg.shuffle``), augmented when ``cfg.augment``
    (:func:`augment_recipe`, generator seeded by ``(seed, step)``), then :func:`recipe_step` at
    :func:`recipe_lr`. The weights after every ``cfg.snapshot_every`` steps and after each of
    ``snapshot_steps`` are kept in ``snapshots/`` (bf16 weights widened exactly to float32; the authors' recipe: every 200 steps for MNIST, 10,000
    for CIFAR-100, so step 20,000 is among them); ``last.pt`` is written every ``cfg.ckpt_every`` steps
    and after each epoch, when the test split (never augmented) is evaluated. Deterministic on CPU: the
    initialisation is seeded by ``cfg.seed``, and a run resumed from any checkpoint replays exactly the
    batches an uninterrupted one sees. ``datasets`` are as :func:`load_datasets` returns them (normalised
    to [-1, 1]); they are re-normalised by ``cfg.normalize`` here.
    """
    if not isinstance(cfg, RecipeConfig):
        raise TypeError(f"train_recipe trains a RecipeConfig; train {type(cfg).__name__} with train()")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    chash = cfg.hash()
    ckpt_path, final = out / CKPT_NAME, out / MODEL_NAME
    if final.exists() and not ckpt_path.exists():
        _check_owner(final, chash)
    state = _check_owner(ckpt_path, chash) if ckpt_path.exists() else None
    ds = load_recipe_datasets(cfg, data_root, datasets=datasets)
    n_train = len(ds.train)
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs

    bf16 = cfg.precision == "bf16"
    model = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides))
    model = model.to(dev, torch.bfloat16) if bf16 else model.to(dev)
    autocast, gemm = autocast_for(cfg.precision, dev), gemm_for(cfg.precision, dev)
    opt = make_recipe_optimizer(model, cfg)
    step, history, wall_before, running = 0, [], 0.0, None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, history, wall_before = state["step"], list(state["history"]), float(state["wall_s"])
        running = state.get("running")
    fill = zero_pixel(*cfg.normalize)
    orders = LoaderOrder(n_train, cfg.batch_size, cfg.seed) if cfg.shuffle == "dataloader" else None
    keep = set(int(s) for s in snapshot_steps)
    snaps = out / SNAPSHOT_DIR
    t0 = time.perf_counter()

    def save_ckpt():
        save_torch(ckpt_path, dict(
            config_hash=chash, config=cfg.to_dict(), model=model.state_dict(), optimizer=opt.state_dict(),
            step=step, history=history, running=running, wall_s=wall_before + time.perf_counter() - t0,
        ))

    def kept_weights() -> dict:
        # bf16 weights are widened to float32, exactly (io.state_sha256 hashes numpy bytes: no bfloat16)
        return {k: (v.detach().float() if v.dtype == torch.bfloat16 else v.detach()).cpu()
                for k, v in model.state_dict().items()}

    def save_snapshot():
        wanted = step in keep or (cfg.snapshot_every and step > 0 and step % cfg.snapshot_every == 0)
        p = snaps / f"step_{step:07d}.pt"
        if wanted and not p.exists():
            save_torch(p, dict(config_hash=chash, step=step, model=kept_weights()))

    def evaluate_split(split) -> tuple[float, float]:
        with gemm(), autocast():
            return evaluate(model, split, dev)

    last_good = step
    save_snapshot()
    bar = tqdm(total=total_steps, initial=step, disable=not progress, desc=f"train {cfg.model}/{cfg.profile}",
               unit="step")
    while step < total_steps:
        epoch, pos = divmod(step, steps_per_epoch)
        perm = _epoch_order(cfg, n_train, epoch, orders)
        for b in range(pos, steps_per_epoch):
            if max_steps is not None and step >= max_steps:
                bar.close()
                save_ckpt()
                return {"interrupted_at_step": step}
            x, y = recipe_batch(cfg, ds.train, perm, b, step, fill)
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            lv, _ = recipe_step(model, opt, x, y, cfg, recipe_lr(cfg, step, total_steps), autocast, gemm)
            if not math.isfinite(lv) or (running is not None and lv > explode_factor * max(running, 1e-3)):
                bar.close()
                raise TrainingDiverged(
                    f"loss became {lv:.4g} at step {step} (epoch {epoch}); the last good checkpoint is "
                    f"{ckpt_path} at step {last_good}. Lower the learning rate or enable grad_clip."
                )
            running = lv if running is None else 0.98 * running + 0.02 * lv
            step += 1
            save_snapshot()
            bar.update(1)
            bar.set_postfix(loss=f"{running:.3f}")
            if step % cfg.ckpt_every == 0 and step % steps_per_epoch != 0:
                save_ckpt()
                last_good = step
        test_loss, test_acc = evaluate_split(ds.test)
        history.append(dict(epoch=epoch + 1, step=step, train_loss_ema=running, test_loss=test_loss, test_acc=test_acc))
        if progress:
            bar.write(f"epoch {epoch + 1}/{cfg.epochs}: train loss {running:.4f}  test loss {test_loss:.4f}  "
                      f"test acc {test_acc:.4f}")
        save_ckpt()
        last_good = step
    bar.close()

    train_loss, train_acc = evaluate_split(ds.train)
    weights = kept_weights()
    wall = wall_before + time.perf_counter() - t0
    save_torch(final, dict(config_hash=chash, config=cfg.to_dict(), model=weights, step=step, history=history,
                           wall_s=wall))
    metrics = dict(
        model=cfg.model, profile=cfg.profile, recipe=cfg.recipe, config_hash=chash, epochs=cfg.epochs, steps=step,
        final_train_loss=train_loss, train_accuracy=train_acc,
        test_loss=history[-1]["test_loss"], test_accuracy=history[-1]["test_acc"],
        wall_seconds=round(wall, 2), device=str(dev), precision=cfg.precision, torch_version=torch.__version__,
        python=platform.python_version(), weights_sha256=state_sha256(weights),
        n_parameters=sum(p.numel() for p in model.parameters()), history=history,
    )
    atomic_write_json(out / METRICS_NAME, metrics)
    return metrics


def train_any(cfg: TrainConfig, out_dir, **kwargs) -> dict:
    """:func:`train_recipe` for a RecipeConfig, :func:`train` for any other TrainConfig."""
    return (train_recipe if isinstance(cfg, RecipeConfig) else train)(cfg, out_dir, **kwargs)
