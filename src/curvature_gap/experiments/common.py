"""Shared machinery of the figure experiments: the run context, trained models, data, Hessians, plots."""
from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .. import data as data_mod
from ..config import TrainConfig, train_config
from ..device import resolve_device
from ..io import load_torch, state_sha256
from ..model import ViT, build_model, param_groups
from .store import StaleResultWarning, file_lock

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Context:
    """Where and how figures are computed.

    ``datasets`` (model name -> ``train.Datasets``), ``train_overrides`` (model name -> TrainConfig
    overrides) and ``settings_overrides`` (figure -> settings overrides) let tests run every
    figure on small, test-written data; overrides enter the config hash like any other setting.
    """

    profile: str = "smoke"
    device: str = "auto"
    data_dir: str | os.PathLike | None = None
    results_dir: str | os.PathLike = "results"
    runs_dir: str | os.PathLike = "runs"
    progress: bool = True
    verify_md5: bool = True
    recompute: bool = False
    datasets: dict | None = None
    train_overrides: dict = field(default_factory=dict)
    settings_overrides: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.results_dir = Path(self.results_dir)
        self.runs_dir = Path(self.runs_dir)

    # ---------------------------------------------------------------- configuration
    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def train_cfg(self, model: str) -> TrainConfig:
        return train_config(model, self.profile, **self.train_overrides.get(model, {}))

    def run_dir(self, model: str) -> Path:
        cfg = self.train_cfg(model)
        return self.runs_dir / f"{cfg.model}-{cfg.profile}-{cfg.hash()}"

    def log(self, msg: str) -> None:
        if self.progress:
            tqdm.write(msg, file=sys.stderr)

    # ---------------------------------------------------------------- data
    def datasets_for(self, model: str):
        """Train/test sets of ``model``'s training config (subsets applied). Raises DataUnavailable."""
        from ..train import Datasets

        if self.datasets is not None and model in self.datasets:
            ds = self.datasets[model]
        else:
            key = ("data", model)
            if key not in self._cache:
                name = "mnist" if model == "mnist" else "cifar100"
                tr = data_mod.load(name, self.data_dir, train=True, verify_md5=self.verify_md5)
                te = data_mod.load(name, self.data_dir, train=False, verify_md5=self.verify_md5)
                self._cache[key] = Datasets(tr, te)
            ds = self._cache[key]
        cfg = self.train_cfg(model)
        return Datasets(ds.train.subset(cfg.train_subset), ds.test.subset(cfg.test_subset))

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

    def trained_model(self, model: str) -> tuple[ViT, dict]:
        """The model trained under this profile, training (or resuming) it when needed.

        A checkpoint is reused only when it loads, carries the config hash of its directory and
        its weights hash equals the one recorded in ``metrics.json``; otherwise it is retrained
        with a warning.
        """
        key = ("trained", model, self.train_cfg(model).hash())
        if key not in self._cache:
            self._cache[key] = ensure_trained(self, model)
        state, info = self._cache[key]
        cfg = self.train_cfg(model)
        m = build_model(cfg.model, seed=None, **dict(cfg.model_overrides))
        m.load_state_dict(state)
        return m.to(self.torch_device).eval(), dict(info)


