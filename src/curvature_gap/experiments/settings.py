"""Per-result settings for each profile.

Each result's numbers are determined by its settings dataclass, the training configurations of the
models it uses (``config.train_config``) and the code that computes it; together they form its config
hash. Values the paper states are marked "paper"; every other value carries a one-line reason.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import check_choice

__all__ = ["HeatmapSettings", "FusedSettings", "NormsSettings", "TrajectorySettings", "ConvergenceSettings",
           "AssumptionSettings", "Theorem7Settings", "TrainedBoundsSettings", "FigureSettings", "settings_for",
           "replace", "as_dict", "PROFILE_SETTINGS", "EncoderFamilySettings", "BEYOND_PAPER_SETTINGS"]


@dataclass(frozen=True)
class HeatmapSettings:
    """Figs. 3 and 4: one dense exact Hessian of the MNIST model on one batch."""

    model: str = "mnist"
    trained: bool = False
    # paper (Fig. 5 caption): one batch of 128 MNIST training images. Here the first 128; the authors' code takes
    # the first batch of its shuffled, augmented loader (config.FROM_AUTHORS_CODE).
    batch_size: int = 128
    # prior work's code (dalab/transformer-hessian) plots log10(|H| + 1e-6).
    eps: float = 1e-6
    # parameters in the Hessian: all of them (positions, embedding, block, head); the paper does not say.
    parameters: str = "all"
    # pixels per axis of the whole-Hessian image: a page-width figure shows about 600 (mean of log10 per cell).
    display_cells: int = 600
    # curvlinops cross-check: a seeded sample of this many columns covering every group (None: all columns).
    check_columns: int | None = 256
    check_seed: int = 0
    # float64 cross-check batch: small enough to be quick, large enough to exercise every path.
    check_batch_f64: int = 16
    # tangents per pass of the exact method (None: its default); cost only, same numbers.
    fast_chunk: int | None = None


@dataclass(frozen=True)
class FusedSettings:
    """Beyond the paper: the Hessian through torch.nn.LayerNorm's fused kernel minus the exact one."""

    model: str = "mnist"
    trained: bool = True  # the trained model and batch of Fig. 4
    batch_size: int = 128
    # columns compared: a seeded sample covering every group (the error is structured by group pair).
    columns: int = 512
    seed: int = 1


@dataclass(frozen=True)
class NormsSettings:
    """Fig. 5: parameter-block and Hessian-block norms at init and trained (the Hessians of Figs. 3 and 4)
    and over the first training steps (the trajectory)."""

    model: str = "mnist"


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
    n_permutations: int = 4  # sampled orders drawn (the mean over all orders is computed exactly)
    n_points: int = 30  # log-spaced sample counts from 1 to N
    chunk: int = 512  # samples per backward pass (memory only; does not change the numbers beyond rounding)
    seed: int = 0  # permutation seed


@dataclass(frozen=True)
class Theorem7Settings:
    """Theorem 7 on the trained MNIST ViT (the Fig. 6 setting): both sides along w = w* + t u."""

    model: str = "mnist"
    n_samples: int = 1024  # training samples in L_k (dataset order); k runs to n_samples - 1
    hessian_samples: int = 64  # samples whose exact Hessian norm enters M = max_i ‖∇²l_i(w*)‖
    power_iters: int = 40  # power-iteration steps per sample before the Lanczos refinement
    refine: int = 4  # samples refined by Lanczos
    seed: int = 0  # direction and power-iteration seed


@dataclass(frozen=True)
class TrainedBoundsSettings:
    """The bounds at the MNIST ViT's block 0, at initialisation and trained (test images)."""

    model: str = "mnist"
    n_samples: int = 1  # per-sample instances with every bound (each needs the 2,816-weight loss Hessian)
    n_batch: int = 16  # images in the batch rows (curvlinops Hessian of the mean MSE, Lanczos)
    n_ce: int = 2  # images in the cross-entropy check (dense 2,816-weight Hessian each)


@dataclass(frozen=True)
class FigureSettings:
    """Settings of every result under one profile."""

    init_heatmap: HeatmapSettings
    trained_heatmap: HeatmapSettings
    fused: FusedSettings
    norms: NormsSettings
    trajectory: TrajectorySettings
    convergence: ConvergenceSettings
    convergence_mnist: ConvergenceSettings
    assumption: AssumptionSettings
    theorem7: Theorem7Settings
    trained_bounds: TrainedBoundsSettings


