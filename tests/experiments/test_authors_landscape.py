"""experiments.authors_landscape: Figs. 6 and 12 on the authors' model as their code computes them (one pass of
their loader at fixed weights), the runs their configurations read, and the claim rows on the authors' model."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cases import TINY_MODEL, mnist_datasets
from curvature_gap import experiments as ex
from curvature_gap.config import recipe_for
from curvature_gap.data import TensorDataset
from curvature_gap.experiments import authors_landscape as al
from curvature_gap.experiments.convergence import fit_loglog
from curvature_gap.model import build_model
from curvature_gap.train import Datasets, load_datasets, loader, run_key


def test_the_paper_profile_is_what_their_configurations_run():
    """loss_landscape_convergence.yaml: seed 42; assumption_1.yaml: seed 21; both the 8-block CIFAR-100 model at
    step 10,000 over 26 epochs of the loader; Fig. 6 takes no gradient."""
    f6, f12 = al.FIG6_SETTINGS["paper"], al.FIG12_SETTINGS["paper"]
    assert (f6.model, f6.run_seed, f6.step, f6.epochs, f6.gradients) == ("authors_cifar100", 42, 10_000, 26, False)
    assert (f12.model, f12.run_seed, f12.step, f12.epochs, f12.gradients, f12.log_every) == (
        "authors_cifar100", 21, 10_000, 26, True, 16)
    ctx = ex.Context(profile="paper")
    c6, c12 = ctx.run_recipe(f6), ctx.run_recipe(f12)
    assert (c6.seed, c12.seed) == (42, 21) and c12 == recipe_for("authors_cifar100", "paper", precision="bf16")
    assert run_key(c6) != run_key(c12), "another seed is another run"
    mnist = ctx.run_recipe(al.MNIST_SETTINGS["paper"])
    assert mnist == recipe_for("authors_mnist", "paper", precision="bf16") and mnist.seed == 37
    exact = ctx.run_recipe(al.MNIST_EXACT_SETTINGS["paper"])
    assert exact == recipe_for("authors_mnist", "paper") and exact.precision == "float32"
    assert c12.precision == "bf16", "the authors' arithmetic is the default of every result of their model"
    # the stand-in's spread is over trained runs, as their Fig. 12 notebook's: Fig. 4's three bf16 runs, and each
    # of them is a run to train (reproduce._runs_to_train reads run_seeds); the float32 twin is its one run
    from curvature_gap.experiments.heatmaps import AUTHORS_TRAINED
    assert al.MNIST_SETTINGS["paper"].run_seeds == AUTHORS_TRAINED["paper"].seeds == (37, 0, 1)
    assert al.MNIST_EXACT_SETTINGS["paper"].run_seeds == ()
    # the results' configurations record the run they read
    for name, seed in (("fig6_authors", 42), ("fig12_authors", 21), ("fig6_authors_mnist", 37)):
        s = ex.spec(name)
        assert ex.config_of(s, ctx, ex.settings_of(s, ctx), {})["train"][s.settings["paper"].model]["seed"] == seed
    assert al.MNIST_SETTINGS["paper"].step == 20_000 and "smoke" not in ex.spec("fig6_authors_mnist").settings


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
    p = al.loader_pass(model, cfg, ds, epochs=2, log_every=2, gradients=True, device="cpu")
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
    without = al.loader_pass(model, cfg, ds, epochs=2, log_every=2, gradients=False, device="cpu")
    np.testing.assert_array_equal(without["running_loss"], p["running_loss"])
    assert "grad_norm" not in without
    assert len(al.loader_pass(model, cfg, ds, 2, 2, False, "cpu", max_batches=3)["running_loss"]) == 3


def test_the_fit_takes_each_logged_point_once_where_k_skips_values():
    k = np.array([16, 32, 48, 64, 80, 1000, 2000, 4000, 8000])
    fit = fit_loglog(k, 3.0 * k ** -0.5, int(k[0]), 40)
    assert fit["slope"] == pytest.approx(-0.5) and fit["r2"] == pytest.approx(1.0)
    assert fit["k_fit"] == sorted(set(fit["k_fit"])) and set(fit["k_fit"]) <= set(k.tolist())
    consecutive = np.arange(1, 500)
    assert fit_loglog(consecutive, 1.0 / consecutive, 4, 40)["k_fit"][:3] == [4, 5, 6]


def _result(meta, arrays=None, profile="paper"):
    return SimpleNamespace(meta=meta, arrays=arrays or {}, config={"profile": profile}, json_path="results/x.json")


_STANDIN12 = dict(step=20_000, precision="bf16", n_passes=3, run_seeds=[37, 0, 1], largest_k=300_160,
                  batch_size=128, theirs_over_exact=0.37, theirs_over_exact_spread=[0.36, 0.38], exact_drift=0.998,
                  exact_drift_spread=[0.99, 1.01], drift_from_samples=60_032)


def test_the_claim_rows_read_the_authors_model_and_can_fail():
    standin6 = _result({"fit": {"slope": -1.099, "r2": 0.82}})
    row = al.slope_row(None, standin6)
    assert row.verdict == "not run" and row.result == "fig6_authors" and "-1.099" in row.note
    assert "CIFAR-100" in row.note and "fig6_authors" in row.command
    good = al.slope_row(_result({"fit": {"slope": -0.95, "r2": 0.9}, "n_batches": 10166}))
    bad = al.slope_row(_result({"fit": {"slope": -1.3, "r2": 0.9}, "n_batches": 10166}))
    assert (good.verdict, bad.verdict) == ("reproduced", "not reproduced")
    standin12 = _result(_STANDIN12)
    row = al.validity_row(None, standin12)
    assert row.verdict == "not run" and "0.37 of the float64 sum" in row.note and "10,166" in row.note
    down, up = np.tile(np.linspace(2, 1, 5), (3, 1)), np.tile(np.linspace(1, 2, 5), (3, 1))
    falls = al.validity_row(_result({**_STANDIN12, "grad_slope": -0.5}, {"grad_norm": down}))
    rises = al.validity_row(_result({**_STANDIN12, "grad_slope": 0.2}, {"grad_norm": up}))
    ends_higher = al.validity_row(_result({**_STANDIN12, "grad_slope": -0.5}, {"grad_norm": up}))
    assert (falls.verdict, rises.verdict, ends_higher.verdict) == ("reproduced", "not reproduced", "not reproduced")
    # the rows sit with the authors' results, one verdict per model
    assert ex.spec("fig6_authors").finding.key == "fig6_authors" and ex.spec("fig6").finding.key == "fig6"
    assert ex.spec("fig12_authors").finding.key == "fig12_authors" and ex.spec("fig12").finding.key == "fig12"
    assert ex.spec("fig6_authors_mnist").finding is None and ex.spec("fig12_authors_mnist").finding is None


def test_a_bf16_running_sum_stalls_where_the_float64_sum_of_the_same_gradients_does_not():
    """GradientSums keeps their sum in the parameters' dtype: bf16 buffers stop growing after a few hundred
    comparable terms (the running mean then falls like 1/k), float64 ones do not; float32 buffers stay exact
    to float32 rounding."""
    g = [torch.full((3,), 0.1, dtype=torch.bfloat16), torch.full((2, 2), -0.05, dtype=torch.bfloat16)]
    sums = al.GradientSums(g)
    for _ in range(2000):
        sums.add(g)
    exact, theirs = sums.norms(2000)
    truth = float(torch.sqrt(sum((t.double() ** 2).sum() for t in g)))
    assert exact == pytest.approx(truth, rel=1e-12)
    assert theirs < 0.3 * exact, "a bf16 sum of 2,000 equal terms stalls near 2⁸ of them"
    g32 = [t.float() for t in g]
    sums32 = al.GradientSums(g32)
    for _ in range(2000):
        sums32.add(g32)
    assert sums32.norms(2000)[1] == pytest.approx(truth, rel=1e-4)


def test_the_accumulation_rows_say_whether_the_plotted_curve_is_the_quantity():
    stall = al.accumulation_rows(_result(_STANDIN12))
    assert [r.id for r in stall] == ["fig12_authors_mnist.bf16_over_exact", "fig12_authors_mnist.exact_drift"]
    assert [r.verdict for r in stall] == ["fails", "fails"] and all(r.finding for r in stall)
    assert all(r.result == "fig12_authors" and r.kind != "claim" for r in stall), "the finding's verdict stays the claim row's"
    fine = al.accumulation_rows(_result({**_STANDIN12, "theirs_over_exact": 0.99, "exact_drift": 0.6}))
    assert [r.verdict for r in fine] == ["holds", "holds"] and not any(r.finding for r in fine)
    assert [r.verdict for r in al.accumulation_rows(None)] == ["not run", "not run"]
    summary = al.accumulation_summary({"grad_samples": np.array([128, 60_032, 120_064]),
                                       "grad_norm": np.array([[1.0, 0.5, 0.5], [1.0, 0.5, 0.52]]),
                                       "grad_norm_theirs": np.array([[1.0, 0.5, 0.25], [1.0, 0.5, 0.26]])})
    assert summary["theirs_over_exact"] == pytest.approx(0.5) and summary["drift_from_samples"] == 60_032
    assert summary["exact_drift"] == pytest.approx(1.02) and summary["n_passes"] == 2
    assert summary["bites_at_samples"] == 120_064, "the first logged k where the sums part by more than ACCUM_TOL"
