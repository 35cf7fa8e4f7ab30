"""Curvature of the model through curvlinops: correct with the hand-written LayerNorm, wrong with
the fused kernel (a guard that also tells us when PyTorch fixes it; the book's fused-LayerNorm page explains the error)."""
import pytest
import torch
from curvlinops import HessianLinearOperator
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import curvature_gap as cg


def _columns(fused: bool, cols):
    torch.manual_seed(0)
    m = cg.build_model("mnist", fused_ln=fused).double()
    x = torch.randn(6, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 10, (6,))
    params = list(m.parameters())
    H = HessianLinearOperator(m, nn.CrossEntropyLoss(), params, [(x, y)])
    P = sum(p.numel() for p in params)
    E = torch.zeros(P, len(cols), dtype=torch.float64)
    E[cols, torch.arange(len(cols))] = 1.0
    HE = H @ E

    w0 = parameters_to_vector(params).detach().clone()

    def grad_at(w):
        vector_to_parameters(w, params)
        g = torch.autograd.grad(nn.functional.cross_entropy(m(x), y), params)
        return torch.cat([gi.reshape(-1) for gi in g])

    h = 1e-5
    fd = torch.stack([(grad_at(w0 + h * E[:, k]) - grad_at(w0 - h * E[:, k])) / (2 * h) for k in range(len(cols))], 1)
    vector_to_parameters(w0, params)
    return HE, fd


def _cols():
    m = cg.build_model("mnist")
    g = {gr.name: gr for gr in cg.param_groups(m)}
    # one column in each block group, plus embedding and head
    return [g[n].start + 3 for n in ("embed", "block0.query", "block0.key", "block0.value",
                                     "block0.ln1", "block0.ffn1", "block0.ffn2", "block0.ln2", "head")]


def test_curvlinops_matches_finite_differences_and_is_symmetric():
    cols = _cols()
    HE, fd = _columns(False, cols)
    rel = ((HE - fd).abs().max() / fd.abs().max()).item()
    assert rel < 1e-7, rel
    sub = HE[cols]
    assert (sub - sub.T).abs().max().item() < 1e-12


def test_fused_layernorm_gives_wrong_curvature_guard():
    """If this starts failing, PyTorch fixed the fused LayerNorm's second derivatives: update the fused-LayerNorm page of the book."""
    cols = _cols()
    HE, fd = _columns(True, cols)
    rel = ((HE - fd).abs().max() / fd.abs().max()).item()
    asym = (HE[cols] - HE[cols].T).abs().max().item()
    assert rel > 1e-3, f"fused LayerNorm curvature now agrees with finite differences (rel {rel:.2e})"
    assert asym > 1e-6


def test_curvlinops_operator_runs_on_float32_model_and_batch():
    m = cg.build_model("mnist")
    x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    H = HessianLinearOperator(m, nn.CrossEntropyLoss(), list(m.parameters()), [(x, y)])
    v = torch.randn(H.shape[1])
    Hv = H @ v
    assert Hv.shape == (4186,) and torch.isfinite(Hv).all()
    # symmetric operator: <u, H v> = <H u, v>
    u = torch.randn(H.shape[1])
    assert abs(torch.dot(u, Hv) - torch.dot(H @ u, v)) <= 1e-3 * (1 + abs(torch.dot(u, Hv)))
