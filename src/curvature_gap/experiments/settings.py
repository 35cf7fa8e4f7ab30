"""Per-figure settings for each profile.

Each figure's numbers are determined by its settings dataclass plus the training configurations
of the models it uses (``config.train_config``); together they form the figure's config hash.
Values the paper states are marked "paper"; every other value carries a one-line reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class HeatmapSettings:
    """Figs. 3, 4 and the fused-LayerNorm comparison: one dense Hessian of the MNIST model."""

    model: str = "mnist"
    trained: bool = False
    # paper (Fig. 5 caption): one batch of 128 MNIST training images; the first 128 (config.UNSTATED).
    batch_size: int = 128
    # prior work's code (dalab/transformer-hessian) plots log10(|H| + 1e-6).
    eps: float = 1e-6
    # columns per curvlinops H @ E product: math.md §5.3 measured 64 as the fastest of 16/64/256.
    curvlinops_chunk: int = 64
    # parameters in the Hessian: all of them (positions, embedding, block, head); the paper does not say.
    parameters: str = "all"
    # heatmap pixels per axis at most; larger Hessians are shown as means of log10 over square cells.
    display_cells: int = 1100
    # tangents per pass of the independent exact method (None: its default); cost only, same numbers.
    fast_chunk: int | None = None


@dataclass(frozen=True)
class NormsSettings:
    """Fig. 5: parameter-block and Hessian-block norms, at init and trained (the Hessians of Figs. 3
    and 4, same batch) and over the first training steps (the trajectory)."""

    model: str = "mnist"


@dataclass(frozen=True)
class TrajectorySettings:
    """Figs. 5 (over training) and 7-11: snapshots during the first training steps."""

    model: str = "mnist"
    batch_size: int = 128  # paper (Fig. 5 caption); the same fixed batch at every snapshot
    n_steps: int = 1000  # paper (App. A.1): the first 1000 training steps
    # snapshot steps (clipped to n_steps; n_steps itself always included): dense early, where the
    # norms move fastest, then every 200 steps; each costs one dense Hessian of the batch.
    steps: tuple = (0, 25, 50, 100, 200, 400, 600, 800, 1000)
    display_steps: tuple = (0, 100, 1000)  # heatmaps at init, early, end of the window
    eps: float = 1e-6  # as for Figs. 3-4
    fast_chunk: int | None = None  # as HeatmapSettings.fast_chunk


@dataclass(frozen=True)
class ConvergenceSettings:
    """Fig. 6: |L_{k+1} - L_k| against the number of batches k at the trained weights w*."""

    model: str = "cifar100"  # paper: the 8-block CIFAR-100 model
    batch_size: int = 128  # "batch-by-batch": k counts batches of this size; 128 as for the Hessian figures
    n_permutations: int = 32  # orders of the data averaged over; makes the mean curve smooth
    # EMA weight of the previous point, along log-spaced k (20 per decade); the paper's constant is
    # not stated. 0.5 lags by one point (0.05 decade).
    ema_beta: float = 0.5
    fit_k_min: int = 4  # least squares in log-log for k >= 4: below, the 1/k variance term bends the curve
    fit_points: int = 40  # log-spaced k values the line is fitted to (equal weight per decade)
    seed: int = 0  # permutation seed


@dataclass(frozen=True)
class AssumptionSettings:
    """Fig. 12: ||grad L_k(w*)|| against the number of samples k (Assumption 1 says it is 0)."""

    model: str = "mnist"  # the CPU model; the paper does not say which model App. A.2 used
    n_permutations: int = 8  # sampled orders shown (the mean over all orders is computed exactly)
    n_points: int = 30  # log-spaced sample counts from 1 to N
    chunk: int = 512  # samples per backward pass (memory only; does not change the numbers beyond rounding)
    seed: int = 0  # permutation seed


@dataclass(frozen=True)
class FigureSettings:
    """Settings of every figure under one profile."""

    init_heatmap: HeatmapSettings
    trained_heatmap: HeatmapSettings  # Fig. 4 and the fused-LayerNorm comparison (same model, batch)
    norms: NormsSettings
    trajectory: TrajectorySettings
    convergence: ConvergenceSettings
    assumption: AssumptionSettings


PAPER = FigureSettings(
    init_heatmap=HeatmapSettings(trained=False),
    trained_heatmap=HeatmapSettings(trained=True),
    norms=NormsSettings(),
    trajectory=TrajectorySettings(),
    convergence=ConvergenceSettings(),
    assumption=AssumptionSettings(),
)

SMOKE = FigureSettings(
    # 4 images: a dense Hessian costs ~ P columns x batch size, 32x less than the paper's 128; at this
    # batch size 256 curvlinops columns / 128 tangents per pass amortise the per-call overhead.
    init_heatmap=HeatmapSettings(trained=False, batch_size=4, curvlinops_chunk=256, fast_chunk=128),
    trained_heatmap=HeatmapSettings(trained=True, batch_size=4, curvlinops_chunk=256, fast_chunk=128),
    norms=NormsSettings(),
    # the smoke MNIST run has only 32 steps in total (config.PROFILE_CONFIGS); same 4 images as Figs. 3-4.
    trajectory=TrajectorySettings(batch_size=4, n_steps=32, steps=(0, 4, 8, 12, 16, 20, 24, 28, 32),
                                  display_steps=(0, 8, 32), fast_chunk=128),
    # MNIST 1-block smoke model (CIFAR-100 is not obtainable offline); batch 8 gives 256 batches
    # out of the 2,048 training images.
    convergence=ConvergenceSettings(model="mnist", batch_size=8, n_permutations=64),
    assumption=AssumptionSettings(n_points=20, n_permutations=4),
)

PROFILE_SETTINGS = {"paper": PAPER, "smoke": SMOKE}


def settings_for(profile: str) -> FigureSettings:
    from ..config import check_choice

    check_choice("profile", profile, tuple(PROFILE_SETTINGS))
    return PROFILE_SETTINGS[profile]


def replace(settings, **overrides):
    """``dataclasses.replace`` that accepts lists for tuple fields (JSON round trips)."""
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return dataclasses.replace(settings, **fixed)


def as_dict(settings) -> dict:
    d = dataclasses.asdict(settings)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
