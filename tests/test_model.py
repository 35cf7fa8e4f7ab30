"""curvature_gap.model: Table 1 shapes, parameter counts, parameter groups, and the one forward pass."""
import pytest
import torch

import curvature_gap as cg
from curvature_gap.model import BlockParts, attention_matrix, block_forward, layer_norm_parts, patchify
from curvature_gap.params import count_parameters, param_slices


@pytest.mark.parametrize(
    "name, tokens, d, dff, blocks, classes, n_params",
    [
        # embed (16·16+16) + pos 49·16 + block (3·256 + 16·64+64 + 64·16+16 + 4·16) + head 16·10+10
        ("mnist", 49, 16, 64, 1, 10, 272 + 784 + 2960 + 170),
        ("cifar100", 64, 128, 512, 8, 100, (48 * 128 + 128) + 64 * 128 + 8 * (3 * 128**2 + 2 * 128 * 512 + 512 + 128 + 4 * 128) + 128 * 100 + 100),
    ],
)
def test_table1_shapes_and_counts(name, tokens, d, dff, blocks, classes, n_params):
    m = cg.build_model(name)
    assert m.cfg.n_tokens == tokens and m.cfg.d_model == d and m.cfg.d_ff == dff
    assert len(m.blocks) == blocks
    assert sum(p.numel() for p in m.parameters()) == n_params
    b = m.blocks[0]
    assert b.query.shape == (d, d) and b.key.shape == (d, d) and b.value.shape == (d, d)
    assert b.ffn1["weight"].shape == (d, dff) and b.ffn2["weight"].shape == (dff, d)
    x = torch.randn(2, m.cfg.in_channels, m.cfg.image_size, m.cfg.image_size)
    assert m(x).shape == (2, classes)


def test_mnist_model_is_about_4200_params_with_2960_in_block():
    m = cg.build_model("mnist")
    groups = {g.name: g for g in cg.param_groups(m)}
    block = sum(g.size for n, g in groups.items() if n.startswith("block0."))
    assert block == 2960
    assert sum(g.size for g in groups.values()) == 4186


def test_param_groups_are_named_ordered_and_slice_the_flat_vector():
    m = cg.build_model("cifar100", n_blocks=2)
    groups = cg.param_groups(m)
    names = [g.name for g in groups]
    expected_block = ["query", "key", "value", "ln1", "ffn1", "ffn2", "ln2"]
    assert names == ["pos", "embed"] + [f"block{i}.{k}" for i in range(2) for k in expected_block] + ["head"]
    flat = torch.nn.utils.parameters_to_vector(m.parameters())
    assert groups[-1].stop == flat.numel()
    g = next(g for g in groups if g.name == "block1.value")
    assert torch.equal(flat[g.slice], m.blocks[1].value.reshape(-1))


@pytest.mark.parametrize("name", ["mnist", "authors_mnist"])
def test_param_slices_cut_the_flat_vector_in_parameter_order(name):
    m = cg.build_model(name, seed=0)
    flat = torch.nn.utils.parameters_to_vector(m.parameters())
    sl = param_slices(m)
    assert list(sl) == [n for n, _ in m.named_parameters()]
    assert [s.start for s in sl.values()] == [0] + [s.stop for s in sl.values()][:-1], "contiguous"
    assert list(sl.values())[-1].stop == flat.numel()
    for n, p in m.named_parameters():
        assert torch.equal(flat[sl[n]], p.detach().reshape(-1)), n


def test_patchify_row_major_patches():
    img = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    p = patchify(img, 4)
    assert p.shape == (2, 4, 48)
    # patch (row 0, col 1) of image 1, channel 2, pixel (1, 3)
    assert p[1, 1].reshape(3, 4, 4)[2, 1, 3] == img[1, 2, 1, 4 + 3]


