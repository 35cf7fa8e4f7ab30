"""Settings shared by several results, and the helpers every result's settings use.

Every settings class that reads a trained model extends :class:`Variant` (whose model, which dataset, which
arithmetic), and a result's id is derived from those fields (:func:`.spec.result_id`). A result's own settings,
per profile, live in its module; here are only the trajectory's, which the training run itself reads (the
snapshots it saves). Values the paper states are marked "paper"; every other value carries a one-line reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import DATASET_OF, check_choice
from ..precision import ARITHMETICS

__all__ = ["Variant", "MODELS", "DATASETS", "OWN_ARITHMETIC", "MODEL_KEYS", "TrajectorySettings", "TRAJECTORY",
           "AUTHORS_RUN_SEEDS", "trajectory_settings", "replace", "as_dict"]

# whose model a result is computed on: "table1", the theorem's block (paper Eq. 1) as this companion builds it for
# Table 1, computed as the paper describes; "authors", the model of the authors' public code, computed as their code
# computes each figure (config.AUTHORS_CODE)
MODELS = ("table1", "authors")
DATASETS = tuple(dict.fromkeys(DATASET_OF.values()))
# the arithmetic each model is trained in unless a result names another (precision.ARITHMETICS): Table 1's runs in
# float32, the authors' in their bf16
OWN_ARITHMETIC = {"table1": "exact", "authors": "authors"}
# the configuration (config.MODEL_CONFIGS, config.RECIPES) of each model on each dataset
MODEL_KEYS = {("table1", "mnist"): "mnist", ("table1", "cifar100"): "cifar100",
              ("authors", "mnist"): "authors_mnist", ("authors", "cifar100"): "authors_cifar100"}
assert {m: DATASET_OF[m] for m in MODEL_KEYS.values()} == {k: d for (_, d), k in MODEL_KEYS.items()}


@dataclass(frozen=True)
class Variant:
    """What a result is computed on: the base of the settings of every result that reads a trained model.

    ``model``: whose model (:data:`MODELS`) and protocol: the theorem's block as the paper describes each figure, or the
    authors' model as their code computes it; ``dataset``: the data it is trained on and read with; ``arithmetic``: the
    arithmetic of its training run (``precision.ARITHMETICS``: ``"exact"`` float32, ``"authors"`` their bf16). The run
    is the recipe of :attr:`model_key` under the profile (``experiments.Context.recipe``)."""

    model: str = "table1"
    dataset: str = "mnist"
    arithmetic: str = "exact"

    def __post_init__(self):
        check_choice("model", self.model, MODELS)
        check_choice("dataset", self.dataset, DATASETS)
        check_choice("arithmetic", self.arithmetic, ARITHMETICS)

    @property
    def model_key(self) -> str:
        """The model's configuration: its key in ``config.MODEL_CONFIGS`` and ``config.RECIPES``."""
        return MODEL_KEYS[(self.model, self.dataset)]


# The runs of the authors' MNIST recipe a verdict on their trained model counts over (their initialisation is
# unseeded, so one run is one draw): the recipe's seed (37, configs/vit_classification_mnist.yaml), then 0 and 1.
# Three is the fewest a count over runs needs; each bf16 run to step 20,000 costs about 9 min on one CPU core.
# Fig. 4 reads all three at step 20,000, Fig. 5 at steps 0-1000, Fig. 12's MNIST stand-in one pass of each.
AUTHORS_RUN_SEEDS = (37, 0, 1)


@dataclass(frozen=True)
class TrajectorySettings(Variant):
    """Figs. 5 (over training) and 7-11 on the theorem's block: snapshots of the first training steps."""

    batch_size: int = 128  # paper (Fig. 5 caption); the same fixed batch at every snapshot
    n_steps: int = 1000  # paper (App. A.1): the first 1000 training steps
    # snapshot steps (clipped to n_steps; n_steps itself always included): dense early, where the
    # norms move fastest, then every 200 steps; saved while the model trains.
    steps: tuple = (0, 25, 50, 100, 200, 400, 600, 800, 1000)
    display_steps: tuple = (0, 100, 1000)  # heatmaps at init, early, end of the window
    eps: float = 1e-6  # as for Figs. 3-4
    display_cells: int = 600  # the FFN block (2,128 rows) is shown as means of log10 over cells
    fast_chunk: int | None = None  # as HeatmapSettings.fast_chunk


TRAJECTORY = {
    "paper": TrajectorySettings(),
    # the smoke MNIST run has only 32 steps in total (config.RECIPES); same 4 images as Figs. 3-4.
    "smoke": TrajectorySettings(batch_size=4, n_steps=32, steps=(0, 4, 8, 12, 16, 20, 24, 28, 32),
                                display_steps=(0, 8, 32), fast_chunk=128),
}


def trajectory_settings(profile: str) -> TrajectorySettings:
    """The trajectory's settings under ``profile``."""
    check_choice("profile", profile, tuple(TRAJECTORY))
    return TRAJECTORY[profile]


def replace(settings, **overrides):
    """``dataclasses.replace`` that accepts lists for tuple fields (JSON round trips)."""
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return dataclasses.replace(settings, **fixed)


def as_dict(settings) -> dict:
    d = dataclasses.asdict(settings)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
