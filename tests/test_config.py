"""curvature_gap.config: Table 1's models, the run profiles, their hashes, and the choices the paper leaves open."""
from __future__ import annotations

import dataclasses

import pytest

from curvature_gap import config as cf


def test_table1_models():
    m, c = cf.MODEL_CONFIGS["mnist"], cf.MODEL_CONFIGS["cifar100"]
    assert (m.n_tokens, m.patch_dim, m.d_model, m.d_ff, m.n_blocks, m.n_classes) == (49, 16, 16, 64, 1, 10)
    assert (c.n_tokens, c.patch_dim, c.d_model, c.d_ff, c.n_blocks, c.n_classes) == (64, 48, 128, 512, 8, 100)


def test_profiles_overrides_and_choices():
    assert set(cf.PROFILE_CONFIGS) == {(m, p) for m in cf.MODELS for p in cf.PROFILES}
    cfg = cf.train_config("cifar100", "smoke", epochs=3)
    assert cfg.epochs == 3 and cfg.model_config().n_blocks == 2 and cf.train_config("cifar100", "smoke").epochs == 1
    with pytest.raises(cf.ConfigError, match="unknown profile 'huge'; choose one of: smoke, paper"):
        cf.train_config("mnist", "huge")
    with pytest.raises(cf.ConfigError, match="unknown model 'imagenet'; choose one of: mnist, cifar100"):
        cf.train_config("imagenet", "paper")


def test_the_hash_is_stable_and_changes_with_every_setting():
    cfg = cf.train_config("mnist", "smoke")
    assert cfg.hash() == cf.train_config("mnist", "smoke").hash() and len(cfg.hash()) == 12
    hashes = {cfg.hash()}
    for f in dataclasses.fields(cf.TrainConfig):
        v = getattr(cfg, f.name)
        new = {"model": "cifar100", "profile": "paper", "optimizer": "adamw", "schedule": "constant",
               "model_overrides": (("d_ff", 8),)}.get(f.name, None)
        if new is None:
            new = (not v) if isinstance(v, bool) else (1 if v is None else v * 2 + 1 if isinstance(v, (int, float)) else v)
        hashes.add(dataclasses.replace(cfg, **{f.name: new}).hash())
    assert len(hashes) == len(dataclasses.fields(cf.TrainConfig)) + 1
    assert cf.config_hash({"a": 1, "b": 2}) == cf.config_hash({"b": 2, "a": 1})


def test_unstated_choices_have_reasons():
    assert len(cf.UNSTATED) >= 10
    assert all(set(u) == {"name", "value", "reason"} and all(u.values()) for u in cf.UNSTATED)
