"""exact.layers: the references of layer_hessian are the modules themselves, differentiated by autograd.

The layers are built from configs (nothing downloaded) with every parameter random; the block-by-block and
Hessian-vector routes agree with the dense reverse-over-reverse Hessian; the finite-difference check fails on a
wrong Hessian; masks reach each module in its own convention.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from curvature_gap.exact import layers as R

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("one_thread")]


def test_randomize_leaves_no_default_initialisation():
    layer = R.randomize(nn.TransformerEncoderLayer(8, 2, 6, dtype=torch.float64), seed=0)
    assert not torch.allclose(layer.norm1.weight, torch.ones(8, dtype=torch.float64))
    assert layer.norm1.bias.abs().min() > 0 and layer.linear1.bias.abs().min() > 0
    again = R.randomize(nn.TransformerEncoderLayer(8, 2, 6, dtype=torch.float64), seed=0)
    assert all(torch.equal(a, b) for a, b in zip(layer.parameters(), again.parameters()))


def test_block_and_hvp_routes_agree_with_the_dense_reference():
    layer, X, T = R.instance("torch", N=2, L=4, heads=2)
    H = R.hessian_autograd(layer, X, T)
    names = [n for n, _ in layer.named_parameters()]
    sizes = [p.numel() for p in layer.parameters()]
    off = {n: sum(sizes[:i]) for i, n in enumerate(names)}
    size = dict(zip(names, sizes))
    pairs = [(names[0], names[-1]), (names[-1], names[0]), (names[4], names[4])]
    blocks = R.block_autograd(layer, X, T, pairs, chunk=7)
    for a, b in pairs:
        ref = H[off[a]:off[a] + size[a], off[b]:off[b] + size[b]]
        assert torch.allclose(blocks[(a, b)], ref, rtol=0, atol=1e-13 * H.abs().max())
    g = torch.Generator().manual_seed(0)
    v = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in layer.named_parameters()}
    hv = R.hvp_autograd(layer, X, T, v)
    flat = H @ torch.cat([v[n].reshape(-1) for n in names])
    assert torch.allclose(torch.cat([hv[n].reshape(-1) for n in names]), flat, rtol=0, atol=1e-13 * flat.abs().max())


def test_the_finite_difference_check_can_fail():
    layer, X, T = R.instance("torch", N=1, L=3, heads=1)
    H = R.hessian_autograd(layer, X, T)
    assert R.fd_column_error(layer, X, T, H) < 1e-7
    wrong = H.clone()
    j = next(layer.parameters()).numel() // 2                # a column the check looks at
    wrong[:, j] *= 1.001
    assert R.fd_column_error(layer, X, T, wrong) > 1e-6
    assert R.fd_column_error(layer, X, T, H) < 1e-7          # the parameters were restored


@pytest.mark.slow
def test_available_names_the_libraries():
    assert R.available("torch")
    assert set(R.LIBRARY) == {k for k, _, _ in R.GRID}
    for kind, lib in R.LIBRARY.items():
        if lib is not None and R.available(kind):
            assert __import__(lib).__name__ == lib


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["timm", "vit", "bert"])
def test_library_layers_are_built_from_configs_in_eval_mode_and_take_masks(kind):
    pytest.importorskip(R.LIBRARY[kind])
    layer, X, T = R.instance(kind, N=2, L=4, heads=2)
    assert not layer.training
    kp = torch.tensor([[False] * 4, [False, False, True, True]])
    with torch.no_grad(), R.math_backend():
        full = R.layer_output(layer, X)
        padded = R.layer_output(layer, X, key_padding_mask=kp)
        alone = R.layer_output(layer, X[1:, :2])           # the unpadded part of sequence 1, on its own
    assert torch.allclose(padded[0], full[0], rtol=0, atol=1e-14)
    assert torch.allclose(padded[1, :2], alone[0], rtol=0, atol=1e-13)
