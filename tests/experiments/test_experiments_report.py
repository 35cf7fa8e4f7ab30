"""curvature_gap.experiments.report: each published number beside the recomputed one, and what differs."""
from __future__ import annotations

import pytest

from curvature_gap.experiments import report as rp
from curvature_gap.experiments.store import Result


def _fig6(chash="h1", slope=-1.0, r2=0.99):
    return Result("fig6", chash, {}, {}, {"fit": {"slope": slope, "r2": r2}, "loss_max": 2.0, "loss_mean": 0.5})


def test_same_configuration_and_numbers_differ_by_nothing():
    e = rp.compare("fig6", _fig6(), _fig6())
    assert e["differs"] == "nothing" and e["status"] == "ok"
    assert [n["name"] for n in e["numbers"]] == list(rp.key_numbers("fig6", _fig6()))
    assert all(n["rel_diff"] == 0.0 for n in e["numbers"])


def test_rounding_other_numbers_and_another_configuration():
    assert rp.compare("fig6", _fig6(), _fig6(slope=-1.0 * (1 + 1e-6)))["differs"].startswith("nothing beyond rounding")
    other = rp.compare("fig6", _fig6(), _fig6(slope=-0.9))
    assert other["differs"].startswith("numbers differ by up to 1.0e-01 relative")
    cfg = rp.compare("fig6", _fig6(), _fig6(chash="h2", slope=-0.9))
    assert cfg["differs"] == "the configuration (settings, training or code) differs from the published one"


def test_not_reproduced_and_nothing_published():
    blocked = rp.compare("fig6", _fig6(), None, "blocked", "CIFAR-100 is not available offline")
    assert blocked["differs"] == "not recomputed: CIFAR-100 is not available offline"
    assert all(n["recomputed"] is None and n["published"] is not None for n in blocked["numbers"])
    new = rp.compare("fig6", None, _fig6())
    assert new["differs"] == "nothing published to compare with" and all(n["published"] is None for n in new["numbers"])
    assert rp.compare("fig6", None, None, "skipped")["numbers"] == []


def test_a_published_result_of_another_layout_is_reported_not_fatal():
    """A result published under the same name by other code (a renamed result) cannot be read by this code's key
    numbers: the report says so, for a blocked and for a recomputed result alike, and goes on."""
    old = Result("fig6", "h0", {}, {}, {"fit": {"slope": -1.0}})  # no "loss_max": another layout
    blocked = rp.compare("fig6", old, None, "blocked", "CIFAR-100 is missing")
    assert blocked["differs"].startswith("not recomputed: CIFAR-100 is missing; the published result has another "
                                         "layout (KeyError: 'r2')") and blocked["numbers"] == []
    new = rp.compare("fig6", old, _fig6())
    assert "another layout" in new["differs"] and "make publish" in new["differs"]
    assert all(n["published"] is None and n["recomputed"] is not None for n in new["numbers"])


def test_report_md_lists_every_result_and_a_table_per_result_with_numbers():
    entries = [rp.compare("fig6", _fig6(), _fig6(slope=-0.9)), rp.compare("fig3", None, None, "blocked", "no | data")]
    md = rp.report_md(entries, "header line")
    assert md.startswith("# Reproduction report\n\nheader line\n")
    assert "| fig6 | ok |" in md and "| fig3 | blocked | not recomputed: no / data |" in md
    assert md.count("## ") == 1 and "| fitted slope | -1 | -0.9 | 1.0e-01 |" in md


def test_every_result_reproduce_runs_has_key_numbers():
    """The report is written after every result is computed: a result without key numbers would lose it."""
    from curvature_gap import experiments

    missing = [n for n, s in experiments.SPECS.items() if s.key_numbers is None]
    assert not missing, f"results without key numbers: {missing}"
    with pytest.raises(KeyError, match="declares no key numbers"):
        rp.key_numbers("no-such-result", None)
