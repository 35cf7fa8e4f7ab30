"""The recipe of CONTRIBUTING.md works: its toy result module, taken from the file's own code block, is
registered, computed and cached, drawn with its message, read by the claim rows and counted as a finding,
with nothing listed anywhere else."""
from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from cases import REPO
from curvature_gap import checks, findings
from curvature_gap import experiments
from curvature_gap.checks import Inputs, figures
from curvature_gap.experiments import report


def _recipe_module(tmp_path, monkeypatch):
    text = (REPO / "CONTRIBUTING.md").read_text()
    code = re.search(r"### 1\. The module.*?```python\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "toy.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("curvature_gap.experiments.toy", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    spec.loader.exec_module(mod)  # relative imports resolve in curvature_gap.experiments, as for a module there
    return mod


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    mod = _recipe_module(tmp_path, monkeypatch)
    experiments.register(mod.SPECS)
    yield mod
    for s in mod.SPECS:
        experiments.SPECS.pop(s.name, None)


def test_the_recipe_builds_a_result_that_every_registry_derives(toy, tmp_path):
    assert "toy" in experiments.SPECS and experiments.spec("toy").profiles == ("smoke", "paper")
    assert list(experiments.SPECS)[-3:] == ["toy", "theorem7", "trained_bounds"]   # book order: beyond the paper, then checks
    ctx = experiments.Context(profile="smoke", results_dir=tmp_path / "results", progress=False)
    r = experiments.load_results("toy", ctx=ctx)
    assert r.meta["n"] == 100 and r.arrays["x"].shape == (100,)
    assert experiments.find_result("toy", ctx=ctx).config_hash == r.config_hash          # cached under its config hash
    fig = experiments.plot("toy", r, "histogram")
    assert fig.get_figwidth() > 0 and experiments.message("toy", "histogram", r).startswith("The mean of 100 draws")
    assert report.key_numbers("toy", r) == {"mean": r.meta["mean"], "standard error": r.meta["se"]}
    rows = figures.run(Inputs(results={"toy": r}))
    (row,) = [x for x in rows if x.id == "toy.mean"]
    assert row.verdict == "reproduced"
    assert "toy" in checks.data_results()                                    # verify reads it
    entries = findings.result_entries()
    assert ("toy", "Toy: the mean of N(0, 1) draws is near 0", "notebooks/toy", "experiment") in entries
    assert findings.finding_of("toy", [row]).verdict == "not run"        # a smoke result gives no verdict
    paper = experiments.load_results("toy", ctx=experiments.Context(profile="paper", results_dir=tmp_path / "results", progress=False))
    (prow,) = [x for x in figures.run(Inputs(results={"toy": paper})) if x.id == "toy.mean"]
    assert paper.meta["n"] == 10_000 and findings.finding_of("toy", [prow]).verdict == "reproduced"
    # a changed setting is a new result, never the cached one
    other = experiments.Context(profile="smoke", results_dir=tmp_path / "results", progress=False,
                      settings_overrides={"toy": {"n": 50}})
    assert experiments.config_hash_of("toy", ctx=other) != r.config_hash and experiments.find_result("toy", ctx=other) is None


def test_a_result_declared_twice_is_refused_by_name(toy):
    with pytest.raises(experiments.ConfigError, match="result 'toy' is declared twice"):
        experiments.register(toy.SPECS)
