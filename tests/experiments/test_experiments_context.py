"""curvature_gap.experiments.context: profile, device, data, directories and the trained models of the experiments."""
from __future__ import annotations

import pytest
import torch

from cases import TINY_TRAIN, experiments_context, mnist_datasets
from curvature_gap.config import recipe_for
from curvature_gap.data import DataUnavailable
from curvature_gap.experiments import Context
from curvature_gap.train import run_dir, run_key


def test_paths_configs_and_snapshot_steps(tmp_path):
    ctx = experiments_context(tmp_path, trajectory=dict(n_steps=6, steps=[0, 3, 9]))
    assert ctx.results_dir == tmp_path / "results" and ctx.torch_device == torch.device("cpu")
    assert ctx.recipe("mnist") == recipe_for("mnist", "smoke", **TINY_TRAIN)
    assert ctx.run_dir("mnist") == run_dir(ctx.recipe("mnist"), tmp_path / "runs")
    assert ctx.snapshot_steps("mnist") == (0, 3, 6) and ctx.snapshot_steps("cifar100") == ()
    assert Context(profile="paper").recipe("mnist") == recipe_for("mnist", "paper")


def test_the_loader_batches_are_what_the_run_trains_on(tmp_path):
    """loader_batches serves both recipes: for Table 1's (epoch shuffle, no augmentation) pass j's batch is the first
    batch of epoch j's permutation; its first pass is the batch train's first step sees."""
    from curvature_gap import train as tr
    ctx = experiments_context(tmp_path, datasets=mnist_datasets(300, 80))
    r = ctx.recipe("mnist")
    (x0, y0), (x1, y1) = ctx.loader_batches("mnist", 2)
    ds = ctx.data("mnist")
    for j, (x, y) in enumerate([(x0, y0), (x1, y1)]):
        idx = tr.EpochOrder(len(ds.train), r.batch_size, r.seed).order(j)[:r.batch_size]
        assert torch.equal(x, ds.train.images[idx]) and torch.equal(y, ds.train.labels[idx])
    _, x, y = next(tr.loader(r, ds, 1))
    assert torch.equal(x, x0) and torch.equal(y, y0)


def test_data_subsets_first_batch_and_models(tmp_path):
    ctx = experiments_context(tmp_path, datasets=mnist_datasets(300, 80))
    ds = ctx.data("mnist")
    assert len(ds.train) == 256 and len(ds.test) == 64          # the training config's subsets
    x, y = ctx.first_images("mnist", 5)
    assert torch.equal(x, ds.train.images[:5]) and torch.equal(y, ds.train.labels[:5])
    with pytest.raises(ValueError, match="fewer than the batch of 1000"):
        ctx.first_images("mnist", 1000)
    init, info = ctx.model("mnist", 0)
    assert sum(p.numel() for p in init.parameters()) == 454 and not init.training
    assert info["step"] == 0 and info["config_hash"] == run_key(ctx.recipe("mnist"))
    m, tinfo = ctx.model("mnist")
    assert tinfo["steps"] == 8 and tinfo["weights_sha256"] != info["weights_sha256"]
    assert not torch.equal(next(m.parameters()), next(init.parameters()))
    assert ctx.phases.get("training", 0) > 0


def test_missing_data_is_data_unavailable(tmp_path):
    ctx = Context(profile="smoke", data_dir=tmp_path / "none", progress=False)
    with pytest.raises(DataUnavailable, match="MNIST"):
        ctx.data("mnist")
