"""Per-result settings of each profile: declared by each figure's module (the points of its FigureSpec's grid),
each a Variant (model, dataset, arithmetic) where it reads a trained model; the trajectory's, shared, in
curvature_gap.experiments.settings."""
from __future__ import annotations

import dataclasses

import pytest

from curvature_gap.config import ConfigError, PROFILES
from curvature_gap.experiments import INTERNAL, SPECS
from curvature_gap.experiments import settings as st


def test_every_result_declares_frozen_settings_for_its_profiles_and_smoke_is_smaller():
    for name, s in {**SPECS, **INTERNAL}.items():
        assert s.profiles and set(s.profiles) <= set(PROFILES), name
        assert "paper" in s.profiles, f"{name} has no paper-profile settings"
        for prof, v in s.settings.items():
            assert dataclasses.is_dataclass(v) and v.__dataclass_params__.frozen, (name, prof)
        if "smoke" in s.settings:
            assert type(s.settings["smoke"]) is type(s.settings["paper"]), name
        if isinstance(s.settings["paper"], st.Variant):  # the variant is the settings' fields, the id derived from them
            assert s.spec.id_of(s.settings["paper"]) == name
    assert SPECS["fig6_mnist"].profiles == ("paper",)                                 # a paper-only stand-in
    paper, smoke = (lambda n: SPECS[n].settings["paper"]), (lambda n: SPECS[n].settings["smoke"])
    assert paper("fig3").batch_size == 128 and st.trajectory_settings("paper").n_steps == 1000  # the paper's values
    assert smoke("fig3").batch_size < paper("fig3").batch_size
    assert st.trajectory_settings("smoke").n_steps < st.trajectory_settings("paper").n_steps
    assert paper("fig6").dataset == "cifar100" and paper("fig6_mnist").dataset == "mnist"
    assert paper("fig6").model_key == "cifar100" and paper("fig12_authors").model_key == "authors_cifar100"
    assert paper("fig3").step == 0 and paper("fig4").step is None and paper("fig4_authors").step == 20_000
    assert (paper("fig4_authors_exact").model, paper("fig4_authors_exact").arithmetic) == ("authors", "exact")
    with pytest.raises(ConfigError, match="choose one of: paper, smoke"):
        st.trajectory_settings("huge")
    with pytest.raises(ConfigError, match="unknown model 'authors_mnist'; choose one of: table1, authors"):
        st.Variant(model="authors_mnist")
    with pytest.raises(ConfigError, match="unknown arithmetic 'bf16'"):
        st.Variant(arithmetic="bf16")


def test_replace_and_as_dict_round_trip_tuples_through_json_lists():
    t = st.trajectory_settings("smoke")
    r = st.replace(t, steps=[0, 2], n_steps=2)
    assert r.steps == (0, 2) and r.n_steps == 2 and t.steps != r.steps
    d = st.as_dict(r)
    assert d["steps"] == [0, 2] and isinstance(d["display_steps"], list)
    assert st.replace(t, **d) == r
