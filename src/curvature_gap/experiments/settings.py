"""Settings shared by several results, and the helpers every result's settings use.

Each result's numbers are determined by its settings dataclass, the training configurations of the
models it uses (their ``config.Recipe`` and run key) and the code that computes it; together they form its config
hash. A result's own settings, per profile, live in its module (``SPECS[...].settings``); here are only
the trajectory's, which the training run itself reads (the snapshots it saves), Figs. 3–4 record, and
Figs. 5 and 7–11 are computed from. Values the paper states are marked "paper"; every other value carries
a one-line reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import check_choice

__all__ = ["TrajectorySettings", "TRAJECTORY", "AUTHORS_RUN_SEEDS", "trajectory_settings", "replace", "as_dict"]

# The runs of the authors' MNIST recipe a verdict on their trained model counts over (their initialisation is
# unseeded, so one run is one draw): the recipe's seed (37, configs/vit_classification_mnist.yaml), then 0 and 1.
# Three is the fewest a count over runs needs; each bf16 run to step 20,000 costs about 9 min on one CPU core.
# Fig. 4 reads all three at step 20,000, Fig. 5 at steps 0-1000, Fig. 12's MNIST stand-in one pass of each.
AUTHORS_RUN_SEEDS = (37, 0, 1)


@dataclass(frozen=True)
class TrajectorySettings:
    """Figs. 5 (over training) and 7-11: snapshots of the first training steps."""

    model: str = "mnist"
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
