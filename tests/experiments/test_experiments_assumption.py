"""curvature_gap.experiments.assumption: Fig. 12 on the trained tiny model, and the rows on the authors' model."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cases import experiments_context, mnist_datasets
from curvature_gap import experiments
from curvature_gap.experiments import assumption as asm


def test_fig12_measures_the_gradient_norms_at_the_trained_weights(tmp_path):
    ctx = experiments_context(tmp_path, mnist_datasets(96, 32), assumption=dict(n_points=10, n_permutations=2, chunk=64))
    r = experiments.load_results("fig12", ctx=ctx)
    assert r["k"][0] == 1 and r["k"][-1] == 96 and r["grad_norms"].shape == (2, len(r["k"]))
    m, _ = ctx.model(experiments.Variant())
    tr = ctx.data(experiments.Variant()).train
    loss = torch.nn.functional.cross_entropy(m(tr.images), tr.labels)
    full = float(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(m.parameters()))]).norm())
    assert r["grad_norm_full"] == pytest.approx(full, rel=1e-4)
    np.testing.assert_allclose(r["grad_norms"][:, -1], full, rtol=1e-4)
    assert r["rms_per_sample_grad_norm"] > r["grad_norm_full"] and r["checkpoint"]["steps"] == 3
    assert set(experiments.plot("fig12", r)) == {"assumption"}


def _result(meta, arrays=None, profile="paper"):
    return SimpleNamespace(meta=meta, arrays=arrays or {}, config={"profile": profile}, json_path="results/x.json")


_STANDIN12 = dict(step=20_000, precision="bf16", n_passes=3, run_seeds=[37, 0, 1], largest_k=300_160,
                  batch_size=128, theirs_over_exact=0.37, theirs_over_exact_spread=[0.36, 0.38], exact_drift=0.998,
                  exact_drift_spread=[0.99, 1.01], drift_from_samples=60_032)


def test_the_validity_row_reads_the_authors_model_and_can_fail():
    standin12 = _result(_STANDIN12)
    row = asm.validity_row(None, standin12, experiments.spec("fig12_authors"))
    assert row.verdict == "not run" and "0.37 of the float64 sum" in row.note and "10,166" in row.note
    down, up = np.tile(np.linspace(2, 1, 5), (3, 1)), np.tile(np.linspace(1, 2, 5), (3, 1))
    falls = asm.validity_row(_result({**_STANDIN12, "grad_slope": -0.5}, {"grad_norm": down}), None, experiments.spec("fig12_authors"))
    rises = asm.validity_row(_result({**_STANDIN12, "grad_slope": 0.2}, {"grad_norm": up}), None, experiments.spec("fig12_authors"))
    ends_higher = asm.validity_row(_result({**_STANDIN12, "grad_slope": -0.5}, {"grad_norm": up}), None, experiments.spec("fig12_authors"))
    assert (falls.verdict, rises.verdict, ends_higher.verdict) == ("reproduced", "not reproduced", "not reproduced")
    # the rows sit with the authors' results, one verdict per model
    assert experiments.spec("fig12_authors").finding.key == "fig12_authors" and experiments.spec("fig12").finding.key == "fig12"
    assert experiments.spec("fig12_authors_mnist").finding is None


def test_the_accumulation_rows_say_whether_the_plotted_curve_is_the_quantity():
    stall = asm.accumulation_rows(_result(_STANDIN12), experiments.spec("fig12_authors"))
    assert [r.id for r in stall] == ["fig12_authors_mnist.bf16_over_exact", "fig12_authors_mnist.exact_drift"]
    assert [r.verdict for r in stall] == ["fails", "fails"] and all(r.finding for r in stall)
    assert all(r.result == "fig12_authors" and r.kind != "claim" for r in stall), "the finding's verdict stays the claim row's"
    fine = asm.accumulation_rows(_result({**_STANDIN12, "theirs_over_exact": 0.99, "exact_drift": 0.6}), experiments.spec("fig12_authors"))
    assert [r.verdict for r in fine] == ["holds", "holds"] and not any(r.finding for r in fine)
    assert [r.verdict for r in asm.accumulation_rows(None, experiments.spec("fig12_authors"))] == ["not run", "not run"]


def test_assumption_rows_without_a_result_are_not_run_and_name_the_command():
    a1 = asm.assumption_rows(None)
    assert [r.id for r in a1] == ["assumption1.zero", "fig12.validity_increases"]
    assert all(not r.ran and "curvature-gap reproduce --only fig12" in r.command for r in a1)


def test_assumption_rows_from_a_result():
    meta = dict(grad_norm_full=1e-3, rms_per_sample_grad_norm=1.0, n_samples=100, decreasing=True,
                slope_small_k=-0.5, k_floor=1e6)
    zero, fig12 = asm.assumption_rows(_result(meta))
    assert zero.verdict == "fails" and zero.value == 1e-3 and zero.finding      # the paper claims it holds
    assert fig12.verdict == "reproduced" and fig12.value == -0.5 and "k^-1/2" in fig12.note
    zero, fig12 = asm.assumption_rows(_result(dict(meta, grad_norm_full=1e-9, decreasing=False)))
    assert zero.verdict == "holds" and fig12.verdict == "not reproduced"