def test_block_matches_paper_equation():
    """Y = LN(X + A X W_V), Z = LN(Y + FFN(Y)) with A = softmax(X W_Q W_Kᵀ Xᵀ/√d_K)."""
    torch.manual_seed(0)
    b = cg.build_model("mnist", ln_eps=0.0).blocks[0].double()
    x = torch.randn(3, 49, 16, dtype=torch.float64)

    def ln(u):
        mu = u.mean(-1, keepdim=True)
        return (u - mu) / ((u - mu).pow(2).mean(-1, keepdim=True)).sqrt()

    a = torch.softmax(x @ b.query @ b.key.T @ x.transpose(1, 2) / 4.0, -1)
    y = ln(x + a @ x @ b.value)
    z = ln(y + torch.relu(y @ b.ffn1["weight"] + b.ffn1["bias"]) @ b.ffn2["weight"] + b.ffn2["bias"])
    torch.testing.assert_close(b(x), z, rtol=1e-12, atol=1e-12)


def test_handwritten_layernorm_equals_fused_in_value():
    from curvature_gap.model import LayerNorm

    x = torch.randn(4, 7, 16, dtype=torch.float64)
    ln, fused = LayerNorm(16, 1e-5).double(), LayerNorm(16, 1e-5, fused=True).double()
    torch.testing.assert_close(ln(x), fused(x), rtol=1e-12, atol=1e-12)


@pytest.mark.fault("zero-variance-layernorm")
def test_zero_variance_row_raises_with_eps_zero():
    from curvature_gap.model import LayerNorm

    x = torch.randn(2, 3, 8)
    x[1, 2] = 5.0
    with pytest.raises(ValueError, match="Assumption 2"):
        LayerNorm(8, eps=0.0)(x)


def test_seeded_build_is_reproducible_and_seed_sensitive():
    a, b, c = cg.build_model("mnist", seed=3), cg.build_model("mnist", seed=3), cg.build_model("mnist", seed=4)
    va, vb, vc = (torch.nn.utils.parameters_to_vector(m.parameters()) for m in (a, b, c))
    assert torch.equal(va, vb) and not torch.equal(va, vc)


def test_unknown_model_name_is_a_clear_error():
    from curvature_gap.config import ConfigError

    with pytest.raises(ConfigError, match="choose one of: mnist, cifar100"):
        cg.build_model("imagenet")


def test_block_parts_are_the_intermediate_values_of_the_module():
    torch.manual_seed(1)
    m = cg.build_model("mnist")
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))      # non-trivial biases and LayerNorm affines
    b = m.blocks[0]
    x = torch.randn(2, 49, 16)
    parts = b.parts(x)
    assert isinstance(parts, BlockParts)
    torch.testing.assert_close(parts.out, b(x))
    torch.testing.assert_close(parts.A, attention_matrix(x, b.query, b.key))
    torch.testing.assert_close(parts.A.sum(-1), torch.ones(2, 49))
    torch.testing.assert_close(parts.u1, x + parts.A @ x @ b.value)
    torch.testing.assert_close(parts.h, parts.y @ b.ffn1["weight"] + b.ffn1["bias"])
    assert torch.equal(parts.mask, (parts.h > 0).float()) and torch.equal(parts.r, torch.relu(parts.h))
    # without biases and affines: the theory's block
    plain = block_forward(x, b.query, b.key, b.value, b.ffn1["weight"], b.ffn2["weight"])
    torch.testing.assert_close(plain.y, layer_norm_parts(plain.u1, 0.0)[0])


