"""``curvature-gap reproduce``: keep going past failures, exit codes, manifest, locks, resumption.

Most tests register cheap stand-in figures (same registry, same cache, same plotting path) so that
the orchestration is tested in seconds; one test runs the real Fig. 6 to see a missing dataset
reported as blocked.
"""
from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import numpy as np

from curvature_gap import cli, reproduce
from curvature_gap import experiments as ex
from curvature_gap.data import DataUnavailable
from curvature_gap.experiments.common import add_footer, new_figure

MANIFEST_KEYS = {"command", "profile", "config_hash", "git", "device", "torch_version", "wall_seconds", "outputs", "status"}


def _plot(result):
    fig = new_figure(3, 2)
    ax = fig.subplots()
    ax.plot(result["x"])
    add_footer(fig, result)
    return fig


def _register(monkeypatch, tmp_path, behaviours: dict):
    """Stand-in figures: behaviour "ok" computes (and counts), "fail" raises, "blocked" lacks data."""
    counter = tmp_path / "computed.txt"

    def make(name, how):
        def compute(job):
            if how == "fail":
                raise RuntimeError(f"{name} broke")
            if how == "blocked":
                raise DataUnavailable(f"{name}: dataset X is not available offline; put it into data/X")
            if how == "slow":
                time.sleep(1.0)
            with open(counter, "a") as f:
                f.write(name + "\n")
            return {"x": np.arange(4.0) * len(name)}, {"profile": job.ctx.profile}

        return ex.FigureSpec(name, "test", f"test_{name}", f"stand-in {how}", "assumption", compute, _plot)

    for name, how in behaviours.items():
        monkeypatch.setitem(ex.FIGURES, name, make(name, how))
    monkeypatch.setattr(ex, "FIGURE_NAMES", tuple(behaviours))
    return counter


def _run(tmp_path, only, profile="smoke", **kw):
    return reproduce.run(profile=profile, only=only, device="cpu", data_dir=tmp_path / "data",
                         results_dir=tmp_path / "results", figures_dir=tmp_path / "figures", runs_dir=tmp_path / "runs",
                         progress=False, command="curvature-gap reproduce (test)", **kw)


