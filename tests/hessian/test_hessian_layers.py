"""hessian.layers: curvature_gap.layer_hessian on the real modules of PyTorch, timm and Hugging Face.

Reference: reverse-over-reverse torch.autograd through each module's own forward under the MATH attention
backend (curvature_gap.exact.layers), float64, on batches of two sequences; the second-derivative pieces also
against central differences of the module's first derivatives. timm and transformers are the ``layers``
extra: their tests skip where it is not installed (CI installs it).
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from cases import slow_but
import curvature_gap
from curvature_gap.exact import encoder_layer as eref
from curvature_gap.exact import layers as R
from curvature_gap.hessian.layers import attention_mask, layer_hessian, layer_hvp
from curvature_gap.hessian.models import describe
from curvature_gap.hessian.ops.attention import Attention

TOL = 1e-10
FD_TOL = 1e-7

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("one_thread")]


def _need(kind: str):
    if R.LIBRARY[kind] is not None:
        pytest.importorskip(R.LIBRARY[kind])


def _rel(A, B) -> float:
    return float((A - B).abs().max() / B.abs().max())


# ---------------------------------------------------------------------------------------- the grid
# make test-fast: the first point of each class of the grid
@pytest.mark.parametrize("kind,cfg,L", slow_but(R.GRID, lambda i, g: g[0] not in {h[0] for h in R.GRID[:i]},
                                                 ids=[R.grid_id(*g) for g in R.GRID]))
def test_grid_matches_reverse_over_reverse_autograd_of_the_module(kind, cfg, L):
    _need(kind)
    r = R.check(kind, cfg, L, layer_hessian)
    assert r["rel_err"] <= TOL, r


def test_grid_covers_each_class_and_feature():
    kinds = {k for k, _, _ in R.GRID}
    assert kinds == {"torch", "timm", "vit", "bert"}
    assert {L for _, _, L in R.GRID} == {1, 5}
    timm = [c for k, c, _ in R.GRID if k == "timm"]
    assert any(c.get("init_values") for c in timm) and any(c.get("scale_attn_norm") for c in timm)
    assert any(c.get("qkv_bias") is False for c in timm) and any(c.get("proj_bias") is False for c in timm)
    assert {c.get("heads") for k, c, _ in R.GRID} == {1, 2}


@pytest.mark.parametrize("kind", ["timm", "vit", "bert"])
def test_near_one_hot_attention_and_large_inputs(kind):
    _need(kind)
    layer, X, T = R.instance(kind, N=2, L=6, seed=3, heads=2)
    R.randomize(layer, 3, scale=6.0)                  # sharp scores: near-one-hot softmax rows
    X = 3.0 * X
    H = layer_hessian(layer, X, target=T).dense
    assert _rel(H, R.hessian_autograd(layer, X, T)) <= TOL


def test_timm_manual_attention_path_too():
    """timm's non-fused attention (q·scale, explicit softmax) is the same function."""
    _need("timm")
    layer, X, T = R.instance("timm", heads=2, init_values=0.1)
    layer.attn.fused_attn = False
    assert _rel(layer_hessian(layer, X, target=T).dense, R.hessian_autograd(layer, X, T)) <= TOL


def test_batch_is_the_mean_of_the_sequences_hessians():
    """MSE over the batch = mean of the per-sequence MSEs: H(batch) = mean of H(sequence n)."""
    layer, X, T = R.instance("torch", N=3, L=4, heads=2)
    Hb = layer_hessian(layer, X, target=T).dense
    Hs = sum(layer_hessian(layer, X[i], target=T[i]).dense for i in range(3)) / 3
    assert _rel(Hb, Hs) <= 1e-13


def test_sequence_first_pytorch_layer():
    layer = nn.TransformerEncoderLayer(8, 2, 6, dropout=0.0, batch_first=False, dtype=torch.float64)
    R.randomize(layer, 2)
    g = torch.Generator().manual_seed(0)
    X, T = (torch.randn(4, 2, 8, generator=g, dtype=torch.float64) for _ in range(2))   # (L, N, d)
    res = layer_hessian(layer, X, target=T)
    ref = R.autograd_hessian(lambda: (layer(X) - T).pow(2).mean(), list(layer.parameters()))
    assert _rel(res.dense, ref) <= TOL
    assert torch.allclose(res.Z, layer(X), rtol=0, atol=1e-14)


