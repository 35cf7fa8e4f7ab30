"""Configurations: the paper's Table 1 models, the authors' models, and the run profiles.

``ModelConfig`` names the block variant (norm placement, biases, W_O, activation, heads, positional
encoding, initialisation); its defaults are the theorem's block as this project builds it for Table 1.
The authors' models and recipes (``MODEL_CONFIGS["authors_*"]``, ``AUTHORS_RECIPES``: values of the same two
classes) carry, value by value, the file of their public experiment code (``AUTHORS_CODE``) each is read from.
A training run is a ``Recipe`` (data); ``RECIPES`` holds every run a profile trains, Table 1's
(``TABLE1_RECIPES``) and the authors' (``authors_recipe`` of ``AUTHORS_RECIPES``), all run by ``train.train``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

MODELS = ("mnist", "cifar100")
PROFILES = ("smoke", "paper")
DEVICES = ("auto", "cpu", "cuda")


class ConfigError(ValueError):
    """A user-facing configuration error (bad name, bad value)."""


def check_choice(what: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; choose one of: {', '.join(map(str, choices))}")


# The authors' public experiment code (MIT): github.com/intsystems/2025-Project-182, folder code/.
# Paths in the comments below are relative to that folder.
AUTHORS_CODE = "github.com/intsystems/2025-Project-182 (folder code/, MIT licence)"

# the values of the ModelConfig fields that name a choice
MODEL_CHOICES = {"norm": ("post", "pre"), "activation": ("relu", "gelu"),
                 "pos_encoding": ("learned", "sinusoidal", "none"), "init": ("normal", "torch")}
# The fields that say which block variant a config is (the Hessian routes declare support over these).
VARIANT_FIELDS = ("norm", "n_heads", "activation", "qkv_bias", "out_proj", "out_proj_bias", "ffn_bias",
                  "patch_bias", "pos_encoding", "head_bias")


@dataclass(frozen=True)
class ModelConfig:
    """A ViT and its block variant. ``d_model`` is the paper's d_V; ``d_k`` the total query/key width.

    The defaults are the paper's theorem block (Eq. 1) as built for Table 1: post-norm, one head, ReLU, no Q/K/V biases
    and no W_O, FFN biases, a patch embedding, head and their biases, learned positions, N(0, 1/fan_in) initialisation.

    * ``norm``: ``"post"`` Y = LN(X + f(X)) per sub-layer; ``"pre"`` Y = X + f(LN(X)), with a final
      LayerNorm before pooling;
    * ``n_heads``: attention heads; each gets d_k / n_heads query/key and d_model / n_heads value columns;
    * ``activation``: ``"relu"`` or ``"gelu"`` (the exact erf form, as ``nn.GELU()``);
    * ``qkv_bias``, ``out_proj`` (W_O after attention), ``out_proj_bias``, ``ffn_bias`` (b_1, b_2),
      ``patch_bias``, ``head_bias``: which affine maps exist and which carry biases;
    * ``pos_encoding``: ``"learned"`` (a parameter), ``"sinusoidal"`` (the fixed sin/cos table of
      Vaswani et al., a buffer) or ``"none"``;
    * ``init``: ``"normal"``: matrices N(0, 1/fan_in), biases 0; ``"torch"``: ``nn.Linear``'s default,
      weights and biases U(−1/√fan_in, 1/√fan_in). LayerNorms start at γ = 1, β = 0 in both."""

    name: str
    image_size: int
    in_channels: int
    patch_size: int
    d_model: int
    d_k: int
    d_ff: int
    n_blocks: int
    n_classes: int
    ln_eps: float = 1e-12
    ffn_bias: bool = True
    norm: str = "post"
    n_heads: int = 1
    activation: str = "relu"
    qkv_bias: bool = False
    out_proj: bool = False
    out_proj_bias: bool = False
    patch_bias: bool = True
    pos_encoding: str = "learned"
    head_bias: bool = True
    init: str = "normal"

    def __post_init__(self):
        for f, choices in MODEL_CHOICES.items():
            check_choice(f, getattr(self, f), choices)
        for f in ("ffn_bias", "qkv_bias", "out_proj", "out_proj_bias", "patch_bias", "head_bias"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"{f} must be True or False, got {getattr(self, f)!r}")
        if self.out_proj_bias and not self.out_proj:
            raise ConfigError("out_proj_bias=True needs out_proj=True (a bias on a W_O that does not exist)")
        h = self.n_heads
        if not isinstance(h, int) or isinstance(h, bool) or h < 1:
            raise ConfigError(f"n_heads must be a positive integer, got {h!r}")
        if self.d_k % h or self.d_model % h:
            raise ConfigError(f"n_heads={h} must divide d_k={self.d_k} and d_model={self.d_model}")
        if self.image_size % self.patch_size:
            raise ConfigError(f"patch_size={self.patch_size} must divide image_size={self.image_size}")
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"pos_encoding='sinusoidal' needs an even d_model (sin/cos pairs), got {self.d_model}")
        if self.ln_eps < 0:
            raise ConfigError(f"ln_eps must be >= 0, got {self.ln_eps!r}")

    @property
    def n_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.patch_size**2

    def variant(self) -> dict:
        """The block variant: ``{field: value}`` over ``VARIANT_FIELDS``."""
        return {f: getattr(self, f) for f in VARIANT_FIELDS}


MODEL_CONFIGS = {
    # Table 1: patch 4, hidden 16, ff 64, 1 block. d_K = d_V as in the authors' code (to_query is Linear(d, d)).
    # The block is the theorem's (Eq. 1): why it differs from the authors' block is in FROM_AUTHORS_CODE.
    "mnist": ModelConfig("mnist", 28, 1, 4, 16, 16, 64, 1, 10),
    # Table 1: patch 4, hidden 128, ff 512, 8 blocks.
    "cifar100": ModelConfig("cifar100", 32, 3, 4, 128, 128, 512, 8, 100),
    # The authors' models, value by value from their code (paths relative to code/ of AUTHORS_CODE).
    "authors_mnist": ModelConfig(
        "authors_mnist",
        image_size=28,          # configs/vit_classification_mnist.yaml: model.params.input_dim
        in_channels=1,          # configs/vit_classification_mnist.yaml: model.params.num_channels
        patch_size=4,           # configs/vit_classification_mnist.yaml: model.params.patch_size
        d_model=16,             # configs/vit_classification_mnist.yaml: model.params.model_dim
        d_k=16,                 # src/models/vit_classification.py: SelfAttention.to_query is Linear(hidden_dim, hidden_dim)
        d_ff=64,                # configs/vit_classification_mnist.yaml: model.params.ff_dim
        n_blocks=1,             # configs/vit_classification_mnist.yaml: model.params.num_blocks
        n_classes=10,           # configs/vit_classification_mnist.yaml: model.params.num_classes
        ln_eps=1e-5,            # src/models/vit_classification.py: nn.LayerNorm(model_dim), torch's default eps
        ffn_bias=False,         # src/models/vit_classification.py: FeedForward, both Linear(..., bias=False)
        norm="post",            # src/models/vit_classification.py: TransformerEncoderBlock.forward, norm(x + f(x))
        n_heads=1,              # src/models/vit_classification.py: scaled_dot_product_attention on (B, n, d), one head
        activation="gelu",      # src/models/vit_classification.py: FeedForward uses nn.GELU() (exact erf form)
        qkv_bias=True,          # src/models/vit_classification.py: to_query/to_key/to_value Linear(..., bias=True)
        out_proj=True,          # src/models/vit_classification.py: SelfAttention.out_layer after the attention
        out_proj_bias=True,     # src/models/vit_classification.py: out_layer = Linear(hidden_dim, hidden_dim, bias=True)
        patch_bias=True,        # src/models/vit_classification.py: PatchEmbeddings.in_layer Linear(..., bias=True)
        pos_encoding="sinusoidal",  # src/models/vit_classification.py: SinusoidalPositionalEncoding, a buffer
        head_bias=True,         # src/models/vit_classification.py: VisionTransformer.out_layer = nn.Linear(model_dim, num_classes)
        init="torch",           # src/models/vit_classification.py never re-initialises: torch's nn.Linear defaults
    ),
}
# the block as for authors_mnist (the same module file); the sizes from configs/vit_classification_cifar_100.yaml,
# model.params: input_dim, num_channels, patch_size, model_dim (= d_k: to_query is Linear(hidden_dim, hidden_dim)),
# ff_dim, num_blocks, num_classes
MODEL_CONFIGS["authors_cifar100"] = dataclasses.replace(
    MODEL_CONFIGS["authors_mnist"], name="authors_cifar100", image_size=32, in_channels=3, patch_size=4, d_model=128,
    d_k=128, d_ff=512, n_blocks=8, n_classes=100)
# The models that have training profiles (the CLI's --model); every key of MODEL_CONFIGS can be built.
assert MODELS == tuple(MODEL_CONFIGS)[:2]


PRECISIONS = ("float32", "bf16")
# the values of the Recipe fields that name a choice
RECIPE_CHOICES = {"optimizer": ("adam", "adamw"), "schedule": ("constant", "cosine"),
                  "shuffle": ("epoch", "dataloader"), "precision": PRECISIONS, "source": ("table1", "authors")}
# Table 1's models and the authors' (the CLI's --model); MODELS stays the Table-1 pair: the theorem's figures
# iterate it.
RECIPE_MODELS = ("authors_mnist", "authors_cifar100")
TRAIN_MODELS = MODELS + RECIPE_MODELS
# the dataset each model is trained on
DATASET_OF = {"mnist": "mnist", "cifar100": "cifar100", "authors_mnist": "mnist", "authors_cifar100": "cifar100"}
# Recipe fields that do not change a run's weights: they are left out of the run's key (``train.run_key``)
NOT_WEIGHTS = ("profile", "source", "ckpt_every", "snapshot_every")


@dataclass(frozen=True)
class Recipe:
    """Everything that determines a training run, as data; ``train.train`` is the one loop that runs it.

    Table 1's runs (``TABLE1_RECIPES``) and the authors' (:func:`authors_recipe` of ``AUTHORS_RECIPES``) are
    values of this one class. Per optimiser step ``s`` of ``total``:

    * the batch: ``batch_size`` images of the training split (``train_subset`` of it, normalised by ``normalize`` =
      (mean, std) per channel of torchvision's ``Normalize`` after ``ToTensor``) in the order ``shuffle`` names
      (``"epoch"`` or ``"dataloader"``, as the authors' loaders: ``train.ORDERS``);
    * its augmentation (``train.augment``, seeded by ``(seed, s)``): a random crop of the image padded by
      ``crop_padding`` black pixels, a rotation by U(−d, d) degrees with ``d = rotation_degrees``, a horizontal flip
      with probability 1/2 when ``hflip`` (0 / False: none);
    * the step: ``optimizer`` (Adam or AdamW with ``betas``, ``adam_eps``, ``weight_decay``) at learning rate
      ``lr`` × the ``schedule`` (``"constant"``, or ``"cosine"`` decay to 0 over the run) × ``min(1,
      s / warmup_steps)`` (``train.warmup_factor``; 0: no warm-up), gradients clipped to global 2-norm
      ``grad_clip`` (None: not clipped), in ``precision`` (``"float32"``; ``"bf16"``: weights and optimiser
      state in bfloat16, forward and loss as CUDA's bfloat16 autocast computes them: ``precision.autocast_logits``);
    * the initialisation of ``model`` (``MODEL_CONFIGS`` with ``model_overrides``) is seeded by ``seed``;
    * ``torch_compile``: the step's forward through ``torch.compile`` (inductor, ``emulate_precision_casts``).
      Off by default: fused kernels sum in another order, so a compiled run's weights differ in the last bits (a
      run of its own), and every ``train()`` call compiles anew (timings: ``benchmarks/bf16_cpu.json``).

    Not part of the weights (``NOT_WEIGHTS``): ``profile`` and ``source`` (names), ``ckpt_every`` (the resumable
    ``last.pt``) and ``snapshot_every`` (weights kept in ``snapshots/`` every that many steps; 0: none)."""

    model: str = "mnist"
    profile: str = "paper"
    source: str = "table1"      # whose values: "table1" (this companion's reading of Table 1) or "authors"
    seed: int = 0
    optimizer: str = "adam"
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)  # torch's defaults
    adam_eps: float = 1e-8       # torch's default
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_steps: int = 0
    grad_clip: float | None = None
    batch_size: int = 128
    epochs: int = 5
    train_subset: int | None = None
    test_subset: int | None = None
    normalize: tuple | None = None  # None: Normalize(0.5, 0.5) on every channel (pixels to [-1, 1])
    crop_padding: int = 0
    rotation_degrees: float = 0.0
    hflip: bool = False
    shuffle: str = "epoch"
    precision: str = "float32"
    torch_compile: bool = False
    ckpt_every: int = 200
    snapshot_every: int = 0
    model_overrides: tuple = ()

    def __post_init__(self):
        for f, choices in {"model": tuple(MODEL_CONFIGS), **RECIPE_CHOICES}.items():
            check_choice(f, getattr(self, f), choices)
        b = tuple(self.betas)
        if len(b) != 2 or not all(0 <= x < 1 for x in b):
            raise ConfigError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if not isinstance(self.torch_compile, bool):
            raise ConfigError(f"torch_compile must be True or False, got {self.torch_compile!r}")
        for f in ("warmup_steps", "crop_padding", "snapshot_every"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{f} must be an integer >= 0, got {v!r}")
        if not 0 <= self.rotation_degrees <= 180:
            raise ConfigError(f"rotation_degrees must be in [0, 180], got {self.rotation_degrees!r}")
        channels = self.model_config().in_channels
        if self.normalize is None:
            object.__setattr__(self, "normalize", ((0.5,) * channels, (0.5,) * channels))
        mean, std = self.normalize
        if len(mean) != channels or len(std) != channels or min(std) <= 0:
            raise ConfigError(f"normalize must be (mean, std) with {channels} value(s) each and std > 0, "
                              f"got {self.normalize!r}")

    @property
    def augments(self) -> bool:
        """Whether the training batches are augmented at all."""
        return bool(self.crop_padding or self.rotation_degrees or self.hflip)

    def model_config(self) -> ModelConfig:
        return dataclasses.replace(MODEL_CONFIGS[self.model], **dict(self.model_overrides))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["model_overrides"] = dict(self.model_overrides)
        d["model_config"] = dataclasses.asdict(self.model_config())
        return d

    def weights_dict(self) -> dict:
        """:meth:`to_dict` without the fields that cannot change the weights (``NOT_WEIGHTS``)."""
        return {k: v for k, v in self.to_dict().items() if k not in NOT_WEIGHTS}

    def hash(self) -> str:
        return config_hash(self.to_dict())


def config_hash(obj) -> str:
    """Stable 12-hex-digit hash of a JSON-serialisable config."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# Table 1's runs: (model, profile) -> Recipe. `smoke` runs in seconds on a laptop CPU (CI); `paper` follows
# Table 1 and trains well past the paper's ">50%" accuracy.
TABLE1_RECIPES: dict[tuple[str, str], Recipe] = {
    ("mnist", "smoke"): Recipe(model="mnist", profile="smoke", lr=1e-2, schedule="cosine", epochs=2,
                               train_subset=2048, test_subset=512, ckpt_every=8),
    ("mnist", "paper"): Recipe(model="mnist", profile="paper", lr=1e-2, schedule="cosine", epochs=15),
    ("cifar100", "smoke"): Recipe(model="cifar100", profile="smoke", epochs=1, batch_size=32, train_subset=256,
                                  test_subset=128, ckpt_every=4, model_overrides=(("n_blocks", 2),)),
    ("cifar100", "paper"): Recipe(model="cifar100", profile="paper", optimizer="adamw", lr=1e-3, weight_decay=0.05,
                                  schedule="cosine", epochs=200, batch_size=256, crop_padding=4, hflip=True,
                                  ckpt_every=500, grad_clip=1.0),
}


# ------------------------------------------------------------------------ the authors' recipes
# Their training recipe for each dataset as a Recipe, value for value from their public code (AUTHORS_CODE; the
# comments name each value's file, relative to its code/ folder), with two differences: float32 by default
# (precision="bf16" gives their bf16 weights and autocast, precision.py), and a seeded initialisation and
# augmentation (their configs' common.seed feeds the training DataLoader's generator only; nothing calls
# torch.manual_seed). The augmentations are torch ops on the same distributions as torchvision's transforms, not
# torchvision's random stream; their validation (metrics.validate_on_start, validation_interval) does not change
# the weights.
_AUTHORS_COMMON = dict(
    source="authors",
    optimizer="adamw",          # src/train/vit_classification.py: torch.optim.AdamW(model.parameters(), **optimizer.params)
    lr=1e-3,                    # configs/*.yaml: optimizer.params.lr
    betas=(0.9, 0.95),          # configs/*.yaml: optimizer.params.betas
    adam_eps=1e-8,              # configs/*.yaml: optimizer.params.eps
    weight_decay=0.0,           # configs/*.yaml: optimizer.params.weight_decay
    # src/train/vit_classification.py: transformers' get_constant_schedule_with_warmup, stepped every batch: a
    # linear warm-up from 0 over scheduler.params.num_warmup_steps optimizer steps, then constant
    schedule="constant",
    warmup_steps=100,           # configs/*.yaml: scheduler.params.num_warmup_steps
    grad_clip=1.0,              # configs/*.yaml: optimizer.max_norm; clip_grad_norm_(..., norm_type=2.0)
    batch_size=128,             # configs/*.yaml: data.batch_size
    epochs=100,                 # configs/*.yaml: trainer.num_epochs
    shuffle="dataloader",       # src/datasets/*.py: DataLoader(shuffle=True, generator seeded by data.seed)
    precision="float32",        # see above: "bf16" is their arithmetic, asked for by an arithmetic (precision.py)
)
AUTHORS_RECIPES = {
    "mnist": Recipe(
        model="authors_mnist",
        seed=37,                    # configs/vit_classification_mnist.yaml: common.seed
        # src/datasets/mnist.py: _default_norm("mnist"), the yaml's data.normalization
        normalize=((0.1307,), (0.3081,)),
        # src/datasets/mnist.py: _build_transforms(augment=train), input_dim 28 (no resize): RandomCrop(28,
        # padding=2), then RandomRotation(10 degrees, fill=0), NEAREST (its default); no flip
        crop_padding=2, rotation_degrees=10.0, hflip=False,
        # configs/vit_classification_mnist.yaml: trainer.checkpoint.last_save_interval (the resumable "last"
        # checkpoint) and regular_save_interval (a kept "step_<n>" checkpoint)
        ckpt_every=100, snapshot_every=200,
        **_AUTHORS_COMMON,
    ),
    "cifar100": Recipe(
        model="authors_cifar100",
        seed=21,                    # configs/vit_classification_cifar_100.yaml: common.seed
        # configs/vit_classification_cifar_100.yaml says data.normalization: imagenet, but
        # src/datasets/cifar_100.py's _default_norm knows only "cifar" and "zeroone": any other name,
        # "imagenet" included, falls through to mean = std = 0.5 per channel
        normalize=((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        # src/datasets/cifar_100.py: _build_transforms(augment=train), input_dim 32 < 36 so RandomCrop(32,
        # padding=2) (padding=4 only if input_dim >= 36), then RandomHorizontalFlip() (p = 0.5); no rotation
        crop_padding=2, rotation_degrees=0.0, hflip=True,
        # configs/vit_classification_cifar_100.yaml: trainer.checkpoint.last_save_interval, regular_save_interval
        ckpt_every=1000, snapshot_every=10000,
        **_AUTHORS_COMMON,
    ),
}


def authors_recipe(dataset: str, profile: str = "paper", **overrides) -> Recipe:
    """``AUTHORS_RECIPES[dataset]`` under ``profile``, then ``overrides``."""
    return dataclasses.replace(AUTHORS_RECIPES[dataset], profile=profile, **overrides)


# Every run a profile trains: (model, profile) -> Recipe. The authors' `paper`: their recipe as stated (100
# epochs); `smoke`: the same recipe on a few hundred images for one epoch (CI; it ends inside the 100-step
# warm-up, so it tests that the recipe runs, not that it learns).
RECIPES: dict[tuple[str, str], Recipe] = {
    **TABLE1_RECIPES,
    ("authors_mnist", "paper"): authors_recipe("mnist", "paper"),
    ("authors_mnist", "smoke"): authors_recipe("mnist", "smoke", epochs=1, train_subset=384, test_subset=256),
    ("authors_cifar100", "paper"): authors_recipe("cifar100", "paper"),
    ("authors_cifar100", "smoke"): authors_recipe("cifar100", "smoke", epochs=1, train_subset=256, test_subset=128),
}


def recipe_for(model: str, profile: str, **overrides) -> Recipe:
    """The recipe that trains ``model`` (one of ``TRAIN_MODELS``) under ``profile``, with optional overrides."""
    check_choice("model", model, TRAIN_MODELS)
    check_choice("profile", profile, PROFILES)
    cfg = RECIPES[(model, profile)]
    return dataclasses.replace(cfg, **overrides) if overrides else cfg
