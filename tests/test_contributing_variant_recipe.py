"""The "Adding a model variant" recipe of CONTRIBUTING.md works: its code block, taken from the file itself, declares a
variant as a ModelConfig value (pre-norm, two heads and more), builds it, gets its exact Hessian from the fast route
within 1e-10 of reverse-over-reverse autograd in float64, and finds the one model that route does not support (a
fused LayerNorm) refused by name. Its checks catch a tolerance that no float64 Hessian meets, a model the route does
not support, a wrong Hessian and a route that would take a model it was not written for."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import curvature_gap.hessian as hs
from cases import mutated_recipe, run_recipe
from curvature_gap.config import MODEL_CONFIGS, ModelConfig

pytestmark = pytest.mark.usefixtures("one_thread")
SECTION = "Adding a model variant"


def test_the_recipe_declares_builds_and_checks_a_variant():
    ns = run_recipe(SECTION)
    cfg, model = ns["CFG"], ns["model"]
    # a value: a ModelConfig that differs from the theorem's block in the fields it names, registered nowhere
    assert isinstance(cfg, ModelConfig) and model.cfg is cfg and cfg.name not in MODEL_CONFIGS
    base = dataclasses.replace(MODEL_CONFIGS["mnist"], name=cfg.name, image_size=8, patch_size=4, d_model=4, d_k=4,
                               d_ff=8)
    assert {f for f, v in cfg.variant().items() if base.variant()[f] != v} == {
        "norm", "n_heads", "activation", "qkv_bias", "out_proj", "pos_encoding"}
    assert cfg.init == "torch" and base.init == "normal"
    # the fast route's Hessian, within 1e-10 of the reference (and not trivially: the two differ by rounding)
    H, ref, err = ns["H"], ns["ref"], ns["err"]
    P = sum(p.numel() for p in model.parameters())
    assert H.dtype == ref.dtype == torch.float64 and H.shape == (P, P) and 0 < err <= 1e-10
    assert torch.equal(H, H.T) and hs.resolve_method(model, "cross_entropy", "auto") == "vit"
    # the fused LayerNorm: refused by the fast route, taken by the generic routes
    fused = ns["fused"]
    assert fused.blocks[0].ln1.fused and "fused_ln=True" in ns["refused"] and not hs.unsupported(fused, "functorch")
    assert hs.resolve_method(fused, "cross_entropy", "auto") == "functorch"


def test_a_tolerance_no_float64_hessian_meets_fails_the_recipe():
    with pytest.raises(AssertionError):
        run_recipe(SECTION, mutated_recipe(SECTION, "err <= 1e-10", "err <= 1e-18"))


def test_a_model_the_route_does_not_support_fails_the_recipe():
    built = "model = build(CFG)\n"
    fused = "model = build(CFG)\nfor b in model.blocks:\n    b.ln1.fused = b.ln2.fused = True\nmodel.ln_f.fused = True\n"
    with pytest.raises(AssertionError):  # the recipe's own check, before the route is called
        run_recipe(SECTION, mutated_recipe(SECTION, built, fused))
    # without that check, the route itself refuses it, naming it
    code = mutated_recipe(SECTION, built, fused).replace('assert not unsupported(model, "vit") and SUPPORTS["vit"] == {}\n', "")
    with pytest.raises(ValueError, match=r"this model \(tiny_pre_2heads\) has fused_ln=True .*Fix"):
        run_recipe(SECTION, code)


def test_a_wrong_hessian_fails_the_recipe(monkeypatch):
    route = hs.hessian

    def off_by_a_little(model, data, *args, **kw):  # one symmetric pair of entries off by 1e-8 of the norm
        H = route(model, data, *args, **kw).clone()
        H[0, 1] += 1e-8 * H.norm()
        H[1, 0] = H[0, 1]
        return H

    monkeypatch.setattr(hs, "hessian", off_by_a_little)
    with pytest.raises(AssertionError):
        run_recipe(SECTION)


def test_a_route_that_takes_an_unsupported_model_fails_the_recipe(monkeypatch):
    route = hs.hessian

    def takes_everything(model, data, *args, **kw):
        if model.blocks[0].ln1.fused:
            return torch.zeros(0)
        return route(model, data, *args, **kw)

    monkeypatch.setattr(hs, "hessian", takes_everything)
    with pytest.raises(AssertionError, match="accepted a model it does not support"):
        run_recipe(SECTION)
