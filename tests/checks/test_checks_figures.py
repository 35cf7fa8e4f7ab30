"""curvature_gap.checks.figures: the verdicts about the paper's figures, derived from a table of rankings
(never from one number)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from curvature_gap.checks import figures as cf
from curvature_gap.experiments.hessians import SETS, STATISTICS

UNITS = SETS["all"][1]


def _stats(value):
    """unit_stats with ``value(unit, statistic)`` for every unit of the tiny model's tables."""
    return {u: {st: float(value(u, st)) for st in STATISTICS} for u in UNITS}


def _res(stats, profile="paper"):
    return SimpleNamespace(meta={"unit_stats": stats, "batch_size": 128, "n_parameters": 4186},
                           config={"profile": profile}, json_path="results/fig3/h.json")


def _base(u, st):
    return 1.0 + UNITS.index(u) * 0.01               # every unit distinct, W_V not first


def test_ranking_table_orders_each_set_by_each_statistic():
    table = cf.ranking_table(_stats(_base))
    assert set(table) == set(SETS) and set(table["weights"]) == set(STATISTICS)
    assert table["weights"]["fro"] == ["W_2", "W_1", "W_V", "W_K", "W_Q"]
    assert table["all"]["mean"][0] == "head" and len(table["with_layernorm"]["rms"]) == 7


def test_W_V_largest_everywhere_is_reproduced():
    row = cf.values_largest(_res(_stats(lambda u, st: 100.0 if u == "W_V" else _base(u, st))), "fig3")
    assert row.verdict == "reproduced" and row.value == 1.0 and not row.finding
    assert row.id == "fig3.values_largest" and row.details["rankings"]["all"]["max"][0] == "W_V"
    assert all(all(per.values()) for per in row.details["leads"].values())


def test_W_V_largest_by_some_statistics_only_is_partly_reproduced():
    def value(u, st):
        if u == "W_V":
            return 100.0 if st == "fro" else 0.5
        return _base(u, st)

    row = cf.values_largest(_res(_stats(value)), "fig4")
    assert row.verdict == "partly reproduced" and row.finding
    assert row.value == pytest.approx(1 / len(STATISTICS))
    assert row.details["leads"]["weights"]["fro"] and not row.details["leads"]["weights"]["mean"]
    assert sum(row.details["leads"]["weights"].values()) == 1


def test_W_V_largest_among_the_weights_but_not_with_the_layernorms_is_partly_reproduced():
    def value(u, st):
        return {"W_V": 100.0, "LN1": 1000.0}.get(u, _base(u, st))

    row = cf.values_largest(_res(_stats(value)), "fig3")
    assert row.verdict == "partly reproduced" and row.value == 1.0
    assert all(row.details["leads"]["weights"].values())
    assert not any(row.details["leads"]["with_layernorm"].values())


def test_W_V_never_largest_is_not_reproduced():
    row = cf.values_largest(_res(_stats(lambda u, st: 0.1 if u == "W_V" else _base(u, st))), "fig3")
    assert row.verdict == "not reproduced" and row.value == 0.0 and row.finding


def test_no_result_is_not_run_with_the_command():
    row = cf.values_largest(None, "fig4")
    assert row.verdict == "not run" and row.command == cf.FIGURE_COMMAND.format(name="fig4", needs="MNIST")
    assert cf.keys_values(None).verdict == "not run"
    fig6 = cf.convergence_slope(None)
    assert fig6.verdict == "not run" and "CIFAR-100 and a GPU" in fig6.command
    stand = cf.convergence_slope(None, SimpleNamespace(meta={"fit": {"slope": -0.98, "r2": 0.99}}))
    assert "MNIST stand-in (1 block) gives slope -0.980" in stand.note and stand.verdict == "not run"


def test_fig5_keys_and_values():
    weights = SETS["weights"][1]
    big = {"W_K": 10.0, "W_V": 9.0}

    def norms(scale):
        return {u: {"fro": big.get(u, 1.0) * scale, "rms": big.get(u, 1.0) * scale} for u in weights}

    hs = {u: {st: big.get(u, 1.0) for st in STATISTICS} for u in weights}
    meta = {"param_norms": {"init": norms(1.0), "trained": norms(2.0)}, "hessian_stats": {"init": hs, "trained": hs}}
    row = cf.keys_values(SimpleNamespace(meta=meta, config={"profile": "paper"}, json_path="f.json"))
    assert row.verdict == "reproduced" and row.value == 1.0
    hs2 = {u: {st: {"W_Q": 10.0, "W_V": 9.0}.get(u, 1.0) for st in STATISTICS} for u in weights}
    meta2 = dict(meta, hessian_stats={"init": hs2, "trained": hs2}, param_norms={"init": {u: {"fro": 1.0, "rms": 1.0}
                 for u in weights} | {"W_Q": {"fro": 5.0, "rms": 5.0}, "W_1": {"fro": 4.0, "rms": 4.0}},
                 "trained": norms(2.0)})
    row2 = cf.keys_values(SimpleNamespace(meta=meta2, config={"profile": "paper"}, json_path="f.json"))
    assert row2.verdict == "partly reproduced" and row2.value == 0.5


def test_fig6_slope():
    res = lambda slope: SimpleNamespace(meta={"fit": {"slope": slope, "r2": 0.99}, "n_samples": 50000},  # noqa: E731
                                        config={"profile": "paper"}, json_path="f.json")
    assert cf.convergence_slope(res(-1.05)).verdict == "reproduced"
    assert cf.convergence_slope(res(-0.5)).verdict == "not reproduced"
    assert cf.convergence_slope(res(-1.0 - cf.SLOPE_TOL - 1e-9)).verdict == "not reproduced"
