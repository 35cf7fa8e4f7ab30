"""curvature_gap.experiments.assumption: Fig. 12 on the trained tiny model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cases import experiments_context, mnist_datasets
from curvature_gap import experiments as ex


def test_fig12_measures_the_gradient_norms_at_the_trained_weights(tmp_path):
    ctx = experiments_context(tmp_path, mnist_datasets(96, 32), assumption=dict(n_points=10, n_permutations=2, chunk=64))
    r = ex.load_results("fig12", ctx=ctx)
    assert r["k"][0] == 1 and r["k"][-1] == 96 and r["grad_norms"].shape == (2, len(r["k"]))
    m, _ = ctx.model("mnist")
    tr = ctx.data("mnist").train
    loss = torch.nn.functional.cross_entropy(m(tr.images), tr.labels)
    full = float(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(m.parameters()))]).norm())
    assert r["grad_norm_full"] == pytest.approx(full, rel=1e-4)
    np.testing.assert_allclose(r["grad_norms"][:, -1], full, rtol=1e-4)
    assert r["rms_per_sample_grad_norm"] > r["grad_norm_full"] and r["checkpoint"]["steps"] == 3
    assert set(ex.plot("fig12", r)) == {"assumption"}
