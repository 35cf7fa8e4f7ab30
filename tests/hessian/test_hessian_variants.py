"""curvature_gap.hessian on model variants: the program route (``method="vit"``) takes every variant a ModelConfig
names (pre-norm, several heads, biases on or off, every positional encoding) and agrees with reverse-over-reverse
autograd in float64, block by block, through its shortcuts (the last FFN in closed form, the scores' bilinear form,
the embedding from the positions); it refuses only a fused LayerNorm, naming it; and the general routes agree with
the same reference."""
from __future__ import annotations

import pytest
import torch

import curvature_gap as cg
from cases import perturbed_model, rel, reverse_over_reverse as _reverse_over_reverse
from curvature_gap.hessian import SUPPORTS, resolve_method, hessian, hessian_block, unsupported
from curvature_gap.hessian._vit import ViTSecondOrder, bilinear_blocks, closed_form_groups, dense
from curvature_gap.hessian.spectra import top_eigenvalues

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)
# variants the route refused before it was a program of the op rules
VARIANTS = {
    "pre-norm": dict(norm="pre"),
    "two heads": dict(n_heads=2),
    "pre-norm, two heads, GELU, no patch/head bias": dict(norm="pre", n_heads=2, activation="gelu", patch_bias=False,
                                                           head_bias=False),
    "two heads, the authors' block (Q/K/V biases, W_O, sinusoidal)": dict(n_heads=2, activation="gelu", qkv_bias=True,
                                                                           out_proj=True, out_proj_bias=True,
                                                                           ffn_bias=False, pos_encoding="sinusoidal",
                                                                           ln_eps=1e-5),
    "pre-norm, Q/K/V biases, two blocks, no positions": dict(norm="pre", qkv_bias=True, n_blocks=2,
                                                             pos_encoding="none"),
    "no patch bias, no head bias": dict(patch_bias=False, head_bias=False),
}


def _batch(n=3, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g, dtype=dtype), torch.randint(0, 10, (n,), generator=g)


def test_every_route_declares_its_variants():
    assert set(SUPPORTS) == {"vit", "functorch", "curvlinops", "torch.func"}
    fields = set(cg.config.VARIANT_FIELDS)
    assert all(set(s) <= fields for s in SUPPORTS.values())
    assert SUPPORTS["vit"] == {} and SUPPORTS["functorch"] == {}


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_the_program_route_takes_the_variant_and_equals_reverse_over_reverse_float64(overrides):
    m = perturbed_model(3, torch.float64, **TINY, **overrides)
    x, y = _batch(3)
    assert not unsupported(m, "vit") and resolve_method(m, "cross_entropy", "auto") == "vit"
    ref = _reverse_over_reverse(m, x, y)
    assert rel(ref, ref.T) < 1e-13
    H = hessian(m, (x, y), method="vit")
    assert H.shape == ref.shape and rel(H, ref) <= 1e-10
    so = ViTSecondOrder(m, x, y)
    assert bilinear_blocks(so) == ([] if m.cfg.n_heads > 1 else list(range(m.cfg.n_blocks)))
    # without the shortcuts: every column by its own pass; and blocks in both orientations
    assert rel(dense(so, 5, 2, closed_form=False, bilinear=False, embed_mixed=False), ref) <= 1e-10
    groups = {g.name: g for g in cg.param_groups(m)}
    names = list(groups)
    pairs = [(names[-1], names[1]), (names[1], names[-1]), (names[3], names[3]), (names[-2], names[2])]
    cf = closed_form_groups(so)
    if cf:
        pairs.append((cf[1], cf[0]))
    blocks = hessian(m, (x, y), blocks=pairs, method="vit")
    for r, c in pairs:
        assert rel(blocks[(r, c)], ref[groups[r].slice, groups[c].slice]) <= 1e-10, (r, c)


def test_the_closed_form_last_ffn_holds_in_pre_norm_and_a_mutation_is_caught():
    """In pre-norm the LayerNorm after the last FFN is ``ln_f``: the closed form reads it there."""
    m = perturbed_model(5, torch.float64, **TINY, norm="pre", activation="gelu")
    x, y = _batch(4, seed=2)
    so = ViTSecondOrder(m, x, y)
    g = {gr.name: gr for gr in so.groups}
    s = slice(g["block0.ffn1"].start, g["block0.ffn2"].stop)
    ref = _reverse_over_reverse(m, x, y)
    assert closed_form_groups(so) == ["block0.ffn1", "block0.ffn2"] and rel(so.last_ffn_hessian(), ref[s, s]) <= 1e-10
    ln = so.ctx("ln_f")
    ln["s"] = ln["s"] * 0
    assert rel(so.last_ffn_hessian(), ref[s, s]) > 1e-6


def test_the_route_refuses_only_a_fused_layernorm():
    m = cg.build_model("mnist", seed=0, fused_ln=True, norm="pre", **TINY)
    data = _batch(2, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"method='vit' supports every ModelConfig variant .*this model \(mnist\) has "
                                         r"fused_ln=True"):
        hessian(m, data, method="vit")
    with pytest.raises(ValueError, match="fused_ln=True"):
        hessian_block(m, data, "block0.ffn1", "block0.ffn1", method="vit")
    assert resolve_method(m, "cross_entropy", "auto") == "functorch", "auto must not use the hand-written route"
    assert unsupported(m, "vit") and not unsupported(m, "functorch")
    with pytest.raises(ValueError, match="needs a curvature_gap ViT"):
        hessian(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)), data, method="vit")


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
    assert rel(hessian(m, (x, y), method="functorch"), ref) <= 1e-10
    assert rel(hessian(m, (x, y), method="curvlinops"), ref) <= 1e-10
    assert rel(hessian(m, (x, y), method="torch.func"), ref) <= 1e-10
    groups = cg.hessian.group_slices(m)
    blk = hessian_block(m, (x, y), "block0.value", "block0.query")
    assert rel(blk, ref[groups["block0.value"], groups["block0.query"]]) <= 1e-10


@pytest.mark.parametrize("method", ["vit", "functorch"])
def test_spectra_of_a_variant_by_either_products(method):
    m = perturbed_model(4, torch.float64, **TINY, **GENERAL["pre-norm, two heads, GELU, no patch/head bias"], out_proj=True)
    x, y = _batch(3)
    ref = _reverse_over_reverse(m, x, y)
    sl = cg.hessian.group_slices(m)["block0.out"]
    spec = top_eigenvalues(m, (x, y), groups=["block0.out"], iters=20, overall=False, method=method)
    top = torch.linalg.eigvalsh(ref[sl, sl])[-1].item()
    assert abs(spec.blocks["block0.out"].lambda_max - top) <= 1e-8 * max(1.0, abs(top))
