"""curvature_gap.experiments.context: profile, device, data, directories and the trained models of the experiments."""
from __future__ import annotations

import pytest
import torch

from cases import TINY_TRAIN, experiments_context, mnist_datasets
from curvature_gap.config import recipe_for
from curvature_gap.data import DataUnavailable
from curvature_gap.experiments import Context, Variant
from curvature_gap.train import RunMissing, run_dir, run_key

MNIST = Variant()  # the theorem's block on MNIST, float32


def test_paths_configs_and_snapshot_steps(tmp_path):
    ctx = experiments_context(tmp_path, trajectory=dict(n_steps=6, steps=[0, 3, 9]))
    assert ctx.results_dir == tmp_path / "results" and ctx.torch_device == torch.device("cpu")
    assert ctx.recipe(MNIST) == recipe_for("mnist", "smoke", **TINY_TRAIN)
    assert ctx.run_dir(MNIST) == run_dir(ctx.recipe(MNIST), tmp_path / "runs")
    assert ctx.snapshot_steps(MNIST) == (0, 3, 6) and ctx.snapshot_steps(Variant(dataset="cifar100")) == ()
    assert ctx.snapshot_steps(Variant(model="authors", arithmetic="authors")) == ()
    assert Context(profile="paper").recipe(MNIST) == recipe_for("mnist", "paper")
    # the variant names the run: the authors' model in their arithmetic is their recipe in bf16, another seed another run
    authors = Context(profile="paper").recipe(Variant(model="authors", arithmetic="authors"), seed=0)
    assert authors == recipe_for("authors_mnist", "paper", precision="bf16", seed=0)


def test_the_loader_batches_are_what_the_run_trains_on(tmp_path):
    """loader_batches serves both recipes: for Table 1's (epoch shuffle, no augmentation) pass j's batch is the first
    batch of epoch j's permutation; its first pass is the batch train's first step sees."""
    from curvature_gap import train as tr
    ctx = experiments_context(tmp_path, datasets=mnist_datasets(300, 80))
    r = ctx.recipe(MNIST)
    (x0, y0), (x1, y1) = ctx.loader_batches(MNIST, 2)
    ds = ctx.data(MNIST)
    for j, (x, y) in enumerate([(x0, y0), (x1, y1)]):
        idx = tr.EpochOrder(len(ds.train), r.batch_size, r.seed).order(j)[:r.batch_size]
        assert torch.equal(x, ds.train.images[idx]) and torch.equal(y, ds.train.labels[idx])
    _, x, y = next(tr.loader(r, ds, 1))
    assert torch.equal(x, x0) and torch.equal(y, y0)


def test_data_subsets_first_batch_and_models(tmp_path):
    ctx = experiments_context(tmp_path, datasets=mnist_datasets(300, 80))
    ds = ctx.data(MNIST)
    assert len(ds.train) == 256 and len(ds.test) == 64          # the training config's subsets
    x, y = ctx.first_images(MNIST, 5)
    assert torch.equal(x, ds.train.images[:5]) and torch.equal(y, ds.train.labels[:5])
    with pytest.raises(ValueError, match="fewer than the batch of 1000"):
        ctx.first_images(MNIST, 1000)
    init, info = ctx.model(MNIST, 0)
    assert sum(p.numel() for p in init.parameters()) == 454 and not init.training
    assert info["step"] == 0 and info["config_hash"] == run_key(ctx.recipe(MNIST))
    with pytest.raises(RunMissing, match="no usable weights"):  # the model is only loaded: nothing trains it here
        ctx.model(MNIST)
    assert ctx.phases.get("training", 0) == 0 and ctx.trained == []
    ctx.train(MNIST)  # the runner's: trains the run
    m, tinfo = ctx.model(MNIST)
    assert tinfo["steps"] == 8 and tinfo["weights_sha256"] != info["weights_sha256"] and "loop" not in tinfo
    assert [t["steps"] for t in ctx.trained] == [8]
    assert not torch.equal(next(m.parameters()), next(init.parameters()))
    assert ctx.phases.get("training", 0) > 0


def test_missing_data_is_data_unavailable(tmp_path):
    ctx = Context(profile="smoke", data_dir=tmp_path / "none", progress=False)
    with pytest.raises(DataUnavailable, match="MNIST"):
        ctx.data(MNIST)
