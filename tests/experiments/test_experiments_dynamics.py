"""curvature_gap.experiments.dynamics (Figs. 7–11) and dynamics_blocks: one block type over the first steps."""
from __future__ import annotations

import numpy as np
import pytest

import curvature_gap as cg
from cases import TINY_MODEL
from curvature_gap import experiments
from curvature_gap.experiments import dynamics_blocks as db
from curvature_gap.exact.linalg import sym_spectral_norm


@pytest.mark.parametrize("fig, kind, n_tensors", [("fig7", "queries", 1), ("fig9", "values", 1),
                                                 ("fig10", "layernorm", 4), ("fig11", "feedforward", 4)])
def test_each_type_is_cut_from_the_trajectory(small_run, fig, kind, n_tensors):
    _, ctx = small_run
    t = experiments.load_results("trajectory", ctx=ctx)
    r = experiments.load_results(fig, ctx=ctx)
    assert r["block_type"] == kind and len(r["tensors"]) == n_tensors
    np.testing.assert_array_equal(r["hess_fro"], t[f"fro_{kind}"])
    W = np.concatenate([r[f"w{k}"] for k in range(n_tensors)], 1).astype(np.float64)
    np.testing.assert_allclose(r["param_fro"], np.linalg.norm(W, axis=1), rtol=1e-6)
    assert ("pair_fro" in r) == (kind in ("layernorm", "feedforward"))
    if fig == "fig10":   # drawing is the same code for every type: once is enough
        assert set(experiments.plot(fig, r)) == {"entries", "hessian", "norms"}


def test_snapshot_record_of_designed_blocks():
    m = cg.build_model("mnist", seed=0, **TINY_MODEL)
    groups = db.trajectory_groups(m)
    assert groups[0] == "block0.query" and groups[-1] == "head"
    pairs = db.trajectory_pairs(m)
    assert ("block0.ln1", "block0.ln2") in pairs and ("block0.ffn1", "block0.ffn2") in pairs
    P = sum(p.numel() for p in m.parameters())
    rng = np.random.default_rng(0)
    H = rng.standard_normal((P, P))
    H = H + H.T
    blocks = db.blocks_from_dense(H, m)
    rec = db.snapshot_record(blocks, m, display=True, eps=1e-6, cells=600)
    q = blocks[("block0.query", "block0.query")]
    assert rec["diag_fro"][0] == pytest.approx(np.linalg.norm(q)) and rec["spec_queries"] == pytest.approx(sym_spectral_norm(q))
    ln = np.block([[blocks[("block0.ln1", "block0.ln1")], blocks[("block0.ln1", "block0.ln2")]],
                   [blocks[("block0.ln1", "block0.ln2")].T, blocks[("block0.ln2", "block0.ln2")]]])
    assert rec["fro_layernorm"] == pytest.approx(np.linalg.norm(ln))
    assert rec["img_layernorm"].shape == ln.shape and rec["pool_layernorm"] == 1
    assert "img_values" not in db.snapshot_record(blocks, m, display=False, eps=1e-6, cells=600)
