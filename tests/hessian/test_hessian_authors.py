"""curvature_gap.hessian's hand-written route (``method="vit"``) on the authors' ViT (``authors_mnist``: Q/K/V
biases, W_O with bias, exact-erf GELU, FFN without biases, sinusoidal positions): equal to reverse-over-reverse
autograd (float64, small sizes), to curvlinops (the real model, batch 32, float64 and float32) and to central
differences of the gradient; the theorem's variant computes the model's values bit for bit."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import curvature_gap as cg
from cases import TWO_BLOCKS, perturbed_model, rel, reverse_over_reverse as _reverse_over_reverse
from curvature_gap.hessian import _generic, resolve_method, hessian, hessian_block
from curvature_gap.hessian._vit import ViTSecondOrder, closed_form_groups, dense

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(d_model=4, d_k=4, d_ff=8, patch_size=7)  # 16 tokens; ~400 parameters with the authors' block
VARIANTS = {
    "authors": {},
    "authors, 2 blocks": dict(n_blocks=2),  # GELU through Hessian-vector products in block 0
    "authors, FFN biases, no b_O": dict(ffn_bias=True, out_proj_bias=False),
    "authors, no W_O, no positions": dict(out_proj=False, out_proj_bias=False, pos_encoding="none"),
    "authors block with ReLU": dict(activation="relu"),  # Q/K/V biases and W_O with the theorem's activation
}


def _authors(seed: int, dtype=torch.float64, **overrides) -> nn.Module:
    """The authors' model (torch init: random biases) with LayerNorm affines moved off γ = 1, β = 0."""
    m = cg.build_model("authors_mnist", seed=seed, **overrides).to(dtype)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if ".ln" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return m


def _batch(n: int, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 1, 28, 28, generator=g, dtype=dtype) * 2 - 1), torch.randint(0, 10, (n,), generator=g)


def test_the_authors_models_take_the_fast_route():
    for name in ("authors_mnist", "authors_cifar100"):
        m = cg.build_model(name, n_blocks=1, d_model=8, d_k=8, d_ff=8) if name == "authors_cifar100" else \
            cg.build_model(name)
        assert not cg.hessian.unsupported(m, "vit"), name
        assert resolve_method(m, "cross_entropy", "auto") == "vit", name
    m = cg.build_model("authors_mnist")
    assert sum(p.numel() for p in m.parameters()) == 3642
    assert "pos" in dict(m.named_buffers()) and "pos" not in dict(m.named_parameters())  # sinusoidal: no tangent
    assert [g.name for g in cg.param_groups(m)] == ["embed", "block0.query", "block0.key", "block0.value", "block0.out",
                                                    "block0.ln1", "block0.ffn1", "block0.ffn2", "block0.ln2", "head"]


@pytest.mark.slow
@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_dense_and_every_block_pair_equal_reverse_over_reverse_float64(overrides):
    m = _authors(3, **SMALL, **overrides)
    x, y = _batch(3, seed=4)
    ref = _reverse_over_reverse(m, x, y)
    assert rel(ref, ref.T) < 1e-13
    H = hessian(m, (x, y), method="vit")
    assert H.shape == ref.shape and H.dtype == torch.float64
    assert rel(H, ref) <= 1e-10
    assert rel(hessian(m, (x, y), method="vit", chunk=5, sample_chunk=2), ref) <= 1e-10
    groups = {g.name: g for g in cg.param_groups(m)}
    assert ("block0.out" in groups) == m.cfg.out_proj
    pairs = [(r, c) for r in groups for c in groups]  # every pair: both orientations and the diagonal
    blocks = hessian(m, (x, y), blocks=pairs, method="vit")
    scale = ref.abs().max()
    for r, c in pairs:
        err = (blocks[(r, c)] - ref[groups[r].slice, groups[c].slice]).abs().max() / scale
        assert err <= 1e-10, (r, c, err.item())
    late = "block0.out" if m.cfg.out_proj else "block0.value"
    assert rel(hessian_block(m, (x, y), late, "block0.query", method="vit"),
               ref[groups[late].slice, groups["block0.query"].slice]) <= 1e-10
    # one product H v with a tangent on every group at once (what the spectra's overall Lanczos uses)
    so = ViTSecondOrder(m, x, y)
    v = torch.randn(2, ref.shape[0], generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    tan = {}
    for gr in so.groups:
        tan.update(so.group_tangent(gr.name, v[:, gr.slice]))
    res = so.columns(tan, list(groups))
    assert rel(torch.cat([res[n] for n in groups], 1), v @ ref) <= 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, dict(ffn_bias=True)], ids=["no FFN biases", "FFN biases"])
def test_gelu_last_ffn_closed_form_equals_its_hessian_vector_columns(overrides):
    """The closed form's GELU curvature term against the route's own GELU rule, and both against autograd."""
    m = _authors(5, **SMALL, **overrides)
    x, y = _batch(4, seed=6)
    so = ViTSecondOrder(m, x, y)
    assert closed_form_groups(so) == ["block0.ffn1", "block0.ffn2"]
    ref = _reverse_over_reverse(m, x, y)
    g = {gr.name: gr for gr in so.groups}
    s = slice(g["block0.ffn1"].start, g["block0.ffn2"].stop)
    cf = so.last_ffn_hessian()
    hv = dense(so, None, None, closed_form=False)
    assert rel(cf, ref[s, s]) <= 1e-10 and rel(hv, ref) <= 1e-10
    # the curvature term is not negligible: dropping GELU'' would be caught
    assert (ref[g["block0.ffn1"].slice, g["block0.ffn1"].slice]).abs().max() > 0
    act = so.ctx("blocks.0.act")
    act["a2"] = torch.zeros_like(act["a2"])
    assert rel(so.last_ffn_hessian(), ref[s, s]) > 1e-4


