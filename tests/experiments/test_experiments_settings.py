"""curvature_gap.experiments.settings: per-result settings of each profile."""
from __future__ import annotations

import dataclasses

import pytest

from curvature_gap.config import ConfigError
from curvature_gap.experiments import settings as st


def test_both_profiles_define_every_result_and_smoke_is_smaller():
    paper, smoke = st.settings_for("paper"), st.settings_for("smoke")
    assert set(st.PROFILE_SETTINGS) == {"paper", "smoke"}
    for f in dataclasses.fields(st.FigureSettings):
        assert type(getattr(paper, f.name)) is type(getattr(smoke, f.name)), f.name
    assert paper.init_heatmap.batch_size == 128 and paper.trajectory.n_steps == 1000     # the paper's values
    assert smoke.init_heatmap.batch_size < paper.init_heatmap.batch_size
    assert smoke.trajectory.n_steps < paper.trajectory.n_steps
    assert paper.convergence.model == "cifar100" and paper.convergence_mnist.model == "mnist"
    assert not paper.init_heatmap.trained and paper.trained_heatmap.trained
    with pytest.raises(ConfigError, match="choose one of: paper, smoke"):
        st.settings_for("huge")


def test_replace_and_as_dict_round_trip_tuples_through_json_lists():
    t = st.settings_for("smoke").trajectory
    r = st.replace(t, steps=[0, 2], n_steps=2)
    assert r.steps == (0, 2) and r.n_steps == 2 and t.steps != r.steps
    d = st.as_dict(r)
    assert d["steps"] == [0, 2] and isinstance(d["display_steps"], list)
    assert st.replace(t, **d) == r