def test_attention_samples_attend_only_to_themselves():
    """Heads and sequences share the sample axis: each sequence's output is its own, computed alone."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 6, generator=g, dtype=torch.float64) for _ in range(3))
    O, ctx = Attention(2).forward([q, k, v], {})
    assert ctx["A"].shape == (3 * 2, 4, 4)
    for i in range(3):
        Oi, _ = Attention(2).forward([q[i:i + 1], k[i:i + 1], v[i:i + 1]], {})
        assert torch.allclose(O[i], Oi[0], rtol=0, atol=1e-15)


# ---------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("kind", ["torch", "timm", "vit", "bert"])
def test_masks(kind):
    _need(kind)
    layer, X, T = R.instance(kind, N=2, L=5, heads=2)
    kp = torch.zeros(2, 5, dtype=torch.bool)
    kp[1, 3:] = True
    per_seq = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    bool_mask = torch.zeros(5, 5, dtype=torch.bool)
    bool_mask[0, 4] = bool_mask[2, 1] = True
    both = dict(attn_mask=bool_mask, key_padding_mask=kp, is_causal=True)
    for mask in (dict(is_causal=True), dict(key_padding_mask=kp), dict(attn_mask=per_seq), both):
        if kind == "torch" and mask is both:
            # nn.TransformerEncoderLayer reads is_causal as a hint that src_mask is causal and applies src_mask
            # alone, where the engine would add the two: refused rather than computed for another mask
            with pytest.raises(ValueError, match="is not the causal mask"):
                layer_hessian(layer, X, target=T, **mask)
            mask = dict(attn_mask=bool_mask, key_padding_mask=kp)
        H = layer_hessian(layer, X, target=T, **mask).dense
        assert _rel(H, R.hessian_autograd(layer, X, T, **mask)) <= TOL, mask


def test_pytorch_applies_src_mask_alone_under_the_is_causal_hint():
    """Why ``layer_hessian`` refuses ``is_causal=True`` with another ``attn_mask`` on PyTorch's layer: the layer
    applies ``src_mask`` alone (with or without a key padding mask). Fails the day PyTorch adds the causal mask."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    layer = R.torch_layer(heads=2)
    X = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    m = torch.zeros(5, 5, dtype=torch.bool)
    m[0, 4] = m[2, 1] = True
    kp = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        for extra in ({}, {"src_key_padding_mask": kp}):
            assert torch.equal(layer(X, src_mask=m, is_causal=True, **extra), layer(X, src_mask=m, **extra))


def test_mask_conversion_matches_pytorch_own_arguments():
    """attention_mask(...) handed to the layer as one float mask = the layer's own src_mask / key padding /
    is_causal arguments (the references' convention is PyTorch's)."""
    layer = R.torch_layer(heads=2)
    X = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kp = torch.tensor([[False] * 5, [False, False, False, True, True]])
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    with torch.no_grad():
        own = layer(X, src_mask=causal, src_key_padding_mask=kp, is_causal=True)
        ours = R.layer_output(layer, X, key_padding_mask=kp, is_causal=True)
    assert torch.allclose(own, ours, rtol=0, atol=1e-13)