def _computed(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


def test_keeps_going_past_failures_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    counter = _register(monkeypatch, tmp_path, {"a": "ok", "b": "fail", "c": "blocked", "d": "ok"})
    code, outcomes = _run(tmp_path, None)
    assert code == 1
    assert [o.status for o in outcomes] == ["ok", "failed", "blocked", "ok"]
    assert _computed(counter) == ["a", "d"]
    for o in (outcomes[0], outcomes[3]):
        assert [Path(p).suffix for p in o.outputs] == [".pdf", ".png"] and all(Path(p).stat().st_size > 0 for p in o.outputs)
    out = capsys.readouterr().out
    assert "RuntimeError: b broke" in out and "dataset X is not available offline" in out
    assert "2/4 figures ok" in out
    table = out[out.index("figure  status"):]
    assert table.count("\n") >= 6 and "blocked" in table and "failed" in table

    doc = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert set(doc["figures"]) == {"a", "b", "c", "d"}
    for name, e in doc["figures"].items():
        assert MANIFEST_KEYS <= set(e), name
        assert e["profile"] == "smoke" and e["device"] == "cpu" and e["command"] == "curvature-gap reproduce (test)"
    assert doc["figures"]["a"]["config_hash"] == ex.config_hash_of("a", ctx=ex.Context(profile="smoke"))
    assert doc["figures"]["a"]["outputs"] == outcomes[0].outputs
    rc = doc["figures"]["a"]["results_computed"]  # when, where and by which commit the numbers were computed
    assert rc["device"] == "cpu" and rc["compute_seconds"] >= 0 and "commit" in rc["git"] and rc["created"]
    assert doc["figures"]["b"]["error"] == "RuntimeError: b broke" and doc["figures"]["b"]["outputs"] == []
    assert doc["figures"]["c"]["status"] == "blocked"


def test_all_ok_exits_zero_and_a_restart_recomputes_only_what_is_missing(tmp_path, monkeypatch):
    counter = _register(monkeypatch, tmp_path, {"a": "ok", "b": "ok"})
    code, _ = _run(tmp_path, "a")
    assert code == 0 and _computed(counter) == ["a"]
    code, outcomes = _run(tmp_path, "a,b")  # as after an interrupted run
    assert code == 0 and _computed(counter) == ["a", "b"]
    assert [o.cached for o in outcomes] == [True, False]


def test_unknown_figure_is_one_line_and_exit_code_2(capsys):
    code = cli.main(["reproduce", "--profile", "smoke", "--only", "fig3,fig99"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "unknown figure fig99" in err and "valid names: fig3, fig4, fig5, fig6" in err and "fused_ln" in err


def test_parse_only_keeps_canonical_order():
    assert reproduce.parse_only("fig12, fig3") == ["fig3", "fig12"]
    assert reproduce.parse_only(None) == list(ex.FIGURE_NAMES)
    assert "fused_ln" in ex.FIGURE_NAMES and len(ex.FIGURE_NAMES) == 11


def test_missing_cifar100_blocks_fig6_with_the_instructions(tmp_path):
    code, outcomes = _run(tmp_path, "fig6", profile="paper")
    assert code == 1 and outcomes[0].status == "blocked"
    assert "CIFAR-100 is not available offline" in outcomes[0].message
    assert "cifar-100-python" in outcomes[0].message
    doc = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert doc["figures"]["fig6"]["status"] == "blocked" and doc["figures"]["fig6"]["profile"] == "paper"


def test_a_failed_rerun_says_where_the_files_on_disk_come_from(tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, {"a": "ok"})
    code, first = _run(tmp_path, "a")
    _register(monkeypatch, tmp_path, {"a": "blocked"})
    code, second = _run(tmp_path, "a", profile="paper")
    e = json.loads((tmp_path / "figures" / "manifest.json").read_text())["figures"]["a"]
    assert code == 1 and e["status"] == "blocked" and e["profile"] == "paper" and e["outputs"] == []
    assert e["files_on_disk_from"]["profile"] == "smoke"
    assert e["files_on_disk_from"]["outputs"] == first[0].outputs
    assert e["files_on_disk_from"]["config_hash"] == first[0].config_hash


def _child(tmp_path, q):
    try:
        code, outcomes = _run(tmp_path, "s")
        q.put((code, outcomes[0].config_hash))
    except BaseException as exc:  # pragma: no cover - reported to the parent
        q.put(("error", repr(exc)))


def test_two_concurrent_runs_compute_once_and_keep_the_manifest_valid(tmp_path, monkeypatch):
    counter = _register(monkeypatch, tmp_path, {"s": "slow"})
    mp = multiprocessing.get_context("fork")
    q = mp.Queue()
    procs = [mp.Process(target=_child, args=(tmp_path, q)) for _ in range(2)]
    for p in procs:
        p.start()
    res = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[0] for r in res] == [0, 0], res
    assert res[0][1] == res[1][1]
    assert _computed(counter) == ["s"]
    doc = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert doc["figures"]["s"]["status"] == "ok"
    assert not list((tmp_path / "figures").glob(".*.tmp")) and not list((tmp_path / "results").rglob("*.tmp"))


def test_summary_table_columns():
    o = [reproduce.Outcome("fig3", "ok", 1.234, "cpu", ["figures/a.pdf", "figures/a.png"]),
         reproduce.Outcome("fig6", "blocked", 0.5, "cpu", message="CIFAR-100 is not available offline. Download it")]
    t = reproduce.summary_table(o, 2.0, color=False)
    lines = t.splitlines()
    assert lines[0].split() == ["figure", "status", "seconds", "device", "outputs"]
    assert lines[2].split()[:4] == ["fig3", "ok", "1.2", "cpu"] and "figures/a.pdf, figures/a.png" in lines[2]
    assert "CIFAR-100 is not available offline" in lines[3]
    assert lines[-1] == "1/2 figures ok in 2.0 s"
