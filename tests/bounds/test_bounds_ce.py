"""curvature_gap.bounds.ce: Theorem 6 for the cross-entropy through the ViT's head."""
from __future__ import annotations

import pytest
import torch
from torch.func import hessian

from cases import randn
from curvature_gap.bounds import ce
from curvature_gap.exact.forward import block_output
from curvature_gap.exact.instances import random_instance
from curvature_gap.exact.linalg import sym_spectral_norm

pytestmark = pytest.mark.usefixtures("one_thread")


def _case():
    inst = random_instance(L=4, d_V=3, d_ff=6, seed=1, target="zero", away_from_kinks=True)
    return inst, randn(5, 3, seed=2), randn(5, seed=3)


def test_ce_loss_is_the_cross_entropy_of_the_mean_pooled_block_output():
    inst, W_h, b_h = _case()
    z = W_h @ block_output(inst.X, *inst.weights).mean(0) + b_h
    assert float(ce.ce_loss(inst, W_h, b_h, 2)) == pytest.approx(float(-torch.log_softmax(z, 0)[2]), rel=1e-14)


def test_output_factors_against_autograd():
    inst, W_h, b_h = _case()
    f = ce.output_factors(inst, W_h, b_h, 2)
    assert 0 < f["softmax_factor"] <= 0.5                             # Gershgorin
    Z = block_output(inst.X, *inst.weights)
    loss_of_Z = lambda z: torch.nn.functional.cross_entropy((W_h @ z.reshape(4, 3).mean(0) + b_h)[None],  # noqa: E731
                                                              torch.tensor([2]))
    H = hessian(loss_of_Z)(Z.reshape(-1))
    g = torch.func.grad(loss_of_Z)(Z.reshape(-1))
    assert f["out_curv"] == pytest.approx(sym_spectral_norm(H), rel=1e-10)
    assert f["out_curv"] <= f["out_curv_bound"] * (1 + 1e-12)
    assert f["grad_norm"] == pytest.approx(float(g.norm()), rel=1e-12)


def test_ce_records_hold_and_measure_the_exact_hessian():
    inst, W_h, b_h = _case()
    recs = ce.ce_records([inst], W_h, b_h, [2])
    by = {r["check"]: r for r in recs}
    assert set(by) == {"ce.output_factor", "thm6.full.explicit.ce"}
    f = ce.output_factors(inst, W_h, b_h, 2)
    assert by["ce.output_factor"]["ratio"] == pytest.approx(0.5 / f["softmax_factor"]) and by["ce.output_factor"]["ratio"] >= 1
    flat = lambda v: ce.ce_loss(inst, W_h, b_h, 2, [t.reshape(w.shape) for t, w in  # noqa: E731
                                                    zip(torch.split(v, [w.numel() for w in inst.weights]), inst.weights)])
    H = hessian(flat)(torch.cat([w.reshape(-1) for w in inst.weights]))
    assert by["thm6.full.explicit.ce"]["exact"] == pytest.approx(sym_spectral_norm(H), rel=1e-10)
    assert by["thm6.full.explicit.ce"]["ratio"] >= 1
