"""curvature_gap.experiments.heatmaps: Figs. 3 and 4 on the tiny model (the exact Hessian, cross-checked)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from curvature_gap import experiments
from curvature_gap.experiments.heatmaps import group_table
from curvature_gap.hessian import hessian


def test_fig3_numbers_equal_the_exact_hessian_of_the_first_batch(small_run):
    _, ctx = small_run
    r = experiments.load_results("fig3", ctx=ctx)
    assert r["n_parameters"] == 454 and r["trained"] is False and r["batch_size"] == 4
    cc = r["cross_check"]
    assert cc["float32"]["max_relative_difference"] < 1e-5 and cc["float64"]["max_relative_difference"] < 1e-10
    m = ctx.model(experiments.Variant(), 0)[0]
    H = hessian(m, ctx.first_images(experiments.Variant(), 4)).double().numpy()
    names, starts, stops = r["group_names"], r["group_starts"], r["group_stops"]
    assert names[0] == "pos" and names[-1] == "head" and r["pool"] == 1
    v = names.index("block0.value")
    blk = H[starts[v]:stops[v], starts[v]:stops[v]]
    np.testing.assert_allclose(r["pair_fro"][v, v], np.linalg.norm(blk), rtol=1e-5)
    assert r["unit_stats"]["W_V"]["max"] == pytest.approx(float(np.abs(blk).max()), rel=1e-5)
    np.testing.assert_allclose(r["image"].astype(np.float64), np.log10(np.abs(H) + 1e-6), atol=2e-3)
    a0, a1 = r["attention_range"]
    assert r["attention"].shape == (a1 - a0, a1 - a0)
    assert r["rankings"]["weights"]["fro"][0] in ("W_Q", "W_K", "W_V", "W_1", "W_2")
    assert r["checkpoint"]["step"] == 0 and any(k.startswith("dyn_") for k in r.arrays)
    for part in ("hessian", "attention", "block_means"):
        assert len(experiments.plot("fig3", r, part).axes) >= 1


def test_fig4_is_the_trained_model(small_run):
    _, ctx = small_run
    r = experiments.load_results("fig4", ctx=ctx)
    assert r["trained"] is True and r["checkpoint"]["steps"] == 8
    assert 0 <= r["checkpoint"]["test_accuracy"] <= 1
    assert not any(k.startswith("dyn_") for k in r.arrays)
    assert r["loss"] != experiments.load_results("fig3", ctx=ctx)["loss"]


def test_group_table_describes_the_flat_parameter_vector():
    import curvature_gap as cg

    m = cg.build_model("mnist", seed=0, d_model=4, d_k=4, d_ff=8, patch_size=7)
    gt = group_table(m)
    flat = torch.nn.utils.parameters_to_vector(m.parameters())
    assert gt["n_parameters"] == flat.numel() == gt["group_stops"][-1]
    i = gt["param_names"].index("blocks.0.value")
    o = gt["param_offsets"][i]
    assert torch.equal(flat[o:o + 16], m.blocks[0].value.reshape(-1))


def test_the_authors_hessian_order_is_their_parameter_list_and_flattening():
    """Their Hessian figures differentiate every weight and LayerNorm gamma, beta (no other bias), flattened
    in their storage: our indices in that order pick exactly their flat vector out of ours."""
    from curvature_gap.model import build_model
    from curvature_gap.params import authors_hessian_order, authors_parameter_names

    m = build_model("authors_mnist", seed=3, d_model=4, d_k=4, d_ff=8, patch_size=7)
    idx, layout = authors_hessian_order(m)
    ours = torch.nn.utils.parameters_to_vector(m.parameters())
    params = dict(m.named_parameters())
    theirs = []
    for name, (o, transposed) in authors_parameter_names(m.cfg).items():
        if name.endswith(".bias") and "norm" not in name:
            continue
        t = params[o].detach()
        theirs.append((name, (t.T if transposed else t).reshape(-1)))
    order = {o: i for i, (o, _) in enumerate(m.named_parameters())}      # their module order is ours
    theirs.sort(key=lambda nt: order[authors_parameter_names(m.cfg)[nt[0]][0]])
    assert torch.equal(ours[idx], torch.cat([t for _, t in theirs]))
    assert sum(n for _, n in layout) == len(idx) == sum(p.numel() for n, p in m.named_parameters()
                                                         if not n.endswith("_bias") and n not in ("embed.bias", "head.bias"))
    assert [g for g, _ in layout][:6] == ["embed", "block0.query", "block0.key", "block0.value", "block0.out", "block0.ln1"]


def test_leads_without_counts_the_statistics_a_block_leads_once_another_is_left_out():
    from types import SimpleNamespace

    from curvature_gap.experiments.heatmaps import leads_without
    from curvature_gap.experiments.hessians import STATISTICS

    def stats(**size):
        return {u: {st: v for st in STATISTICS} for u, v in size.items()}

    res = SimpleNamespace(meta={"unit_stats": stats(W_Q=1.0, W_K=2.0, W_V=3.0, W_O=4.0, W_1=0.5, W_2=0.5)})
    n = len(STATISTICS)
    assert leads_without(res, None, "W_O") == n and leads_without(res, None) == 0
    assert leads_without(res, "W_O") == n, "without W_O the Values lead"
    assert leads_without(res, "W_V", "W_O") == n and leads_without(res, "W_O", "W_K") == 0


def test_the_fig3_verdict_on_the_authors_model_is_a_count_over_initialisations():
    """Their initialisation is unseeded: the verdict counts the initialisations that reproduce the claim."""
    from curvature_gap.experiments.heatmaps import AUTHORS_INIT, seed_count

    assert len(AUTHORS_INIT["paper"].seeds) >= 10 and AUTHORS_INIT["paper"].seeds[0] == 37
    every = {"weights": 7, "with_layernorm": 7, "block": 7}
    none = {"weights": 0, "with_layernorm": 0, "block": 0}
    first_v = {st: "W_V" for st in range(7)}
    first_o = {st: "W_O" for st in range(7)}
    yes = dict(seed=1, leads=every, weights_first=first_v, verdict="reproduced")
    no = dict(seed=2, leads=none, weights_first=first_o, verdict="not reproduced")
    assert seed_count([yes, yes])[0] == "reproduced"
    assert seed_count([no, no])[0] == "not reproduced"
    verdict, sentence, counts = seed_count([yes, no, no])
    assert verdict == "partly reproduced" and counts["reproduced"] == 1
    assert "in all 7 statistics in 1/3, in none in 2/3" in sentence and "W_O does (14 of 14 readings)" in sentence
