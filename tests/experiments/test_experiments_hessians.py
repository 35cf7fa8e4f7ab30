"""curvature_gap.experiments.hessians: the figures' Hessian, its curvlinops cross-check, block statistics."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import curvature_gap as cg
from cases import TINY_MODEL, random_batch
from curvature_gap.experiments import hessians as hs
from curvature_gap.hessian import hessian

pytestmark = pytest.mark.usefixtures("one_thread")


def _model():
    return cg.build_model("mnist", seed=0, **TINY_MODEL)


def test_units_partition_block0_and_the_outer_groups():
    m = _model()
    units = hs.units_of(m)
    assert set(units) == set(hs.UNITS) - {"W_O", "b_att"}      # the theorem's block has neither
    allidx = np.concatenate(list(units.values()))
    assert len(allidx) == len(set(allidx.tolist())) == sum(p.numel() for p in m.parameters())
    assert len(units["LN1"]) == 8 and len(units["W_V"]) == 16
    a = cg.build_model("authors_mnist", seed=0, d_model=4, d_k=4, d_ff=8, patch_size=7)
    au = hs.units_of(a)
    assert set(au) == set(hs.UNITS) - {"b_1", "b_2", "pos"} and len(au["W_O"]) == 16 and len(au["b_att"]) == 16
    allidx = np.concatenate(list(au.values()))
    assert len(allidx) == len(set(allidx.tolist())) == sum(p.numel() for p in a.parameters())


def test_sample_columns_cover_every_group():
    m = _model()
    cols = hs.sample_columns(m, 40, seed=0)
    assert len(cols) >= 40 and np.all(np.diff(cols) > 0)
    for g in cg.param_groups(m):
        assert np.any((cols >= g.start) & (cols < g.stop)), g.name
    assert np.array_equal(cols, hs.sample_columns(m, 40, seed=0))
    assert not np.array_equal(cols, hs.sample_columns(m, 40, seed=1))


def test_exact_columns_and_the_cross_check_against_curvlinops():
    m = _model()
    batch = random_batch(3, seed=0)
    H = hessian(m, batch)
    cols = hs.sample_columns(m, 30, seed=0)
    Hc = hs.exact_columns(m.double(), (batch[0].double(), batch[1]), cols)
    H64 = hessian(m.double(), (batch[0].double(), batch[1]))
    assert float((Hc - H64[:, torch.as_tensor(cols)]).abs().max()) < 1e-12 * float(H64.abs().max())
    m = _model()
    cc = hs.cross_check(m, batch, H, cols, small_batch=2)
    assert cc["float32"]["max_relative_difference"] < 1e-5 and cc["float32"]["columns"] == len(cols)
    assert cc["float64"]["max_relative_difference"] < 1e-10 and cc["float64"]["batch"] == 2
    assert cc["float32"]["worst_group"] in {g.name for g in cg.param_groups(m)}
    # a wrong Hessian is caught
    bad = hs.cross_check(m, batch, H * 1.01, cols, small_batch=2)
    assert bad["float32"]["max_relative_difference"] > 5e-3


def test_block_statistics_and_rankings_on_a_designed_matrix():
    units = {"W_Q": np.array([0, 1]), "W_K": np.array([2, 3, 4]), "W_V": np.array([5, 6, 7]), "W_1": np.array([8]),
             "W_2": np.array([9]), "LN1": np.array([10])}
    H = np.full((11, 11), 1e-3)
    H[5:8, 5:8] = -2.0                 # V-V: largest mean |entry|
    H[10, 10] = 50.0                   # LN1: largest single entry
    st = hs.unit_statistics(H, units)
    assert st["W_V"]["fro"] == pytest.approx(6.0) and st["W_V"]["mean"] == pytest.approx(2.0)
    assert st["W_V"]["spectral"] == pytest.approx(6.0) and st["W_V"]["fro_sqrt_n"] == pytest.approx(6 / np.sqrt(3))
    assert st["LN1"]["max"] == 50.0 and set(st["W_Q"]) == set(hs.STATISTICS)
    rk = hs.rankings(st)
    assert rk["weights"]["mean"][0] == "W_V" and rk["with_layernorm"]["max"][0] == "LN1"
    assert "LN1" not in rk["weights"]["max"] and rk["block"]["fro"][0] == "LN1" and "all" not in rk
    pairs = hs.group_pair_statistics(H, [0, 5, 10], [5, 10, 11])
    assert pairs["fro"][1, 1] == pytest.approx(np.sqrt(9 * 4 + 16 * 1e-6))
    assert pairs["max"][2, 2] == 50.0 and pairs["mean"][0, 2] == pytest.approx(1e-3)
