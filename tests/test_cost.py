"""curvature_gap.cost: the cost of a training run, measured by the run's own trainer on random data of its shape."""
from __future__ import annotations

import dataclasses

import pytest

from cases import TINY_MODEL
from curvature_gap import cost
from curvature_gap.config import recipe_for

TINY = tuple(sorted(TINY_MODEL.items()))


def test_model_titles_say_whose_model_and_its_size():
    assert cost.model_title("authors_cifar100") == "the authors' 8-block CIFAR-100 model"
    assert cost.model_title("cifar100") == "the 8-block CIFAR-100 model of Table 1"
    assert cost.model_title("mnist", (("n_blocks", 2),)) == "the 2-block MNIST model of Table 1"


def test_random_datasets_have_the_models_shape():
    cfg = recipe_for("authors_cifar100", "paper")
    ds = cost.random_datasets(cfg, 5, 3)
    assert tuple(ds.train.images.shape) == (5, 3, 32, 32) and tuple(ds.test.images.shape) == (3, 3, 32, 32)
    assert float(ds.train.images.min()) >= -1 and float(ds.train.images.max()) <= 1
    assert int(ds.train.labels.max()) < 100


@pytest.mark.parametrize("cfg", [
    dataclasses.replace(recipe_for("mnist", "paper"), model_overrides=TINY, batch_size=16),
    dataclasses.replace(recipe_for("authors_mnist", "paper"), model_overrides=TINY, batch_size=16),
], ids=["table1-train", "authors-train"])
def test_seconds_per_step_runs_the_runs_own_trainer(cfg):
    s = cost.seconds_per_step(cfg, "cpu", steps=2, warmup=1)
    assert 0 < s < 5
    assert cost.evaluation_seconds(cfg, "cpu", n_test=64) > 0


def test_bad_step_counts_are_refused():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        cost.seconds_per_step(recipe_for("mnist", "smoke"), "cpu", steps=0)


def test_a_run_cost_adds_steps_and_one_evaluation_per_whole_epoch():
    c = cost.RunCost(title="the authors' 8-block CIFAR-100 model", recipe="the authors' recipe", seed=42, device="cpu",
                     seconds_per_step=0.5, steps_per_epoch=391, steps=10_000, evaluation_s=12.0)
    assert c.evaluations == 25 and c.epoch_s == pytest.approx(391 * 0.5 + 12)
    assert c.seconds == pytest.approx(10_000 * 0.5 + 25 * 12)
    text = c.describe()
    assert "the authors' 8-block CIFAR-100 model (the authors' recipe, seed 42) for 10,000 steps (25.6 epochs)" in text
    assert "about 1.5 h on cpu" in text and "0.5 s per step measured now" in text and "3.5 min per epoch of 391 steps" in text
