"""curvature_gap.exact.instances: seeded problem instances and what each knob does to them."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from cases import perturbed_model, random_batch
from curvature_gap.config import MODEL_CONFIGS
from curvature_gap.exact import forward as fw
from curvature_gap.exact.instances import MNIST_SHAPE, Instance, from_block, from_model, random_instance
from curvature_gap.model import build_model


def test_seeded_draws_are_reproducible_and_seed_sensitive():
    a, b, c = random_instance(5, 3, seed=1), random_instance(5, 3, seed=1), random_instance(5, 3, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors().values(), b.tensors().values()))
    assert not torch.equal(a.X, c.X)
    assert a.shape == (5, 3, 3, 12) and a.shape_str() == "L=5,dV=3,dK=3,dff=12"
    assert a.X.dtype == torch.float64 and a.n_values() == sum(t.numel() for t in a.tensors().values())


def test_sigma_sharpness_and_balance_scale_exactly_what_they_say():
    base = random_instance(6, 4, seed=3)
    s = random_instance(6, 4, seed=3, sigma=2.0)
    torch.testing.assert_close(s.X, 2 * base.X, rtol=0, atol=0)
    sh = random_instance(6, 4, seed=3, sharpness=9.0)
    torch.testing.assert_close(fw.scores(sh.X, sh.W_Q, sh.W_K), 9 * fw.scores(base.X, base.W_Q, base.W_K),
                               rtol=1e-13, atol=1e-13)
    bal = random_instance(6, 4, seed=3, balance=64.0)
    torch.testing.assert_close(bal.W_Q, 64 * base.W_Q, rtol=1e-15, atol=0)
    # W_Q -> a W_Q, W_K -> W_K / a leaves the scores, attention and F unchanged
    torch.testing.assert_close(fw.sa_forward(bal.X, bal.W_Q, bal.W_K, bal.W_V),
                               fw.sa_forward(base.X, base.W_Q, base.W_K, base.W_V), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(sharpness=0.0), dict(uniform="zero_query"), dict(uniform="orthogonal")],
                         ids=["sharpness0", "zero_query", "orthogonal"])
def test_uniform_attention_instances(kw):
    inst = random_instance(5, 4, seed=4, **kw)
    A = fw.attention_matrix(inst.X, inst.W_Q, inst.W_K)
    torch.testing.assert_close(A, torch.full((5, 5), 0.2, dtype=torch.float64), rtol=0, atol=1e-15)
    if kw.get("uniform") == "orthogonal":
        assert inst.W_Q.abs().max() > 0 and inst.W_K.abs().max() > 0
        assert float((inst.W_Q @ inst.W_K.T).abs().max()) == 0.0


def test_bad_uniform_choices_are_refused():
    with pytest.raises(ValueError, match="unknown uniform"):
        random_instance(4, 4, uniform="nearly")
    with pytest.raises(ValueError, match="d_K >= 2"):
        random_instance(4, 4, d_K=1, uniform="orthogonal")
    with pytest.raises(ValueError, match="unknown target"):
        random_instance(4, 4, target="nonsense")


def test_targets():
    fit = random_instance(4, 3, seed=5, target="fit")
    assert float(fw.block_loss(fit.X, *fit.weights, fit.Target)) == 0.0          # an exact global minimiser
    fit_sa = random_instance(4, 3, seed=5, target="fit", target_output="attention")
    assert float(fw.sa_loss(fit_sa.X, fit_sa.W_Q, fit_sa.W_K, fit_sa.W_V, fit_sa.Target)) == 0.0
    assert float(random_instance(4, 3, seed=5, target="zero").Target.abs().max()) == 0.0
    pert = random_instance(4, 3, seed=5, target="perturbed")
    assert 0 < float(fw.block_loss(pert.X, *pert.weights, pert.Target)) < float(
        fw.block_loss(pert.X, *pert.weights, torch.zeros_like(pert.Target)))


def test_away_from_kinks_redraws_until_regular():
    inst = random_instance(8, 4, seed=0, away_from_kinks=True)
    pre = fw.block_forward(inst.X, *inst.weights)["Pre"]
    assert float(pre.abs().min()) > 1e-4


def test_json_round_trip_is_exact():
    inst = random_instance(3, 2, seed=6, target="perturbed", sweep="s", x=1.5)
    back = Instance.from_json(json.loads(json.dumps(inst.to_json())))
    assert all(torch.equal(a, b) for a, b in zip(inst.tensors().values(), back.tensors().values()))
    assert back.meta == inst.meta and back.meta["sweep"] == "s"


def test_from_block_takes_the_five_matrices_and_drops_biases():
    m = build_model("mnist", seed=0).double()
    X = torch.randn(49, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    inst = from_block(m.blocks[0], X, target="zero")
    b = m.blocks[0]
    assert torch.equal(inst.W_Q, b.query.detach()) and torch.equal(inst.W_1, b.ffn1["weight"].detach())
    assert inst.shape == MNIST_SHAPE
    cfg = MODEL_CONFIGS["mnist"]
    assert MNIST_SHAPE == (cfg.n_tokens, cfg.d_model, cfg.d_k, cfg.d_ff)
    assert "biases" in inst.meta["dropped"] and inst.meta["source"] == "model-block"


def test_from_model_is_from_block_at_each_images_tokens():
    model = perturbed_model(seed=1, dtype=torch.float32)
    images, _ = random_batch(3, seed=2)
    got = from_model(model, images, target="zero")
    m = copy.deepcopy(model).double()
    with torch.no_grad():
        X = m.tokens(images.double())
    assert len(got) == 3
    for i, inst in enumerate(got):
        ref = from_block(m.blocks[0], X[i], target="zero", seed=i)
        for f in ("X", "W_Q", "W_K", "W_V", "W_1", "W_2", "Target"):
            assert torch.equal(getattr(inst, f), getattr(ref, f)), f
        assert inst.meta["sample"] == i
