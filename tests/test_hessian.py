"""Exact Hessians (curvature_gap.hessian) against curvlinops, block spectra against eigvalsh, and
running-mean losses against a direct computation. Numbers only, no timings."""
import copy

import pytest
import torch
from curvlinops import HessianLinearOperator
from torch import nn

import curvature_gap as cg
from curvature_gap.data import TensorDataset
from curvature_gap.hessian import hessian, hessian_block
from curvature_gap.hessian.losses import running_mean_losses
from curvature_gap.hessian.spectra import top_eigenvalues

SMALL = dict(d_model=8, d_k=8, d_ff=16, patch_size=7)  # the paper's architecture, narrower: 16 tokens, 0.9k parameters
TINY2 = dict(d_model=4, d_k=4, d_ff=8, n_blocks=2, patch_size=7)  # two blocks, 0.6k parameters


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: these tiny passes only lose from thread synchronisation."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _setup(seed=0, n=4, dtype=torch.float64, **overrides):
    """A model whose biases and LayerNorm affines are non-trivial, and a batch of n images."""
    torch.manual_seed(seed)
    m = cg.build_model("mnist", seed=seed, **overrides).to(dtype)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "bias" in name or "ln" in name:
                p.add_(0.2 * torch.randn_like(p))
    x = torch.randn(n, 1, 28, 28, dtype=dtype)
    y = torch.randint(0, 10, (n,))
    return m, x, y


def _curvlinops_columns(m, x, y, cols):
    params = list(m.parameters())
    op = HessianLinearOperator(m, nn.CrossEntropyLoss(), params, [(x, y)])
    P = op.shape[0]
    E = torch.zeros(P, len(cols), dtype=x.dtype)
    E[torch.as_tensor(cols), torch.arange(len(cols))] = 1
    return op @ E


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("overrides", [SMALL, TINY2], ids=["1block", "2blocks"])
def test_dense_equals_curvlinops_float64(overrides):
    m, x, y = _setup(**overrides)
    H = hessian(m, (x, y))
    P = sum(p.numel() for p in m.parameters())
    assert H.shape == (P, P) and H.dtype == torch.float64
    ref = _curvlinops_columns(m, x, y, list(range(P)))
    assert _rel(H, ref) < 1e-12
    assert torch.equal(H, H.T)


def test_paper_model_block_pairs_equal_curvlinops_float64():
    m, x, y = _setup(n=4)
    groups = {g.name: g for g in cg.param_groups(m)}
    assert sum(g.size for g in groups.values()) == 4186
    pairs = [("block0.value", "block0.query"), ("block0.query", "block0.ln2"), ("block0.ln1", "block0.ln1")]
    cols = sorted({c for _, g in pairs for c in range(groups[g].start, groups[g].stop)})
    ref = _curvlinops_columns(m, x, y, cols)
    where = {c: i for i, c in enumerate(cols)}
    # a forward-ordered pair, a reversed pair (computed transposed) and a diagonal block
    for row, col in pairs:
        blk = hessian_block(m, (x, y), row, col)
        r = ref[groups[row].slice][:, [where[c] for c in range(groups[col].start, groups[col].stop)]]
        assert blk.shape == (groups[row].size, groups[col].size)
        assert _rel(blk, r) < 1e-12, (row, col)
    many = hessian(m, TensorDataset(x, y), blocks=[("head", "block0.ln2"), ("block0.ln2", "head")])
    assert torch.allclose(many[("head", "block0.ln2")], many[("block0.ln2", "head")].T, rtol=0, atol=1e-16)


def test_float32_within_1e5_of_float64_reference():
    m, x, y = _setup(**SMALL)
    H64 = hessian(m, (x, y))
    m32 = copy.deepcopy(m).float()
    H32 = hessian(m32, (x.float(), y))
    assert H32.dtype == torch.float32
    assert _rel(H32.double(), H64) < 1e-5
    # dtype= computes in float64 from a float32 model
    assert _rel(hessian(m32, (x.float(), y), dtype=torch.float64), hessian(copy.deepcopy(m32).double(), (x.float().double(), y))) < 1e-12


