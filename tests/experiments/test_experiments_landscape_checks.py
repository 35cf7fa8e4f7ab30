"""curvature_gap.experiments.landscape_checks: Theorem 7 and the bounds at the trained tiny ViT."""
from __future__ import annotations

import pytest

from cases import experiments_context
from curvature_gap import experiments
from curvature_gap.bounds import registry as ck


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return experiments_context(tmp_path_factory.mktemp("landscape_checks"),
                               theorem7=dict(n_samples=24, hessian_samples=4, power_iters=10, refine=1),
                               trained_bounds=dict(n_samples=1, n_batch=2, n_ce=1))


def test_theorem7_on_the_trained_model(ctx):
    r = experiments.load_results("theorem7", ctx=ctx)
    assert r["n"] == 24 and set(r["M"]) == {"exact", "thm6_ce"} and r["M"]["thm6_ce"] > r["M"]["exact"] > 0
    assert all(p["identity_residual"] < 1e-12 for p in r["paths"])
    at0 = [p for p in r["paths"] if p["t"] == 0.0]
    assert len(at0) == 2 and all(p["min_ratio_exact"] >= 1 for p in at0)
    assert r["hessian"]["n"] == 4 and len(r["hessian"]["refined"]) == 1
    assert r["direction_is_random"].any() and not r["direction_is_random"].all()
    assert set(experiments.plot("theorem7", r)) == {"ratios"}


def test_theorem7s_reported_minima_recompute_from_its_arrays(ctx):
    """Each path's smallest rhs/lhs (the numbers its rows report, with their k) is rhs/lhs of a row of the
    result's arrays: the table holds the minimising k of every path beside its log-spaced ones."""
    import numpy as np

    r = experiments.load_results("theorem7", ctx=ctx)
    a = r.arrays
    for p in r["paths"]:
        for name in ("exact", "thm6_ce"):
            at = ((a["t"] == p["t"]) & (a["direction_is_random"] == (p["direction"] == "random"))
                  & (a["k"] == p[f"argmin_k_{name}"]))
            (i,) = np.flatnonzero(at)
            assert a["at_min"][i] and a[f"rhs_{name}"][i] / a["lhs"][i] == pytest.approx(p[f"min_ratio_{name}"],
                                                                                        rel=1e-12)


@pytest.mark.slow
def test_trained_bounds_records(ctx):
    r = experiments.load_results("trained_bounds", ctx=ctx)
    recs = r["records"]
    checks = {x["check"] for x in recs}
    assert {"thm1.printed", "thm1.repaired", "lemma4.J.std", "prop.S", "thm1.printed.batch",
            "thm6.full.explicit.batch", "ce.output_factor", "thm6.full.explicit.ce"} <= checks
    assert {x["x"] for x in recs} == {"init", "trained"}
    assert all(x["ratio"] >= 1 - ck.RTOL for x in recs if x["check"] in ("thm1.repaired", "ce.output_factor"))
    assert len(r["ratio"]) == len(recs)
