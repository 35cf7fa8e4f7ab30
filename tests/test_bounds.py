"""Tests of curvature_gap.bounds: the bounds as printed, the exact counterparts, the saved
counter-examples (replayed), Theorem 7's identity and Assumption 1's gradient norms.

No real data: models are random, images synthetic.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import hessian, jacfwd, jacrev

from curvature_gap.bounds import checks as ck
from curvature_gap.bounds import exact as ex
from curvature_gap.bounds import formulas as fm
from curvature_gap.bounds import linalg as la
from curvature_gap.bounds import sweeps as sw
from curvature_gap.bounds.instance import Instance, random_instance

CE_DIR = Path(ck.__file__).parent / "counterexamples"
CE_FILES = sorted(CE_DIR.glob("*.json"))

# Checks found failing by `curvature-gap bounds` (results/bounds/summary.json); each must have a
# committed, replayable counter-example.
FAILING = {
    "thm1.printed", "thm1.proof", "thm1.printed.maxblock", "thm1.proof.maxblock", "thm1.term.Ho_QQ",
    "thm1.term.Ho_QK", "sa.dA_dT", "sa.Z1", "lemma4.J.stated", "lemma4.H.stated", "lemma4.dP.stated",
    "lemma4.d2P.stated", "thm6.GQ", "thm6.GK", "thm6.Phi.VQ", "thm6.Phi.QK", "thm6.Phi.sym", "thm6.xi21",
}


# ----------------------------------------------------------------------------- counter-examples
def test_every_failing_check_has_a_committed_counterexample():
    have = {p.stem for p in CE_FILES}
    assert have == FAILING, f"missing: {sorted(FAILING - have)}, unexpected: {sorted(have - FAILING)}"


@pytest.mark.parametrize("path", CE_FILES, ids=[p.stem for p in CE_FILES])
def test_counterexample_replays_and_fails(path):
    ce = json.loads(path.read_text())
    r = sw.replay(ce)
    assert r["ratio"] < 1 - ck.RTOL, f"{ce['check']} no longer fails: ratio {r['ratio']}"
    assert r["ratio"] == pytest.approx(ce["ratio"], rel=1e-6)
    assert r["bound"] == pytest.approx(ce["bound"], rel=1e-6)
    assert r["exact"] == pytest.approx(ce["exact"], rel=1e-6)
    inst = Instance.from_json(ce["instance"])
    assert list(inst.shape) == ce["shape"]


# ----------------------------------------------------------------------------- Theorem 1 as printed / as proved
def test_theorem1_printed_and_proof_hand_values():
    # ‖X‖=2, ‖W_Q‖=‖W_K‖=‖W_V‖=‖Target‖=1, L=2, d_V=2, d_K=1, rank(F−Target)=1; (L‖X‖‖W_V‖+‖T‖)=5
    a = (2.0, 1.0, 1.0, 1.0, 1.0, 2, 2, 1)
    p = fm.theorem1(*a, variant="printed")
    r2 = math.sqrt(2)
    assert p["VV"] == pytest.approx(8.0, rel=1e-14)                 # 2L/d_V ‖X‖²
    assert p["QQ"] == pytest.approx(32 + 960 * r2, rel=1e-14)       # 8/(L³d_Vd_K)·64 + 12/(d_Vd_K)√2·5·32
    assert p["VQ"] == pytest.approx(16 + 40 * r2, rel=1e-14)        # 4/(Ld_V√d_K)·16 + 4√2/(L²√d_K)·5·8
    assert p["QK"] == pytest.approx(32 + 1000 * r2, rel=1e-14)      # 8/16·64 + 4√2·5/(Ld_V√d_K)(3L·32 + d_V/L·8)
    assert p["M"] == pytest.approx(96 + 3000 * r2, rel=1e-14)
    q = fm.theorem1(*a, rank=1, variant="proof")
    assert q["VV"] == pytest.approx(8.0, rel=1e-14)
    assert q["QQ"] == pytest.approx(8 + 960, rel=1e-14)             # 2/(L³d_Vd_K)·64 + 12/(d_Vd_K)·1·5·32
    assert q["VQ"] == pytest.approx(8 + 10 * r2, rel=1e-14)         # 2/(Ld_V√d_K)·16 + 2/(L²√(d_Vd_K))·5·8
    assert q["QK"] == pytest.approx(8 + 250 * r2, rel=1e-14)        # 2/16·64 + 2·5/(Ld_V√(d_Vd_K))·200
    assert q["M"] == pytest.approx(3 * 968, rel=1e-14)
    # the proof variant with rank = min(L, d_V) is what "rank ≤ min(L, d_V)" simplifies to
    assert fm.theorem1(*a, variant="proof")["QQ"] == pytest.approx(8 + 960 * r2, rel=1e-14)


def test_lemma4_stated_reading_fails_on_one_centred_row():
    # m = 1, centred row: ‖X‖ = ‖m_1‖ = ρ, exact ‖J‖ = √n/ρ, stated bound 1/ρ + ρ²/(√n ρ³)
    n = 16
    x = torch.randn(1, n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x - x.mean()
    q = ex.layernorm_exact(x)
    assert q["J"] == pytest.approx(math.sqrt(n) / float(x.norm()), rel=1e-12)
    recs = {r["check"]: r for r in ck.records_ln(q, "X")}
    assert recs["lemma4.J.stated"]["ratio"] == pytest.approx(1 / math.sqrt(n) + 1 / n, rel=1e-12)
    assert recs["lemma4.J.std"]["ratio"] >= 1


# ----------------------------------------------------------------------------- exact counterparts
def _tiny(L=3, d=2, seed=0, **kw):
    return random_instance(L=L, d_V=d, d_ff=3, seed=seed, **kw)


def test_Z1_Z2_and_softmax_derivatives_match_definitions():
    inst = _tiny(L=3, d=2, sharpness=4.0)
    X, L, d = inst.X, 3, 2
    T = X @ inst.W_Q @ inst.W_K.T @ X.T / math.sqrt(inst.d_K)
    A = ex.softmax_rows(T)
    dA = jacrev(ex.softmax_rows)(T).reshape(L * L, L * L)               # ∂vec_r A/∂vec_r T
    d2A = jacfwd(jacrev(ex.softmax_rows))(T).reshape(L ** 4, L * L)      # (L²·L²) × L²
    I = torch.eye(L, dtype=torch.float64)
    Xt = X.T.contiguous()
    Z1 = torch.kron(I, Xt) @ dA @ torch.kron(X, X)
    assert torch.allclose(ex.Z1_matrix(X, A), Z1, atol=1e-13)
    K4 = torch.kron(torch.kron(torch.kron(I, Xt), Xt), Xt)
    Z2 = K4 @ d2A @ torch.kron(X, X)
    assert ex.Z2_norm(X, A) == pytest.approx(float(torch.linalg.matrix_norm(Z2, ord=2)), rel=1e-10)
    assert ex.softmax_d1_norm(A) == pytest.approx(float(torch.linalg.matrix_norm(dA, ord=2)), rel=1e-10)
    assert ex.softmax_d2_norm(A) == pytest.approx(float(torch.linalg.matrix_norm(d2A, ord=2)), rel=1e-10)
    K = ex.softmax_d2_blocks(A)                                          # Lemma C.1 closed form
    for i in range(L):
        for j in range(L):
            auto = hessian(lambda t: ex.softmax_rows(t[None])[0][j])(T[i])
            assert torch.allclose(K[i, j], auto, atol=1e-13)
    S = ex.S_shuffle(3)
    K33 = torch.zeros(9, 9, dtype=torch.float64)
    for a in range(3):
        for b in range(3):
            K33[a * 3 + b, b * 3 + a] = 1
    ref = torch.kron(torch.eye(3, dtype=torch.float64), K33) @ torch.kron(torch.eye(3, dtype=torch.float64).reshape(-1, 1),
                                                                           torch.eye(3, dtype=torch.float64))
    assert torch.equal(S, ref)


def test_layernorm_norms_match_dense_autograd():
    U = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.3
    q = ex.layernorm_exact(U)
    J = jacrev(ex.layernorm)(U).reshape(12, 12)
    H = jacfwd(jacrev(ex.layernorm))(U).reshape(144, 12)
    assert q["J"] == pytest.approx(float(torch.linalg.matrix_norm(J, ord=2)), rel=1e-10)
    assert q["H"] == pytest.approx(float(torch.linalg.matrix_norm(H, ord=2)), rel=1e-10)
    P = lambda X: torch.diag(1 / (X - X.mean(1, keepdim=True)).pow(2).mean(1).sqrt())  # noqa: E731
    dP = jacrev(P)(U).reshape(9, 12)
    d2P = jacfwd(jacrev(P))(U).reshape(9 * 12, 12)
    assert q["dP"] == pytest.approx(float(torch.linalg.matrix_norm(dP, ord=2)), rel=1e-10)
    assert q["d2P"] == pytest.approx(float(torch.linalg.matrix_norm(d2P, ord=2)), rel=1e-10)


def test_second_derivative_norm_dense_and_matrix_free_agree():
    inst = _tiny(L=3, d=2)
    args = [inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.W_1, inst.W_2]
    for i, j in ((2, 3), (4, 5), (1, 1)):
        dense = la.second_derivative_norm(ex._block_Z, args, i, j)
        free = la.second_derivative_norm(ex._block_Z, args, i, j, dense_limit=0)
        assert free == pytest.approx(dense, rel=1e-8)


def test_sa_hessian_and_split_match_autograd():
    inst = _tiny(L=3, d=2, sharpness=2.0)
    q = ex.sa_exact(inst)
    H = hessian(ex.sa_loss, argnums=(1, 2, 3))(inst.X, inst.W_Q, inst.W_K, inst.W_V, inst.Target)
    n = [4, 4, 4]
    full = torch.cat([torch.cat([H[a][b].reshape(n[a], n[b]) for b in range(3)], 1) for a in range(3)], 0)
    assert q["H"] == pytest.approx(float(torch.linalg.eigvalsh(full).abs().max()), rel=1e-12)
    assert q["Hf_VV"] < 1e-14                          # F is linear in W_V
    assert q["H_VV"] == pytest.approx(q["Ho_VV"], rel=1e-12)


# ----------------------------------------------------------------------------- bounds that hold
@pytest.mark.parametrize("seed", [0, 1])
def test_bounds_that_should_hold_hold_on_random_instances(seed):
    inst = random_instance(L=4, d_V=3, d_ff=6, seed=seed, sigma=0.7, sharpness=2.0)
    recs = ck.evaluate(inst)
    must = {"thm1.printed", "thm1.proof", "thm6.block.exact", "thm6.full.exact", "thm6.full.explicit",
            "sa.dA_dT_general", "sa.A", "sa.A_sqrtL", "sa.R", "sa.S", "sa.d2A_dT2", "sa.Z2", "prop.Y",
            "prop.FFN", "prop.S", "lemma4.J.std", "lemma4.H.std", "thm6.B1", "thm6.B2", "thm6.JSY", "thm6.Bk"}
    seen = set()
    for r in recs:
        if r["check"] in must:
            seen.add(r["check"])
            assert ck.holds(r["ratio"]), (r["check"], r["sub"], r["ratio"])
    assert seen == must
    # at uniform attention (W_Q W_Kᵀ = 0) the proof's ‖∂A/∂T‖ = 1/L is an equality
    uni = random_instance(L=4, d_V=3, d_ff=6, seed=seed, sharpness=0.0)
    r = [x for x in ck.evaluate(uni, parts=("sa",)) if x["check"] == "sa.dA_dT"][0]
    assert r["ratio"] == pytest.approx(1.0, abs=1e-12) and ck.holds(r["ratio"])


def test_balance_rescaling_breaks_theorem1():
    # W_Q → a W_Q, W_K → W_K/a leaves F unchanged; the K–K block grows like a², M does not.
    rat = []
    for a in (1.0, 64.0, 4096.0):
        recs = ck.evaluate(random_instance(L=8, d_V=4, seed=0, balance=a), parts=("sa",))
        rat.append({r["check"]: r["ratio"] for r in recs})
    assert rat[0]["thm1.printed"] > 1e3 and rat[0]["thm1.proof"] > 1e3
    assert rat[2]["thm1.printed"] < 1 and rat[2]["thm1.proof"] < 1
    assert rat[1]["thm1.proof"] / rat[2]["thm1.proof"] > 100      # ≈ a^{-2} once the K–K block dominates


# ----------------------------------------------------------------------------- Theorem 7 and Assumption 1
def _tiny_model_and_data(n=24):
    from curvature_gap.model import build_model

    m = build_model("mnist", seed=0)
    g = torch.Generator().manual_seed(0)
    return m, (torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_theorem7_identity_and_rhs():
    from curvature_gap.bounds import theorem7 as t7

    l = np.random.default_rng(0).exponential(size=5000) * 3
    assert t7.identity_residual(l) < 1e-12
    m, ds = _tiny_model_and_data()
    losses = t7.per_sample_losses(m, ds)
    assert losses.dtype == np.float64 and losses.shape == (24,)
    assert t7.identity_residual(losses) < 1e-12
    Lk = t7.running_means(losses)
    assert Lk[-1] == pytest.approx(losses.mean(), rel=1e-14)
    assert t7.rhs(3, 2.0, 5.0, 0.5) == pytest.approx((4 + 2.5) / 4, rel=1e-15)
    res = t7.path_check(m, ds, 24, {"exact": 1.0}, ts=(0.0, 0.1), directions=("random",))
    assert all(p["identity_residual"] < 1e-12 for p in res["paths"])
    assert res["paths"][0]["min_ratio_exact"] >= 1          # at t = 0 the first term alone bounds it


def test_assumption1_gradient_norms():
    from curvature_gap.bounds import assumption1 as a1

    m, (images, labels) = _tiny_model_and_data(16)
    res = a1.gradient_norms(m, (images, labels), ks=[1, 4, 16], n_perm=2)
    md = m.double()
    loss = torch.nn.functional.cross_entropy(md(images.double()), labels)
    g = torch.autograd.grad(loss, list(md.parameters()))
    full = float(torch.sqrt(sum((x ** 2).sum() for x in g)))
    assert res["norms"][0][-1] == pytest.approx(full, rel=1e-10)
    assert res["norms"][1][-1] == pytest.approx(full, rel=1e-10)   # every permutation ends at the full mean
    assert res["mean_grad_norm"] == pytest.approx(full, rel=1e-10)
    assert set(res) >= {"slope", "claim_holds", "reference", "relative_gradient_min"}


# ----------------------------------------------------------------------------- verify rows and CLI
def test_verify_rows_format_and_findings():
    from curvature_gap.bounds.run import verify_rows

    inst = random_instance(L=4, d_V=3, seed=0, sharpness=1.0)
    rows = [{**r, "sweep": "t", "x": 1.0, "seed": 0} for r in ck.evaluate(inst, parts=("sa",), hessian=True)]
    out = verify_rows(sw.summarize(rows))
    keys = {"id", "what", "shapes", "max_rel_err", "verdict", "expected", "note", "finding"}
    assert all(set(r) >= keys for r in out)
    by = {r["id"]: r for r in out}
    assert by["bounds.sa.dA_dT"]["verdict"] == "fails" and by["bounds.sa.dA_dT"]["finding"] is True
    assert by["bounds.sa.A"]["verdict"] == "holds" and by["bounds.sa.A"]["finding"] is False
    assert by["bounds.sa.dA_dT"]["max_rel_err"] < 1


def test_cli_has_bounds_verb():
    from curvature_gap.cli import VERBS, build_parser

    a = build_parser().parse_args(["bounds", "--quick", "--out", "x", "--json", "y.json"])
    assert a.verb == "bounds" and a.quick and a.out == "x" and a.json == "y.json"
    assert "bounds" in VERBS
