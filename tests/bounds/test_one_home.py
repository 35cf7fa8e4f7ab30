"""One home per quantity: each survivor of a removed duplicate equals the literal version it replaced.

The literal versions are written out here, as the modules had them; the survivors live in the module
named for the quantity (``exact.forward``, ``exact.derivatives``, ``exact.instances``, ``model``,
``bounds.quantities``, ``bounds.checks``). The adversarial search ranks by the rows' own terms
(``bounds.checks.TERMS``): its ratio equals the row's ratio at the same instance.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.func import jacrev, vmap

from cases import perturbed_model, random_batch, tiny_instance
from curvature_gap.bounds import adversarial as adv
from curvature_gap.bounds import checks as ck
from curvature_gap.bounds import quantities as ex
from curvature_gap.bounds.training import instances_of, light_bounds
from curvature_gap.exact import derivatives as ad
from curvature_gap.exact import forward as fw
from curvature_gap.exact.instances import from_block, from_model
from curvature_gap.model import build_model, param_slices

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sa_parts_is_the_literal_attention_layer():
    inst = tiny_instance(L=4, d=3, sharpness=4.0)
    X, WQ, WK, WV = inst.X, inst.W_Q, inst.W_K, inst.W_V
    p = fw.sa_parts(X, WQ, WK, WV)
    T = X @ WQ @ WK.T @ X.T / math.sqrt(WQ.shape[1])          # the inline form sa_exact had
    A = torch.softmax(T, dim=-1)
    assert torch.allclose(p["T"], T, rtol=1e-13, atol=1e-14)
    assert torch.allclose(p["A"], A, rtol=1e-13, atol=1e-15)
    assert torch.equal(p["F"], fw.sa_forward(X, WQ, WK, WV))  # one forward: bit for bit


def test_layernorm_rows_are_the_literal_helpers():
    U = torch.randn(5, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.2

    def ln_row(x):  # the helper quantities.py had
        m = x - x.mean()
        return m / m.pow(2).mean().sqrt()

    def inv_sigma_row(x):
        m = x - x.mean()
        return 1.0 / m.pow(2).mean().sqrt()

    assert torch.allclose(vmap(fw.layernorm)(U), vmap(ln_row)(U), rtol=1e-14, atol=1e-15)
    assert torch.allclose(fw.inv_std(U), vmap(inv_sigma_row)(U), rtol=1e-14, atol=0)
    assert torch.allclose(vmap(jacrev(fw.layernorm))(U), vmap(jacrev(ln_row))(U), rtol=1e-12, atol=1e-14)
    q = ex.layernorm_inputs(U)
    M = U - U.mean(1, keepdim=True)                            # light_bounds' literal Lemma 4 inputs
    assert q == {"norm": float(torch.linalg.matrix_norm(U, ord=2)), "row_norm_min": float(M.norm(dim=1).min()),
                 "m": 5, "n": 6}


def test_ffn_residual_and_offsets_are_the_literal_ones():
    inst = tiny_instance(L=3, d=2)
    Y = inst.X
    assert torch.equal(fw.ffn_residual(Y, inst.W_1, inst.W_2), torch.relu(Y @ inst.W_1) @ inst.W_2 + Y)
    H = torch.arange(49.0).reshape(7, 7)
    blocks = ad.split_blocks(H, ("a", "b", "c"), (2, 4, 1))
    off = [0, 2, 6, 7]                                         # the hand-kept offsets it replaced
    for i, p in enumerate("abc"):
        for j, q in enumerate("abc"):
            assert torch.equal(blocks[(p, q)], H[off[i]:off[i + 1], off[j]:off[j + 1]])
    m = build_model("authors_mnist", seed=0)
    sl, start = param_slices(m), 0
    for name, p in m.named_parameters():
        assert sl[name] == slice(start, start + p.numel())
        start += p.numel()
    assert start == sum(p.numel() for p in m.parameters())


def test_from_model_is_the_literal_loop():
    model = perturbed_model(seed=1, dtype=torch.float32)
    images, _ = random_batch(3, seed=2)
    got = from_model(model, images, target="zero")
    m = copy.deepcopy(model).double()
    with torch.no_grad():
        X = m.tokens(images.double())
    for i, inst in enumerate(got):
        ref = from_block(m.blocks[0], X[i], target="zero", seed=i)
        for f in ("X", "W_Q", "W_K", "W_V", "W_1", "W_2", "Target"):
            assert torch.equal(getattr(inst, f), getattr(ref, f)), f
    # the trained-bounds instances keep their per-sample target seeds
    per = instances_of(model, images, 2, "mnist")
    assert [i.meta["sample"] for i in per] == [0, 1] and per[0].meta["model"] == "mnist"
    assert all(math.isfinite(v) for v in light_bounds(per[0]).values())


@pytest.mark.parametrize("check", adv.SUPPORTED)
def test_the_search_ranks_by_the_rows_own_ratio(check):
    """The differentiable ratio the search descends equals the ratio of the row at the same instance."""
    inst = adv.start_instance(4, 3, 0)
    if check.startswith("lemma4"):
        got = float(adv._ln_ratio(check, inst.X))
    else:
        got = float(adv._sa_ratio(check, adv._sa_q(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target,
                                                   need=adv._need(check))))
    assert got == pytest.approx(adv.row_ratio(check, inst), rel=1e-9)


def test_every_searched_check_has_one_term_and_a_missing_one_is_named(monkeypatch):
    assert set(adv.SUPPORTED) <= set(ck.TERMS)
    with pytest.raises(KeyError, match="thm6.xikl has no ratio"):
        ck.term("thm6.xikl", {})
    q = ex.sa_exact(tiny_instance(L=3, d=2))
    b, e = ck.term("thm1.proof.VV", q)
    assert (b, e) == (ck.TERMS["thm1.proof.VV"](q)[0][1], q["H_VV"])
    monkeypatch.setitem(ck.TERMS, "two.entries", lambda q: [("a", 1.0, 1.0), ("b", 2.0, 1.0)])
    with pytest.raises(ValueError, match="single-entry"):
        ck.term("two.entries", q)