def test_generic_method_and_sample_chunks_agree():
    m, x, y = _setup(n=5, **TINY2)
    H = hessian(m, (x, y))
    Hf = hessian(m, (x, y), method="functorch")
    assert _rel(Hf, H) < 1e-12
    assert _rel(hessian(m, (x, y), chunk=61, sample_chunk=3), H) < 1e-12
    # the last block's FFN pair comes in closed form; the first block's through Hessian-vector products
    g = {gr.name: gr for gr in cg.param_groups(m)}
    for r, c in [("block1.ffn2", "block1.ffn1"), ("block0.ffn1", "block1.ffn2"), ("block0.ffn2", "block0.ffn2")]:
        assert _rel(hessian_block(m, (x, y), r, c), Hf[g[r].slice, g[c].slice]) < 1e-12, (r, c)
    with pytest.raises(KeyError):
        hessian_block(m, (x, y), "block9.value", "head")


def test_block_spectra_match_eigvalsh():
    m, x, y = _setup(n=6, d_model=4, d_k=4, d_ff=8, patch_size=7)
    H = hessian(m, (x, y))
    sp = top_eigenvalues(m, (x, y), iters=40)
    for g in cg.param_groups(m):
        ev = torch.linalg.eigvalsh(H[g.slice, g.slice])
        b = sp.blocks[g.name]
        scale = ev.abs().max().item()
        assert abs(b.lambda_max - ev[-1].item()) < 1e-8 * scale, g.name
        assert abs(b.lambda_min - ev[0].item()) < 1e-8 * scale, g.name
        assert abs(b.spectral_norm - scale) < 1e-8 * scale
    ev = torch.linalg.eigvalsh(H)
    assert abs(sp.overall.lambda_max - ev[-1].item()) < 1e-8 * ev.abs().max().item()
    # the generic (torch.func) engine gives the same numbers
    sp2 = top_eigenvalues(m, (x, y), groups=["block0.ln1"], iters=8, overall=False, method="functorch")
    assert abs(sp2.blocks["block0.ln1"].lambda_max - sp.blocks["block0.ln1"].lambda_max) < 1e-10


def test_running_mean_losses_against_direct_computation():
    torch.manual_seed(0)
    m = cg.build_model("mnist", seed=1, d_model=8, d_k=8, d_ff=16)
    ds = TensorDataset(torch.randn(50, 1, 28, 28), torch.randint(0, 10, (50,)))
    r = running_mean_losses(m, ds, batch_size=8, device="cpu", permutation=3, eval_batch_size=7)
    with torch.no_grad():
        direct = nn.functional.cross_entropy(m(ds.images), ds.labels, reduction="none").double()
    assert torch.equal(r.order.sort().values, torch.arange(50))
    assert torch.allclose(r.losses, direct[r.order], rtol=1e-6)
    for k in (1, 2, 17, 50):
        assert abs(r.mean_by_sample[k - 1].item() - direct[r.order[:k]].mean().item()) < 1e-6
    assert r.seen_by_batch.tolist() == [8, 16, 24, 32, 40, 48, 50]
    for j, k in enumerate(r.seen_by_batch.tolist()):
        assert abs(r.mean_by_batch[j].item() - direct[r.order[:k]].mean().item()) < 1e-6
    assert torch.allclose(r.diff_by_sample, (r.mean_by_sample[1:] - r.mean_by_sample[:-1]).abs())
    assert len(r.diff_by_batch) == 6
    same = running_mean_losses(m, (ds.images, ds.labels), 8, permutation=None)
    assert torch.equal(same.order, torch.arange(50))
    with pytest.raises(ValueError):
        running_mean_losses(m, ds, 8, permutation=torch.zeros(50, dtype=torch.long))
