"""Where and how the experiments run: profile, device, data, directories, and the trained models."""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import data as data_mod
from ..config import DATASET_OF, RECIPE_MODELS, RecipeConfig, TrainConfig, recipe_config, train_config
from ..device import resolve_device
from ..io import state_sha256
from ..model import ViT, build_model
from ..precision import precision_of
from ..train import (Datasets, ensure_recipe_step, ensure_trained, load_recipe_datasets, recipe_first_batch,
                     recipe_pass_batches, run_dir)
from .settings import trajectory_settings

__all__ = ["Context"]


def _seed(seed: int | None) -> dict:
    """``{"seed": seed}``, or nothing for None (the configuration's own seed)."""
    return {} if seed is None else {"seed": int(seed)}


def _arithmetic(arithmetic: str | None) -> dict:
    """``{"precision": ...}`` of an arithmetic (``precision.ARITHMETICS``), or nothing for None (the recipe's)."""
    return {} if arithmetic is None else {"precision": precision_of(arithmetic)}


@dataclass
class Context:
    """Where and how figures are computed.

    ``datasets`` (model name -> ``train.Datasets``), ``train_overrides`` (model name -> TrainConfig
    overrides) and ``settings_overrides`` (figure -> settings overrides) let tests run every figure on
    small, test-written data; overrides enter the config hash like any other setting.
    ``published_dir`` holds the results committed to the repository, one directory per profile (read
    when the cache has none for the current configuration).
    """

    profile: str = "smoke"
    device: str = "auto"
    data_dir: str | os.PathLike | None = None
    results_dir: str | os.PathLike = "results"
    runs_dir: str | os.PathLike = "runs"
    published_dir: str | os.PathLike | None = None
    progress: bool = True
    verify_md5: bool = True
    recompute: bool = False
    datasets: dict | None = None
    train_overrides: dict = field(default_factory=dict)
    settings_overrides: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict, repr=False)  # phase name -> seconds spent (:meth:`phase`)
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.results_dir = Path(self.results_dir)
        self.runs_dir = Path(self.runs_dir)
        self.published_dir = Path(self.published_dir) if self.published_dir is not None else None

    # ---------------------------------------------------------------- configuration
    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def train_cfg(self, model: str, seed: int | None = None, arithmetic: str | None = None) -> TrainConfig:
        """The training configuration of ``model`` under this profile: Table 1's models by
        ``config.train_config``, the authors' by their recipe (:meth:`recipe_cfg`); ``seed``: a run of the
        same configuration with another seed (None: the profile's); ``arithmetic``: of the authors' runs."""
        if model in RECIPE_MODELS:
            return self.recipe_cfg(model, seed, arithmetic)
        if arithmetic is not None:
            raise ValueError(f"{model} is trained in float32 only; an arithmetic is a setting of the authors' runs")
        return train_config(model, self.profile, **self.train_overrides.get(model, {}), **_seed(seed))

    def run_cfg(self, settings) -> TrainConfig | None:
        """The training configuration of the run a result with ``settings`` reads: its ``model``'s, with
        the seed its ``run_seed`` names and the arithmetic its ``arithmetic`` names (None where the settings
        name no model)."""
        model = getattr(settings, "model", None)
        if model is None:
            return None
        return self.train_cfg(model, getattr(settings, "run_seed", None), getattr(settings, "arithmetic", None))

    def run_dir(self, model: str) -> Path:
        return run_dir(self.train_cfg(model), self.runs_dir)

    @contextmanager
    def phase(self, name: str):
        """Add the wall time of the ``with`` body to ``phases[name]`` (data, training, hessian, cross-check):
        where a reproduction's time goes, recorded in each result's provenance."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    def log(self, msg: str) -> None:
        if self.progress:
            tqdm.write(msg, file=sys.stderr)

    def snapshot_steps(self, model: str) -> tuple[int, ...]:
        """The training steps the dynamics figures (Figs. 5, 7-11) look at, saved while training."""
        s = trajectory_settings(self.profile)
        over = self.settings_overrides.get("trajectory") or {}
        steps, n = over.get("steps", s.steps), over.get("n_steps", s.n_steps)
        if over.get("model", s.model) != model:
            return ()
        return tuple(sorted({int(st) for st in steps if st <= n} | {int(n)}))

    # ---------------------------------------------------------------- data
    def _raw_datasets(self, model: str) -> Datasets:
        """The whole train/test split of ``model``'s dataset (normalised to [-1, 1]); given ones
        (``datasets``, keyed by model or by dataset name) first. Raises DataUnavailable."""
        name = DATASET_OF.get(model, "mnist" if model == "mnist" else "cifar100")
        for k in (model, name):
            if self.datasets is not None and k in self.datasets:
                return self.datasets[k]
        key = ("data", name)
        if key not in self._cache:
            with self.phase("data"):
                tr = data_mod.load(name, self.data_dir, train=True, verify_md5=self.verify_md5)
                te = data_mod.load(name, self.data_dir, train=False, verify_md5=self.verify_md5)
            self._cache[key] = Datasets(tr, te)
        return self._cache[key]

    def datasets_for(self, model: str) -> Datasets:
        """Train/test sets of ``model``'s training config (subsets applied). Raises DataUnavailable."""
        ds = self._raw_datasets(model)
        cfg = self.train_cfg(model)
        return Datasets(ds.train.subset(cfg.train_subset), ds.test.subset(cfg.test_subset))

    # ---------------------------------------------------------------- the authors' recipe
    def recipe_cfg(self, model: str, seed: int | None = None, arithmetic: str | None = None) -> RecipeConfig:
        """The authors' recipe for ``model`` (``authors_mnist``, ``authors_cifar100``) under this profile;
        ``seed``: a run of it with another seed (None: the recipe's); ``arithmetic``: ``"authors"`` (bf16) or
        ``"exact"`` (float32) training (None: the recipe's own precision)."""
        return recipe_config(model, self.profile, **{**self.train_overrides.get(model, {}), **_seed(seed),
                                                     **_arithmetic(arithmetic)})

    def recipe_datasets(self, model: str) -> Datasets:
        """Train/test sets as the authors' recipe reads them (its subsets and normalisation)."""
        return load_recipe_datasets(self.recipe_cfg(model), datasets=self._raw_datasets(model))

    def recipe_first_batch(self, model: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The first batch of the authors' shuffled, augmented training loader (their Figs. 3–4 batch), on
        the device."""
        x, y = recipe_first_batch(self.recipe_cfg(model), self.recipe_datasets(model))
        return x.to(self.torch_device), y.to(self.torch_device)

    def recipe_pass_batches(self, model: str, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first batch of each of the first ``n`` passes of the authors' training loader (their notebooks'
        repeated ``next(iter(loader))``: ``train.recipe_pass_batches``), on the device."""
        dev = self.torch_device
        return [(x.to(dev), y.to(dev)) for x, y in recipe_pass_batches(self.recipe_cfg(model), self.recipe_datasets(model), n)]

    def recipe_model(self, model: str, step: int, seed: int | None = None,
                     arithmetic: str | None = None) -> tuple[ViT, dict]:
        """The authors' model after ``step`` steps of their recipe (``train.ensure_recipe_step``: from the
        run's snapshot, else trained to ``step``, resuming), in eval mode on the device, in float32 (a bf16
        run's weights widen exactly); ``seed``: of a run with another seed (None: the recipe's);
        ``arithmetic``: of the run (None: the recipe's precision)."""
        cfg = self.recipe_cfg(model, seed, arithmetic)
        key = ("recipe", model, cfg.hash(), step)
        if key not in self._cache:
            with self.phase("training"):
                self._cache[key] = ensure_recipe_step(cfg, self.runs_dir, step, self.device,
                                                      datasets=self._raw_datasets(model), progress=self.progress,
                                                      log=self.log)
        state, info = self._cache[key]
        m = build_model(cfg.model, seed=None, **dict(cfg.model_overrides))
        m.load_state_dict(state)
        return m.to(self.torch_device).eval(), dict(info)

    def first_batch(self, model: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n`` training images and labels (the fixed Hessian batch), on the device."""
        tr = self.datasets_for(model).train
        if len(tr) < n:
            raise ValueError(f"the {model} training set has {len(tr)} images, fewer than the batch of {n}")
        dev = self.torch_device
        return tr.images[:n].to(dev), tr.labels[:n].to(dev)

    # ---------------------------------------------------------------- models
    def init_model(self, model: str) -> ViT:
        cfg = self.train_cfg(model)
        m = build_model(cfg.model, seed=cfg.seed, **dict(cfg.model_overrides))
        return m.to(self.torch_device).eval()

    def init_info(self, model: str) -> dict:
        cfg = self.train_cfg(model)
        return dict(config_hash=cfg.hash(), weights_sha256=state_sha256(self.init_model(model).state_dict()), steps=0,
                    note="initialisation of the training run (same seed)")

    def trained_model(self, model: str) -> tuple[ViT, dict]:
        """The model trained under this profile (``train.ensure_trained``: reused when its checkpoint is
        intact and belongs to this config, else trained or resumed), with the dynamics figures'
        snapshots saved along the way."""
        cfg = self.train_cfg(model)
        key = ("trained", model, cfg.hash())
        if key not in self._cache:
            ds = self.datasets_for(model)
            with self.phase("training"):
                self._cache[key] = ensure_trained(cfg, self.runs_dir, self.device, datasets=ds,
                                                  progress=self.progress, snapshot_steps=self.snapshot_steps(model),
                                                  log=self.log)
        state, info = self._cache[key]
        m = build_model(cfg.model, seed=None, **dict(cfg.model_overrides))
        m.load_state_dict(state)
        return m.to(self.torch_device).eval(), dict(info)
