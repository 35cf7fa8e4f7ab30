"""experiments.running_mean: the authors' protocol of Figs. 6 and 12 (one pass of their loader at fixed weights), the
runs their configurations read, the log-log trend both figures fit and the two sums of the same gradients."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cases import TINY_MODEL, mnist_datasets
from curvature_gap import experiments
from curvature_gap.config import recipe_for
from curvature_gap.data import TensorDataset
from curvature_gap.experiments import assumption, convergence
from curvature_gap.experiments import running_mean as rm
from curvature_gap.model import build_model
from curvature_gap.train import Datasets, load_datasets, loader, run_key


def test_the_paper_profile_is_what_their_configurations_run():
    """loss_landscape_convergence.yaml: seed 42; assumption_1.yaml: seed 21; both the 8-block CIFAR-100 model at
    step 10,000 over 26 epochs of the loader; Fig. 6 takes no gradient."""
    f6, f12 = convergence.AUTHORS_SETTINGS["paper"], assumption.AUTHORS_SETTINGS["paper"]
    assert (f6.model, f6.dataset, f6.arithmetic) == (f12.model, f12.dataset, f12.arithmetic) == (
        "authors", "cifar100", "authors")
    assert (f6.model_key, f6.run_seed, f6.step, f6.epochs, f6.gradients) == ("authors_cifar100", 42, 10_000, 26, False)
    assert (f12.model_key, f12.run_seed, f12.step, f12.epochs, f12.gradients, f12.log_every) == (
        "authors_cifar100", 21, 10_000, 26, True, 16)
    ctx = experiments.Context(profile="paper")
    c6, c12 = ctx.run_recipe(f6), ctx.run_recipe(f12)
    assert (c6.seed, c12.seed) == (42, 21) and c12 == recipe_for("authors_cifar100", "paper", precision="bf16")
    assert run_key(c6) != run_key(c12), "another seed is another run"
    mnist = ctx.run_recipe(rm.MNIST_SETTINGS["paper"])
    assert mnist == recipe_for("authors_mnist", "paper", precision="bf16") and mnist.seed == 37
    exact = ctx.run_recipe(rm.MNIST_EXACT_SETTINGS["paper"])
    assert exact == recipe_for("authors_mnist", "paper") and exact.precision == "float32"
    assert c12.precision == "bf16", "the authors' arithmetic is the default of every result of their model"
    # the stand-in's spread is over trained runs, as their Fig. 12 notebook's: Fig. 4's three bf16 runs, and each
    # of them is a run the pass reads (running_mean.figure_runs), trained by the runner; the float32 twin is its one run
    from curvature_gap.experiments.heatmaps import AUTHORS_TRAINED
    assert rm.MNIST_SETTINGS["paper"].run_seeds == AUTHORS_TRAINED["paper"].seeds == (37, 0, 1)
    assert rm.MNIST_EXACT_SETTINGS["paper"].run_seeds == ()
    assert rm.figure_runs(rm.MNIST_SETTINGS["paper"], ctx) == [(20_000, 37), (20_000, 0), (20_000, 1)]
    assert experiments.runs_of("fig6_authors_mnist", ctx) == [], "its numbers are cut from the shared pass"
    assert [(st, sd) for _, st, sd in experiments.runs_of("loader_pass_authors_mnist", ctx)] == [
        (20_000, 37), (20_000, 0), (20_000, 1)]
    # the results' configurations record the run they read
    for name, seed in (("fig6_authors", 42), ("fig12_authors", 21), ("fig6_authors_mnist", 37)):
        s = experiments.spec(name)
        config = experiments.config_of(s, ctx, experiments.settings_of(s, ctx), {})
        assert config["train"][s.settings["paper"].model_key]["seed"] == seed
    assert rm.MNIST_SETTINGS["paper"].step == 20_000 and "smoke" not in experiments.spec("fig6_authors_mnist").settings


@pytest.fixture(scope="module")
def tiny_pass():
    """The authors' MNIST recipe on a 454-parameter model and 40 test-written images, in float64."""
    cfg = dataclasses.replace(recipe_for("authors_mnist", "smoke"), model_overrides=tuple(sorted(TINY_MODEL.items())),
                              batch_size=16)
    ds = load_datasets(cfg, datasets=mnist_datasets(40, 8))
    ds = Datasets(TensorDataset(ds.train.images.double(), ds.train.labels), ds.test)
    return cfg, ds, build_model(cfg.model, seed=1, **dict(cfg.model_overrides)).double().eval()


