"""curvature_gap.config: Table 1's models, the run profiles, their hashes, and the choices the paper leaves open."""
from __future__ import annotations

import dataclasses
import re

import pytest

from curvature_gap import config as cf
from tools.book import provenance_tables as pt


def test_table1_models():
    m, c = cf.MODEL_CONFIGS["mnist"], cf.MODEL_CONFIGS["cifar100"]
    assert (m.n_tokens, m.patch_dim, m.d_model, m.d_ff, m.n_blocks, m.n_classes) == (49, 16, 16, 64, 1, 10)
    assert (c.n_tokens, c.patch_dim, c.d_model, c.d_ff, c.n_blocks, c.n_classes) == (64, 48, 128, 512, 8, 100)


def test_profiles_overrides_and_choices():
    assert set(cf.RECIPES) == {(m, p) for m in cf.TRAIN_MODELS for p in cf.PROFILES}
    assert set(cf.TABLE1_RECIPES) == {(m, p) for m in cf.MODELS for p in cf.PROFILES}
    cfg = cf.recipe_for("cifar100", "smoke", epochs=3)
    assert cfg.epochs == 3 and cfg.model_config().n_blocks == 2 and cf.recipe_for("cifar100", "smoke").epochs == 1
    with pytest.raises(cf.ConfigError, match="unknown profile 'huge'; choose one of: smoke, paper"):
        cf.recipe_for("mnist", "huge")
    with pytest.raises(cf.ConfigError, match="unknown model 'imagenet'; choose one of: mnist, cifar100, authors_mnist, authors_cifar100"):
        cf.recipe_for("imagenet", "paper")


def test_the_hash_is_stable_and_changes_with_every_setting():
    cfg = cf.recipe_for("mnist", "smoke")
    assert cfg.hash() == cf.recipe_for("mnist", "smoke").hash() and len(cfg.hash()) == 12
    hashes = {cfg.hash()}
    for f in dataclasses.fields(cf.Recipe):
        v = getattr(cfg, f.name)
        new = {"model": "authors_mnist", "profile": "paper", "optimizer": "adamw", "schedule": "constant",
               "model_overrides": (("d_ff", 8),), "source": "authors", "betas": (0.8, 0.9),
               "normalize": ((0.1,), (0.2,)), "shuffle": "dataloader", "precision": "bf16"}.get(f.name, None)
        if new is None:
            new = (not v) if isinstance(v, bool) else (1 if v is None else v * 2 + 1 if isinstance(v, (int, float)) else v)
        hashes.add(dataclasses.replace(cfg, **{f.name: new}).hash())
    assert len(hashes) == len(dataclasses.fields(cf.Recipe)) + 1
    assert cf.config_hash({"a": 1, "b": 2}) == cf.config_hash({"b": 2, "a": 1})


def test_unstated_choices_have_reasons():
    assert len(pt.UNSTATED) >= 2
    assert all(set(u) == {"name", "value", "reason"} and all(u.values()) for u in pt.UNSTATED)


def test_values_from_the_authors_code_name_their_file():
    rows = pt.FROM_AUTHORS_CODE
    assert len(rows) >= 10
    assert all(set(u) == {"name", "value", "source", "ours", "reason"} and all(u.values()) for u in rows)
    assert all(u["source"].startswith(("src/", "configs/", "notebooks/")) for u in rows)
    names = {u["name"] for u in rows} | {u["name"] for u in pt.UNSTATED}
    assert len(names) == len(rows) + len(pt.UNSTATED), "a choice is either stated by the authors' code or not"


def test_the_default_variant_is_the_theorem_block():
    v = cf.MODEL_CONFIGS["mnist"].variant()
    assert v == dict(norm="post", n_heads=1, activation="relu", qkv_bias=False, out_proj=False, out_proj_bias=False,
                     ffn_bias=True, patch_bias=True, pos_encoding="learned", head_bias=True)
    assert cf.MODEL_CONFIGS["cifar100"].variant() == v and cf.MODEL_CONFIGS["mnist"].init == "normal"
    assert cf.MODEL_CONFIGS["mnist"].ln_eps == 1e-12


@pytest.mark.parametrize("bad, message", [
    (dict(norm="sandwich"), "unknown norm 'sandwich'; choose one of: post, pre"),
    (dict(activation="tanh"), "unknown activation 'tanh'; choose one of: relu, gelu"),
    (dict(pos_encoding="rotary"), "unknown pos_encoding 'rotary'"),
    (dict(init="xavier"), "unknown init 'xavier'"),
    (dict(n_heads=3), "n_heads=3 must divide d_k=16 and d_model=16"),
    (dict(n_heads=0), "n_heads must be a positive integer"),
    (dict(out_proj_bias=True), "out_proj_bias=True needs out_proj=True"),
    (dict(qkv_bias=1), "qkv_bias must be True or False"),
    (dict(pos_encoding="sinusoidal", d_model=15), "needs an even d_model"),
    (dict(patch_size=5), "patch_size=5 must divide image_size=28"),
])
def test_invalid_variants_are_clear_errors(bad, message):
    with pytest.raises(cf.ConfigError, match=re.escape(message)):
        dataclasses.replace(cf.MODEL_CONFIGS["mnist"], **bad)


def test_authors_models_and_recipes_are_their_code():
    a, c = cf.MODEL_CONFIGS["authors_mnist"], cf.MODEL_CONFIGS["authors_cifar100"]
    assert a.variant() == dict(norm="post", n_heads=1, activation="gelu", qkv_bias=True, out_proj=True,
                               out_proj_bias=True, ffn_bias=False, patch_bias=True, pos_encoding="sinusoidal",
                               head_bias=True)
    assert (a.image_size, a.in_channels, a.patch_size, a.d_model, a.d_k, a.d_ff, a.n_blocks, a.n_classes, a.ln_eps) == \
        (28, 1, 4, 16, 16, 64, 1, 10, 1e-5)
    assert (c.image_size, c.in_channels, c.patch_size, c.d_model, c.d_k, c.d_ff, c.n_blocks, c.n_classes) == \
        (32, 3, 4, 128, 128, 512, 8, 100) and c.variant() == a.variant()
    m, r = cf.AUTHORS_RECIPES["mnist"], cf.AUTHORS_RECIPES["cifar100"]
    for x in (m, r):  # their recipes are Recipe values: nothing restated in a class of their own
        assert isinstance(x, cf.Recipe) and x.source == "authors" and x.shuffle == "dataloader"
        assert (x.optimizer, x.lr, x.betas, x.adam_eps, x.weight_decay, x.warmup_steps, x.grad_clip, x.batch_size,
                x.epochs, x.schedule, x.precision) == ("adamw", 1e-3, (0.9, 0.95), 1e-8, 0.0, 100, 1.0, 128, 100,
                                                       "constant", "float32")
    assert (m.model, m.seed, m.normalize) == ("authors_mnist", 37, ((0.1307,), (0.3081,)))
    assert (r.model, r.seed, r.normalize) == ("authors_cifar100", 21, ((0.5,) * 3, (0.5,) * 3))
    assert (m.crop_padding, m.rotation_degrees, m.hflip, m.ckpt_every, m.snapshot_every) == (2, 10.0, False, 100, 200)
    assert (r.crop_padding, r.rotation_degrees, r.hflip, r.ckpt_every, r.snapshot_every) == (2, 0.0, True, 1000, 10000)
