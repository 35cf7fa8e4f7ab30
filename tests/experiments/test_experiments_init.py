"""curvature_gap.experiments: compute -> results cache -> plot; the config hash; the published results.

Fig. 6 on test-written data and the tiny model (454 parameters) stands for every result: the cache, the
published results and the compute/plot split are the same code for all of them.
"""
from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from cases import experiments_context
from curvature_gap import experiments
from curvature_gap.config import ConfigError
from curvature_gap.experiments import convergence
from curvature_gap.experiments import context
from curvature_gap.experiments.store import PublishedStore, StaleResultWarning, UnusableResult
from curvature_gap.train import run_dir


@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory):
    """A checkpoint directory shared by the Fig. 6 tests (training is deterministic)."""
    return tmp_path_factory.mktemp("shared_runs")


def _ctx(tmp_path, runs_dir=None, **over):
    return experiments_context(tmp_path, runs_dir=runs_dir, fig6=dict(batch_size=8, n_permutations=8, **over))


def _boom(*a, **k):
    raise AssertionError("recomputed")


@pytest.mark.slow
@pytest.mark.fault("replotting")
def test_plot_reads_results_and_never_recomputes(tmp_path, shared_runs, monkeypatch):
    r = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs))
    assert not r.from_cache and -1.6 < r["fit"]["slope"] < -0.5
    assert r["n_blocks"] == 1 and r["dataset"] == "MNIST"
    # Theorem 7 at w = w*: |L_{k+1} - L_k| <= 2 l_max / (k + 1) for every order of the data
    np.testing.assert_allclose(r["theorem7_rhs"], 2 * r["loss_max"] / (r["k"] + 1))
    assert np.all(r["q90"] <= r["theorem7_rhs"]) and np.all(r["mean_abs_diff"] <= r["theorem7_rhs"])
    assert r.json_path == tmp_path / "results" / "fig6" / f"{r.config_hash}.json"
    assert r.provenance["compute_seconds"] > 0 and r.provenance["device"] == "cpu"

    monkeypatch.setattr(convergence, "compute_convergence", _boom)
    monkeypatch.setattr(context, "ensure", _boom)
    monkeypatch.setattr(context, "load_run", _boom)
    again = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs))
    assert again.from_cache and again.config_hash == r.config_hash
    np.testing.assert_array_equal(again["mean_abs_diff"], r["mean_abs_diff"])
    paths = experiments.render("fig6", again, tmp_path / "figures")
    assert [p.rsplit(".", 1)[1] for p in paths] == ["pdf", "png"]
    assert all((tmp_path / "figures" / p.rsplit("/", 1)[1]).stat().st_size > 1000 for p in paths)
    assert set(experiments.plot("fig6", again)) == {"convergence"}


def test_the_runner_trains_and_the_computation_only_loads(tmp_path, monkeypatch):
    """A result asks its context for a run; the runner (load_results) trains the runs its figure declares before the
    computation starts, and a computation that asks for a run nobody trained gets RunMissing, never a training."""
    from curvature_gap.train import RunMissing

    computing, trained = [], []
    real_compute, real_ensure = convergence.compute_convergence, context.ensure

    def compute(*a, **k):
        computing.append(True)
        try:
            return real_compute(*a, **k)
        finally:
            computing.pop()

    def ensure(*a, **k):
        assert not computing, "training started from inside a computation"
        trained.append(a[0].model)
        return real_ensure(*a, **k)

    monkeypatch.setattr(convergence, "compute_convergence", compute)
    monkeypatch.setattr(context, "ensure", ensure)
    assert experiments.runs_of("fig6", _ctx(tmp_path)) == [(experiments.settings_of(experiments.spec("fig6"),
                                                                                    _ctx(tmp_path)), None, None)]
    r = experiments.load_results("fig6", ctx=_ctx(tmp_path))
    assert trained == ["mnist"] and r["checkpoint"]["steps"] == 8
    monkeypatch.setattr(context.Context, "train", lambda self, *a, **k: None)  # a runner that forgets
    with pytest.raises(RunMissing, match=r"has no usable weights .*: missing"):
        experiments.load_results("fig6", ctx=_ctx(tmp_path, tmp_path / "other-runs", seed=1))


@pytest.mark.fault("setting-changed")
def test_config_change_never_reuses_old_numbers(tmp_path, shared_runs):
    a = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs))
    b = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs, seed=1))
    assert a.config_hash != b.config_hash and not b.from_cache
    assert b.config["settings"]["seed"] == 1
    ctx = _ctx(tmp_path, shared_runs)
    ctx.train_overrides = {"mnist": dict(ctx.train_overrides["mnist"], lr=3e-3)}  # another training run, another hash
    c = experiments.load_results("fig6", ctx=ctx)
    assert c.config_hash not in (a.config_hash, b.config_hash) and not c.from_cache
    assert c["checkpoint"]["config_hash"] != a["checkpoint"]["config_hash"]
    assert experiments.config_hash_of("fig6", ctx=_ctx(tmp_path, shared_runs)) == a.config_hash
    assert (tmp_path / "results" / "fig6" / f"{a.config_hash}.json").exists(), "old numbers stay under their own hash"