def test_layer_norm_parts():
    u = torch.randn(3, 5, dtype=torch.float64)
    n_hat, r = layer_norm_parts(u, 1e-5)
    var = (u - u.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
    torch.testing.assert_close(r, (var + 1e-5).rsqrt())
    torch.testing.assert_close(n_hat, (u - u.mean(-1, keepdim=True)) * r)
    u[1] = 3.0
    layer_norm_parts(u, 1e-5)                       # eps > 0: a constant row is fine
    with pytest.raises(ValueError, match="Assumption 2"):
        layer_norm_parts(u, 0.0)


def test_count_parameters():
    assert count_parameters(cg.build_model("mnist")) == 4186


# ---------------------------------------------------------------------------------------------- numbers unchanged
# Pinned before the block variants were added (ModelConfig.norm, ..., init): the Table 1 models' parameters
# (sha256 over state-dict names and float32 bytes, seed 0) and their logits on a fixed input.
PINNED = {
    "mnist": ("78736d5212be3f42eeca72a27df50f8c862dbe9afc0f47fad534f92ef2521edf",
              [0.043103646486997604, -0.14506195485591888, 0.04939071089029312, -0.45695024728775024]),
    "cifar100": ("c8ac97c915e7e9e907fa6159c817a8dc72b3909dd90a4d0d1016768459307a08",
                 [-1.06145179271698, 0.7514196038246155, -1.8436099290847778, -0.3364231586456299]),
}


def _state_sha256(m) -> str:
    import hashlib

    h = hashlib.sha256()
    for n, p in m.state_dict().items():
        h.update(n.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _theorem_vit_forward(m, images):
    """The Table 1 forward op by op, in the order the model computed it before the variants existed."""
    import math

    def ln(u, mod):
        uc = u - u.mean(-1, keepdim=True)
        return uc * torch.rsqrt((uc * uc).mean(-1, keepdim=True) + mod.eps) * mod.weight + mod.bias

    x = torch.nn.functional.linear(patchify(images, m.cfg.patch_size), m.embed.weight, m.embed.bias) + m.pos
    for b in m.blocks:
        A = torch.softmax((x @ b.query) @ (x @ b.key).transpose(-1, -2) / math.sqrt(b.query.shape[-1]), dim=-1)
        y = ln(x + (A @ x) @ b.value, b.ln1)
        x = ln(y + (torch.relu(y @ b.ffn1["weight"] + b.ffn1["bias"]) @ b.ffn2["weight"] + b.ffn2["bias"]), b.ln2)
    return torch.nn.functional.linear(x.mean(dim=1), m.head.weight, m.head.bias)


@pytest.mark.parametrize("name", ["mnist", "cifar100"])
def test_table1_models_are_bit_identical_to_before_the_variants(name):
    m = cg.build_model(name, seed=0)
    sha, first = PINNED[name]
    assert _state_sha256(m) == sha, "the parameters (names, order, RNG draws) of a Table 1 model changed"
    g = torch.Generator().manual_seed(123)
    x = torch.randn(3, m.cfg.in_channels, m.cfg.image_size, m.cfg.image_size, generator=g)
    with torch.no_grad():
        z = m(x)
        assert torch.equal(z, _theorem_vit_forward(m, x)), "the forward's arithmetic changed"
        h = m.tokens(x)
        for b in m.blocks:                                # the Hessian's block_forward is the module's block
            assert torch.equal(b.parts(h).out, b(h))
            h = b(h)
    torch.testing.assert_close(z[0, :4], torch.tensor(first), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- variants
VARIANTS = {
    "pre-norm": dict(norm="pre"),
    "gelu": dict(activation="gelu"),
    "two heads": dict(n_heads=2),
    "qkv bias + W_O": dict(qkv_bias=True, out_proj=True, out_proj_bias=True),
    "sinusoidal, no biases": dict(pos_encoding="sinusoidal", patch_bias=False, head_bias=False, ffn_bias=False),
    "no positions, torch init": dict(pos_encoding="none", init="torch"),
}


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_variants_build_run_and_have_contiguous_groups(overrides):
    m = cg.build_model("mnist", seed=0, d_model=8, d_k=8, d_ff=16, patch_size=7, **overrides)
    x = torch.randn(2, 1, 28, 28)
    assert m(x).shape == (2, 10)
    groups = cg.param_groups(m)
    assert groups[-1].stop == count_parameters(m)
    b = m.blocks[0]
    assert (b.query_bias is not None) == m.cfg.qkv_bias and (b.out is not None) == m.cfg.out_proj
    assert (m.ln_f is not None) == (m.cfg.norm == "pre")
    names = [g.name for g in groups]
    assert ("block0.out" in names) == m.cfg.out_proj and ("pos" in names) == (m.cfg.pos_encoding == "learned")


def test_variant_forward_follows_its_equations():
    """Pre-norm, two heads, GELU, Q/K/V biases, W_O with bias, sinusoidal positions, written out here."""
    import math

    cfg = dict(d_model=8, d_k=8, d_ff=16, patch_size=7, norm="pre", n_heads=2, activation="gelu", qkv_bias=True,
               out_proj=True, out_proj_bias=True, pos_encoding="sinusoidal", ln_eps=1e-5, init="torch")
    m = cg.build_model("mnist", seed=2, **cfg).double()
    x = torch.randn(3, 1, 28, 28, dtype=torch.float64)
    ln = lambda u, mod: torch.nn.functional.layer_norm(u, (8,), mod.weight, mod.bias, 1e-5)  # noqa: E731
    t = torch.arange(16, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    pe = torch.stack([torch.sin(t * w), torch.cos(t * w)], -1).reshape(16, 8)
    h = patchify(x, 7) @ m.embed.weight.T + m.embed.bias + pe
    for b in m.blocks:
        u = ln(h, b.ln1)
        q, k, v = u @ b.query + b.query_bias, u @ b.key + b.key_bias, u @ b.value + b.value_bias
        heads = [torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(4), -1) @ v[..., s]
                 for s in (slice(0, 4), slice(4, 8))]
        h = h + torch.cat(heads, -1) @ b.out + b.out_bias
        u = ln(h, b.ln2)
        h = h + torch.nn.functional.gelu(u @ b.ffn1["weight"] + b.ffn1["bias"]) @ b.ffn2["weight"] + b.ffn2["bias"]
    z = (ln(h, m.ln_f).mean(1)) @ m.head.weight.T + m.head.bias
    torch.testing.assert_close(m(x), z, rtol=1e-6, atol=1e-6)   # the table is float32, here float64
    torch.testing.assert_close(m.pos.double(), pe, rtol=0, atol=1e-6)


def test_block_parts_is_the_theorem_block_only():
    from curvature_gap.config import ConfigError

    b = cg.build_model("mnist", activation="gelu").blocks[0]
    with pytest.raises(ConfigError, match="activation='gelu'"):
        b.parts(torch.randn(1, 49, 16))


# ---------------------------------------------------------------------------------------------- the authors' model
def test_authors_models_have_their_parameter_counts():
    """3,642 (MNIST) and 1,600,228 (CIFAR-100): the authors' src/models/vit_classification.py with their yaml sizes."""
    m = cg.build_model("authors_mnist")
    assert count_parameters(m) == 3642
    assert count_parameters(cg.build_model("authors_cifar100")) == 1_600_228
    sizes = {g.name: g.size for g in cg.param_groups(m)}
    assert sizes == {"embed": 16 * 16 + 16, "block0.query": 272, "block0.key": 272, "block0.value": 272,
                     "block0.out": 272, "block0.ln1": 32, "block0.ffn1": 16 * 64, "block0.ffn2": 64 * 16,
                     "block0.ln2": 32, "head": 16 * 10 + 10}
    assert "pos" not in dict(m.named_parameters()) and m.pos.shape == (49, 16)


def _authors_reference(d=16, dff=64, blocks=1, classes=10, patch=4, image=28, channels=1, seed=0):
    """A stand-in for the authors' VisionTransformer written for this test: torch modules carrying their
    parameter names (nn.Linear (out, in), nn.LayerNorm), a fixed sinusoidal buffer, and a forward written as a
    function: post-norm, Q/K/V with biases, one-head SDPA, W_O with bias, Linear → GELU → Linear without
    biases, mean over tokens, linear head."""
    import math

    from torch import nn

    torch.manual_seed(seed)
    L = nn.Linear
    root = nn.Module()
    root.embeddings = nn.Module()
    root.embeddings.patch_embeddings = nn.Module()
    root.embeddings.patch_embeddings.in_layer = L(channels * patch * patch, d)
    n = (image // patch) ** 2
    ang = torch.arange(n)[:, None] * torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
    root.register_buffer("pe", torch.stack([ang.sin(), ang.cos()], -1).flatten(1), persistent=False)
    root.transformer_blocks = nn.ModuleList()
    for _ in range(blocks):
        blk = nn.Module()
        blk.self_attention = nn.ModuleDict({k: L(d, d) for k in ("to_query", "to_key", "to_value", "out_layer")})
        blk.self_attention_norm = nn.LayerNorm(d)
        blk.feed_forward = nn.ModuleDict({"in_layer": L(d, dff, bias=False), "out_layer": L(dff, d, bias=False)})
        blk.feed_forward_norm = nn.LayerNorm(d)
        root.transformer_blocks.append(blk)
    root.out_layer = L(d, classes)
    with torch.no_grad():  # away from the initialisation, so every term matters
        for p in root.parameters():
            p.add_(0.3 * torch.randn_like(p))

    def forward(images):
        b, c, hh, ww = images.shape
        x = images.reshape(b, c, hh // patch, patch, ww // patch, patch).permute(0, 2, 4, 1, 3, 5)
        x = root.embeddings.patch_embeddings.in_layer(x.reshape(b, n, c * patch * patch)) + root.pe
        for blk in root.transformer_blocks:
            sa = blk.self_attention
            a = nn.functional.scaled_dot_product_attention(sa["to_query"](x), sa["to_key"](x), sa["to_value"](x))
            x = blk.self_attention_norm(x + sa["out_layer"](a))
            ff = blk.feed_forward
            x = blk.feed_forward_norm(x + ff["out_layer"](nn.functional.gelu(ff["in_layer"](x))))
        return root.out_layer(x.mean(1))

    return root, forward


def test_from_authors_state_dict_float64_logits():
    from curvature_gap.model import from_authors_state_dict

    ref, fwd = _authors_reference()
    ref = ref.double()
    assert sum(p.numel() for p in ref.parameters()) == 3642
    x = torch.randn(5, 1, 28, 28, dtype=torch.float64)
    m = from_authors_state_dict(ref.state_dict(), "mnist", dtype=torch.float64)
    assert next(m.parameters()).dtype == torch.float64 and m.cfg.name == "authors_mnist"
    with torch.no_grad():
        z, z_ref = m(x), fwd(x)
    assert ((z - z_ref).abs().max() / z_ref.abs().max()).item() <= 1e-12


def test_from_authors_state_dict_two_blocks_and_bf16_weights():
    from curvature_gap.model import from_authors_state_dict

    ref, fwd = _authors_reference(d=8, dff=16, blocks=2, patch=7, seed=1)
    pe32 = ref.pe.clone()                                 # .to(bf16) rounds the buffer too
    bf = ref.to(torch.bfloat16)
    sd = bf.state_dict()                                  # as the authors' trainer saves it: bf16
    assert all(t.dtype == torch.bfloat16 for t in sd.values())
    m = from_authors_state_dict(sd, "mnist", d_model=8, d_k=8, d_ff=16, n_blocks=2, patch_size=7)
    assert next(m.parameters()).dtype == torch.float32
    x = torch.randn(6, 1, 28, 28)
    with torch.no_grad():
        z = m(x)
        z_bf16 = fwd(x.to(torch.bfloat16)).float()        # their model cast to bf16, computing in bf16
        ref.float()                                       # the same bf16 weights, widened exactly,
        ref.pe = pe32                                     # and the float32 table (as a float32 load of theirs)
        z_f32 = fwd(x)
    scale = z_f32.abs().max()
    assert ((z - z_f32).abs().max() / scale).item() < 1e-5
    assert ((z - z_bf16).abs().max() / scale).item() < 5e-2


def test_from_authors_state_dict_names_the_bad_key():
    from curvature_gap.config import ConfigError
    from curvature_gap.model import from_authors_state_dict

    sd = _authors_reference()[0].state_dict()
    missing = {k: v for k, v in sd.items() if k != "out_layer.bias"}
    with pytest.raises(ConfigError, match=r"missing \['out_layer.bias'\].*Fix"):
        from_authors_state_dict(missing, "mnist")
    with pytest.raises(ConfigError, match=r"unexpected \['module.out_layer.bias'\].*strip the prefix"):
        from_authors_state_dict({**missing, "module.out_layer.bias": sd["out_layer.bias"]}, "mnist")
    bad = dict(sd)
    bad["transformer_blocks.0.feed_forward.in_layer.weight"] = torch.zeros(32, 16)
    with pytest.raises(ConfigError, match=r"feed_forward.in_layer.weight: shape \(32, 16\), expected \(64, 16\)"):
        from_authors_state_dict(bad, "mnist")
    with pytest.raises(ConfigError, match="missing"):
        from_authors_state_dict(sd, "cifar100")
    with pytest.raises(ConfigError, match="not the authors' variant: activation='relu'"):
        from_authors_state_dict(sd, "mnist", activation="relu")
    with pytest.raises(ConfigError, match="choose one of: mnist, cifar100"):
        from_authors_state_dict(sd, "imagenet")
