"""curvature_gap.experiments.trajectory: the first training steps behind Figs. 5 and 7-11, on either model (the
theorem's: the training run's snapshots and followed blocks; the authors': their notebook's parameter lists)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from curvature_gap import experiments
from curvature_gap.config import ConfigError
from curvature_gap.experiments import trajectory
from curvature_gap.experiments.settings import trajectory_settings
from curvature_gap.hessian import hessian
from curvature_gap.model import build_model
from curvature_gap.params import authors_hessian_order, authors_indices, authors_parameter_names, param_slices
from curvature_gap.train import train


def _flat(state: dict) -> np.ndarray:
    return torch.cat([v.reshape(-1) for v in state.values()]).numpy()


def test_snapshot_steps():
    s = trajectory_settings("smoke")
    assert trajectory.snapshot_steps(dataclasses.replace(s, steps=(0, 3, 5, 9), n_steps=6, display_steps=(0, 6)), 8) == [0, 3, 5, 6]
    assert trajectory.snapshot_steps(dataclasses.replace(s, steps=(0, 3, 5, 9), n_steps=6, display_steps=(0, 6)), 4) == [0, 3, 4]


def test_trajectory_snapshots_are_the_training_run(small_run):
    tmp_path, ctx = small_run
    t = experiments.load_results("trajectory", ctx=ctx)
    assert list(t["steps"]) == [0, 3, 5, 6]  # requested steps within n_steps, plus n_steps
    # snapshot 0 is the initialisation, snapshot 6 the run after 6 steps (training resumes exactly)
    mnist = experiments.Variant()
    np.testing.assert_array_equal(t["w"][0], trajectory.flat_weights(ctx.model(mnist, 0)[0]))
    cfg = ctx.recipe(mnist)
    train(cfg, tmp_path / "direct", device="cpu", datasets=ctx.data(mnist), max_steps=6, progress=False)
    direct = torch.load(tmp_path / "direct" / "last.pt", weights_only=True)["model"]
    np.testing.assert_array_equal(t["w"][3], _flat(direct))
    assert not list((tmp_path / "results" / "trajectory").glob("*.partial")), "the partial snapshots are removed"
    G = len(t["groups"])
    assert t["diag_fro"].shape == (4, G) and t["img_values"].shape[0] == 2   # display steps 0 and 6
    fig3 = experiments.load_results("fig3", ctx=ctx)
    np.testing.assert_allclose(t["diag_fro"][0], fig3["dyn_diag_fro"])     # step 0 is Fig. 3's Hessian


@pytest.mark.fault("reproduce-killed")
def test_interrupted_trajectory_resumes_from_its_saved_snapshots(small_run, monkeypatch):
    _, base = small_run
    over = dict(base.settings_overrides, trajectory=dict(batch_size=4, n_steps=4, steps=[0, 2, 4], display_steps=[0, 4],
                                                        fast_chunk=512))
    ctx = dataclasses.replace(base, settings_overrides=over, _cache={})
    real, calls = trajectory.hessian, []

    def killed_at_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(trajectory, "hessian", killed_at_second)
    with pytest.raises(RuntimeError, match="killed"):
        experiments.load_results("trajectory", ctx=ctx)
    chash = experiments.config_hash_of("trajectory", ctx=ctx)
    assert sorted(p.name for p in (ctx.results_dir / "trajectory" / f"{chash}.partial").iterdir()) == [
        "step_0000000.npz", "step_0000002.npz"]
    calls.clear()
    t = experiments.load_results("trajectory", ctx=ctx)
    assert len(calls) == 1 and list(t["steps"]) == [0, 2, 4]  # only the missing snapshot was computed
    tmp_path = ctx.results_dir.parent
    train(ctx.recipe(experiments.Variant()), tmp_path / "direct4", device="cpu", datasets=ctx.data(experiments.Variant()),
          max_steps=4, progress=False)
    direct = torch.load(tmp_path / "direct4" / "last.pt", weights_only=True)["model"]
    np.testing.assert_array_equal(t["w"][2], _flat(direct))


def test_one_computation_takes_the_protocol_of_the_model():
    """The three trajectories are one figure's grid and one computation; the variant's model picks the protocol, and
    the run is its recipe (the authors' model: their recipe, in the arithmetic the variant names)."""
    specs = [experiments.spec(n) for n in ("trajectory", "trajectory_authors", "trajectory_authors_exact")]
    assert {s.compute for s in specs} == {trajectory.compute_trajectory} and {s.spec for s in specs} == {
        trajectory.TRAJECTORY_FIGURE}
    ctx = experiments.Context(profile="smoke")
    assert [ctx.recipe(s.settings["smoke"]).source for s in specs] == ["table1", "authors", "authors"]
    assert [s.settings["smoke"].arithmetic for s in specs[1:]] == ["authors", "exact"]
    assert [ctx.recipe(s.settings["smoke"]).precision for s in specs] == ["float32", "bf16", "float32"]


def _model():
    return build_model("authors_mnist", seed=0, d_model=8, d_k=8, d_ff=16, image_size=8, patch_size=4).double()


def test_the_lists_are_the_authors_names_in_their_flattening():
    m = _model()
    order, layout = authors_hessian_order(m)
    starts = dict(zip([g for g, _ in layout], np.cumsum([0] + [n for _, n in layout])[:-1]))
    q = authors_indices(m, trajectory.LISTS["queries"][0])
    assert q == order[starts["block0.query"]:starts["block0.query"] + len(q)]
    # their Linear weight is (out, in) = the transpose of ours: entry (o, i) of theirs is ours (i, o)
    sl = param_slices(m)["blocks.0.query"]
    d = m.cfg.d_model
    assert q[1] == sl.start + d and len(q) == d * m.cfg.d_k
    ln = authors_indices(m, trajectory.LISTS["layernorm"][0])
    assert authors_indices(m, trajectory.LISTS["feedforward"][0]) == ln[-2 * d:], (
        "their FeedForward list is LN2's gamma, beta")
    names = authors_parameter_names(m.cfg)
    assert all(n in names for lst, _ in trajectory.LISTS.values() for n in lst)
    with pytest.raises(ConfigError, match="not a parameter of the authors' model: nope; theirs are: embeddings"):
        authors_indices(m, ["nope"])


def test_a_lists_hessian_is_the_cut_of_the_whole_one_and_matches_autograd():
    """The Hessian over one list alone (what their notebook asks curvlinops for) equals the principal
    sub-matrix of the whole exact Hessian, against reverse-over-reverse autograd in float64."""
    m = _model()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(3, 1, 8, 8, generator=g, dtype=torch.float64), torch.tensor([1, 4, 7])
    H = hessian(m, (x, y)).numpy()
    ix = authors_indices(m, trajectory.LISTS["keys"][0])
    p = dict(m.named_parameters())["blocks.0.key"]
    base = p.detach().clone()

    def ce(wt):  # their flattening: W_K as their (out, in) matrix, row-major
        logits = torch.func.functional_call(m, {"blocks.0.key": wt.reshape(base.T.shape).T}, (x,))
        return torch.nn.functional.cross_entropy(logits, y)

    ref = torch.autograd.functional.hessian(ce, base.T.reshape(-1).clone()).numpy()  # double backward
    assert np.max(np.abs(H[np.ix_(ix, ix)] - ref)) <= 1e-10 * max(1.0, np.max(np.abs(ref)))


@pytest.mark.slow
def test_a_lists_hessian_from_its_groups_blocks_is_the_dense_hessians_principal_submatrix():
    """list_hessian assembles the blocks of the groups holding a list (one group, two, or the closed-form FFN pair)
    and cuts the list out: equal to the dense Hessian's sub-matrix in float64."""
    import numpy as np
    import torch

    from curvature_gap.experiments.trajectory import LISTS, list_hessian
    from curvature_gap.hessian import hessian
    from curvature_gap.model import build_model
    from curvature_gap.params import authors_indices

    model = build_model("authors_mnist", seed=3).double().eval()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(3, 1, 28, 28, generator=g, dtype=torch.float64), torch.tensor([1, 4, 7]))
    H = hessian(model, batch).numpy()
    for name in ("queries", "layernorm", "ffn_weights"):
        ix = authors_indices(model, LISTS[name][0])
        np.testing.assert_allclose(list_hessian(model, batch, ix), H[np.ix_(ix, ix)], rtol=0, atol=1e-12 * np.abs(H).max())


def test_each_list_gets_the_batch_of_its_section_as_their_notebook_draws_it():
    """Their notebook calls next(iter(loader)) in each of five sections: section i gets pass i's first batch."""
    from curvature_gap.experiments.trajectory import LISTS, PLOTTED, SECTION_PASS

    assert [SECTION_PASS[g] for g in PLOTTED] == [0, 1, 2, 3, 4]
    assert set(LISTS) - set(SECTION_PASS) == {"ffn_weights"}


