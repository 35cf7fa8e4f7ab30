"""No error is dropped (tracker issue 21, item 5): an unreadable published result or figure manifest is said,
with its fix, instead of being silently taken for a missing one; a missing one stays silent."""
from __future__ import annotations

import json
import warnings

import pytest

from curvature_gap import experiments
from curvature_gap import reproduce
from curvature_gap.experiments import Context, PublishedStore, StaleResultWarning, UnusableResult


def _published(tmp_path):
    return PublishedStore(tmp_path / "published" / "smoke")


def _refused(store, name):
    with pytest.raises(UnusableResult) as err:
        store.read(name, "")
    return err.value


def test_a_missing_published_result_is_silent(tmp_path):
    store = _published(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _refused(store, "fig3")
        experiments.warn_if_damaged(store, "fig3")
        experiments.warn_if_damaged(None, "fig3")


@pytest.mark.parametrize("damage", ["not json", "edited"])
def test_a_damaged_published_result_warns_with_the_fix(tmp_path, damage):
    store = _published(tmp_path)
    store.root.mkdir(parents=True)
    jp = store.json_path("fig3")
    jp.write_text("{ truncated" if damage == "not json" else json.dumps({"figure": "fig3", "sha256": "0" * 64}))
    with pytest.warns(StaleResultWarning) as rec:
        experiments.warn_if_damaged(store, "fig3")
    _refused(store, "fig3")
    msg = str(rec[0].message)
    assert "fig3" in msg and str(jp) in msg
    assert "git checkout" in msg and "curvature-gap reproduce --profile smoke --only fig3" in msg
    assert "curvature-gap publish --profile smoke --only fig3" in msg


def test_find_result_says_when_the_published_file_is_damaged(tmp_path, monkeypatch):
    """find_result still returns None (the rows are then `not run`), but no longer in silence."""
    monkeypatch.setattr(experiments, "_config", lambda name, ctx: (None, None, {"a": 1}, "abc123abc123"))
    ctx = Context(profile="smoke", results_dir=tmp_path / "results", published_dir=tmp_path / "published",
                  progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert experiments.find_result("fig3", ctx=ctx) is None          # nothing published: silent
    store = _published(tmp_path)
    store.root.mkdir(parents=True)
    store.json_path("fig3").write_text("{ truncated")
    with pytest.warns(StaleResultWarning, match="published result fig3 cannot be used"):
        assert experiments.find_result("fig3", ctx=ctx) is None


def test_read_manifest(tmp_path):
    path = tmp_path / "manifest.json"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reproduce.read_manifest(path) == {"figures": {}}     # none yet: silent
        path.write_text(json.dumps({"figures": {"fig3": {"status": "ok"}}}))
        assert reproduce.read_manifest(path) == {"figures": {"fig3": {"status": "ok"}}}
    for bad in ("{ truncated", "[1, 2]", json.dumps({"figures": []})):
        path.write_text(bad)
        with pytest.warns(RuntimeWarning) as rec:
            assert reproduce.read_manifest(path) == {"figures": {}}
        msg = str(rec[0].message)
        assert str(path) in msg and "started anew" in msg and "rerun `curvature-gap reproduce`" in msg
