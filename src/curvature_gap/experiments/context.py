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

from .. import data
from ..config import Recipe, recipe_for
from ..device import resolve_device
from ..model import ViT, build_model
from ..precision import precision_of
from ..train import Datasets, ensure, load_datasets, load_run, pass_batches, run_dir
from .settings import Variant, replace, trajectory_settings

__all__ = ["Context"]


@dataclass
class Context:
    """Where and how figures are computed, with one method per need of a result, each taking the
    :class:`~.settings.Variant` it is computed on: its run's recipe, its data, the batches it reads and its weights at
    any step (:meth:`model`, which only loads them: the runner trains them first with :meth:`train`).

    ``datasets`` (model key or dataset name -> ``train.Datasets``, whole splits normalised to [-1, 1]),
    ``train_overrides`` (model key, ``Variant.model_key`` -> Recipe overrides) and ``settings_overrides`` (result ->
    settings overrides) let tests run every figure on small, test-written data; overrides enter the config hash like any
    other setting. ``published_dir`` holds the results committed to the repository, one directory per profile (read when
    the cache has none for the current configuration)."""

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

    def recipe(self, v: Variant, seed: int | None = None) -> Recipe:
        """The recipe that trains ``v``'s model (``config.recipe_for`` of ``v.model_key`` under this profile) in
        ``v.arithmetic``, with the context's overrides; ``seed``: a run of it with another seed (None: the recipe's)."""
        return recipe_for(v.model_key, self.profile, **{**self.train_overrides.get(v.model_key, {}),
                                                        **({} if seed is None else {"seed": int(seed)}),
                                                        "precision": precision_of(v.arithmetic)})

    def run_recipe(self, settings) -> Recipe | None:
        """The recipe of the run a result with ``settings`` reads: its variant's, with the seed its ``run_seed``
        names (None where the settings are no :class:`~.settings.Variant`: no trained model)."""
        if not isinstance(settings, Variant):
            return None
        return self.recipe(settings, getattr(settings, "run_seed", None))

    def run_dir(self, v: Variant, seed: int | None = None) -> Path:
        return run_dir(self.recipe(v, seed), self.runs_dir)

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

    def snapshot_steps(self, v: Variant) -> tuple[int, ...]:
        """The training steps the theorem's dynamics figures (Figs. 5, 7-11) look at, saved while ``v``'s run
        trains (none for another run than the trajectory's)."""
        s = trajectory_settings(self.profile)
        s = replace(s, **(self.settings_overrides.get("trajectory") or {}))
        if self.recipe(s) != self.recipe(v):
            return ()
        return tuple(sorted({int(st) for st in s.steps if st <= s.n_steps} | {int(s.n_steps)}))

    # ---------------------------------------------------------------- data
    def _raw_datasets(self, v: Variant) -> Datasets:
        """The whole train/test split of ``v``'s dataset (normalised to [-1, 1]); given ones (``datasets``, keyed
        by model key or by dataset name) first. Raises DataUnavailable."""
        for k in (v.model_key, v.dataset):
            if self.datasets is not None and k in self.datasets:
                return self.datasets[k]
        key = ("data", v.dataset)
        if key not in self._cache:
            with self.phase("data"):
                self._cache[key] = Datasets(*(data.load(v.dataset, self.data_dir, train=t, verify_md5=self.verify_md5)
                                              for t in (True, False)))
        return self._cache[key]

    def data(self, v: Variant) -> Datasets:
        """Train/test sets as ``v``'s recipe reads them: subsets, normalisation, no augmentation; DataUnavailable."""
        return load_datasets(self.recipe(v), datasets=self._raw_datasets(v))

    def first_images(self, v: Variant, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``n`` training images and labels, in file order, unaugmented (the theorem's block's fixed
        Hessian batch), on the device."""
        tr = self.data(v).train
        if len(tr) < n:
            raise ValueError(f"the {v.model_key} training set has {len(tr)} images, fewer than the batch of {n}")
        dev = self.torch_device
        return tr.images[:n].to(dev), tr.labels[:n].to(dev)

    def loader_batches(self, v: Variant, passes: int = 1, n: int | None = None) -> list[tuple[torch.Tensor, ...]]:
        """The first batch of each of the first ``passes`` passes over ``v``'s training loader, shuffled,
        augmented and normalised as its run trains (``train.pass_batches``; the authors' notebooks' repeated
        ``next(iter(loader))``; pass 0 is their Figs. 3–4 batch), on the device; ``n``: its first ``n`` images."""
        dev = self.torch_device
        out = [(x.to(dev), y.to(dev)) for x, y in pass_batches(self.recipe(v), self.data(v), passes)]
        if n is not None and n > len(out[0][1]):
            raise ValueError(f"{v.model_key}: the loader's first batch has {len(out[0][1])} images, fewer than the "
                             f"{n} asked")
        return out if n is None else [(x[:n], y[:n]) for x, y in out]

    # ---------------------------------------------------------------- models
    def train(self, v: Variant, step: int | None = None, seed: int | None = None, snapshots: tuple = ()) -> None:
        """The runner's: make ``v``'s run (of ``seed``; None: the recipe's) hold its weights after ``step`` steps
        (None: the whole run, saving the snapshots the dynamics figures read, :meth:`snapshot_steps`; 0: its
        initialisation, nothing to train), training or resuming it where they are missing (``train.ensure``), also
        saving the snapshots of the earlier steps ``snapshots`` on the way, and keep them for :meth:`model`."""
        recipe = self.recipe(v, seed)
        key = ("run", recipe.hash(), step)
        if key in self._cache:
            return
        with self.phase("training"):
            self._cache[key] = ensure(recipe, self.runs_dir, step, self.device,
                                      datasets=self._raw_datasets(v) if step != 0 else None, progress=self.progress,
                                      snapshot_steps=(self.snapshot_steps(v) if step is None else ())
                                      + tuple(snapshots), log=self.log)
        info = self._cache[key][1]
        if "loop" in info:
            self.trained.append(dict(run=info.get("run") or info.get("run_dir"), **info["loop"]))

    def model(self, v: Variant, step: int | None = None, seed: int | None = None) -> tuple[ViT, dict]:
        """``v``'s model after its run under this profile (``step=None``), or after ``step`` steps of it (0: the
        run's seeded initialisation), of the run of ``seed`` (None: the recipe's), in eval mode on the device, in
        float32 (a bf16 run's weights widen exactly), with a description of the weights. It only loads them
        (``train.load_run``): a run it does not find raises ``train.RunMissing``; the result that reads it
        declares it (``FigureSpec.runs``) and the runner trains it (:meth:`train`)."""
        recipe = self.recipe(v, seed)
        key = ("run", recipe.hash(), step)
        if key not in self._cache:
            self._cache[key] = load_run(recipe, self.runs_dir, step)
        state, info = self._cache[key]
        m = build_model(recipe.model, seed=None, **dict(recipe.model_overrides))
        m.load_state_dict(state)
        return m.to(self.torch_device).eval(), {k: x for k, x in info.items() if k != "loop"}
