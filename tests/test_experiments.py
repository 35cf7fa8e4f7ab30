"""Figure computations: the numbers they produce, the result cache and the compute/plot split.

Everything runs on test-written data (``tiny_datasets``) and, for the Hessian figures, on a reduced
model (d_V = 4, patch 7, 454 parameters) so that dense Hessians take well under a second.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from curvature_gap import experiments as ex
from curvature_gap.experiments import assumption, common, convergence, heatmaps, norms
from curvature_gap.experiments.store import ResultStore, StaleResultWarning

TINY_MODEL = (("d_ff", 8), ("d_k", 4), ("d_model", 4), ("patch_size", 7))
TINY_TRAIN = dict(model_overrides=TINY_MODEL, epochs=1, batch_size=32, train_subset=256, test_subset=64, ckpt_every=100)


def _ctx(tmp_path, tiny_datasets, runs_dir=None, **settings):
    return ex.Context(
        profile="smoke", device="cpu", results_dir=tmp_path / "results", runs_dir=runs_dir or tmp_path / "runs",
        progress=False, datasets={"mnist": tiny_datasets}, train_overrides={"mnist": TINY_TRAIN},
        settings_overrides=settings,
    )


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """One context shared by the Hessian-figure tests (the small model is trained once)."""
    from synthetic import learnable_images
    from curvature_gap.data import TensorDataset
    from curvature_gap.train import Datasets

    def make(n, seed):
        imgs, labels = learnable_images(n, 1, 28, 10, seed)
        return TensorDataset(torch.from_numpy(imgs).float().div(255).sub(0.5).div(0.5), torch.from_numpy(labels).long())

    tmp = tmp_path_factory.mktemp("small_run")
    # 512 tangents per pass: the whole small model in one pass of the exact method (cost only)
    ctx = _ctx(tmp, Datasets(make(512, 0), make(128, 1)), init_heatmap=dict(fast_chunk=512),
               trained_heatmap=dict(fast_chunk=512),
               trajectory=dict(batch_size=4, n_steps=6, steps=[0, 3, 5, 9], display_steps=[0, 6], fast_chunk=512))
    return tmp, ctx


# -------------------------------------------------------------------- Fig. 6 numbers
def test_loss_difference_identity_and_iid_slope_is_minus_one():
    rng = np.random.default_rng(0)
    losses = rng.exponential(0.7, 8192)
    D = convergence.loss_differences(losses, batch_size=8, n_permutations=64, seed=1)
    assert D.shape == (64, 1023)
    # exact identity for one order: L_{k+1} - L_k = (b_{k+1} - L_k) / (k + 1)
    perm = np.random.default_rng(1).permutation(8192)
    b = losses[perm].reshape(1024, 8).mean(1)
    L = np.cumsum(b) / np.arange(1, 1025)
    np.testing.assert_allclose(D[0], np.abs((b[1:] - L[:-1]) / np.arange(2, 1025)), rtol=1e-10, atol=1e-15)
    fit = convergence.fit_loglog(np.arange(1, 1024), D.mean(0), k_min=4, n_points=40)
    assert -1.1 < fit["slope"] < -0.9, fit
    assert fit["r2"] > 0.98


def test_loglog_ema_keeps_the_slope_of_a_power_law():
    k = np.arange(1, 2001)
    kk, e = convergence.loglog_ema(k, 3.0 / k, beta=0.5)
    slope = np.polyfit(np.log10(kk[10:]), np.log10(e[10:]), 1)[0]
    assert abs(slope + 1) < 1e-4
    assert np.all(e[10:] / (3.0 / kk[10:]) < 1.13)  # lag of one point = 0.05 decade


def test_too_few_batches_is_a_clear_error():
    with pytest.raises(ValueError, match="only 2 batches"):
        convergence.loss_differences(np.ones(20), batch_size=8, n_permutations=2)


# -------------------------------------------------------------------- Fig. 12 numbers
def test_assumption1_gradient_norms_decrease_in_k_and_end_at_the_full_gradient(tiny_datasets):
    torch.manual_seed(0)
    m = common.build_model("mnist", seed=0, **dict(TINY_MODEL))
    x, y = tiny_datasets.train.images[:256], tiny_datasets.train.labels[:256]
    ks = assumption.k_grid(256, 12)
    G = assumption.gradient_norms(m, x, y, ks, n_permutations=8, seed=0, device="cpu", chunk=64)
    mean = G.mean(0)
    assert ks[0] == 1 and ks[-1] == 256
    assert mean[0] > 2 * mean[len(ks) // 2] > 2 * mean[-1] * 0.999
    assert np.all(np.diff(mean) < 0.05 * mean[:-1])  # decreasing up to noise
    # at k = N every order gives the full-batch gradient
    full = torch.autograd.grad(torch.nn.functional.cross_entropy(m(x), y), list(m.parameters()))
    full = float(torch.cat([g.reshape(-1) for g in full]).norm())
    np.testing.assert_allclose(G[:, -1], full, rtol=1e-5)


def test_exact_mean_square_gradient_over_orders_matches_sampling(tiny_datasets):
    m = common.build_model("mnist", seed=0, **dict(TINY_MODEL))
    x, y = tiny_datasets.train.images[:48], tiny_datasets.train.labels[:48]
    gbar, msq = assumption.per_sample_gradient_moments(m, x, y, "cpu", chunk=16)
    rows = []
    for i in range(48):  # per-sample gradients, one backward each
        g = torch.autograd.grad(torch.nn.functional.cross_entropy(m(x[i : i + 1]), y[i : i + 1]), list(m.parameters()))
        rows.append(torch.cat([t.reshape(-1) for t in g]).double().numpy())
    Gs = np.stack(rows)
    np.testing.assert_allclose(gbar, Gs.mean(0), rtol=1e-4, atol=1e-7)
    assert msq == pytest.approx(float((Gs**2).sum(1).mean()), rel=1e-4)
    rng = np.random.default_rng(0)
    gbar2 = float(gbar @ gbar)
    for k in (1, 5, 20, 48):
        mc = np.mean([np.sum(Gs[rng.choice(48, k, replace=False)].mean(0) ** 2) for _ in range(4000)])
        exact = assumption.expected_grad_norm_sq(np.array([k]), gbar2, msq - gbar2, 48)[0]
        assert exact == pytest.approx(mc, rel=0.04), k


# -------------------------------------------------------------------- Hessian numbers
def test_curvlinops_dense_hessian_equals_autograd_and_is_symmetric():
    m = common.build_model("mnist", seed=0, **dict(TINY_MODEL))
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(2, 1, 28, 28, generator=g), torch.randint(0, 10, (2,), generator=g))
    H = common.curvlinops_hessian(m, batch, chunk=454, progress=False).double()
    A = common.autograd_hessian_rows(m, batch).double()
    assert H.shape == (454, 454)
    assert float((H - A).abs().max() / A.abs().max()) < 1e-5
    assert float((H - H.T).abs().max() / H.abs().max()) < 1e-5


def test_block_norms_and_dominance_on_a_designed_matrix():
    names = ["pos", "block0.query", "block0.key", "block0.value", "head"]
    starts, stops = [0, 2, 5, 7, 10], [2, 5, 7, 10, 11]
    H = np.full((11, 11), 1e-3)
    H[7:10, 7:10] = -2.0  # V-V dominates in mean |entry|
    H[2, 6] = H[6, 2] = 5.0  # Q-K holds the largest single entry
    nb = common.block_norms(H, starts, stops)
    assert nb["fro"][3, 3] == pytest.approx(6.0)
    assert nb["max"][1, 2] == 5.0 and nb["mean"][3, 3] == 2.0
    d = heatmaps.dominance(nb["mean"], nb["max"], names)
    assert d["largest_mean_abs_block"] == "V-V" and d["value_value_rank_by_mean_abs"] == 1
    assert d["largest_max_abs_block"] in ("Q-K", "K-Q")


def test_pooled_log_image_is_the_cell_mean_of_log10():
    H = np.arange(1, 37, dtype=float).reshape(6, 6)
    img, f = common.pooled_log_image(H, eps=0.0, max_cells=3)
    assert f == 2 and img.shape == (3, 3)
    assert img[0, 0] == pytest.approx(np.log10([1, 2, 7, 8]).mean())
    img5, f5 = common.pooled_log_image(H[:5, :5], eps=0.0, max_cells=3)  # ragged edge: nan-padded
    assert f5 == 2 and img5[2, 2] == pytest.approx(np.log10(H[4, 4]))


def test_fig3_and_fused_layernorm_numbers_on_a_small_model(small_run):
    _, ctx = small_run
    r = ex.load_results("fig3", ctx=ctx)
    H = r["H"].astype(np.float64)
    assert H.shape == (454, 454) and r["n_parameters"] == 454
    assert r["cross_check"]["max_relative_difference"] < 1e-5
    assert np.abs(H - H.T).max() <= 1e-5 * np.abs(H).max()
    assert r["group_names"][0] == "pos" and r["group_names"][-1] == "head"
    np.testing.assert_allclose(r["block_fro"][3, 3], np.linalg.norm(H[r["group_starts"][3]:r["group_stops"][3],
                                                                      r["group_starts"][3]:r["group_stops"][3]]), rtol=1e-5)
    f = ex.load_results("fused_ln", ctx=ctx)  # trains the small model first
    assert f["trained"] and f["checkpoint"]["steps"] == 8
    assert f["max_relative_error"] > 1e-3  # torch.nn.LayerNorm's second derivatives are wrong here
    assert f["fused_asymmetry"] > 1e-6 and f["exact_asymmetry"] < 1e-5
    assert abs(f["loss_difference_forward"]) < 1e-5  # ... while the forward pass agrees


# -------------------------------------------------------------------- trajectory (Figs. 5, 7-11)
def test_trajectory_snapshots_are_the_training_run_and_feed_figs_5_and_7_to_11(small_run):
    from curvature_gap.train import train

    tmp_path, ctx = small_run
    t = ex.load_results("trajectory", ctx=ctx)
    assert list(t["steps"]) == [0, 3, 5, 6]  # requested steps within n_steps, plus n_steps
    # snapshot 0 is the initialisation, snapshot 6 the run after 6 steps (training resumes exactly)
    np.testing.assert_array_equal(t["w"][0], common.flat_params(ctx.init_model("mnist")))
    cfg = ctx.train_cfg("mnist")
    train(cfg, tmp_path / "direct", device="cpu", datasets=ctx.datasets_for("mnist"), max_steps=6, progress=False)
    direct = torch.load(tmp_path / "direct" / "last.pt", weights_only=True)["model"]
    np.testing.assert_allclose(t["w"][3], torch.cat([v.reshape(-1) for v in direct.values()]).numpy(), rtol=0, atol=0)
    assert not list((tmp_path / "runs").glob("*/trajectory-*")), "the replay run is removed once saved"
    assert t["H_values"].shape == (2, 16, 16) and t["H_feedforward"].shape == (2, 76, 76)

    r5 = ex.load_results("fig5", ctx=ctx)
    G = len(r5["group_names"])
    assert r5["hess_fro_steps"].shape == (4, G) and r5["param_fro_steps"].shape == (4, G)
    np.testing.assert_allclose(r5["param_fro_steps"][0], r5["param_fro_init"], rtol=1e-6)
    np.testing.assert_allclose(r5["hess_fro_steps"][0], np.diag(r5["hess_fro_init"]), rtol=1e-5)

    r9 = ex.load_results("fig9", ctx=ctx)
    assert r9["block_type"] == "values" and r9["w0"].shape == (4, 16)
    np.testing.assert_allclose(r9["hess_fro"], t["fro_values"])
    np.testing.assert_allclose(r9["param_fro"], np.linalg.norm(r9["w0"].astype(np.float64), axis=1), rtol=1e-6)
    r10 = ex.load_results("fig10", ctx=ctx)
    assert len(r10["tensors"]) == 4 and r10["sub_fro"].shape == (4, 4)
    fig = ex.plot_fig10(r10)
    assert len(fig.axes) >= 6


def test_interrupted_trajectory_resumes_from_its_saved_snapshots(small_run, monkeypatch):
    import dataclasses

    _, base = small_run
    over = dict(base.settings_overrides, trajectory=dict(batch_size=4, n_steps=4, steps=[0, 2, 4], display_steps=[0, 4],
                                                        fast_chunk=512))
    ctx = dataclasses.replace(base, settings_overrides=over, _cache={})
    real, calls = common.fast_hessian, []

    def killed_at_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(norms, "fast_hessian", killed_at_third)
    with pytest.raises(RuntimeError, match="killed"):
        ex.load_results("trajectory", ctx=ctx)
    chash = ex.config_hash_of("trajectory", ctx=ctx)
    assert sorted(p.name for p in (ctx.results_dir / "trajectory" / f"{chash}.partial").iterdir()) == [
        "step_000000.npz", "step_000002.npz"]
    calls.clear()
    t = ex.load_results("trajectory", ctx=ctx)
    assert len(calls) == 1 and list(t["steps"]) == [0, 2, 4]  # only the missing snapshot was computed
    from curvature_gap.train import train  # the resumed replay reaches the same weights as a direct run

    tmp_path = ctx.results_dir.parent
    train(ctx.train_cfg("mnist"), tmp_path / "direct4", device="cpu", datasets=ctx.datasets_for("mnist"), max_steps=4,
          progress=False)
    direct = torch.load(tmp_path / "direct4" / "last.pt", weights_only=True)["model"]
    np.testing.assert_array_equal(t["w"][2], torch.cat([v.reshape(-1) for v in direct.values()]).numpy())


def test_cached_figure_is_reused_without_its_inputs(small_run, monkeypatch):
    tmp_path, ctx = small_run
    r5 = ex.load_results("fig5", ctx=ctx)
    for dep in ("fig3", "fig4", "trajectory"):  # inputs gone, e.g. removed by hand
        for p in (tmp_path / "results" / dep).glob("*.npz"):
            p.unlink()

    def boom(*a, **k):
        raise AssertionError("recomputed")

    for mod, fn in ((heatmaps, "compute_heatmap"), (norms, "compute_trajectory"), (norms, "compute_norms")):
        monkeypatch.setattr(mod, fn, boom)
    again = ex.load_results("fig5", ctx=ctx)
    assert again.from_cache and again.config_hash == r5.config_hash
    assert len(ex.plot_fig5(again).axes) >= 6


# -------------------------------------------------------------------- cache and compute/plot split
@pytest.fixture(scope="module")
def shared_runs(tmp_path_factory):
    """A checkpoint directory shared by the Fig. 6 tests (training is deterministic)."""
    return tmp_path_factory.mktemp("shared_runs")


def _fig6_ctx(tmp_path, tiny_datasets, runs_dir=None, **over):
    return _ctx(tmp_path, tiny_datasets, runs_dir, fig6=dict(batch_size=8, n_permutations=8, **over))


def test_plot_reads_results_and_never_recomputes(tmp_path, tiny_datasets, shared_runs, monkeypatch):
    ctx = _fig6_ctx(tmp_path, tiny_datasets, shared_runs)
    r = ex.load_results("fig6", ctx=ctx)
    assert not r.from_cache and -1.6 < r["fit"]["slope"] < -0.5
    assert r["substitution"] and r["n_blocks"] == 1
    # Theorem 7 at w = w*: |L_{k+1} - L_k| <= 2 l_max / (k + 1), for every order of the data
    assert r["theorem7"]["status"] == "overlaid"
    np.testing.assert_allclose(r["theorem7_rhs"], 2 * r["losses"].max() / (r["k"] + 1))
    assert np.all(r["diffs"] <= r["theorem7_rhs"])
    assert r.json_path == tmp_path / "results" / "fig6" / f"{r.config_hash}.json"

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(convergence, "compute_convergence", boom)
    monkeypatch.setattr(common, "ensure_trained", boom)
    again = ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs))
    assert again.from_cache and again.config_hash == r.config_hash
    np.testing.assert_array_equal(again["mean_abs_diff"], r["mean_abs_diff"])
    paths = ex.render("fig6", again, tmp_path / "figures")
    assert [p.rsplit(".", 1)[1] for p in paths] == ["pdf", "png"]
    assert all((tmp_path / "figures" / p.rsplit("/", 1)[1]).stat().st_size > 1000 for p in paths)


def test_fig6_paper_path_runs_on_a_cifar100_format_set(tmp_path, cifar_root):
    """The 8-block CIFAR-100 route of Fig. 6, on a small CIFAR-format set read by torchvision's loader."""
    ctx = ex.Context(profile="smoke", device="cpu", data_dir=cifar_root, verify_md5=False, progress=False,
                     results_dir=tmp_path / "results", runs_dir=tmp_path / "runs",
                     settings_overrides={"fig6": dict(model="cifar100", batch_size=8, n_permutations=4)})
    r = ex.load_results("fig6", ctx=ctx)
    assert r["dataset"] == "CIFAR-100" and r["substitution"] is None and r["n_blocks"] == 2
    assert r["n_samples"] == 64 and r["k"].tolist() == list(range(1, 8))
    assert (tmp_path / "runs" / f"cifar100-smoke-{ctx.train_cfg('cifar100').hash()}" / "model.pt").exists()
    assert len(ex.plot_fig6(r).axes) == 1