@pytest.mark.parametrize("damage", ["truncate_npz", "edit_npz", "edit_json", "truncate_json", "delete_npz"])
@pytest.mark.fault("damaged-result")
def test_damaged_result_is_detected_and_recomputed(tmp_path, shared_runs, damage):
    a = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs))
    if damage == "truncate_npz":
        a.npz_path.write_bytes(a.npz_path.read_bytes()[:100])
    elif damage == "edit_npz":
        data = bytearray(a.npz_path.read_bytes())
        data[-200] ^= 0xFF
        a.npz_path.write_bytes(bytes(data))
    elif damage == "edit_json":
        doc = json.loads(a.json_path.read_text())
        doc["meta"]["fit"]["slope"] = -1.0
        a.json_path.write_text(json.dumps(doc))
    elif damage == "truncate_json":
        a.json_path.write_text(a.json_path.read_text()[:50])
    else:
        a.npz_path.unlink()
    with pytest.warns(StaleResultWarning, match="recomputing"):
        b = experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs))
    assert not b.from_cache and b["fit"]["slope"] == a["fit"]["slope"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleResultWarning)
        assert experiments.load_results("fig6", ctx=_ctx(tmp_path, shared_runs)).from_cache


@pytest.mark.fault("stale-published")
def test_a_published_result_of_other_code_or_settings_is_refused(tmp_path, shared_runs, monkeypatch):
    ctx = _ctx(tmp_path, shared_runs)
    r = experiments.load_results("fig6", ctx=ctx)
    store = PublishedStore(tmp_path / "published" / "smoke")
    store.publish(r)
    fresh = dataclasses.replace(ctx, results_dir=tmp_path / "empty-cache", _cache={})
    ok = experiments.published_check("fig6", fresh)
    assert ok.config_hash == r.config_hash
    found = experiments.find_result("fig6", ctx=fresh)           # no cache: the published result is used
    assert found is not None and found.json_path == tmp_path / "published" / "smoke" / "fig6.json"
    # the same result, computed by other code: the published copy carries another code hash
    stale = dataclasses.replace(r, config=dict(r.config, code="0000000000000000"), config_hash="000000000000")
    store.publish(stale)
    with pytest.raises(UnusableResult) as err:
        experiments.published_check("fig6", fresh)
    msg = str(err.value)
    assert "fig6.json" in msg and f"now {r.config_hash}" in msg and "code: '0000000000000000' ->" in msg
    assert experiments.find_result("fig6", ctx=fresh) is None, "never used for the current configuration"
    monkeypatch.setattr(convergence, "compute_convergence", _boom)
    with pytest.raises(AssertionError, match="recomputed"):
        experiments.load_results("fig6", ctx=fresh)                # so it would be recomputed, not served
    with pytest.raises(UnusableResult, match="no published results directory"):
        experiments.published_check("fig6", dataclasses.replace(fresh, published_dir=None))


def test_fig6_paper_path_runs_on_a_cifar100_format_set(tmp_path, cifar_root):
    """The multi-block CIFAR-100 route of Fig. 6, on a small CIFAR-format set read by torchvision's loader."""
    ctx = experiments.Context(profile="smoke", device="cpu", data_dir=cifar_root, verify_md5=False, progress=False,
                     results_dir=tmp_path / "results", runs_dir=tmp_path / "runs",
                     settings_overrides={"fig6": dict(dataset="cifar100", batch_size=8, n_permutations=4)})
    r = experiments.load_results("fig6", ctx=ctx)
    assert r["dataset"] == "CIFAR-100" and r["n_blocks"] == 2
    assert r["n_samples"] == 64 and r["k"].tolist() == list(range(1, 8))
    assert (run_dir(ctx.recipe(experiments.Variant(dataset="cifar100")), tmp_path / "runs") / "model.pt").exists()
    assert len(experiments.plot("fig6", r, "convergence").axes) == 1


@pytest.mark.fault("unknown-figure")
def test_unknown_figure_lists_the_valid_names():
    with pytest.raises(ConfigError, match="valid names: fig3_authors, fig3, fig4_authors, fig4_authors_exact, fig4, fig5_authors, fig5_authors_exact, fig5, fig6_authors, fig6_authors_mnist, fig6_authors_mnist_exact, fig6, fig6_mnist, fig7_authors, fig7"):
        experiments.load_results("fig99", "smoke")


def test_registry_plots_profiles_and_contexts(tmp_path):
    assert experiments.FIGURE_NAMES == tuple(n for n in experiments.RESULT_NAMES if experiments.SPECS[n].plots)
    assert "trained_bounds" in experiments.RESULT_NAMES and "trained_bounds" not in experiments.FIGURE_NAMES
    assert experiments.spec("trajectory").name == "trajectory" and "trajectory" not in experiments.RESULT_NAMES
    with pytest.raises(ConfigError, match="exists only under the profile"):
        experiments.config_hash_of("fig6_mnist", "smoke")
    with pytest.raises(ConfigError, match="has no figure"):
        experiments.plot("trained_bounds", None)
    with pytest.raises(ConfigError, match="has no part 'nope'; parts: convergence"):
        experiments.plot("fig6", None, "nope")
    with pytest.raises(ValueError, match="differs from the context"):
        experiments.config_hash_of("fig6", "paper", ctx=experiments.Context(profile="smoke"))
    with pytest.raises(TypeError, match="either ctx or context keyword"):
        experiments.config_hash_of("fig6", ctx=experiments.Context(), results_dir="x")
    # the hash covers settings, training configuration, dependencies and code
    c = experiments.config_of(experiments.spec("fig5"), experiments.Context(profile="smoke"), experiments.settings_of(experiments.spec("fig5"), experiments.Context()),
                     {"fig3": "a", "fig4": "b", "trajectory": "c"})
    assert set(c) == {"figure", "profile", "settings", "train", "depends", "code"} and "mnist" in c["train"]
    assert experiments.config_hash_of("fig3", "smoke") != experiments.config_hash_of("fig3", "paper")
    assert experiments.default_published_dir(tmp_path) is None
    (tmp_path / "published").mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "src" / "curvature_gap").mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    assert experiments.default_published_dir(tmp_path / "sub") == tmp_path / "published"
