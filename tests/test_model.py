"""curvature_gap.model: Table 1 shapes, parameter counts, parameter groups, and the one forward pass."""
import pytest
import torch

import curvature_gap as cg
from curvature_gap.model import BlockParts, attention_matrix, block_forward, count_parameters, layer_norm_parts, patchify


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
