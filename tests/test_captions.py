"""curvature_gap.captions: every figure of every result has a message, computed from its numbers.

Each message is evaluated on the committed paper-profile results (published/paper/), and checked against the
numbers it states; one is evaluated on an edited copy to show that the message follows the numbers."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from curvature_gap import captions, experiments

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "published" / "paper"


def _published(name: str):
    doc = json.loads((PUBLISHED / f"{name}.json").read_text())
    with np.load(PUBLISHED / f"{name}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return SimpleNamespace(meta=doc["meta"], arrays=arrays, config=doc["config"])


def _parts():
    for s in experiments.SPECS.values():
        for part in s.plots:
            yield s.name, part


def test_every_figure_part_of_every_result_has_a_message():
    missing = [(n, p) for n, p in _parts() if p not in experiments.spec(n).messages]
    assert not missing, f"figures without a caption message: {missing}"
    extra = [(s.name, p) for s in experiments.SPECS.values() for p in s.messages if p not in s.plots]
    assert not extra, f"messages of parts no figure draws: {extra}"
    with pytest.raises(KeyError, match=r"SPECS\['fig3'\].messages in curvature_gap.experiments.heatmaps"):
        experiments.message("fig3", "no-such-part", None)


@pytest.mark.parametrize("name,part", [(n, p) for n, p in _parts() if (PUBLISHED / f"{n}.json").is_file()])
def test_each_message_is_one_sentence_on_the_published_numbers(name, part):
    msg = experiments.message(name, part, _published(name))
    assert msg.endswith(".") and len(msg) < 320 and msg.count("$") % 2 == 0, msg
    assert "nan" not in msg and "inf" not in msg, msg


def test_the_heatmap_message_follows_the_ranking():
    res = _published("fig3")
    order = res.meta["rankings"]["block"]["fro"]
    msg = experiments.message("fig3", "hessian", res)
    assert captions.unit_tex(order[0]) in msg and "At initialisation" in msg
    edited = copy.deepcopy(res)
    edited.meta["rankings"]["block"]["fro"] = ["W_V"] + [u for u in order if u != "W_V"]
    assert "block (outlined) is the largest diagonal block" in experiments.message("fig3", "hessian", edited)


def test_the_theory_messages_state_their_numbers():
    flat = {"slope_jacobian": -1.004, "slope_hessian": -1.98}
    assert "sigma^{-1.00}" in captions.layernorm_flattening(flat) and "sigma^{-1.98}" in captions.layernorm_flattening(flat)
    sweep = {"decades": {"Q": 4.2, "K": 4.0, "V": 0.9, "1": 0.1, "2": 0.3}}
    m = captions.input_scaling(sweep)
    assert "$W_{Q}$ block most (4.2 decades" in m and "$W_{1}$ block least (0.1)" in m
    recs = [{"check": "thm1.printed", "x": 2.0 ** k, "ratio": 10.0 ** (6 - k / 2)} for k in range(0, 16)]
    recs += [{"check": "thm1.repaired", "x": 2.0 ** k, "ratio": 1e6} for k in range(0, 16)]
    m = captions.theorem1_sweeps(recs)
    assert "from $a = 2^{13}$ on" in m and "never does (least 1e+06×)" in m
    assert captions.ordinal(1) == "1st" and captions.ordinal(12) == "12th" and captions.ordinal(23) == "23rd"
