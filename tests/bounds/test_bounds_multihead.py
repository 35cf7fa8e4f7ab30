"""curvature_gap.bounds.formulas.theorem1_multihead and curvature_gap.bounds.multihead: the repaired Theorem 1
extended to h heads with W_O, its exact quantity, its softmax lemma and its search."""
from __future__ import annotations

import math

import pytest
import torch

from curvature_gap.bounds import formulas as fm
from curvature_gap.bounds import multihead as mhb


@pytest.mark.parametrize("h", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_the_exact_quantity_is_the_hessian_of_pytorch_s_own_module(h, causal, one_thread):
    inst = mhb.instance(5, 4, h, 3)
    inst.W_Q, inst.W_K = 8 * inst.W_Q, 8 * inst.W_K  # near-one-hot attention
    mask = torch.triu(torch.full((5, 5), float("-inf"), dtype=torch.float64), 1) if causal else None
    H = mhb.exact(*inst.tensors(), h, mask)["H"]
    H_ref = mhb.pytorch_hessian(inst, causal)
    assert float((H - H_ref).abs().max() / H_ref.abs().max()) < 1e-12
    # the layer itself: nn.MultiheadAttention's output equals the hand-written forward
    from torch import nn
    mha = nn.MultiheadAttention(4, h, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([inst.W_Q.T, inst.W_K.T, inst.W_V.T]))
        mha.out_proj.weight.copy_(inst.W_O.T)
        out = mha(inst.X[None], inst.X[None], inst.X[None], need_weights=False, attn_mask=mask)[0][0]
    assert torch.allclose(out, mhb.forward(*inst.tensors()[:5], h, mask), atol=1e-13)


def test_the_index_map_to_pytorch_s_parameters():
    d = 3
    idx = mhb.to_pytorch_index(d)
    W = torch.arange(4 * d * d, dtype=torch.float64)   # entries numbered in PyTorch's (in_proj, out_proj) order
    in_proj, out = W[:3 * d * d].reshape(3 * d, d), W[3 * d * d:].reshape(d, d)
    theory = torch.cat([in_proj[:d].T.reshape(-1), in_proj[d:2 * d].T.reshape(-1), in_proj[2 * d:].T.reshape(-1),
                        out.T.reshape(-1)])
    assert torch.equal(W[idx], theory)


@pytest.mark.parametrize("qk", [0.25, 1.0, 8.0])
def test_the_bound_holds_at_draws_and_each_row_bounds_its_block(qk, one_thread):
    for h in (1, 2, 4):
        inst = mhb.instance(4, 4, h, 0)
        inst.W_Q, inst.W_K = qk * inst.W_Q, qk * inst.W_K
        recs = mhb.evaluate(inst)
        assert {r["sub"] for r in recs if r["check"] == "mh.blocks"} == set(fm.MH_PAIRS)
        assert all(r["ratio"] >= 1 for r in recs), [(r["check"], r["sub"], r["ratio"]) for r in recs if r["ratio"] < 1]


def test_a_deliberately_wrong_quantity_makes_the_bound_fail(one_thread):
    """The check can fail: at the tightest instance the search finds at L = 4, h = 2 (a ratio below 4), feeding the
    bound ‖X‖_2/2 and ‖Target‖_2/2 (every row then falls at least 4-fold) puts it below the exact Hessian norm; the
    right norms keep it above."""
    from curvature_gap.bounds import search
    (cell,) = [c for c in search.search_all([search.MH_OBJECTIVES[0]], search.Budget(screen=8, keep=2, steps=60,
                                            lengths=(4,)), workers=1)["mh"] if c.h == 2]
    best = min(cell.records, key=lambda r: r["ratio"])
    inst = mhb.MHInstance(*(best["point"][f] for f in ("X", "W_Q", "W_K", "W_V", "W_O", "Target")), 2)
    q = mhb.exact(*inst.tensors(), 2)
    n = {k: float(q[f"norm_{k}"]) for k in ("X", "Q", "K", "V", "O", "T")}
    H = float(q["norm_H"])
    ratio = min(r["ratio"] for r in mhb.evaluate(inst) if r["check"] == "mh")
    right = fm.theorem1_multihead(n["X"], n["Q"], n["K"], n["V"], n["O"], n["T"], 4, 4, 2)["M"]
    assert right >= H and abs(right / H - ratio) < 1e-9 * ratio
    assert ratio < 4
    wrong = fm.theorem1_multihead(n["X"] / 2, n["Q"], n["K"], n["V"], n["O"], n["T"] / 2, 4, 4, 2)["M"]
    assert wrong < H
    with pytest.raises(ValueError, match="divisible"):
        mhb.instance(4, 6, 4, 0)


def test_the_formula_s_rows_and_their_scaling():
    b = fm.theorem1_multihead(2.0, 1.0, 1.0, 1.0, 1.0, 0.0, 4, 8, 2)
    assert set(fm.MH_PAIRS) <= set(b) and b["M"] == 4 * max(b[ij] for ij in fm.MH_PAIRS)
    assert math.isclose(b["VV"], 2 / 32 * 4 * 4)                 # 2/(Ld) · L n_X² n_O²
    assert math.isclose(b["OO"], 2 / 32 * 2 * 4 * 4)             # 2/(Ld) · h L n_X² n_V²
    assert math.isclose(b["rho"], 2 * math.sqrt(8) * 2)          # √min(L,d) · √(hL) n_X n_V n_O
    # W_V → a W_V, W_O → W_O / a leaves F unchanged: the V rows scale like 1/a², the O row like a²
    c = fm.theorem1_multihead(2.0, 1.0, 1.0, 3.0, 1 / 3, 0.0, 4, 8, 2)
    assert math.isclose(c["VV"], b["VV"] / 9) and math.isclose(c["OO"], b["OO"] * 9)


def test_at_one_head_with_w_o_fixed_the_qkv_rows_are_at_most_the_repaired_single_head_rows():
    for nX, nQ, nK, nV, nT, L, d in ((1.0, 1.0, 1.0, 1.0, 1.0, 4, 4), (3.0, 0.2, 5.0, 2.0, 0.5, 8, 4),
                                     (0.5, 2.0, 2.0, 0.3, 4.0, 3, 6)):
        mh = fm.theorem1_multihead(nX, nQ, nK, nV, 1.0, nT, L, d, 1)
        rep = fm.theorem1(nX, nQ, nK, nV, nT, L, d, d, variant="repaired")
        for ij in ("VV", "QQ", "KK", "QK"):
            assert mh[ij] <= rep[ij]
        assert mh["QV"] <= rep["VQ"] and mh["KV"] <= rep["VK"]


def test_the_softmax_second_derivative_lemma_and_its_formula(one_thread):
    g = torch.Generator().manual_seed(0)
    z, t, s = (torch.randn(64, 7, generator=g, dtype=torch.float64) * c for c in (4.0, 1.0, 1.0))
    # the closed form is the second derivative of softmax (autograd)
    from torch.func import hessian
    for i in range(3):
        Hs = hessian(lambda v: torch.softmax(v, -1))(z[i])           # (out, in, in)
        want = torch.einsum("aij,i,j->a", Hs, t[i], s[i])
        assert torch.allclose(mhb.softmax_d2(z[i], t[i], s[i]), want, atol=1e-13)
    assert float(mhb.softmax_d2_ratio(z, t, s).min()) >= 1