PAPER = FigureSettings(
    init_heatmap=HeatmapSettings(trained=False),
    trained_heatmap=HeatmapSettings(trained=True),
    fused=FusedSettings(),
    norms=NormsSettings(),
    trajectory=TrajectorySettings(),
    convergence=ConvergenceSettings(),
    # the stand-in for Fig. 6 where CIFAR-100 or a GPU is missing: the same procedure on the MNIST model
    convergence_mnist=ConvergenceSettings(model="mnist"),
    assumption=AssumptionSettings(),
    theorem7=Theorem7Settings(),
    trained_bounds=TrainedBoundsSettings(),
)

SMOKE = FigureSettings(
    # 4 images: a dense Hessian costs ~ P columns x batch size, 32x less than the paper's 128.
    init_heatmap=HeatmapSettings(trained=False, batch_size=4, check_columns=64, check_batch_f64=4, fast_chunk=128),
    trained_heatmap=HeatmapSettings(trained=True, batch_size=4, check_columns=64, check_batch_f64=4, fast_chunk=128),
    fused=FusedSettings(batch_size=4, columns=96),
    norms=NormsSettings(),
    # the smoke MNIST run has only 32 steps in total (config.PROFILE_CONFIGS); same 4 images as Figs. 3-4.
    trajectory=TrajectorySettings(batch_size=4, n_steps=32, steps=(0, 4, 8, 12, 16, 20, 24, 28, 32),
                                  display_steps=(0, 8, 32), fast_chunk=128),
    # MNIST 1-block smoke model; batch 8 gives 256 batches out of the 2,048 training images.
    convergence=ConvergenceSettings(model="mnist", batch_size=8, n_permutations=64),
    convergence_mnist=ConvergenceSettings(model="mnist", batch_size=8, n_permutations=64),
    assumption=AssumptionSettings(n_points=20, n_permutations=4),
    theorem7=Theorem7Settings(n_samples=64, hessian_samples=8, power_iters=20, refine=1),
    trained_bounds=TrainedBoundsSettings(n_samples=1, n_batch=4, n_ce=1),
)

PROFILE_SETTINGS = {"paper": PAPER, "smoke": SMOKE}


@dataclass(frozen=True)
class EncoderFamilySettings:
    """Beyond the paper: the diagonal Hessian blocks of nn.TransformerEncoderLayer, post/pre-norm, 1/4 heads,
    at initialisation and after a short Adam run on a teacher-student task (experiments.encoder_family)."""

    d_model: int = 16  # 4 heads of width 4; a dense float64 Hessian of 3,280 parameters per configuration
    dim_feedforward: int = 64  # 4 d_model, PyTorch's default ratio (2048 / 512)
    activation: str = "relu"  # PyTorch's default
    seq_len: int = 8  # tokens per sequence
    n_seq: int = 12  # sequences: the training set, and the loss whose Hessian is taken (cost ∝ n_seq)
    steps: int = 300  # "a few hundred" full-batch Adam steps: the loss falls by an order of magnitude or more
    lr: float = 1e-3  # Adam's default
    student_seed: int = 0
    teacher_seed: int = 1
    data_seed: int = 2


# Settings of results beyond the paper, per profile (kept out of FigureSettings so that adding one leaves
# every other result's code hash as it is): settings key -> profile -> settings
BEYOND_PAPER_SETTINGS = {
    "encoder_family": {
        "paper": EncoderFamilySettings(),
        # seconds: width 8 (4 heads of width 2), 2 sequences of 4 tokens, 20 steps
        "smoke": EncoderFamilySettings(d_model=8, dim_feedforward=16, seq_len=4, n_seq=2, steps=20),
    },
}


def settings_for(profile: str) -> FigureSettings:
    check_choice("profile", profile, tuple(PROFILE_SETTINGS))
    return PROFILE_SETTINGS[profile]


def replace(settings, **overrides):
    """``dataclasses.replace`` that accepts lists for tuple fields (JSON round trips)."""
    fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return dataclasses.replace(settings, **fixed)


def as_dict(settings) -> dict:
    d = dataclasses.asdict(settings)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