@pytest.mark.slow
def test_the_theorem_variant_keeps_its_path_and_its_hessian():
    """The theorem's block (the program composed from the config) computes model.block_forward's values bit for
    bit, keeps the closed form where it had it (ReLU with FFN biases) and not where it had none, and agrees with the
    generic route to 1e-12 in float64."""
    m = perturbed_model(0, torch.float64, **TWO_BLOCKS)
    x, y = _batch(4, seed=1)
    so = ViTSecondOrder(m, x, y)
    assert so.ctx("blocks.0.act")["a2"] is None and "blocks.0.out" not in so.program.groups.get("block0.value", ())
    for i, blk in enumerate(m.blocks):
        V = lambda n: so.values[f"b{i}.{n}"]  # noqa: E731
        x_in = so.values["x0"] if i == 0 else so.values[f"b{i - 1}.out"]
        bp = blk.parts(x_in)
        ln1, ln2 = so.ctx(f"blocks.{i}.ln1"), so.ctx(f"blocks.{i}.ln2")
        ours = dict(q=V("q"), k=V("k"), A=so.ctx(f"blocks.{i}.attention")["A"], ax=V("ax"), n1=ln1["n"], rstd1=ln1["r"],
                    y=V("y"), mask=so.ctx(f"blocks.{i}.act")["a1"], r=V("r"), n2=ln2["n"], rstd2=ln2["r"], out=V("out"))
        for f, t in ours.items():
            assert torch.equal(t, getattr(bp, f)), (i, f)
    assert closed_form_groups(so) == ["block1.ffn1", "block1.ffn2"]
    assert rel(hessian(m, (x, y), method="vit"), hessian(m, (x, y), method="functorch")) <= 1e-12
    m2 = perturbed_model(0, torch.float64, ffn_bias=False, **TWO_BLOCKS)
    so2 = ViTSecondOrder(m2, x, y)
    assert closed_form_groups(so2) == []
    H2 = hessian(m2, (x, y), method="vit")
    assert rel(H2, hessian(m2, (x, y), method="functorch")) <= 1e-12
    g = {gr.name: gr for gr in so2.groups}
    s = slice(g["block1.ffn1"].start, g["block1.ffn2"].stop)
    assert rel(so2.last_ffn_hessian(), H2[s, s]) <= 1e-12  # valid there too, just not used


@pytest.mark.slow
def test_the_authors_mnist_model_equals_curvlinops_on_sampled_columns():
    m = cg.build_model("authors_mnist", seed=0)
    # batch 8: the columns' equality does not depend on the batch size (sample chunks: the test above)
    x, y = _batch(8, seed=7, dtype=torch.float32)
    groups = cg.param_groups(m)
    P = groups[-1].stop
    g = torch.Generator().manual_seed(8)
    cols = torch.cat([gr.start + torch.randperm(gr.size, generator=g)[:max(8, 256 * gr.size // P + 1)]
                      for gr in groups])
    assert len(cols) >= 256 and len(set(cols.tolist())) == len(cols)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        H = hessian(m, (x, y), method="vit", dtype=dtype)
        assert H.shape == (P, P) and H.dtype == dtype
        ref = _generic.curvlinops_columns(m, x, y, cols, dtype=dtype)
        err = rel(H[:, cols], ref)
        assert err <= tol, (dtype, err)
        for gr in groups:  # every group's columns are nonzero and right
            inside = (cols >= gr.start) & (cols < gr.stop)
            assert ref[:, inside].abs().max() > 0, gr.name
            assert (H[:, cols[inside]] - ref[:, inside]).abs().max() <= tol * ref.abs().max(), (dtype, gr.name)


@pytest.mark.slow
def test_columns_equal_central_differences_of_the_gradient():
    m = _authors(9, dtype=torch.float64)
    x, y = _batch(6, seed=10)
    groups = cg.param_groups(m)
    cols = [gr.start + (7 * k + 3) % gr.size for k, gr in enumerate(groups)]  # one column in every group
    H = hessian(m, (x, y), method="vit")
    params = list(m.parameters())
    w0 = parameters_to_vector(params).detach().clone()

    def grad_at(w):
        vector_to_parameters(w, params)
        g = torch.autograd.grad(nn.functional.cross_entropy(m(x), y), params)
        return torch.cat([t.reshape(-1) for t in g])

    h = 1e-4
    try:
        fd = torch.stack([(grad_at(w0 + h * e) - grad_at(w0 - h * e)) / (2 * h)
                          for e in torch.eye(w0.numel(), dtype=torch.float64)[cols]], 1)
    finally:
        vector_to_parameters(w0, params)
    assert rel(H[:, cols], fd) < 1e-6
    assert all(fd[:, k].abs().max() > 0 for k in range(len(cols)))


def test_a_fused_layernorm_is_refused_by_name():
    """The one model the route refuses: fused LayerNorm (its Hessian is PyTorch's kernel's, which forward-over-reverse
    gets wrong); ``auto`` sends it to the generic route."""
    m = cg.build_model("authors_mnist", fused_ln=True, **SMALL)
    data = _batch(2, seed=0, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"this model \(authors_mnist\) has fused_ln=True .* Fix: build the model with "
                                         r"fused_ln=False"):
        hessian(m, data, method="vit")
    with pytest.raises(ValueError, match="fused_ln=True"):
        ViTSecondOrder(m, *data)
    assert resolve_method(m, "cross_entropy", "auto") == "functorch"
