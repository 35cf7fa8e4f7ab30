"""curvature_gap.hessian: the exact dense Hessian and its blocks, against curvlinops (the paper's tool) in
float64, on models whose biases and LayerNorm affines are non-trivial. Numbers only, no timings."""
from __future__ import annotations

import copy

import pytest
import torch

import curvature_gap as cg
from cases import SMALL_MODEL, TWO_BLOCKS, perturbed_model, rel
from curvature_gap.data import TensorDataset
from curvature_gap.hessian import _generic, group_slices, hessian, hessian_block

pytestmark = pytest.mark.usefixtures("one_thread")


def _setup(seed=0, n=4, dtype=torch.float64, **overrides):
    m = perturbed_model(seed, dtype, **overrides)
    g = torch.Generator().manual_seed(seed + 1)
    return m, torch.randn(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


@pytest.mark.parametrize("overrides", [SMALL_MODEL, TWO_BLOCKS], ids=["1block", "2blocks"])
def test_dense_equals_curvlinops_float64(overrides):
    m, x, y = _setup(**overrides)
    H = hessian(m, (x, y))
    P = sum(p.numel() for p in m.parameters())
    assert H.shape == (P, P) and H.dtype == torch.float64
    ref = _generic.curvlinops_columns(m, x, y)
    assert rel(H, ref) < 1e-12
    assert torch.equal(H, H.T)


def test_paper_model_block_pairs_equal_curvlinops_float64():
    m, x, y = _setup(n=4)
    groups = {g.name: g for g in cg.param_groups(m)}
    assert sum(g.size for g in groups.values()) == 4186
    pairs = [("block0.value", "block0.query"), ("block0.query", "block0.ln2"), ("block0.ln1", "block0.ln1")]
    cols = sorted({c for _, g in pairs for c in range(groups[g].start, groups[g].stop)})
    ref = _generic.curvlinops_columns(m, x, y, cols)
    where = {c: i for i, c in enumerate(cols)}
    # a forward-ordered pair, a reversed pair (computed transposed) and a diagonal block
    for row, col in pairs:
        blk = hessian_block(m, (x, y), row, col)
        r = ref[groups[row].slice][:, [where[c] for c in range(groups[col].start, groups[col].stop)]]
        assert blk.shape == (groups[row].size, groups[col].size)
        assert rel(blk, r) < 1e-12, (row, col)
    many = hessian(m, TensorDataset(x, y), blocks=[("head", "block0.ln2"), ("block0.ln2", "head")])
    assert torch.allclose(many[("head", "block0.ln2")], many[("block0.ln2", "head")].T, rtol=0, atol=1e-16)
    assert group_slices(m)["head"] == groups["head"].slice


def test_float32_within_1e5_of_float64_reference():
    m, x, y = _setup(**SMALL_MODEL)
    H64 = hessian(m, (x, y))
    m32 = copy.deepcopy(m).float()
    H32 = hessian(m32, (x.float(), y))
    assert H32.dtype == torch.float32
    assert rel(H32, H64) < 1e-5
    # dtype= computes in float64 from a float32 model
    assert rel(hessian(m32, (x.float(), y), dtype=torch.float64),
               hessian(copy.deepcopy(m32).double(), (x.float().double(), y))) < 1e-12


@pytest.mark.slow
def test_other_methods_and_sample_chunks_agree():
    m, x, y = _setup(n=5, **TWO_BLOCKS)
    H = hessian(m, (x, y))
    Hf = hessian(m, (x, y), method="functorch")
    assert rel(Hf, H) < 1e-12
    assert rel(hessian(m, (x, y), method="torch.func"), H) < 1e-12
    assert rel(hessian(m, (x, y), chunk=61, sample_chunk=3), H) < 1e-12
    # the last block's FFN pair comes in closed form; the first block's through Hessian-vector products
    g = {gr.name: gr for gr in cg.param_groups(m)}
    for r, c in [("block1.ffn2", "block1.ffn1"), ("block0.ffn1", "block1.ffn2"), ("block0.ffn2", "block0.ffn2")]:
        assert rel(hessian_block(m, (x, y), r, c), Hf[g[r].slice, g[c].slice]) < 1e-12, (r, c)
    with pytest.raises(KeyError):
        hessian_block(m, (x, y), "block9.value", "head")
    with pytest.raises(ValueError, match="method must be one of"):
        hessian(m, (x, y), method="finite-differences")
    with pytest.raises(ValueError, match="needs a curvature_gap ViT"):
        hessian(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)), (x.float(), y), method="vit")


@pytest.mark.parametrize("overrides", [SMALL_MODEL, TWO_BLOCKS], ids=["1block", "2blocks"])
def test_shared_passes_equal_their_own_passes_float64(overrides, monkeypatch):
    """The query and key columns from one pass over the scores' bilinear form, and the embedding's columns mixed
    from the positions' pass per sample, equal those columns by their own passes; the plan has neither pass."""
    from curvature_gap.hessian._vit import ViTSecondOrder, bilinear_blocks, closed_form_groups, dense, dense_plan

    m, x, y = _setup(n=5, **overrides)
    so = ViTSecondOrder(m, x, y)
    own = dense(so, None, None, bilinear=False, embed_mixed=False)
    shared = dense(so, None, None)
    assert rel(shared, own) < 1e-13 and torch.equal(shared, shared.T)
    # tangent chunks across two tokens and uneven sample chunks mix the same columns
    assert rel(dense(so, 24, 2), own) < 1e-13
    passes = [col for col, _ in dense_plan(so, closed_form_groups(so), bilinear_blocks(so), True)]
    assert "embed" not in passes and not any(p.endswith((".query", ".key")) for p in passes)
    assert [p for p in passes if p.endswith(".scores")] == [f"block{i}.scores" for i in range(m.cfg.n_blocks)]
    # the first-order term of the (query, key) block is what makes it exact: without it the block is wrong
    g = {gr.name: gr for gr in cg.param_groups(m)}
    grad = so.scores_grad
    monkeypatch.setattr(so, "scores_grad", lambda i: torch.zeros_like(grad(i)))
    wrong = dense(so, None, None)
    q, k = g["block0.query"].slice, g["block0.key"].slice
    assert rel(wrong[q, k], own[q, k]) > 1e-3