def test_config_change_never_reuses_old_numbers(tmp_path, tiny_datasets, shared_runs):
    a = ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs))
    b = ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs, seed=1))
    assert a.config_hash != b.config_hash and not b.from_cache
    assert b.config["settings"]["seed"] == 1
    ctx = _fig6_ctx(tmp_path, tiny_datasets, shared_runs)
    ctx.train_overrides = {"mnist": dict(TINY_TRAIN, lr=3e-3)}  # another training run, another hash
    c = ex.load_results("fig6", ctx=ctx)
    assert c.config_hash not in (a.config_hash, b.config_hash) and not c.from_cache
    assert c["checkpoint"]["config_hash"] != a["checkpoint"]["config_hash"]
    assert ex.config_hash_of("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs)) == a.config_hash


@pytest.mark.parametrize("damage", ["truncate_npz", "edit_npz", "edit_json", "truncate_json", "delete_npz"])
def test_damaged_result_is_detected_and_recomputed(tmp_path, tiny_datasets, shared_runs, damage):
    a = ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs))
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
        b = ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs))
    assert not b.from_cache and b["fit"]["slope"] == a["fit"]["slope"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleResultWarning)
        assert ex.load_results("fig6", ctx=_fig6_ctx(tmp_path, tiny_datasets, shared_runs)).from_cache


