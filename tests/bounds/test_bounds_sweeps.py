"""curvature_gap.bounds.sweeps: sweeps, summaries, slopes, and the committed counter-examples (replayed)."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from curvature_gap.bounds import registry
from curvature_gap.bounds import sweeps as sw
from curvature_gap.exact.forward import attention_matrix, sa_loss
from curvature_gap.exact.instances import Instance, random_instance

pytestmark = pytest.mark.usefixtures("one_thread")

CE_DIR = Path(registry.__file__).parent / "counterexamples"
CE_FILES = sorted(CE_DIR.glob("*.json"))
NAMED = {"thm1.printed@minimiser", "thm1.printed@uniform", "thm1.printed@admissible"}


# ----------------------------------------------------------------------------- the committed counter-examples
def test_every_known_failure_has_a_committed_counterexample_and_nothing_else_is_committed():
    stems = {p.stem for p in CE_FILES}
    # each failing check's smallest failing instance, and its worst where that is another (<check>.worst)
    assert {s for s in stems if "@" not in s and not s.endswith(".worst")} == set(registry.known_failures())
    assert {s.removesuffix(".worst") for s in stems if s.endswith(".worst")} <= set(registry.known_failures())
    assert {s for s in stems if "@" in s} == NAMED, "the named Theorem 1 counter-examples (bounds/counterexamples)"
    for p in CE_FILES:
        ce = json.loads(p.read_text())
        assert ce["check"] == p.stem.split("@")[0].removesuffix(".worst") and ce["ratio"] < 1 - registry.RTOL, p.name
        worst = CE_DIR / f"{ce['check']}.worst.json"
        if "@" not in p.stem and not p.stem.endswith(".worst") and worst.is_file():
            assert json.loads(worst.read_text())["ratio"] < ce["ratio"], "a worst copy only where it is worse"
        assert list(Instance.from_json(ce["instance"]).shape) == ce["shape"]


def test_the_named_theorem1_counterexamples_rule_out_both_readings():
    """Theorem 1 fails at an exact minimiser (the statement's w*) and under uniform attention (the proof's
    assumption); the repaired bound holds on both."""
    named = {d["name"]: d for d in sw.named_theorem1(CE_DIR)}
    assert set(named) == NAMED
    for d in named.values():
        assert d["printed"] < 1 <= d["repaired"], d
        assert d["worst_block_norm"] > d["printed_rows_max"]       # a block no printed row bounds
    assert named["thm1.printed@minimiser"]["loss"] < 1e-25
    assert named["thm1.printed@uniform"]["attn_dev"] < 1e-14
    adm = named["thm1.printed@admissible"]  # both at once: every assumption in force
    assert adm["loss"] < 1e-25 and adm["attn_dev"] < 1e-14
    uni = Instance.from_json(json.loads((CE_DIR / "thm1.printed@uniform.json").read_text())["instance"])
    assert float((uni.W_Q @ uni.W_K.T).abs().max()) == 0.0 and float(uni.W_Q.abs().max()) > 0


def test_a_counterexample_replays_to_its_recorded_numbers():
    ce = json.loads((CE_DIR / "sa.dA_dT.json").read_text())
    r = sw.replay(ce)
    assert r["ratio"] < 1 - registry.RTOL
    for k in ("ratio", "bound", "exact"):
        assert r[k] == pytest.approx(ce[k], rel=1e-6), k
    with pytest.raises(KeyError, match="not produced on replay"):
        sw.replay(dict(ce, sub="no-such-sub"))


# ----------------------------------------------------------------------------- sweeps, summaries, slopes
def test_sweep_definitions():
    mini = {s.name for s in sw.definitions(mini=True)}
    assert {"sigma", "sharpness", "balance", "minimiser", "uniform", "ln_rows"} <= mini
    full = {s.name: s for s in sw.definitions(quick=True)}
    assert set(full) >= mini | {"ln_width"}
    inst = full["minimiser"].make(64.0, 0)
    assert float(sa_loss(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)) == 0.0
    inst = full["uniform"].make(64.0, 0)
    A = attention_matrix(inst.X, inst.W_Q, inst.W_K)
    torch.testing.assert_close(A, torch.full_like(A, 1 / inst.L), rtol=0, atol=1e-15)


def test_run_sweep_records_and_instances():
    s = sw.Sweep("tiny", "sigma", [0.5, 2.0], (0, 1), lambda x, seed: random_instance(L=3, d_V=2, seed=seed, sigma=x),
                 lambda x: ("sa",))
    rows, insts = sw.run_sweep(s)
    assert len(insts) == 4 and {r["inst_key"] for r in rows} == set(insts)
    assert {r["sweep"] for r in rows} == {"tiny"} and {r["x"] for r in rows} == {0.5, 2.0}
    r = next(r for r in rows if r["check"] == "thm1.printed" and r["x"] == 2.0 and r["seed"] == 1)
    again = [x for x in registry.evaluate(insts["tiny|2.0|1"], parts=("sa",)) if x["check"] == "thm1.printed"][0]
    assert r["ratio"] == again["ratio"] and insts["tiny|2.0|1"].meta["sweep"] == "tiny"


def _rec(check, sweep, x, seed, bound, exact, **kw):
    return {"check": check, "sweep": sweep, "x": x, "seed": seed, "sub": "", "bound": bound, "exact": exact,
            "ratio": registry.ratio(bound, exact), **kw}


def test_summarize_and_slopes_on_a_power_law():
    xs = [1.0, 2.0, 4.0, 8.0, 16.0]
    rows = [_rec("sa.A", "sigma", x, s, 3 * x ** 2, x ** 3) for x in xs for s in (0, 1)]   # fails for x > 3
    rows.append(_rec("sa.A", "search", "a", 0, 1.0, 100.0, L=4, d=3, h=1, family="one-hot", minimiser=False))
    (s,) = sw.summarize(rows, ["sa.A"])
    assert s["verdict"] == "fails" and s["min_ratio"] == pytest.approx(0.01)
    assert s["min_ratio_sweeps"] == pytest.approx(3 / 16) and s["n_searched"] == 1
    assert s["n_records"] == 11 and s["n_fail"] == 7 and s["worst"]["sweep"] == "search"
    assert s["won_by"]["family"] == "one-hot" and s["searched_by_L"] == {4: 0.01}
    assert s["expect"] == registry.CHECKS["sa.A"]["expect"] and s["claim"] == "holds"
    sl = sw.slopes(rows, "sa.A", "sigma")
    assert sl["slope_exact"] == pytest.approx(3.0) and sl["slope_bound"] == pytest.approx(2.0)
    assert sl["slope_exact_low"] == pytest.approx(3.0) and sl["n_x"] == 5
    held = sw.summarize([_rec("sa.S", "sigma", 1.0, 0, 2.0, 2.0)], ["sa.S"])[0]
    assert held["verdict"] == "holds"


def test_counterexamples_are_picked_saved_and_replayable(tmp_path):
    insts = {f"balance|{a}|0": random_instance(L=8, d_V=4, seed=0, balance=a) for a in (1.0, 4096.0)}
    insts["minimiser|4096.0|0"] = random_instance(L=8, d_V=4, seed=0, balance=4096.0, target="fit",
                                                  target_output="attention")
    rows = []
    for key, inst in insts.items():
        sweep, x, seed = key.split("|")
        rows += [dict(r, sweep=sweep, x=float(x), seed=int(seed), inst_key=key, ln_input="block")
                 for r in registry.evaluate(inst, parts=("sa",))]
    worst, small = sw.pick_counterexamples(rows, insts)
    assert "thm1.printed" in worst and "sa.A" not in worst
    assert set(worst) == set(small) and all(ce["ratio"] < 1 for ce in worst.values())
    named = sw.named_counterexamples(rows, insts)
    assert set(named) == {"thm1.printed@minimiser"} and "minimiser" in named["thm1.printed@minimiser"]["why"]
    paths = sw.save_counterexamples({**worst, **named}, tmp_path / "ce")
    assert (tmp_path / "ce" / "thm1.printed@minimiser.json") in paths
    ce = json.loads((tmp_path / "ce" / "thm1.printed.json").read_text())
    assert sw.replay(ce)["ratio"] == pytest.approx(worst["thm1.printed"]["ratio"], rel=1e-12)
    sw.save_counterexamples({"x": worst["sa.dA_dT"]}, tmp_path / "ce", replace=False)
    assert len(list((tmp_path / "ce").glob("*.json"))) == len(paths) + 1
    sw.save_counterexamples({"x": worst["sa.dA_dT"]}, tmp_path / "ce")
    assert [p.name for p in (tmp_path / "ce").glob("*.json")] == ["x.json"]


def test_write_csv_keeps_full_precision(tmp_path):
    rows = [_rec("sa.A", "sigma", 0.1, 0, 1 / 3, 2 / 7, extra="dropped")]
    sw.write_csv(tmp_path / "t.csv", rows)
    (back,) = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert float(back["ratio"]) == rows[0]["ratio"] and "extra" not in back
    assert list(back) == sw.CSV_FIELDS and math.isfinite(float(back["bound"]))
    assert np.isclose(float(back["exact"]), 2 / 7, rtol=0, atol=0)


def test_an_exact_minimiser_replays_as_one_on_a_cpu_that_rounds_F_otherwise():
    """A minimiser's stored Target is F as the writing CPU rounded it; another CPU (AMD against Intel, other BLAS
    kernels) rounds F in other last bits, so F − Target is rounding noise, rank(F − Target) turns full and the
    proof's bound (√rank) jumps from 0.0179 to 6131. Such a file records ``tied``, and its replay refits Target."""
    ce = json.loads((CE_DIR / "thm1.proof.QK.worst.json").read_text())
    assert ce["tied"] == "attention" and ce["loss"] == 0.0
    other = json.loads(json.dumps(ce))  # the same file, as another CPU's F would leave it: Target one ulp away
    tgt = torch.tensor(other["instance"]["Target"], dtype=torch.float64)
    other["instance"]["Target"] = torch.nextafter(tgt, torch.full_like(tgt, math.inf)).tolist()
    assert sw.replay(other)["ratio"] == pytest.approx(ce["ratio"], rel=1e-9)
    untied = {k: v for k, v in other.items() if k != "tied"}
    assert sw.replay(untied)["ratio"] > 1, "without the refit, rounding noise in F − Target passes for a residual"
    inst = random_instance(L=4, d_V=3, d_ff=6, seed=2, target="fit", target_output="attention")
    assert sw.counterexample_json({"check": "thm1.proof.QK", "sub": "QK", "bound": 1.0, "exact": 2.0,
                                   "ratio": 0.5}, inst)["tied"] == "attention"
    assert "tied" not in sw.counterexample_json({"check": "thm1.proof.QK", "sub": "QK", "bound": 1.0, "exact": 2.0,
                                                 "ratio": 0.5}, random_instance(L=4, d_V=3, d_ff=6, seed=2))