def test_the_pass_is_the_running_mean_and_its_gradient(tiny_pass):
    cfg, ds, model = tiny_pass
    p = rm.loader_pass(model, cfg, ds, epochs=2, log_every=2, gradients=True, device="cpu")
    batches = [(x, y) for _, x, y in loader(cfg, ds, 2)]
    assert len(p["running_loss"]) == len(batches) == 6 and list(p["n_seen"]) == [16, 32, 40, 56, 72, 80]
    params = list(model.parameters())
    for i in range(len(batches)):
        x = torch.cat([b[0] for b in batches[:i + 1]])
        y = torch.cat([b[1] for b in batches[:i + 1]])
        mean = torch.nn.functional.cross_entropy(model(x), y)  # L_k over the samples seen, computed at once
        assert p["running_loss"][i] == pytest.approx(mean.item(), rel=1e-12)
        if i % 2 == 0:
            g = torch.autograd.grad(mean, params)
            norm = float(torch.sqrt(sum((t ** 2).sum() for t in g)))
            assert p["grad_norm"][i // 2] == pytest.approx(norm, rel=1e-10)
            # a float64 model's buffers are float64: their sum is the exact one
            assert p["grad_norm_theirs"][i // 2] == pytest.approx(norm, rel=1e-10)
            assert p["grad_samples"][i // 2] == p["n_seen"][i]
    without = rm.loader_pass(model, cfg, ds, epochs=2, log_every=2, gradients=False, device="cpu")
    np.testing.assert_array_equal(without["running_loss"], p["running_loss"])
    assert "grad_norm" not in without
    assert len(rm.loader_pass(model, cfg, ds, 2, 2, False, "cpu", max_batches=3)["running_loss"]) == 3


def test_the_fit_takes_each_logged_point_once_where_k_skips_values():
    k = np.array([16, 32, 48, 64, 80, 1000, 2000, 4000, 8000])
    fit = rm.fit_loglog(k, 3.0 * k ** -0.5, int(k[0]), 40)
    assert fit["slope"] == pytest.approx(-0.5) and fit["r2"] == pytest.approx(1.0)
    assert fit["k_fit"] == sorted(set(fit["k_fit"])) and set(fit["k_fit"]) <= set(k.tolist())
    consecutive = np.arange(1, 500)
    assert rm.fit_loglog(consecutive, 1.0 / consecutive, 4, 40)["k_fit"][:3] == [4, 5, 6]


def test_a_bf16_running_sum_stalls_where_the_float64_sum_of_the_same_gradients_does_not():
    """GradientSums keeps their sum in the parameters' dtype: bf16 buffers stop growing after a few hundred
    comparable terms (the running mean then falls like 1/k), float64 ones do not; float32 buffers stay exact
    to float32 rounding."""
    g = [torch.full((3,), 0.1, dtype=torch.bfloat16), torch.full((2, 2), -0.05, dtype=torch.bfloat16)]
    sums = rm.GradientSums(g)
    for _ in range(2000):
        sums.add(g)
    exact, theirs = sums.norms(2000)
    truth = float(torch.sqrt(sum((t.double() ** 2).sum() for t in g)))
    assert exact == pytest.approx(truth, rel=1e-12)
    assert theirs < 0.3 * exact, "a bf16 sum of 2,000 equal terms stalls near 2⁸ of them"
    g32 = [t.float() for t in g]
    sums32 = rm.GradientSums(g32)
    for _ in range(2000):
        sums32.add(g32)
    assert sums32.norms(2000)[1] == pytest.approx(truth, rel=1e-4)


def test_the_accumulation_summary_reads_both_sums_of_every_pass():
    summary = rm.accumulation_summary({"grad_samples": np.array([128, 60_032, 120_064]),
                                       "grad_norm": np.array([[1.0, 0.5, 0.5], [1.0, 0.5, 0.52]]),
                                       "grad_norm_theirs": np.array([[1.0, 0.5, 0.25], [1.0, 0.5, 0.26]])})
    assert summary["theirs_over_exact"] == pytest.approx(0.5) and summary["drift_from_samples"] == 60_032
    assert summary["exact_drift"] == pytest.approx(1.02) and summary["n_passes"] == 2
    assert summary["bites_at_samples"] == 120_064, "the first logged k where the sums part by more than ACCUM_TOL"


@pytest.mark.parametrize("figure, part", [("fig6", "convergence"), ("fig12", "assumption")])
def test_each_figure_has_one_plot_message_and_key_numbers_for_both_protocols(figure, part):
    """Fig. 6 and Fig. 12 are one module each: the theorem's model (random orders) and the authors' (a loader pass)
    are drawn, captioned and summarised by the same functions, which tell the protocol from the result."""
    specs = experiments.FIGURES[figure].results
    assert len(specs) == 5 and {s.variant.model for s in specs} == {"table1", "authors"}
    for attr in ("plots", "messages"):
        assert len({getattr(s, attr)[part] for s in specs}) == 1, attr
    assert len({s.key_numbers for s in specs}) == 1
    assert rm.on_loader(SimpleNamespace(meta={"loader": "theirs"})) and not rm.on_loader(SimpleNamespace(meta={}))