def test_damaged_checkpoint_is_detected_and_retrained_to_the_same_weights(tmp_path, tiny_datasets):
    ctx = _fig6_ctx(tmp_path, tiny_datasets)
    _, info = ctx.trained_model("mnist")
    mp = ctx.run_dir("mnist") / "model.pt"
    mp.write_bytes(mp.read_bytes()[: mp.stat().st_size // 2])
    with pytest.warns(StaleResultWarning, match="retraining"):
        _, info2 = _fig6_ctx(tmp_path, tiny_datasets).trained_model("mnist")
    assert info2["weights_sha256"] == info["weights_sha256"]


def test_result_store_roundtrip_and_config_mismatch(tmp_path):
    st = ResultStore(tmp_path)
    cfg = {"a": 1, "t": [1, 2]}
    r = st.save("figX", "abc", cfg, {"x": np.arange(3.0)}, {"v": np.float64(2.5), "n": float("nan")})
    got = st.load("figX", "abc", cfg)
    assert got.from_cache and got["v"] == 2.5 and got["n"] == "nan"
    np.testing.assert_array_equal(got["x"], [0, 1, 2])
    with pytest.warns(StaleResultWarning, match="another configuration"):
        assert st.load("figX", "abc", {"a": 2, "t": [1, 2]}) is None
    assert st.load("figX", "zzz", cfg) is None  # missing: no warning, just absent
    assert r.paths == [str(tmp_path / "figX" / "abc.json"), str(tmp_path / "figX" / "abc.npz")]


def test_unknown_figure_lists_the_valid_names():
    from curvature_gap.config import ConfigError

    with pytest.raises(ConfigError, match="valid names: fig3, fig4, fig5, fig6, fig7"):
        ex.load_results("fig99", "smoke")
