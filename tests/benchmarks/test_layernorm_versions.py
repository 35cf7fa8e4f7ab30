"""benchmarks/layernorm_versions.py: its quick mode runs with the installed curvlinops only (no scratch
environment, as in CI) and writes a complete document in which the other release is skipped, not faked;
its exact Hessian (reverse-over-reverse through the hand-written LayerNorm) agrees with central finite
differences of the gradient, in the document and in an independent check here."""
from __future__ import annotations

import importlib.util
import math
import sys

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

NAME = "layernorm_versions"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(BENCH))  # the script imports _bench
    try:
        spec = importlib.util.spec_from_file_location(f"benchmarks_{NAME}_under_test", BENCH / f"{NAME}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def quick_doc(quick_run):
    returncode, stdout, stderr, doc = quick_run(NAME)  # the run tests/benchmarks/test_bench_quick.py checks too
    assert returncode == 0 and doc is not None, stdout[-3000:] + stderr[-3000:]
    return doc


@pytest.mark.slow
def test_quick_document_is_complete(quick_doc, report):
    doc = report.validate(quick_doc, NAME)
    assert doc["mode"] == "quick" and doc["command"].startswith(f"python benchmarks/{NAME}.py --quick")
    assert doc["threads"] == 1 and len(doc["git"]["commit"]) == 40 and len(doc["load_average"]) == 2
    s = doc["settings"]
    assert s["dtype"] == "float64" and s["checkpoints"] == ["init"] and s["scratch"] == []
    assert s["blocks"][:4] == ["W_E", "W_Q", "W_K", "W_V"] and len(s["blocks"]) == len(s["block_sizes"]) == 12
    assert sum(s["block_sizes"]) == s["parameters"]
    assert {r["version"] for r in s["releases"]} >= {"2.0.1", "3.0.0", "3.0.1"}
    assert s["installed_curvlinops"]["curvlinops_version"] and isinstance(s["installed_curvlinops"]["torch_func"], bool)


@pytest.mark.slow
def test_rows_exact_installed_and_a_skipped_scratch(quick_doc):
    rows = quick_doc["rows"]
    assert [(r["method"], r.get("environment")) for r in rows] == [
        ("exact", None), ("curvlinops", "installed"), ("curvlinops", "scratch (none)")]
    exact, inst, skipped = rows
    G = len(quick_doc["settings"]["blocks"])
    assert exact["status"] == "ok" and exact["asymmetry"] < 1e-12
    assert inst["status"] == "ok" and inst["curvlinops_version"] == quick_doc["settings"]["installed_curvlinops"][
        "curvlinops_version"]
    for key in ("block_max_rel", "block_fro_rel"):
        assert len(inst[key]) == G and all(len(r) == G for r in inst[key])
    # the largest block of the whole difference is the overall max error, and both are finite numbers
    i, j = inst["worst_block"]
    assert math.isclose(inst["block_max_rel"][i][j], inst["max_rel_err"], rel_tol=1e-12)
    assert set(inst["largest"]) == set(exact["largest"]) == set(inst["same_largest"])
    assert all(v["largest"] == v["ranking"][0] for v in exact["largest"].values())
    # no scratch environment: the other release is skipped, with the reason, and carries no numbers
    assert skipped["status"].startswith("skipped: no scratch environment") and "max_rel_err" not in skipped


@pytest.mark.slow
def test_the_document_s_exact_hessian_agrees_with_finite_differences(quick_doc):
    exact = quick_doc["rows"][0]
    assert len(exact["fd_columns"]) == 12
    assert exact["fd_max_rel_err"] <= 1e-6


@pytest.mark.slow
def test_exact_hessian_columns_against_our_own_finite_differences(script):
    """Independently of the script's finite differences: perturb each of a few parameters of the quick
    model by ±h, take the gradient with plain autograd, and compare with the exact Hessian's column."""
    import torch

    import curvature_gap as cg

    model = cg.build_model("authors_mnist", seed=0, **script.QUICK_MODEL).double()
    X, y, _ = script.first_batch(8)
    X = X.double()
    H = script.exact_hessian(model, X, y)
    params, labels, sizes, perm = script.authors_params(model)
    assert H.shape == (sum(sizes), sum(sizes)) and torch.allclose(H, H.T, atol=1e-13, rtol=0)

    def grad():
        loss = torch.nn.functional.cross_entropy(model(X), y)
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])[perm]

    starts = torch.cumsum(torch.tensor([0] + sizes[:-1]), 0)
    h = 1e-5
    for b in (1, 3, 5, 6, 9, 11):  # W_Q, W_V, LN1 gamma, LN1 beta, LN2 gamma, head
        p, c = params[b], int(starts[b]) + 1  # the second entry of the block in the authors' layout
        j = int(perm[c]) - int(starts[b])  # where that entry sits in our tensor (flat)
        with torch.no_grad():
            p.view(-1)[j] += h
        gp = grad()
        with torch.no_grad():
            p.view(-1)[j] -= 2 * h
        gm = grad()
        with torch.no_grad():
            p.view(-1)[j] += h
        fd = (gp - gm) / (2 * h)
        err = float((fd - H[:, c]).abs().max() / H[:, c].abs().max())
        assert err <= 1e-6, f"column {c} ({labels[b]}): finite differences differ by {err:.1e}"
