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
from ..config import DATASET_OF, Recipe, recipe_for
from ..device import resolve_device
from ..model import ViT, build_model
from ..precision import precision_of
from ..train import Datasets, ensure, load_datasets, pass_batches, run_dir
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
    """Where and how figures are computed, with one method per need of a result: the recipe of a model's run
    (:meth:`recipe`), its data (:meth:`data`), the batches it reads (:meth:`first_images`,
    :meth:`loader_batches`) and its weights at any step (:meth:`model`). Table 1's models and the authors' are
    served alike: what differs is their recipe's values (``config.RECIPES``).

    ``datasets`` (model or dataset name -> ``train.Datasets``, whole splits normalised to [-1, 1]),
    ``train_overrides`` (model name -> Recipe overrides) and ``settings_overrides`` (figure -> settings overrides) let tests run every figure on
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
    # the training this context did: one {"run", "steps", "seconds"} per train call (the steps' own time: train's loop)
    trained: list = field(default_factory=list, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.results_dir = Path(self.results_dir)
        self.runs_dir = Path(self.runs_dir)
        self.published_dir = Path(self.published_dir) if self.published_dir is not None else None

    # ---------------------------------------------------------------- configuration
    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def recipe(self, model: str, seed: int | None = None, arithmetic: str | None = None) -> Recipe:
        """The recipe that trains ``model`` under this profile (``config.recipe_for``), with the context's
        overrides; ``seed``: a run of it with another seed (None: the recipe's); ``arithmetic``: ``"authors"``
        (bf16) or ``"exact"`` (float32) training (None: the recipe's own precision)."""
        return recipe_for(model, self.profile, **{**self.train_overrides.get(model, {}), **_seed(seed),
                                                  **_arithmetic(arithmetic)})

    def run_recipe(self, settings) -> Recipe | None:
        """The recipe of the run a result with ``settings`` reads: its ``model``'s, with the seed its
        ``run_seed`` names and the arithmetic its ``arithmetic`` names (None where the settings name no model)."""
        model = getattr(settings, "model", None)
        if model is None:
            return None
        return self.recipe(model, getattr(settings, "run_seed", None), getattr(settings, "arithmetic", None))

    def run_dir(self, model: str) -> Path:
        return run_dir(self.recipe(model), self.runs_dir)

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
        """The training steps the theorem's dynamics figures (Figs. 5, 7-11) look at, saved while training."""
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
        name = DATASET_OF[model]
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

    def data(self, model: str) -> Datasets:
        """Train/test sets as ``model``'s recipe reads them: its subsets, its normalisation, not augmented.
        Raises DataUnavailable."""
        return load_datasets(self.recipe(model), datasets=self._raw_datasets(model))

    def first_images(self, model: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n`` training images and labels, in file order, unaugmented (the theorem's block's fixed
        Hessian batch), on the device."""
        tr = self.data(model).train
        if len(tr) < n:
            raise ValueError(f"the {model} training set has {len(tr)} images, fewer than the batch of {n}")
        dev = self.torch_device
        return tr.images[:n].to(dev), tr.labels[:n].to(dev)

    def loader_batches(self, model: str, passes: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first batch of each of the first ``passes`` passes over ``model``'s training loader, shuffled,
        augmented and normalised as its run trains (``train.pass_batches``; the authors' notebooks' repeated
        ``next(iter(loader))``; pass 0 is their Figs. 3–4 batch), on the device."""
        dev = self.torch_device
        return [(x.to(dev), y.to(dev)) for x, y in pass_batches(self.recipe(model), self.data(model), passes)]

    # ---------------------------------------------------------------- models
    def model(self, model: str, step: int | None = None, seed: int | None = None,
              arithmetic: str | None = None) -> tuple[ViT, dict]:
        """``model`` after its run under this profile (``step=None``), or after ``step`` steps of it (0: the
        run's seeded initialisation), in eval mode on the device, in float32 (a bf16 run's weights widen
        exactly), with a description of the weights. ``seed``, ``arithmetic``: of a run with another seed or
        arithmetic (None: the recipe's). Weights come from ``train.ensure``: reused when the run's files are
        intact, else trained or resumed; a whole run of the theorem's dynamics model saves the snapshots its
        figures read (:meth:`snapshot_steps`)."""
        recipe = self.recipe(model, seed, arithmetic)
        key = ("run", model, recipe.hash(), step)
        if key not in self._cache:
            with self.phase("training"):
                self._cache[key] = ensure(recipe, self.runs_dir, step, self.device,
                                          datasets=self._raw_datasets(model) if step != 0 else None,
                                          progress=self.progress,
                                          snapshot_steps=self.snapshot_steps(model) if step is None else (),
                                          log=self.log)
            info = self._cache[key][1]
            if "loop" in info:
                self.trained.append(dict(run=info.get("run") or info.get("run_dir"), **info["loop"]))
        state, info = self._cache[key]
        m = build_model(recipe.model, seed=None, **dict(recipe.model_overrides))
        m.load_state_dict(state)
        return m.to(self.torch_device).eval(), dict(info)
