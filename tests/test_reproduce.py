"""curvature_gap.reproduce (``curvature-gap reproduce`` and ``publish``): keep going past failures, exit codes,
the long-run guard, manifest, report, locks, resumption.

Most tests register cheap stand-in results (same registry, same cache, same plotting path) so that the
orchestration is tested in seconds; Fig. 6 at paper scale is run for real to see a missing dataset reported
as blocked.
"""
from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pytest

from cases import mnist_datasets
from curvature_gap import cli, reproduce
from curvature_gap import experiments
from curvature_gap.config import ConfigError, recipe_for
from curvature_gap.cost import RunCost
from curvature_gap.data import DataUnavailable
from curvature_gap.plotting import new_figure

MANIFEST_KEYS = {"figure", "command", "profile", "config_hash", "git", "device", "torch_version", "wall_seconds", "outputs",
                 "status", "results_computed", "finished"}


def _cost(seconds_per_step: float, asked: list | None = None):
    """A stand-in for ``cost.training_cost``: ``seconds_per_step`` (no step is timed); records the models asked."""
    def cost(cfg, device, run_steps=None, **kw):
        if asked is not None:
            asked.append(cfg.model)
        return RunCost(title=f"the {cfg.model} model", recipe="a recipe", seed=cfg.seed, device=str(device),
                       seconds_per_step=seconds_per_step, steps_per_epoch=100, steps=run_steps or 100, evaluation_s=0.0)
    return cost


def _plot(result):
    fig = new_figure(3, 2)
    fig.subplots().plot(result["x"])
    return fig


def _register(monkeypatch, tmp_path, behaviours: dict, keep=(), trains=False):
    """Stand-in results: "ok" computes (and counts), "fail" raises, "blocked" lacks data, "slow" sleeps first.
    ``keep`` names real results to leave in the registry beside them; ``trains``: each reads the whole MNIST run
    (its figure declares it: the runner trains it first, the long-run guard prices it)."""
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

        # the MNIST settings of Fig. 12 under both profiles (its paper profile is the CIFAR-100 model)
        settings = {"paper": experiments.spec("fig12_mnist").settings["paper"], "smoke": experiments.spec("fig12").settings["smoke"]}
        return experiments.FigureSpec(name, "check", f"test_{name}", f"stand-in {how}", (experiments.Point(settings),),
                                      compute, {"main": _plot}, runs=(lambda s, ctx: [(None, None)]) if trains else None,
                                      key_numbers=lambda r: {"sum of x": float(r["x"].sum())})

    for name, how in behaviours.items():
        (result,) = make(name, how).results
        monkeypatch.setitem(experiments.SPECS, name, result)
    names = tuple(keep) + tuple(behaviours)
    monkeypatch.setattr(experiments, "RESULT_NAMES", names)
    monkeypatch.setattr(experiments, "FIGURE_NAMES", names)
    return counter


def _run(tmp_path, only, profile="smoke", allow_long=True, **kw):
    (tmp_path / "published").mkdir(exist_ok=True)
    return reproduce.run(profile=profile, only=only, device="cpu", data_dir=tmp_path / "data",
                         results_dir=tmp_path / "results", figures_dir=tmp_path / "figures", runs_dir=tmp_path / "runs",
                         published_dir=tmp_path / "published", progress=False, allow_long=allow_long,
                         command="curvature-gap reproduce (test)", **kw)


