"""curvature_gap.experiments.context: profile, device, data, directories and the trained models of the experiments."""
from __future__ import annotations

import pytest
import torch

from cases import TINY_TRAIN, experiments_context, mnist_datasets
from curvature_gap.config import train_config
from curvature_gap.data import DataUnavailable
from curvature_gap.experiments import Context
from curvature_gap.train import run_dir


def test_paths_configs_and_snapshot_steps(tmp_path):
    ctx = experiments_context(tmp_path, trajectory=dict(n_steps=6, steps=[0, 3, 9]))
    assert ctx.results_dir == tmp_path / "results" and ctx.torch_device == torch.device("cpu")
    assert ctx.train_cfg("mnist") == train_config("mnist", "smoke", **TINY_TRAIN)
    assert ctx.run_dir("mnist") == run_dir(ctx.train_cfg("mnist"), tmp_path / "runs")
    assert ctx.snapshot_steps("mnist") == (0, 3, 6) and ctx.snapshot_steps("cifar100") == ()
    assert Context(profile="paper").train_cfg("mnist") == train_config("mnist", "paper")


def test_data_subsets_first_batch_and_models(tmp_path):
    ctx = experiments_context(tmp_path, datasets=mnist_datasets(300, 80))
    ds = ctx.datasets_for("mnist")
    assert len(ds.train) == 256 and len(ds.test) == 64          # the training config's subsets
    x, y = ctx.first_batch("mnist", 5)
    assert torch.equal(x, ds.train.images[:5]) and torch.equal(y, ds.train.labels[:5])
    with pytest.raises(ValueError, match="fewer than the batch of 1000"):
        ctx.first_batch("mnist", 1000)
    init = ctx.init_model("mnist")
    assert sum(p.numel() for p in init.parameters()) == 454 and not init.training
    info = ctx.init_info("mnist")
    assert info["steps"] == 0 and info["config_hash"] == ctx.train_cfg("mnist").hash()
    m, tinfo = ctx.trained_model("mnist")
    assert tinfo["steps"] == 8 and tinfo["weights_sha256"] != info["weights_sha256"]
    assert not torch.equal(next(m.parameters()), next(init.parameters()))
    assert ctx.phases.get("training", 0) > 0


def test_missing_data_is_data_unavailable(tmp_path):
    ctx = Context(profile="smoke", data_dir=tmp_path / "none", progress=False)
    with pytest.raises(DataUnavailable, match="MNIST"):
        ctx.datasets_for("mnist")