def verify_checkpoint(run_dir: Path, chash: str) -> tuple[dict | None, str]:
    """(state dict, "") when ``run_dir/model.pt`` is intact and belongs to ``chash``, else (None, why)."""
    import json

    mp, metrics_path = run_dir / "model.pt", run_dir / "metrics.json"
    if not mp.exists():
        return None, "missing"
    try:
        state = load_torch(mp)
    except Exception as exc:  # noqa: BLE001 - truncated or edited files fail in many ways
        return None, f"{mp} cannot be loaded ({type(exc).__name__}: {exc})"
    if state.get("config_hash") != chash:
        return None, f"{mp} was written by config {state.get('config_hash')}, not {chash}"
    try:
        metrics = json.loads(metrics_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{metrics_path} cannot be read ({exc})"
    if metrics.get("weights_sha256") != state_sha256(state["model"]):
        return None, f"the weights in {mp} do not match the sha256 in {metrics_path} (edited?)"
    return state, ""


def ensure_trained(ctx: Context, model: str) -> tuple[dict, dict]:
    from ..train import CheckpointMismatch, train

    cfg = ctx.train_cfg(model)
    chash = cfg.hash()
    out = ctx.run_dir(model)
    with file_lock(out / ".lock", f"training {out}"):
        state, why = verify_checkpoint(out, chash)
        if state is None:
            if why != "missing":
                warnings.warn(f"checkpoint unusable: {why}; retraining", StaleResultWarning, stacklevel=2)
                (out / "model.pt").unlink(missing_ok=True)
            ds = ctx.datasets_for(model)
            ctx.log(f"training {model} ({ctx.profile}) into {out}/")
            try:
                train(cfg, out, device=ctx.device, datasets=ds, progress=ctx.progress)
            except CheckpointMismatch as exc:
                warnings.warn(f"{exc}; training from scratch", StaleResultWarning, stacklevel=2)
                (out / "last.pt").unlink(missing_ok=True)
                train(cfg, out, device=ctx.device, datasets=ds, progress=ctx.progress)
            state, why = verify_checkpoint(out, chash)
            if state is None:
                raise RuntimeError(f"training {model} did not leave a usable checkpoint: {why}")
        else:
            ctx.log(f"reusing trained {model} from {out}/model.pt")
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    info = dict(
        run_dir=str(out), config_hash=chash, weights_sha256=metrics["weights_sha256"],
        steps=metrics.get("steps"), test_accuracy=metrics.get("test_accuracy"),
        train_accuracy=metrics.get("train_accuracy"), final_train_loss=metrics.get("final_train_loss"),
    )
    return state["model"], info


# -------------------------------------------------------------------- parameters
def group_table(model: nn.Module) -> dict:
    """Parameter groups and tensors of ``model`` as JSON-able lists (for results)."""
    groups = param_groups(model)
    names, shapes, offsets = [], [], []
    off = 0
    for n, p in model.named_parameters():
        names.append(n)
        shapes.append(list(p.shape))
        offsets.append(off)
        off += p.numel()
    return dict(
        group_names=[g.name for g in groups], group_starts=[g.start for g in groups],
        group_stops=[g.stop for g in groups], param_names=names, param_shapes=shapes, param_offsets=offsets,
        n_parameters=off,
    )


SHORT = {"query": "Q", "key": "K", "value": "V", "ln1": "LN1", "ffn1": "FFN1", "ffn2": "FFN2", "ln2": "LN2"}


def short_label(group: str, n_blocks: int = 1) -> str:
    """Axis label of a parameter group: Q, K, V, LN1, FFN1, FFN2, LN2 (with block index if > 1 block)."""
    if group.startswith("block"):
        b, kind = group[5:].split(".")
        return SHORT.get(kind, kind) + (b if n_blocks > 1 else "")
    return {"pos": "pos", "embed": "embed", "head": "head"}.get(group, group)


def flat_params(model: nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).numpy()


# -------------------------------------------------------------------- Hessians
def ce_batch_loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def curvlinops_hessian(model: nn.Module, batch, chunk: int = 64, progress: bool = True, desc: str = "curvlinops H") -> torch.Tensor:
    """Dense Hessian of the mean cross-entropy on ``batch`` via curvlinops' ``HessianLinearOperator``.

    The operator is applied to column blocks of the identity (``chunk`` columns at a time); the
    columns are in ``model.parameters()`` order, which is ``param_groups`` order.
    """
    from curvlinops import HessianLinearOperator

    params = [p for p in model.parameters() if p.requires_grad]
    H = HessianLinearOperator(model, nn.CrossEntropyLoss(), params, [batch], check_deterministic=False)
    P = H.shape[1]
    dtype, dev = params[0].dtype, params[0].device
    out = torch.empty(P, P, dtype=dtype)
    starts = range(0, P, chunk)
    for start in tqdm(starts, desc=desc, unit="chunk", disable=not progress, leave=False):
        stop = min(P, start + chunk)
        E = torch.zeros(P, stop - start, dtype=dtype, device=dev)
        E[torch.arange(start, stop), torch.arange(stop - start)] = 1.0
        out[:, start:stop] = (H @ E).detach().cpu()
    return out


def autograd_hessian_rows(model: nn.Module, batch, rows=None, chunk: int = 256, progress: bool = False) -> torch.Tensor:
    """Rows of the Hessian by reverse-over-reverse autograd (double backward), batched over rows."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = ce_batch_loss(model, batch)
    g = torch.autograd.grad(loss, params, create_graph=True)
    gflat = torch.cat([t.reshape(-1) for t in g])
    P = gflat.numel()
    rows = torch.arange(P) if rows is None else torch.as_tensor(rows)
    out = torch.empty(len(rows), P, dtype=gflat.dtype)
    for s in tqdm(range(0, len(rows), chunk), desc="autograd H", disable=not progress, leave=False):
        r = rows[s : s + chunk]
        V = torch.zeros(len(r), P, dtype=gflat.dtype, device=gflat.device)
        V[torch.arange(len(r)), r] = 1.0
        hv = torch.autograd.grad(gflat, params, grad_outputs=V, is_grads_batched=True, retain_graph=True)
        out[s : s + len(r)] = torch.cat([t.reshape(len(r), -1) for t in hv], 1).detach().cpu()
    return out


def fast_hessian(model: nn.Module, batch, chunk: int | None = None, progress: bool = False) -> tuple[torch.Tensor, str]:
    """(dense Hessian, method name): ``curvature_gap.hessian.hessian`` (hand-written
    forward-over-reverse for this ViT, independent of curvlinops) when present, else autograd."""
    try:
        from ..hessian import hessian as _hessian
    except ImportError:
        _hessian = None
    if _hessian is not None:
        H = _hessian(model, batch, chunk=chunk) if chunk else _hessian(model, batch)
        return torch.as_tensor(H).detach().cpu(), "curvature_gap.hessian.hessian"
    return autograd_hessian_rows(model, batch, progress=progress), "autograd double backward"


def block_norms(H: np.ndarray, starts, stops) -> dict:
    """Frobenius norms, max |entry| and mean |entry| of every (group, group) block of ``H``."""
    G = len(starts)
    fro, mx, mean = np.zeros((G, G)), np.zeros((G, G)), np.zeros((G, G))
    A = np.abs(H)
    for i in range(G):
        for j in range(G):
            blk = A[starts[i] : stops[i], starts[j] : stops[j]]
            fro[i, j] = math.sqrt(float(np.square(blk, dtype=np.float64).sum()))
            mx[i, j] = float(blk.max())
            mean[i, j] = float(blk.mean(dtype=np.float64))
    return dict(fro=fro, max=mx, mean=mean)


def spectral_norm_sym(A: np.ndarray) -> float:
    """Spectral norm of a symmetric(ised) matrix: the largest |eigenvalue|."""
    S = 0.5 * (A + A.T).astype(np.float64)
    if S.shape[0] <= 600:
        return float(np.abs(np.linalg.eigvalsh(S)).max())
    from scipy.sparse.linalg import eigsh

    v0 = np.ones(S.shape[0]) / math.sqrt(S.shape[0])  # fixed start vector: reproducible to the last digit
    return float(abs(eigsh(S, k=1, which="LM", return_eigenvectors=False, tol=1e-8, v0=v0)[0]))


# -------------------------------------------------------------------- provenance
def git_commit(root: Path = REPO_ROOT) -> dict:
    """HEAD commit and whether the working tree differs from it (None outside a git checkout)."""
    def run(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)

    try:
        head = run("rev-parse", "HEAD")
        if head.returncode != 0:
            return dict(commit=None, dirty=None)
        dirty = run("status", "--porcelain", "--untracked-files=no")
        return dict(commit=head.stdout.strip(), dirty=bool(dirty.stdout.strip()))
    except (OSError, subprocess.SubprocessError):
        return dict(commit=None, dirty=None)


def software() -> dict:
    import matplotlib

    out = dict(python=platform.python_version(), torch=torch.__version__, numpy=np.__version__,
               matplotlib=matplotlib.__version__)
    from importlib.metadata import PackageNotFoundError, version

    try:
        out["curvlinops"] = version("curvlinops-for-pytorch")
    except PackageNotFoundError:  # pragma: no cover
        out["curvlinops"] = None
    return out


# -------------------------------------------------------------------- plotting
def new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def add_footer(fig, result) -> None:
    """A small provenance line: figure, profile, config hash and where its numbers live."""
    profile = result.config.get("profile", "?")
    where = f"results/{result.figure}/{result.config_hash}.json"
    fig.supxlabel(f"curvature-gap · {result.figure} · profile {profile} · config {result.config_hash} · {where}",
                  x=0.995, ha="right", fontsize=6, color="0.45")


def save_figure(fig, stem: Path, dpi: int = 170) -> list[str]:
    """Write ``stem.pdf`` and ``stem.png`` atomically; returns their paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("pdf", "png"):
        target = stem.with_suffix(f".{ext}")
        fd, tmp = tempfile.mkstemp(dir=stem.parent, prefix=f".{target.name}.", suffix=f".{ext}")
        os.close(fd)
        try:
            fig.savefig(tmp, format=ext, dpi=dpi)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        paths.append(str(target))
    return paths


def pooled_log_image(H: np.ndarray, eps: float, max_cells: int) -> tuple[np.ndarray, int]:
    """log10(|H| + eps), averaged over square f x f cells so that the image has <= max_cells pixels a side."""
    A = np.log10(np.abs(H).astype(np.float64) + eps)
    n = A.shape[0]
    f = max(1, math.ceil(n / max_cells))
    if f == 1:
        return A, 1
    m = math.ceil(n / f) * f
    P = np.full((m, m), np.nan)
    P[:n, :n] = A
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(P.reshape(m // f, f, m // f, f), axis=(1, 3)), f


def group_axes(ax, starts, stops, labels, which="xy", fontsize=7, color="white", lw=0.5) -> None:
    """Gridlines at parameter-group boundaries and group labels at their centres."""
    bounds = sorted(set(list(starts) + list(stops)))
    centres = [(a + b) / 2 for a, b in zip(starts, stops)]
    for b in bounds[1:-1]:
        if "x" in which:
            ax.axvline(b, color=color, lw=lw)
        if "y" in which:
            ax.axhline(b, color=color, lw=lw)
    if "x" in which:
        ax.set_xticks(centres, labels, rotation=90, fontsize=fontsize)
    if "y" in which:
        ax.set_yticks(centres, labels, fontsize=fontsize)
    ax.tick_params(length=0)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