def _computed(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


@pytest.mark.slow
@pytest.mark.fault("one-figure-fails")
def test_keeps_going_past_failures_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    counter = _register(monkeypatch, tmp_path, {"a": "ok", "b": "fail", "c": "blocked", "d": "ok"})
    code, outcomes = _run(tmp_path, None)
    assert code == 1
    assert [o.status for o in outcomes] == ["ok", "failed", "blocked", "ok"]
    assert _computed(counter) == ["a", "d"]
    for o in (outcomes[0], outcomes[3]):
        assert [Path(p).suffix for p in o.outputs] == [".pdf", ".png"] and all(Path(p).stat().st_size > 0 for p in o.outputs)
    out = capsys.readouterr().out
    assert "FAILED: RuntimeError: b broke" in out and "BLOCKED: c: dataset X is not available offline" in out
    assert "2/4 results ok" in out
    table = out[out.index("result  status"):]
    assert table.count("\n") >= 6 and "blocked" in table and "failed" in table

    doc = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert set(doc["figures"]) == {"a", "b", "c", "d"}
    for name, e in doc["figures"].items():
        assert MANIFEST_KEYS <= set(e), name
        assert e["profile"] == "smoke" and e["device"] == "cpu" and e["command"] == "curvature-gap reproduce (test)"
    assert doc["figures"]["a"]["config_hash"] == experiments.config_hash_of("a", ctx=experiments.Context(profile="smoke"))
    assert doc["figures"]["a"]["outputs"] == outcomes[0].outputs
    rc = doc["figures"]["a"]["results_computed"]  # when, where and by which commit the numbers were computed
    assert rc["device"] == "cpu" and rc["compute_seconds"] >= 0 and "commit" in rc["git"] and rc["created"]
    assert doc["figures"]["b"]["error"] == "RuntimeError: b broke" and doc["figures"]["b"]["outputs"] == []
    assert doc["figures"]["c"]["status"] == "blocked"
    report = json.loads((tmp_path / "figures" / "reproduction_report.json").read_text())
    assert [e["status"] for e in report["entries"]] == ["ok", "failed", "blocked", "ok"]


@pytest.mark.slow
@pytest.mark.fault("reproduce-killed")
def test_all_ok_exits_zero_and_a_restart_recomputes_only_what_is_missing(tmp_path, monkeypatch):
    counter = _register(monkeypatch, tmp_path, {"a": "ok", "b": "ok"})
    code, _ = _run(tmp_path, "a")
    assert code == 0 and _computed(counter) == ["a"]
    code, outcomes = _run(tmp_path, "a,b")  # as after an interrupted run
    assert code == 0 and _computed(counter) == ["a", "b"]
    assert [o.cached for o in outcomes] == [True, False]


@pytest.mark.fault("dataset-missing")
def test_missing_cifar100_blocks_fig6_only_and_the_run_exits_zero(tmp_path, monkeypatch):
    counter = _register(monkeypatch, tmp_path, {"a": "ok"}, keep=("fig6",))
    asked = []
    monkeypatch.setattr(reproduce, "training_cost", _cost(0.1, asked))
    code, outcomes = _run(tmp_path, "fig6,a", profile="paper", allow_long=False,
                          ctx_kwargs={"datasets": {"mnist": mnist_datasets(64, 16)}})
    assert code == 0, "a result that cannot be obtained here is not a failure"
    assert [(o.figure, o.status) for o in outcomes] == [("fig6", "blocked"), ("a", "ok")]
    assert _computed(counter) == ["a"]
    assert "CIFAR-100 is not available offline" in outcomes[0].message and "cifar-100-python" in outcomes[0].message
    # the blocked message names the run the data would start and its measured cost (200 epochs x 100 steps x 0.1 s)
    assert asked == ["cifar100"], "the cost of the run fig6 would start, measured once"
    assert "Once it is there: training the cifar100 model" in outcomes[0].message
    assert "for 20,000 steps" in outcomes[0].message and "about 0.6 h on cpu" in outcomes[0].message
    assert "--allow-long-runs" in outcomes[0].message
    doc = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert doc["figures"]["fig6"]["status"] == "blocked" and doc["figures"]["fig6"]["profile"] == "paper"
    md = (tmp_path / "figures" / "reproduction_report.md").read_text()
    assert "| training | " in md and "| Hessians | " in md and "| rest | " in md
    assert "The training's floor: 0 steps of 0 run(s)" in md, "nothing was trained here"
    row = next(ln for ln in md.splitlines() if ln.startswith("| fig6 |"))
    assert "| blocked | not recomputed: CIFAR-100 is not available offline" in row
    assert next(ln for ln in md.splitlines() if ln.startswith("| a |")).startswith("| a | ok | nothing published")


@pytest.mark.slow
@pytest.mark.fault("long-run")
def test_a_long_training_run_is_skipped_unless_allowed(tmp_path, monkeypatch, capsys):
    counter = _register(monkeypatch, tmp_path, {"a": "ok", "b": "ok"}, trains=True)
    asked = []
    steps = 100 * recipe_for("mnist", "smoke").epochs  # the stand-in cost's 100 steps per epoch
    monkeypatch.setattr(reproduce, "training_cost", _cost(3 * 3600.0 / steps, asked))  # 3 h for the run
    tiny = {"datasets": {"mnist": mnist_datasets(64, 16)}}
    code, outcomes = _run(tmp_path, "a,b", allow_long=False, ctx_kwargs=tiny)
    assert code == 0 and [o.status for o in outcomes] == ["skipped", "skipped"] and _computed(counter) == []
    assert asked == ["mnist"], "the cost is measured once per model shape in a reproduction"
    msg = outcomes[0].message
    assert f"for {steps} steps" in msg and "would take about 3.0 h on cpu" in msg and "--allow-long-runs" in msg
    assert "the mnist model" in msg, "the message names the run"
    assert "SKIPPED" in capsys.readouterr().out
    code, outcomes = _run(tmp_path, "a", allow_long=True, ctx_kwargs=tiny)
    assert code == 0 and outcomes[0].status == "ok" and _computed(counter) == ["a"] and len(asked) == 1
    monkeypatch.setattr(reproduce, "training_cost", _cost(1.0))
    code, outcomes = _run(tmp_path, "b", allow_long=False, ctx_kwargs=tiny)
    assert outcomes[0].status == "ok", "an estimate under 30 minutes runs"


@pytest.mark.fault("long-run")
def test_the_guard_names_the_authors_cifar_runs_with_their_seeds_and_steps(tmp_path, monkeypatch):
    """Figs. 6 and 12 on the authors' model: blocked without CIFAR-100, the message naming each run (seed 42 for
    Fig. 6, 21 for Fig. 12), the steps to the checkpoint (10,000) and the cost measured once for both."""
    asked = []
    monkeypatch.setattr(reproduce, "training_cost", _cost(0.7, asked))
    ctx = experiments.Context(profile="paper", device="cpu", runs_dir=tmp_path / "runs", data_dir=tmp_path / "no-data",
                     progress=False)
    msgs = {}
    for name in ("fig6_authors", "fig12_authors"):
        with pytest.raises(DataUnavailable) as err:
            reproduce._long_run(name, ctx)
        msgs[name] = str(err.value)
    assert asked == ["authors_cifar100"]
    for name, seed in (("fig6_authors", 42), ("fig12_authors", 21)):
        assert "CIFAR-100" in msgs[name] and f"seed {seed}) for 10,000 steps" in msgs[name]
        assert "about 1.9 h on cpu" in msgs[name] and "0.7 s per step measured now" in msgs[name]


def test_the_cost_is_the_timed_step_times_the_steps_of_the_run(monkeypatch):
    """The step time is the timed steps' own (train's loop: no setup of the call), times the steps of the run."""
    from curvature_gap import cost

    trained, loops = [], iter([{"steps": 2, "seconds": 9.0}, {"steps": 3, "seconds": 6.0},
                               {"steps": 2, "seconds": 9.0}, {"steps": 3, "seconds": 3.0}])
    monkeypatch.setattr(cost, "train", lambda cfg, *a, **k: trained.append(type(cfg).__name__) or
                        {"interrupted_at_step": 0, "loop": next(loops)})
    cfg = recipe_for("mnist", "paper")                    # 60,000 images, batch 128, 15 epochs
    c = cost.training_cost(cfg, "cpu", steps=3)
    assert c.seconds_per_step == pytest.approx(2.0) and c.steps == 469 * 15 and c.steps_per_epoch == 469
    assert c.seconds == pytest.approx(2.0 * 469 * 15) and c.evaluations == 15
    assert reproduce.LONG_RUN_S == 30 * 60
    # the authors' recipe is timed through its own trainer, to the step a figure reads
    c = cost.training_cost(recipe_for("authors_cifar100", "paper"), "cpu", run_steps=10_000, steps=3)
    assert c.steps == 10_000 and c.steps_per_epoch == 391 and c.seconds == pytest.approx(10_000.0)
    assert c.title == "the authors' 8-block CIFAR-100 model" and "their" not in c.recipe
    assert trained == ["Recipe"] * 2 + ["Recipe"] * 2, "warm-up and timed steps, each by the run's trainer"


def test_the_report_splits_the_time_and_states_the_training_floor():
    """Training (in the results and side by side), Hessians and the rest add up to the total; the floor is the
    runs' steps times their measured step time over the cores."""
    import os

    ctx = experiments.Context(profile="smoke", device="cpu", progress=False)
    ctx.phases.update({"training": 30.0, "training (side by side)": 50.0, "hessian": 12.0, "data": 3.0})
    ctx.trained += [dict(run="a", steps=1000, seconds=15.0), dict(run="b", steps=3000, seconds=45.0),
                    dict(run="a", steps=500, seconds=7.5)]
    split = reproduce.timing_split(ctx, 100.0)
    cores = os.cpu_count()
    assert (split["training"], split["Hessians"], split["rest"]) == (80.0, 12.0, 8.0)
    assert split["floor"] == dict(steps=4500, runs=2, step_ms=15.0, cores=cores, seconds=round(67.5 / cores, 4))


@pytest.mark.fault("unknown-figure")
def test_unknown_figure_is_one_line_and_exit_code_2(capsys):
    code = cli.main(["reproduce", "--profile", "smoke", "--only", "fig3,fig99"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "unknown figure fig99" in err and "fused_ln" in err
    valid = err.split("valid names: ")[1].split(", ")
    assert [n for n in valid if n in ("fig3", "fig4", "fig5", "fig6")] == ["fig3", "fig4", "fig5", "fig6"]


def test_parse_only_keeps_canonical_order_and_the_profile():
    assert reproduce.parse_only("fig12, fig3") == ["fig3", "fig12"]
    assert reproduce.parse_only(None) == list(experiments.RESULT_NAMES)
    assert "fig6_mnist" not in reproduce.parse_only(None, "smoke") and "fig6_mnist" in reproduce.parse_only(None)
    assert "fused_ln" in experiments.FIGURE_NAMES and "trained_bounds" in experiments.RESULT_NAMES
    with pytest.raises(ConfigError, match="unknown figures a, b"):
        reproduce.parse_only("a,b")


@pytest.mark.slow
@pytest.mark.fault("one-figure-fails")
def test_a_failed_rerun_says_where_the_files_on_disk_come_from(tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path, {"a": "ok"})
    code, first = _run(tmp_path, "a")
    _register(monkeypatch, tmp_path, {"a": "blocked"})
    code, second = _run(tmp_path, "a", profile="paper")
    e = json.loads((tmp_path / "figures" / "manifest.json").read_text())["figures"]["a"]
    assert code == 0 and e["status"] == "blocked" and e["profile"] == "paper" and e["outputs"] == []
    assert e["files_on_disk_from"]["profile"] == "smoke"
    assert e["files_on_disk_from"]["outputs"] == first[0].outputs
    assert e["files_on_disk_from"]["config_hash"] == first[0].config_hash


def _child(tmp_path, q):
    code, outcomes = _run(tmp_path, "s")       # an exception ends the child with a non-zero exit code
    q.put((code, outcomes[0].config_hash))


@pytest.mark.slow
@pytest.mark.fault("concurrent-runs")
def test_two_concurrent_runs_compute_once_and_keep_the_manifest_valid(tmp_path, monkeypatch):
    counter = _register(monkeypatch, tmp_path, {"s": "slow"})
    mp = multiprocessing.get_context("fork")
    q = mp.Queue()
    procs = [mp.Process(target=_child, args=(tmp_path, q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    assert [p.exitcode for p in procs] == [0, 0]
    res = [q.get(timeout=10) for _ in procs]
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
    assert lines[0].split() == ["result", "status", "seconds", "device", "outputs"]
    assert lines[2].split() == ["fig3", "ok", "1.2", "cpu", "2", "files"]
    assert "CIFAR-100 is not available offline" in lines[3] and "Download it" not in lines[3]
    assert lines[-1] == "1/2 results ok in 2.0 s"
    assert "\033[32m" in reproduce.summary_table(o, color=True)


@pytest.mark.slow
def test_publish_copies_the_cached_results_of_the_current_configuration(tmp_path, monkeypatch, capsys):
    _register(monkeypatch, tmp_path, {"a": "ok", "b": "ok"})
    _run(tmp_path, "a")
    with pytest.raises(ConfigError, match="b has no cached result.*curvature-gap reproduce --profile smoke --only b"):
        reproduce.publish("smoke", tmp_path / "results", tmp_path / "published", only="b")
    written = reproduce.publish("smoke", tmp_path / "results", tmp_path / "published")
    assert sorted(Path(p).name for p in written) == ["a.json", "a.npz"], "no record of a reproduction in figures/"
    assert "not published (no cached result of the current configuration): b" in capsys.readouterr().out
    written = reproduce.publish("smoke", tmp_path / "results", tmp_path / "published", figures_dir=tmp_path / "figures")
    assert sorted(Path(p).name for p in written) == ["a.json", "a.npz", reproduce.PUBLISHED_RUN]
    run = json.loads((tmp_path / "published" / "smoke" / reproduce.PUBLISHED_RUN).read_text())
    assert run["command"] == "curvature-gap reproduce (test)" and run["per_result"]["a"]["status"] == "ok"
    assert run["seconds"] > 0 and len(run["git"]["commit"] or "x" * 40) == 40 and "entries" not in run
    assert set(run["split"]) == {"training", "Hessians", "rest", "floor"}, "the split the report states travels too"
    ctx = experiments.Context(profile="smoke", results_dir=tmp_path / "other", published_dir=tmp_path / "published")
    assert experiments.published_check("a", ctx).config_hash == experiments.config_hash_of("a", ctx=ctx)


@pytest.mark.slow
def test_the_runs_the_results_need_are_trained_side_by_side_once(tmp_path, capsys):
    """train_in_parallel: each run once at the furthest step any result reads (fig5's trajectory and fig4's
    checkpoint share the authors' bf16 run), in worker processes; the results then find them on disk."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).with_name("conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    root = conftest.write_mnist_idx(tmp_path / "data", n_train=512)  # the smoke recipe's 384 images: 3 steps
    ctx = experiments.Context(profile="smoke", device="cpu", data_dir=root, runs_dir=tmp_path / "runs", verify_md5=False,
                     progress=False)
    names = ["fig3_authors", "fig4_authors", "fig5_authors", "fig4_authors_exact"]
    jobs = reproduce._runs_to_train(names, ctx, allow_long=True)
    # fig4_authors counts over runs (smoke: seeds 37 and 0); its float32 twin reads the one run; fig5's trajectory
    # reads steps 1-3 of the bf16 run of seed 37: trained once, to step 3, keeping the snapshots of steps 1 and 2
    bf16, f32 = experiments.Variant("authors", "mnist", "authors"), experiments.Variant("authors", "mnist", "exact")
    assert sorted(jobs, key=str) == sorted([(bf16, 3, 37, (1, 2)), (bf16, 3, 0, ()), (f32, 3, 37, ())], key=str)
    assert reproduce._runs_to_train(["fig3_authors"], ctx, allow_long=True) == [], "step 0 needs no training"
    reproduce.train_in_parallel(names, ctx, allow_long=True, workers=2)
    out = capsys.readouterr().out
    assert "training 3 runs side by side" in out and out.count("  trained ") == 3
    # the workers' step timings come back: 3 steps each, the floor of the report is built from them
    assert sorted(t["steps"] for t in ctx.trained) == [3, 3, 3] and all(t["seconds"] > 0 for t in ctx.trained)
    assert reproduce.timing_split(ctx, 100.0)["floor"]["steps"] == 9
    assert reproduce._runs_to_train(names, ctx, allow_long=True) == [], "all three are on disk now"
    ctx3 = experiments.Context(profile="smoke", device="cpu", data_dir=root, runs_dir=tmp_path / "runs", verify_md5=False,
                      progress=False, settings_overrides={"trajectory_authors": {"run_seeds": (5,)}})
    assert reproduce._runs_to_train(["fig5_authors"], ctx3, allow_long=True) == [(bf16, 3, 5, (1, 2))], \
        "the other runs a count reads are trained too, also when the recipe seed's run is on disk"
    for arithmetic in ("authors", "exact"):
        model, info = ctx.model(experiments.Variant("authors", "mnist", arithmetic), 3)
        assert info["step"] == 3
    paper = experiments.Context(profile="paper", device="cpu", data_dir=root, runs_dir=tmp_path / "runs", verify_md5=False,
                       progress=False)
    assert reproduce._runs_to_train(["fig6_authors", "fig12_authors"], paper, allow_long=True) == [], \
        "with the long-run guard off, runs whose dataset (CIFAR-100) is missing are still not started"


@pytest.mark.slow
def test_the_guard_costs_a_trajectory_to_its_last_step_not_the_whole_recipe(monkeypatch):
    """Figs. 5 and 7-11 read steps 0-1000 of the authors' run: the long-run guard prices 1,000 steps, not 100 epochs
    (a slow machine once skipped them as 'about 0.9 h')."""
    monkeypatch.setattr(reproduce, "training_cost", _cost(2.0))  # 2 s a step: 1,000 steps 33 min, over the limit
    ctx = experiments.Context(profile="paper", runs_dir="/nonexistent-runs", progress=False)
    assert max(step for _, step, _ in experiments.runs_of("trajectory_authors", ctx)) == 1000
    why = reproduce._long_run("trajectory_authors", ctx)
    assert "for 1,000 steps" in why, why
