"""curvature_gap.hessian on model variants: the hand-written route refuses what it was not written for (naming
the variant), ``method="auto"`` never sends such a model there, and the general routes agree with
reverse-over-reverse autograd in float64 on variants the fast route does not support."""
from __future__ import annotations

import pytest
import torch

import curvature_gap as cg
from cases import perturbed_model, rel, reverse_over_reverse as _reverse_over_reverse
from curvature_gap.hessian import SUPPORTS, resolve_method, hessian, hessian_block, unsupported
from curvature_gap.hessian.spectra import top_eigenvalues

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)
UNSUPPORTED = {
    "pre-norm": (dict(norm="pre"), "norm='pre'"),
    "two heads": (dict(n_heads=2), "n_heads=2"),
    "no patch bias": (dict(patch_bias=False), "patch_bias=False"),
    "no head bias": (dict(head_bias=False), "head_bias=False"),
}


def _batch(n=3, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


def test_every_route_declares_its_variants():
    assert set(SUPPORTS) == {"vit", "functorch", "curvlinops", "torch.func"}
    fields = set(cg.config.VARIANT_FIELDS)
    assert all(set(s) <= fields for s in SUPPORTS.values())
    assert SUPPORTS["vit"]["norm"] == ("post",) and SUPPORTS["functorch"] == {}


@pytest.mark.parametrize("overrides, named", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_vit_route_refuses_a_variant_it_does_not_support(overrides, named):
    m = cg.build_model("mnist", seed=0, **TINY, **overrides)
    data = _batch(2, dtype=torch.float32)
    with pytest.raises(ValueError, match=rf"method='vit' supports norm='post', n_heads=1, .*this model \(mnist\) has {named}"):
        hessian(m, data, method="vit")
    with pytest.raises(ValueError, match=named):
        hessian_block(m, data, "block0.ffn1", "block0.ffn1", method="vit")
    with pytest.raises(ValueError, match=named):
        cg.hessian.ViTSecondOrder(m, *data)
    assert resolve_method(m, "cross_entropy", "auto") == "functorch", "auto must not use the post-norm route"
    assert unsupported(m, "vit") and not unsupported(m, "functorch")


def test_the_authors_model_takes_the_fast_route_and_a_pre_norm_one_does_not():
    m = cg.build_model("authors_mnist", d_model=4, d_k=4, d_ff=8, patch_size=7)
    assert not unsupported(m, "vit") and resolve_method(m, "cross_entropy", "auto") == "vit"
    pre = cg.build_model("authors_mnist", d_model=4, d_k=4, d_ff=8, patch_size=7, norm="pre")
    with pytest.raises(ValueError, match="this model \\(authors_mnist\\) has norm='pre'"):
        hessian(pre, _batch(2, dtype=torch.float32), method="vit")
    assert resolve_method(pre, "cross_entropy", "auto") == "functorch"
    assert resolve_method(cg.build_model("mnist", **TINY), "cross_entropy", "auto") == "vit"
    assert resolve_method(cg.build_model("mnist", ffn_bias=False, ln_eps=0.0, **TINY), "cross_entropy", "auto") == "vit"


GENERAL = {
    "authors block (GELU, W_O, Q/K/V biases, sinusoidal, no FFN biases)":
        dict(activation="gelu", qkv_bias=True, out_proj=True, out_proj_bias=True, ffn_bias=False,
             pos_encoding="sinusoidal", ln_eps=1e-5),
    "pre-norm, two heads, GELU, no patch/head bias":
        dict(norm="pre", n_heads=2, activation="gelu", patch_bias=False, head_bias=False),
}


@pytest.mark.slow
@pytest.mark.parametrize("overrides", list(GENERAL.values()), ids=["authors", "prenorm-2heads"])
def test_general_routes_agree_with_reverse_over_reverse_float64(overrides):
    m = perturbed_model(3, torch.float64, **TINY, **overrides)
    x, y = _batch(3)
    ref = _reverse_over_reverse(m, x, y)
    P = sum(p.numel() for p in m.parameters())
    assert ref.shape == (P, P) and rel(ref, ref.T) < 1e-13
    H = hessian(m, (x, y))                               # auto: functorch here
    assert rel(H, ref) <= 1e-10
    assert rel(hessian(m, (x, y), method="curvlinops"), ref) <= 1e-10
    assert rel(hessian(m, (x, y), method="torch.func"), ref) <= 1e-10
    groups = cg.hessian.group_slices(m)
    blk = hessian_block(m, (x, y), "block0.value", "block0.query")
    assert rel(blk, ref[groups["block0.value"], groups["block0.query"]]) <= 1e-10


def test_spectra_route_a_variant_to_the_general_products():
    m = perturbed_model(4, torch.float64, **TINY, **GENERAL["authors block (GELU, W_O, Q/K/V biases, sinusoidal, no FFN biases)"])
    x, y = _batch(3)
    ref = _reverse_over_reverse(m, x, y)
    sl = cg.hessian.group_slices(m)["block0.out"]
    spec = top_eigenvalues(m, (x, y), groups=["block0.out"], iters=20, overall=False)
    top = torch.linalg.eigvalsh(ref[sl, sl])[-1].item()
    assert abs(spec.blocks["block0.out"].lambda_max - top) <= 1e-8 * max(1.0, abs(top))
