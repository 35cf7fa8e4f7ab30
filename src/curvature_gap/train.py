"""Training: seeded, resumable, deterministic on CPU.

Determinism: the initialisation is seeded; epoch ``e`` shuffles with a generator seeded by
``(seed, e)`` and augmentation at step ``s`` with ``(seed, s)``, so a run resumed from any
checkpoint replays exactly the batches an uninterrupted run would see. Checkpoints are written
atomically and carry the config hash; a checkpoint of another config is refused.
"""
from __future__ import annotations

import json
import math
import pickle
import platform
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from . import data as data_mod
from .config import TrainConfig
from .device import resolve_device
from .io import atomic_write_json, file_lock, load_torch, save_torch, state_sha256
from .model import ViT, build_model

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


def load_model(path, device="cpu") -> tuple[ViT, dict]:
    """A trained model and its saved config dict from ``model.pt`` or ``last.pt``."""
    state = load_torch(path, map_location="cpu")
    cfg = TrainConfig(**{k: v for k, v in state["config"].items() if k != "model_config"})
    cfg = TrainConfig(**{**cfg.__dict__, "model_overrides": tuple(sorted(dict(cfg.model_overrides).items()))})
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
