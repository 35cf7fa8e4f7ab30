"""curvature_gap.hessian._generic: curvlinops (the paper's tool) on the model: right with the hand-written
LayerNorm, wrong with the fused kernel (a guard that also tells us when PyTorch fixes it; the book's
fused-LayerNorm page explains the error)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import curvature_gap as cg
from cases import TINY_MODEL, rel
from curvature_gap.hessian import _generic

pytestmark = pytest.mark.usefixtures("one_thread")


def _cols():
    m = cg.build_model("mnist")
    g = {gr.name: gr for gr in cg.param_groups(m)}
    # one column in each block group, plus embedding and head
    return [g[n].start + 3 for n in ("embed", "block0.query", "block0.key", "block0.value",
                                     "block0.ln1", "block0.ffn1", "block0.ffn2", "block0.ln2", "head")]


def _columns(fused: bool, cols):
    torch.manual_seed(0)
    m = cg.build_model("mnist", fused_ln=fused).double()
    x = torch.randn(6, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 10, (6,))
    HE = _generic.curvlinops_columns(m, x, y, cols)
    params = list(m.parameters())
    w0 = parameters_to_vector(params).detach().clone()

    def grad_at(w):
        vector_to_parameters(w, params)
        g = torch.autograd.grad(nn.functional.cross_entropy(m(x), y), params)
        return torch.cat([gi.reshape(-1) for gi in g])

    h = 1e-5
    E = torch.zeros(w0.numel(), len(cols), dtype=torch.float64)
    E[cols, torch.arange(len(cols))] = 1.0
    fd = torch.stack([(grad_at(w0 + h * E[:, k]) - grad_at(w0 - h * E[:, k])) / (2 * h) for k in range(len(cols))], 1)
    vector_to_parameters(w0, params)
    return HE, fd


def test_curvlinops_matches_finite_differences_and_is_symmetric():
    cols = _cols()
    HE, fd = _columns(False, cols)
    assert ((HE - fd).abs().max() / fd.abs().max()).item() < 1e-7
    sub = HE[cols]
    assert (sub - sub.T).abs().max().item() < 1e-12


def test_fused_layernorm_gives_wrong_curvature_guard():
    """If this starts failing, PyTorch fixed the fused LayerNorm's second derivatives: update the fused-LayerNorm
    page of the book."""
    cols = _cols()
    HE, fd = _columns(True, cols)
    rel_err = ((HE - fd).abs().max() / fd.abs().max()).item()
    asym = (HE[cols] - HE[cols].T).abs().max().item()
    assert rel_err > 1e-3, f"fused LayerNorm curvature now agrees with finite differences (rel {rel_err:.2e})"
    assert asym > 1e-6


def test_curvlinops_and_torch_func_dense_hessians_agree_in_float32():
    m = cg.build_model("mnist", seed=0, **TINY_MODEL)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 1, 28, 28, generator=g), torch.randint(0, 10, (2,), generator=g)
    H = _generic.curvlinops_hessian(m, x, y, chunk=200)
    A = _generic.torch_func_hessian(m, x, y)
    assert H.shape == (454, 454) and H.dtype == torch.float32
    assert rel(H, A) < 1e-5 and rel(H, H.T) < 1e-5
    assert rel(_generic.functorch_hessian(m, x, y, dtype=torch.float64), A) < 1e-5
    assert next(m.parameters()).dtype == torch.float32, "the model is copied, never changed"
