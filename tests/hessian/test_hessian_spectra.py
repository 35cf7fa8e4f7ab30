"""curvature_gap.hessian.spectra: block spectra by Lanczos against eigvalsh of the dense exact Hessian."""
from __future__ import annotations

import pytest
import torch

import curvature_gap as cg
from cases import TINY_MODEL, perturbed_model
from curvature_gap.hessian import hessian
from curvature_gap.hessian.hvp import HessianOperator
from curvature_gap.hessian.spectra import top_eigenvalues

pytestmark = pytest.mark.usefixtures("one_thread")


def _setup():
    m = perturbed_model(0, torch.float64, **TINY_MODEL)
    g = torch.Generator().manual_seed(1)
    return m, torch.randn(6, 1, 28, 28, generator=g, dtype=torch.float64), torch.randint(0, 10, (6,), generator=g)


def test_block_spectra_match_eigvalsh():
    m, x, y = _setup()
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
    assert [r["block"] for r in sp.table()][-1] == "overall" and len(sp.table()) == len(sp.blocks) + 1
    # the generic (torch.func) engine gives the same numbers
    sp2 = top_eigenvalues(m, (x, y), groups=["block0.ln1"], iters=8, overall=False, method="functorch")
    assert abs(sp2.blocks["block0.ln1"].lambda_max - sp.blocks["block0.ln1"].lambda_max) < 1e-10
    assert sp2.overall is None
    with pytest.raises(KeyError, match="unknown parameter group"):
        top_eigenvalues(m, (x, y), groups=["block0.nothing"])


def test_operator_on_groups_is_the_hessian_block_times_vectors_with_micro_batches():
    m, x, y = _setup()
    H = hessian(m, (x, y))
    g = {gr.name: gr for gr in cg.param_groups(m)}
    op = HessianOperator(m, (x, y), micro_batch=4, groups=["block0.value", "head"])
    hvp, n = op.matmat, op.shape[0]
    idx = torch.cat([torch.arange(g["block0.value"].start, g["block0.value"].stop),
                     torch.arange(g["head"].start, g["head"].stop)])
    assert n == len(idx)
    V = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = (H[idx][:, idx] @ V.T).T
    assert float((hvp(V) - ref).abs().max()) < 1e-12 * float(ref.abs().max())