def test_bad_masks_raise():
    with pytest.raises(ValueError, match="every key"):
        attention_mask(1, 3, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(L, L\)"):
        attention_mask(2, 3, attn_mask=torch.zeros(2, 2, 3, 3))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attention_mask(2, 3, key_padding_mask=torch.zeros(2, 3))


# ---------------------------------------------------------------------------------------- blocks and HVPs
@pytest.mark.parametrize("kind", ["torch", "timm", "vit", "bert"])
def test_blocks_by_name_and_hvp(kind):
    _need(kind)
    layer, X, T = R.instance(kind, N=2, L=4, heads=2, **({"init_values": 0.2} if kind == "timm" else {}))
    full = layer_hessian(layer, X, target=T)
    names = full.names
    pairs = [(names[-1], names[0]), (names[0], names[-1]), (names[2], names[2]), (names[0], names[1]),
             (names[5], names[3])]
    res = layer_hessian(layer, X, target=T, blocks=pairs)
    assert res.dense is None and set(res.blocks) == set(pairs)
    scale = full.dense.abs().max()
    auto = R.block_autograd(layer, X, T, pairs)
    for p in pairs:
        assert float((res.blocks[p] - full.blocks[p]).abs().max() / scale) <= 1e-14, p
        assert float((res.blocks[p] - auto[p]).abs().max() / scale) <= TOL, p
    sub = layer_hessian(layer, X, target=T, blocks=[names[1], names[4]])
    assert set(sub.blocks) == {(a, b) for a in (names[1], names[4]) for b in (names[1], names[4])}

    g = torch.Generator().manual_seed(5)
    v = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in layer.named_parameters()}
    hv = layer_hvp(layer, X, v, target=T)
    flat = full.dense @ torch.cat([v[n].reshape(-1) for n in names])
    ha = R.hvp_autograd(layer, X, T, v)
    off = full.offsets()
    for n, s in zip(names, full.sizes):
        assert float((hv[n].reshape(-1) - flat[off[n]:off[n] + s]).abs().max() / flat.abs().max()) <= 1e-13, n
        assert float((hv[n] - ha[n]).abs().max() / flat.abs().max()) <= TOL, n
    # several directions at once, and a direction in one parameter only
    vb = {n: torch.stack([t, 2 * t]) for n, t in v.items()}
    hb = layer_hvp(layer, X, vb, target=T)
    assert all(torch.allclose(hb[n][1], 2 * hv[n], rtol=0, atol=1e-13 * flat.abs().max()) for n in names)
    m = names[len(names) // 2]                  # a parameter in the middle of the layer (rows before and after it)
    one = layer_hvp(layer, X, {m: v[m]}, target=T)
    col = full.dense[:, off[m]:off[m] + v[m].numel()] @ v[m].reshape(-1)
    assert float((torch.cat([one[n].reshape(-1) for n in names]) - col).abs().max() / col.abs().max()) <= 1e-13


# ---------------------------------------------------------------------------------------- finite differences
@pytest.mark.parametrize("kind", ["timm", "vit", "bert"])
def test_columns_equal_central_differences_of_the_module_gradient(kind):
    """Independent of the references' double backward: H e_j = (∇l(θ + h e_j) − ∇l(θ − h e_j)) / 2h with ∇l
    the module's first-order autograd, for one entry of every parameter (LayerScale γ, LayerNorm γ and β,
    the Q/K/V and MLP weights and biases: every primitive's second-derivative piece is reached)."""
    _need(kind)
    layer, X, T = R.instance(kind, N=2, L=4, heads=2, **({"init_values": 0.3} if kind == "timm" else {}))
    res = layer_hessian(layer, X, target=T)
    worst = R.fd_column_error(layer, X, T, res.dense)
    assert worst <= FD_TOL


def test_a_general_loss_by_its_derivatives():
    """loss=(dl_dZ, d2l_dZ2) of the stacked rows: a weighted quartic loss against autograd of the same loss."""
    layer, X, T = R.instance("torch", N=2, L=3, heads=2)
    w = torch.rand(6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def loss(Z):
        return (w * Z ** 4).sum() / 4

    dl = lambda Z: w * Z ** 3                                   # noqa: E731
    d2l = lambda Z: torch.diag((3 * w * Z ** 2).reshape(-1))   # noqa: E731
    H = layer_hessian(layer, X, loss=(dl, d2l)).dense
    ref = R.autograd_hessian(lambda: R.layer_loss(layer, X, loss=loss), list(layer.parameters()))
    assert _rel(H, ref) <= TOL


# ---------------------------------------------------------------------------------------- what it refuses
def test_unsupported_layers_raise_naming_the_reason():
    with pytest.raises(ValueError, match="not supported"):
        layer_hessian(nn.Linear(4, 4).double(), torch.randn(3, 4, dtype=torch.float64), target=torch.zeros(3, 4))
    layer, X, T = R.instance("torch", heads=2)
    layer.train()
    layer.dropout.p = 0.1
    with pytest.raises(ValueError, match="dropout"):
        layer_hessian(layer, X, target=T)
    layer.eval()
    with pytest.raises(ValueError, match="width"):
        layer_hessian(layer, torch.randn(2, 5, 6, dtype=torch.float64), target=torch.zeros(2, 5, 6))
    with pytest.raises(ValueError, match="shape of X"):
        layer_hessian(layer, X, target=T[0])
    with pytest.raises(ValueError, match="not parameters"):
        layer_hessian(layer, X, target=T, blocks=["nope"])
    with pytest.raises(ValueError, match="dtype"):
        layer_hessian(layer, X.float(), target=T)


def test_unsupported_timm_features_raise():
    _need("timm")
    from timm.layers import LayerNormFp32, SwiGLU

    with pytest.raises(ValueError, match="qk_norm"):
        describe(R.timm_block(qk_norm=True))
    layer = R.timm_block()
    layer.train()
    with pytest.raises(ValueError, match="drop_path1"):
        describe(layer)
    from timm.models.vision_transformer import Block
    with pytest.raises(ValueError, match="SwiGLU"):
        describe(Block(8, 2, mlp_layer=SwiGLU).double())
    with pytest.raises(ValueError, match="LayerNormFp32"):
        describe(Block(8, 2, norm_layer=LayerNormFp32).double())
    with pytest.raises(ValueError, match="QuickGELU|not supported"):
        from timm.layers import QuickGELU
        describe(Block(8, 2, act_layer=QuickGELU).double())


def test_unsupported_hugging_face_features_raise():
    _need("bert")
    with pytest.raises(ValueError, match="quick_gelu"):
        describe(R.vit_layer(act="quick_gelu"))
    with pytest.raises(ValueError, match="decoder"):
        describe(R.bert_layer(is_decoder=True))
    layer = R.bert_layer()
    layer.train()
    with pytest.raises(ValueError, match="dropout"):
        describe(layer)


def test_describe_reads_the_module():
    _need("bert")
    steps = describe(R.bert_layer())
    assert [s["submodule"] for s in steps][:4] == ["attention.self.query", "attention.self.key",
                                                   "attention.self.value", "attention.self"]
    assert steps[3]["op"] == "Attention(h=2)" and steps[-1]["submodule"] == "output.LayerNorm"
    assert steps[-1]["output"] == "Z"
    used = [p for s in steps for p in s["parameters"]]
    assert sorted(used) == sorted(n for n, _ in R.bert_layer().named_parameters())
    # a fused projection is read as three linear maps on row blocks of one weight
    torch_steps = describe(R.torch_layer(heads=2))
    assert [s["parameters"][0] for s in torch_steps[:3]] == [f"self_attn.in_proj_weight[{a}:{b}]"
                                                             for a, b in ((0, 8), (8, 16), (16, 24))]


def test_public_export():
    assert curvature_gap.layer_hessian is layer_hessian and curvature_gap.layer_hvp is layer_hvp


# ---------------------------------------------------------------------------------------- the traps
@pytest.mark.parametrize("kind", ["timm", "vit"])
def test_default_attention_kernel_has_no_double_backward(kind):
    """Why the references run under the MATH backend: double backward through the library's layer under the
    default CPU attention kernel raises (this test fails the day PyTorch implements it; the book says so)."""
    _need(kind)
    layer, X, T = R.instance(kind, heads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        msg = eref.default_kernel_double_backward_error(layer, X, T)
    assert msg is not None and "_scaled_dot_product_flash_attention_for_cpu_backward" in msg


def test_hugging_face_eager_attention_rounds_the_softmax_to_float32():
    _need("vit")
    err = R.eager_softmax_error()
    assert 1e-10 < err < 1e-5
