"""curvature_gap.bounds.training: the bounds at a ViT's block, per sample and for a batch (curvlinops)."""
from __future__ import annotations

import pytest
import torch

from cases import TINY_MODEL, random_batch
from curvature_gap.bounds import formulas as fm
from curvature_gap.bounds import training as bt
from curvature_gap.exact.forward import block_loss
from curvature_gap.exact.linalg import spectral_norm, sym_spectral_norm
from curvature_gap.model import build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _insts(n=3):
    m = build_model("mnist", seed=0, **TINY_MODEL)
    return bt.instances_of(m, random_batch(n, seed=1)[0], n, "init"), m


def test_instances_are_block0_of_the_model_on_its_tokens():
    insts, m = _insts(2)
    assert len(insts) == 2 and insts[0].shape == (16, 4, 4, 8)
    assert torch.equal(insts[1].W_V, m.blocks[0].value.detach().double())
    assert insts[0].meta["model"] == "init" and insts[1].meta["sample"] == 1
    assert not torch.equal(insts[0].X, insts[1].X)


def test_light_bounds_are_the_formulas_at_the_instance_norms():
    (inst, *_), _ = _insts(1)
    n = bt.norms_of(inst)
    assert n["V"] == spectral_norm(inst.W_V) and n["2"] == spectral_norm(inst.W_2)
    lb = bt.light_bounds(inst)
    a = (n["X"], n["Q"], n["K"], n["V"], spectral_norm(inst.Target), *inst.shape[:3])
    assert lb["thm1"] == fm.theorem1(*a, variant="printed")["M"]
    assert lb["thm1_repaired"] == fm.theorem1(*a, variant="repaired")["M"]
    assert lb["thm6"] > 0 and bt.light_bounds(inst, out_curv=0.0, grad_norm=0.0)["thm6"] < lb["thm6"]


def test_batch_records_measure_the_mean_loss_hessian():
    insts, _ = _insts(3)
    recs = {r["check"]: r for r in bt.batch_records(insts)}
    assert set(recs) == {"thm1.printed.batch", "thm6.full.explicit.batch"} and recs["thm1.printed.batch"]["sub"] == "n=3"
    # the block rows: Lanczos on curvlinops' operator equals the dense Hessian of the mean MSE over the batch
    w0 = [insts[0].W_Q, insts[0].W_K, insts[0].W_V, insts[0].W_1, insts[0].W_2]
    sizes = [w.numel() for w in w0]

    def mean_loss(v):
        ws = [t.reshape(w.shape) for t, w in zip(torch.split(v, sizes), w0)]
        return sum(block_loss(i.X, *ws, i.Target) for i in insts) / len(insts)

    H = torch.func.hessian(mean_loss)(torch.cat([w.reshape(-1) for w in w0]))
    assert recs["thm6.full.explicit.batch"]["exact"] == pytest.approx(sym_spectral_norm(H), rel=1e-6)
    assert recs["thm6.full.explicit.batch"]["bound"] == max(bt.light_bounds(i)["thm6"] for i in insts)
    assert recs["thm1.printed.batch"]["exact"] > 0
