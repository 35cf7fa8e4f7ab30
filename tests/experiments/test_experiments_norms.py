"""curvature_gap.experiments.norms: the trajectory of the first training steps and Fig. 5."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from curvature_gap import experiments as ex
from curvature_gap.experiments import heatmaps, norms
from curvature_gap.experiments.settings import trajectory_settings
from curvature_gap.train import train


def _flat(state: dict) -> np.ndarray:
    return torch.cat([v.reshape(-1) for v in state.values()]).numpy()


def test_snapshot_steps():
    s = trajectory_settings("smoke")
    assert norms.snapshot_steps(dataclasses.replace(s, steps=(0, 3, 5, 9), n_steps=6, display_steps=(0, 6)), 8) == [0, 3, 5, 6]
    assert norms.snapshot_steps(dataclasses.replace(s, steps=(0, 3, 5, 9), n_steps=6, display_steps=(0, 6)), 4) == [0, 3, 4]


def test_trajectory_snapshots_are_the_training_run(small_run):
    tmp_path, ctx = small_run
    t = ex.load_results("trajectory", ctx=ctx)
    assert list(t["steps"]) == [0, 3, 5, 6]  # requested steps within n_steps, plus n_steps
    # snapshot 0 is the initialisation, snapshot 6 the run after 6 steps (training resumes exactly)
    np.testing.assert_array_equal(t["w"][0], norms._flat(ctx.model("mnist", 0)[0]))
    cfg = ctx.recipe("mnist")
    train(cfg, tmp_path / "direct", device="cpu", datasets=ctx.data("mnist"), max_steps=6, progress=False)
    direct = torch.load(tmp_path / "direct" / "last.pt", weights_only=True)["model"]
    np.testing.assert_array_equal(t["w"][3], _flat(direct))
    assert not list((tmp_path / "results" / "trajectory").glob("*.partial")), "the partial snapshots are removed"
    G = len(t["groups"])
    assert t["diag_fro"].shape == (4, G) and t["img_values"].shape[0] == 2   # display steps 0 and 6
    fig3 = ex.load_results("fig3", ctx=ctx)
    np.testing.assert_allclose(t["diag_fro"][0], fig3["dyn_diag_fro"])     # step 0 is Fig. 3's Hessian


def test_fig5_reads_figs3_4_and_the_trajectory(small_run):
    _, ctx = small_run
    r5 = ex.load_results("fig5", ctx=ctx)
    t = ex.load_results("trajectory", ctx=ctx)
    assert r5["param_fro_steps"].shape == (4, len(r5["groups"])) and r5["trajectory_steps"] == 6
    np.testing.assert_array_equal(r5["diag_spec_steps"], t["diag_spec"])
    W = t["w"].astype(np.float64)
    v = ctx.model("mnist", 0)[0]
    units = norms.units_of(v)
    assert r5["param_norms"]["init"]["W_V"]["fro"] == pytest.approx(np.linalg.norm(W[0][units["W_V"]]), rel=1e-6)
    assert r5["hessian_stats"]["trained"] == ex.load_results("fig4", ctx=ctx)["unit_stats"]
    assert set(ex.plot("fig5", r5)) == {"parameters", "hessians", "parameters_over_training", "hessians_over_training"}


@pytest.mark.fault("reproduce-killed")
def test_interrupted_trajectory_resumes_from_its_saved_snapshots(small_run, monkeypatch):
    _, base = small_run
    over = dict(base.settings_overrides, trajectory=dict(batch_size=4, n_steps=4, steps=[0, 2, 4], display_steps=[0, 4],
                                                        fast_chunk=512))
    ctx = dataclasses.replace(base, settings_overrides=over, _cache={})
    real, calls = norms.hessian, []

    def killed_at_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(norms, "hessian", killed_at_second)
    with pytest.raises(RuntimeError, match="killed"):
        ex.load_results("trajectory", ctx=ctx)
    chash = ex.config_hash_of("trajectory", ctx=ctx)
    assert sorted(p.name for p in (ctx.results_dir / "trajectory" / f"{chash}.partial").iterdir()) == [
        "step_0000000.npz", "step_0000002.npz"]
    calls.clear()
    t = ex.load_results("trajectory", ctx=ctx)
    assert len(calls) == 1 and list(t["steps"]) == [0, 2, 4]  # only the missing snapshot was computed
    tmp_path = ctx.results_dir.parent
    train(ctx.recipe("mnist"), tmp_path / "direct4", device="cpu", datasets=ctx.data("mnist"), max_steps=4,
          progress=False)
    direct = torch.load(tmp_path / "direct4" / "last.pt", weights_only=True)["model"]
    np.testing.assert_array_equal(t["w"][2], _flat(direct))


@pytest.mark.fault("replotting")
def test_cached_figure_is_reused_without_its_inputs(small_run, tmp_path, monkeypatch):
    src, base = small_run
    r5 = ex.load_results("fig5", ctx=base)
    shutil.copytree(src / "results", tmp_path / "results")          # a copy: the shared results stay intact
    ctx = dataclasses.replace(base, results_dir=tmp_path / "results", _cache={})
    for dep in ("fig3", "fig4", "trajectory"):  # inputs gone, e.g. removed by hand
        for p in (tmp_path / "results" / dep).glob("*.npz"):
            p.unlink()

    def boom(*a, **k):
        raise AssertionError("recomputed")

    for mod, fn in ((heatmaps, "compute_heatmap"), (norms, "compute_trajectory"), (norms, "compute_norms")):
        monkeypatch.setattr(mod, fn, boom)
    again = ex.load_results("fig5", ctx=ctx)
    assert again.from_cache and again.config_hash == r5.config_hash
    assert len(ex.plot("fig5", again, "hessians_over_training").axes) >= 1
