"""curvature_gap.hessian.loss: the one loss-of-named-parameters closure, against the literal closures it
replaced (bit for bit), and its errors."""
from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad

from cases import TINY_MODEL, perturbed_model
from curvature_gap.hessian.loss import loss_function, model_loss
from curvature_gap.params import flat_view


def _batch(model, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    X = torch.randn(n, cfg.in_channels, cfg.image_size, cfg.image_size, generator=g, dtype=torch.float64)
    return X, torch.randint(0, cfg.n_classes, (n,), generator=g)


def test_model_loss_is_the_literal_closure_with_fixed_parameters_and_buffers():
    model = perturbed_model(**TINY_MODEL)
    X, y = _batch(model)
    params = {n: p.detach() for n, p in model.named_parameters()}
    names = list(params)[:3]
    fixed = {n: v for n, v in params.items() if n not in names}
    mine = model_loss(model, fixed=fixed)
    lit = lambda p: torch.nn.functional.cross_entropy(functional_call(model, {**fixed, **p}, (X,)), y)  # noqa: E731
    p = {n: params[n] * 1.1 for n in names}
    assert torch.equal(mine(p, X, y), lit(p))
    g1, g2 = grad(lambda q: mine(q, X, y))(p), grad(lit)(p)
    assert all(torch.equal(g1[n], g2[n]) for n in names)
    # one sample, as the per-sample routes call it
    assert torch.equal(mine(p, X[:1], y[:1]), torch.nn.functional.cross_entropy(
        functional_call(model, {**fixed, **p}, (X[:1],)), y[:1]))


def test_flat_view_round_trips_the_parameter_order():
    model = perturbed_model(**TINY_MODEL)
    params = {n: p.detach() for n, p in model.named_parameters()}
    unflat = flat_view(list(params), [p.shape for p in params.values()])
    theta = torch.cat([p.reshape(-1) for p in params.values()])
    back = unflat(theta)
    assert list(back) == list(params) and all(torch.equal(back[n], params[n]) for n in params)


def test_an_unknown_loss_names_the_choices():
    with pytest.raises(ValueError, match="use 'cross_entropy' or a callable"):
        loss_function("mse")
    assert loss_function(torch.nn.functional.mse_loss) is torch.nn.functional.mse_loss
