"""hessian.models: curvature_gap.model_hessian and model_hvp on whole timm and Hugging Face models.

Reference: reverse-over-reverse torch.autograd through the module's own forward under the MATH attention backend
(curvature_gap.exact.layers), float64, on small configurations (2 blocks) with every parameter random; Hugging Face
models with attn_implementation="sdpa" (its "eager" attention computes the softmax in float32). The columns also
against central differences of the module's first derivatives. timm and transformers are the ``layers`` extra:
these tests skip where it is not installed.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import curvature_gap
from curvature_gap.exact import encoder_layer as eref
from curvature_gap.exact import layers as R
from curvature_gap.hessian.models import describe, model_hessian, model_hvp

TOL = 1e-10

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("one_thread")]

TIMM = {
    "class token": {},
    "mean pooling, fc_norm": dict(global_pool="avg", fc_norm=True),
    "registers, positions before them, pre-norm": dict(reg_tokens=2, no_embed_class=True, pre_norm=True),
    "no class token, LayerScale, no Q/K/V bias": dict(class_token=False, global_pool="avg", init_values=0.1,
                                                      qkv_bias=False),
}
BERT = {
    "pooler": {},
    "gelu_new, 1 head, 3 layers": dict(act="gelu_new", heads=1, layers=3),
}


def _rel(A, B) -> float:
    return float((A - B).abs().max() / B.abs().max())


@pytest.mark.parametrize("cfg", list(TIMM.values()), ids=list(TIMM))
def test_timm_vision_transformer_equals_reverse_over_reverse(cfg):
    pytest.importorskip("timm")
    model, x, y, _ = R.model_instance("timm_vit", **cfg)
    res = model_hessian(model, x, "cross_entropy", y)
    ref = R.model_hessian_autograd(model, x, "cross_entropy", y)
    assert res.names == tuple(n for n, _ in model.named_parameters()) and res.dense.shape == ref.shape
    assert _rel(res.dense, ref) <= TOL and torch.equal(res.dense, res.dense.T)
    with torch.no_grad():
        logits = model(x)
    assert torch.allclose(res.Z, logits, rtol=0, atol=1e-13) and abs(res.loss - float(
        nn.functional.cross_entropy(logits, y))) <= 1e-13


@pytest.mark.parametrize("cfg", list(BERT.values()), ids=list(BERT))
def test_bert_model_equals_reverse_over_reverse(cfg):
    pytest.importorskip("transformers")
    model, ids, y, kw = R.model_instance("bert", **cfg)
    assert kw["attention_mask"].min() == 0 and (ids == model.config.pad_token_id).any()  # padding is exercised
    res = model_hessian(model, ids, "cross_entropy", y, **kw)
    ref = R.model_hessian_autograd(model, ids, "cross_entropy", y, **kw)
    assert res.names == tuple(n for n, _ in model.named_parameters())
    assert _rel(res.dense, ref) <= TOL
    # the word table's padding row is a constant (nn.Embedding(padding_idx=0)): no curvature
    o = res.offsets()["embeddings.word_embeddings.weight"]
    d = model.config.hidden_size
    assert float(res.dense[o:o + d].abs().max()) == 0.0 and float(ref[o:o + d].abs().max()) == 0.0


def test_bert_last_hidden_state_and_no_pooler():
    """The MSE of the last hidden state, with the pooler present (its rows are zero) and without one."""
    pytest.importorskip("transformers")
    for pooler in (True, False):
        model, ids, _, kw = R.model_instance("bert", pooler=pooler, layers=1)
        T = torch.randn(*ids.shape, model.config.hidden_size, generator=torch.Generator().manual_seed(2),
                        dtype=torch.float64)
        res = model_hessian(model, ids, "mse", T, output="last_hidden_state", **kw)
        used = [p for n, p in model.named_parameters() if not n.startswith("pooler.")]
        ref = R.autograd_hessian(lambda: R.model_loss(model, ids, "mse", T, "last_hidden_state", **kw), used)
        P = ref.shape[0]
        assert _rel(res.dense[:P, :P], ref) <= TOL, pooler
        assert (res.dense.shape[0] > P) == pooler and not res.dense[P:].any()


@pytest.mark.parametrize("kind", ["timm_vit", "bert"])
def test_blocks_hvp_and_finite_differences(kind):
    pytest.importorskip({"timm_vit": "timm", "bert": "transformers"}[kind])
    model, x, y, kw = R.model_instance(kind)
    full = model_hessian(model, x, "cross_entropy", y, **kw)
    names = full.names
    pairs = [(names[-1], names[0]), (names[2], names[2]), (names[5], names[1])]
    part = model_hessian(model, x, "cross_entropy", y, blocks=pairs, **kw)
    scale = full.dense.abs().max()
    assert part.dense is None and all(float((part.blocks[p] - full.blocks[p]).abs().max() / scale) <= 1e-13
                                      for p in pairs)
    g = torch.Generator().manual_seed(5)
    v = {n: torch.randn(p.shape, generator=g, dtype=torch.float64) for n, p in model.named_parameters()}
    hv = model_hvp(model, x, v, "cross_entropy", y, **kw)
    flat = full.dense @ torch.cat([v[n].reshape(-1) for n in names])
    off = full.offsets()
    for n, s in zip(names, full.sizes):
        assert float((hv[n].reshape(-1) - flat[off[n]:off[n] + s]).abs().max() / flat.abs().max()) <= 1e-13, n
    # central differences of the module's first-order autograd, one entry of every parameter
    loss_fn = lambda: R.model_loss(model, x, "cross_entropy", y, **kw)  # noqa: E731
    assert R.fd_column_error(model, None, None, full.dense, loss_fn=loss_fn) <= 1e-7


def test_unsupported_submodules_are_refused_by_name():
    pytest.importorskip("timm")
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match=r"global_pool='max' is not supported: only 'token' or 'avg'"):
        describe(R.timm_vit(global_pool="max"))
    m = R.timm_vit()
    m.blocks[1].attn.q_norm = nn.LayerNorm(4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"blocks\.1: timm Block with qk_norm=True is not supported"):
        describe(m)
    with pytest.raises(ValueError, match="decoder BertModel"):
        describe(R.bert_model(is_decoder=True))
    with pytest.raises(ValueError, match=r"Sequential is not supported\. Supported models .*VisionTransformer.*BertModel"):
        model_hessian(nn.Sequential(nn.Linear(2, 2)).double(), torch.zeros(1, 2, dtype=torch.float64), "mse",
                      torch.zeros(1, 2, dtype=torch.float64))
    trained = R.timm_vit().train()
    with pytest.raises(ValueError, match="training mode with dropout"):
        model_hessian(trained, torch.zeros(1, 1, 8, 8, dtype=torch.float64), "cross_entropy", torch.tensor([0]))
    with pytest.raises(ValueError, match="needs target"):
        model_hessian(R.timm_vit(), torch.zeros(1, 1, 8, 8, dtype=torch.float64), "cross_entropy")


def test_describe_reads_the_whole_model_and_the_public_export():
    pytest.importorskip("timm")
    steps = describe(R.timm_vit())
    assert [s["submodule"] for s in steps[:4]] == ["patch_embed", "patch_embed.proj", "cls_token", "pos_embed"]
    assert steps[-1]["submodule"] == "head" and steps[4]["submodule"] == "blocks.0.norm1"
    used = {p.split("[")[0] for s in steps for p in s["parameters"]}
    assert used == {n for n, _ in R.timm_vit().named_parameters()}
    assert curvature_gap.model_hessian is model_hessian and curvature_gap.model_hvp is model_hvp
