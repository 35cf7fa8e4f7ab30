"""curvature_gap.experiments.store: the results cache (integrity, configuration match) and the published results."""
from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest

from curvature_gap.experiments.store import PublishedStore, ResultStore, StaleResultWarning, UnusableResult

CFG = {"a": 1, "t": [1, 2], "code": "0123abcd"}


def _save(root, figure="figX", chash="abc", cfg=CFG):
    return ResultStore(root).save(figure, chash, cfg, {"x": np.arange(3.0)}, {"v": np.float64(2.5), "n": float("nan")},
                                  {"provenance": {"device": "cpu"}})


@pytest.mark.fault("setting-changed")
def test_result_store_roundtrip_and_config_mismatch(tmp_path):
    st = ResultStore(tmp_path)
    r = _save(tmp_path)
    got = st.load("figX", "abc", CFG)
    assert got.from_cache and got["v"] == 2.5 and got["n"] == "nan" and "x" in got
    np.testing.assert_array_equal(got["x"], [0, 1, 2])
    assert got.provenance["device"] == "cpu" and got.provenance["created"]
    with pytest.warns(StaleResultWarning, match="another configuration"):
        assert st.load("figX", "abc", {**CFG, "a": 2}) is None
    assert st.load("figX", "zzz", CFG) is None  # missing: no warning, just absent
    assert r.paths == [str(tmp_path / "figX" / "abc.json"), str(tmp_path / "figX" / "abc.npz")]
    assert not r.from_cache


@pytest.mark.parametrize("damage, why", [
    ("truncate_npz", "bytes, expected"), ("edit_npz", "does not match its recorded sha256"),
    ("edit_json", "does not match its sha256"), ("truncate_json", "cannot be read"), ("delete_npz", "is missing"),
])
def test_read_names_what_is_wrong_with_a_damaged_result(tmp_path, damage, why):
    r = _save(tmp_path)
    if damage == "truncate_npz":
        r.npz_path.write_bytes(r.npz_path.read_bytes()[:100])
    elif damage == "edit_npz":
        data = bytearray(r.npz_path.read_bytes())
        data[-200] ^= 0xFF
        r.npz_path.write_bytes(bytes(data))
    elif damage == "edit_json":
        doc = json.loads(r.json_path.read_text())
        doc["meta"]["v"] = 3.5
        r.json_path.write_text(json.dumps(doc))
    elif damage == "truncate_json":
        r.json_path.write_text(r.json_path.read_text()[:50])
    else:
        r.npz_path.unlink()
    with pytest.raises(UnusableResult, match=why):
        ResultStore(tmp_path).read("figX", "abc")
    with pytest.warns(StaleResultWarning, match="recomputing"):
        assert ResultStore(tmp_path).load("figX", "abc", CFG) is None


def test_partial_dir_and_lock_paths(tmp_path):
    st = ResultStore(tmp_path)
    assert st.partial_dir("fig", "h") == tmp_path / "fig" / "h.partial"
    with st.lock("fig", "h"):
        assert (tmp_path / "fig" / ".h.lock").exists()


@pytest.mark.fault("stale-published")
def test_published_store_refuses_another_configuration_and_says_what_differs(tmp_path):
    r = _save(tmp_path / "results", cfg=CFG)
    pub = PublishedStore(tmp_path / "published" / "paper")
    out = pub.publish(r)
    assert out.paths == [str(tmp_path / "published" / "paper" / "figX.json"), str(tmp_path / "published" / "paper" / "figX.npz")]
    got = pub.check("figX", "abc", CFG)
    np.testing.assert_array_equal(got["x"], [0, 1, 2])
    assert "created" not in json.loads(out.json_path.read_text())["provenance"]
    new = {**CFG, "code": "ffff0000"}   # the code that computes it changed: another config hash
    with pytest.raises(UnusableResult) as err:
        pub.check("figX", "def", new)
    msg = str(err.value)
    assert "figX.json" in msg and "config abc, now def" in msg and "code: '0123abcd' -> 'ffff0000'" in msg
    with pytest.raises(UnusableResult, match="does not exist"):
        pub.check("figY", "abc", CFG)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ResultStore(tmp_path / "results").load("figX", "abc", CFG).from_cache


def test_a_republish_of_the_same_numbers_rewrites_nothing(tmp_path):
    """`make publish` after a recomputation that changed no number: neither published file is written again (an
    atomic write replaces the file: another inode), the .json keeps its date; a changed array is written."""
    pub = PublishedStore(tmp_path / "published")
    first = pub.publish(_save(tmp_path / "results"))
    npz, doc = first.npz_path.read_bytes(), first.json_path.read_text()
    inodes = (first.npz_path.stat().st_ino, first.json_path.stat().st_ino)
    time.sleep(1.1)  # another creation date for the same numbers
    again = pub.publish(_save(tmp_path / "results2"))  # the same numbers, computed again
    assert again.npz_path.read_bytes() == npz and again.json_path.read_text() == doc
    assert (again.npz_path.stat().st_ino, again.json_path.stat().st_ino) == inodes, "a file was written again"
    assert pub.check("figX", "abc", CFG)["v"] == 2.5
    r = _save(tmp_path / "results3")
    r.meta["v"] = 3.0  # the same arrays, another number in the meta: the .json changes, the .npz does not
    pub.publish(r)
    assert pub.npz_path("figX").stat().st_ino == inodes[0] and json.loads(pub.json_path("figX").read_text())["meta"]["v"] == 3.0
    r.arrays["x"] = np.arange(3.0) + 1e-16 * np.arange(3.0) + np.array([0.0, 0.0, 2.0 ** -50])  # one bit of one entry
    pub.publish(r)
    assert pub.npz_path("figX").read_bytes() != npz
    np.testing.assert_array_equal(pub.check("figX", "abc", CFG)["x"], r.arrays["x"])
