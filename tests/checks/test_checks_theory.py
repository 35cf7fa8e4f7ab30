"""curvature_gap.checks.theory: each closed form of the paper against autograd (the formula rows of
``curvature-gap verify --quick``, computed once per session), that a wrong formula is caught, and that each row is
built from its one declaration (a :class:`FormulaCheck`), which the errata name."""
from __future__ import annotations

import pytest
import torch

from curvature_gap.checks import theory as th
from curvature_gap.checks.theory.common import Group
from curvature_gap.findings import RESULTS
from curvature_gap.theory import layernorm as ln
from curvature_gap.theory.errata import ERRATA


def _formula_rows(rows):
    return [r for r in rows if r.kind == "formula"]


def test_every_formula_row_has_its_expected_verdict_within_tolerance(quick_rows):
    rows = _formula_rows(quick_rows)
    # the nn.TransformerEncoderLayer rows are the book's own results (checks.encoder_layer): their own checks
    encoder = [r for r in rows if r.result == "encoder_layer"]
    assert encoder and all(r.verdict == r.expected and r.rel_err <= r.tolerance for r in encoder if r.ran)
    rows = [r for r in rows if r.result != "encoder_layer"]
    assert len(rows) >= 100
    for r in rows:
        assert r.verdict in ("verified", "corrected", "notation"), r
        assert r.verdict == r.expected, r
        assert r.rel_err <= r.tolerance, r
        assert r.tolerance == (th.FD_TOL if r.id.endswith(".fd") else th.TOL), r
        assert r.result == th.CHECKS[r.id].result and r.claim == "verified"
        if r.verdict != "verified":
            # the printed form was measured wrong (> 1e-3) or shown to be ill-dimensioned
            assert (r.printed_rel_err is not None and r.printed_rel_err > th.BAD) or "not evaluable" in r.note, r


def test_mnist_size_block_hessian(quick_rows):
    """Theorem 5 + Gauss–Newton at L = 49, d_V = d_K = 16, d_ff = 64 against torch.func.hessian."""
    (r,) = [r for r in quick_rows if r.id == "gn.loss_hessian.mnist"]
    assert r.verdict == "verified" and r.rel_err <= 1e-10, r
    assert "L=49" in r.instances and "dV=16" in r.instances and "(2816, 2816)" in r.instances


def test_every_section2_result_is_listed(quick_rows):
    ids = [r.id for r in _formula_rows(quick_rows)]
    assert len(set(ids)) == len(ids)                          # unique ids
    for p in ["appB.", "sec2.", "thm2.", "thm3.", "lem1.", "thm4.", "thm5.xi.", "thm5.phi.", "thm5.H_tr.", "orm.Ho.",
              "orm.Hf.", "lemC1.", "noci.", "lem2.", "gn."]:
        assert any(i.startswith(p) for i in ids), p
    P = ("1", "2", "K", "Q", "V")
    for i in P:
        for j in P:
            assert f"thm5.xi.{i}{j}" in ids and f"thm5.H_tr.{i}{j}" in ids
    for k in "QKV":
        for l in "QKV":
            assert f"thm5.phi.{k}{l}" in ids
    assert set(th.GROUPS) == {"calculus", "layernorm", "ffn", "attention", "phi", "block", "gauss_newton", "mnist"}


@pytest.mark.parametrize("group", ["calculus", "layernorm", "ffn", "attention", "phi", "gauss_newton"])
def test_each_quick_group_has_its_expected_verdicts(group):
    """The groups of a second or less, alone (``make test-fast``; block and mnist are in the quick rows above)."""
    rows = th.run_group(group, quick=True)
    assert rows
    for r in rows:
        assert r.verdict == r.expected and r.result == th.CHECKS[r.id].result, r
        assert r.rel_err is None or r.rel_err <= r.tolerance, r


def test_every_closed_form_row_is_built_from_its_one_declaration(quick_rows):
    """The closed-form rows of verify are the declared checks, in declaration order, each with what its declaration
    says (result, role, what, expected, tolerance): nothing else lists a check."""
    rows = [r for r in quick_rows if r.id in th.CHECKS]
    assert [r.id for r in rows] == list(th.CHECKS)
    for r in rows:
        c = th.CHECKS[r.id]
        assert (r.result, r.role, r.what, r.expected, r.tolerance) == (c.result, c.role, c.what, c.expected, c.tol), \
            r.id
    # every formula row outside the declarations is the book's own encoder-layer family (checks.encoder_layer)
    assert {r.result for r in quick_rows if r.kind == "formula" and r.id not in th.CHECKS} == {"encoder_layer"}


def test_declarations_are_unique_and_name_a_theory_result():
    """One declaration per id across the modules, each in one group, for a theory result of the findings."""
    declared = [c for g in th.GROUPS.values() for c in g.checks]
    assert len(declared) == len(th.CHECKS) >= 100 and all(th.CHECKS[c.id] is c for c in declared)
    theory = {key for key, _, _, kind in RESULTS if kind == "theory"}
    assert {c.result for c in declared} <= theory
    assert {c.tol for c in declared} == {th.TOL, th.FD_TOL}
    assert all((c.tol == th.FD_TOL) == c.id.endswith(".fd") for c in declared)


def test_errata_name_existing_declarations_and_every_printed_error_has_an_erratum():
    """The errata (theory/errata.py) name checks by id: each names a declared check, its evidence one that expects the
    printed form wrong; and each check that expects a printed form wrong is named by an erratum."""
    named = set()
    for e in ERRATA:
        ids = [e["evidence"], *e.get("related", [])]
        assert all(i in th.CHECKS for i in ids), (e["id"], [i for i in ids if i not in th.CHECKS])
        assert th.CHECKS[e["evidence"]].printed, e["id"]
        named.update(ids)
    assert {c.id for c in th.CHECKS.values() if c.printed} <= named


def _toy(*checks, measure):
    return Group("toy", checks, measure).rows(True, [])


def test_a_check_cannot_be_measured_without_a_declaration_nor_declared_without_a_measurement():
    ok = th.FormulaCheck("toy.ok", "appB", "a vs a", "a")
    one = lambda quick, insts, A: A["a"].add(0.0, (1,))
    (row,) = _toy(ok, measure=one)
    assert (row.id, row.result, row.verdict, row.instances) == ("toy.ok", "appB", "verified", "1 inst: random matrices")
    with pytest.raises(KeyError):                                   # a key nobody declared
        _toy(ok, measure=lambda quick, insts, A: A["b"].add(0.0, (1,)))
    with pytest.raises(ValueError, match="nothing was measured"):   # a declaration its group never measures
        _toy(ok, th.FormulaCheck("toy.idle", "appB", "b vs b", "b"), measure=one)
    with pytest.raises(ValueError, match="declared twice"):
        Group("toy", (ok, ok), one)
    with pytest.raises(ValueError, match="key is declared twice"):
        Group("toy", (ok, th.FormulaCheck("toy.other", "appB", "b vs b", "a")), one)
    with pytest.raises(ValueError, match="role"):
        th.FormulaCheck("toy.role", "appB", "a vs a", "a", role="repair")


def test_a_printed_form_is_measured_only_by_a_check_that_declares_what_it_expects():
    def printed(quick, insts, A):
        A["a"].add(0.0, (1,))
        A["a"].printed.append(0.5)
    with pytest.raises(ValueError, match="measured a printed form"):
        _toy(th.FormulaCheck("toy.silent", "appB", "a vs a", "a"), measure=printed)
    (row,) = _toy(th.FormulaCheck("toy.erratum", "appB", "a vs a", "a", note="n", expected="corrected"),
                  measure=printed)
    assert (row.verdict, row.expected, row.printed_rel_err) == ("corrected", "corrected", 0.5)
    assert row.note == "n | printed form: max rel err 0.5"


def test_checks_detect_a_wrong_formula(monkeypatch):
    """A 1 % error injected into ∂P/∂X must turn the Theorem 2 Jacobian row into 'fails'."""
    good = {r.id: r for r in th.run_group("layernorm", quick=True)}
    assert good["thm2.layernorm.jacobian"].verdict == "verified"
    orig = ln.dP_dX
    monkeypatch.setattr(ln, "dP_dX", lambda X: 1.01 * orig(X))
    rows = {r.id: r for r in th.run_group("layernorm", quick=True)}
    assert rows["thm2.layernorm.jacobian"].verdict == "fails" and not rows["thm2.layernorm.jacobian"].as_expected
    assert rows["thm2.layernorm.jacobian"].rel_err > 1e-4


def test_rel_err():
    a, b = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([1.0, 4.0], dtype=torch.float64)
    assert th.rel_err(a, b) == 0.5 and th.rel_err(b, b) == 0.0
    assert th.rel_err(torch.zeros(2), torch.zeros(2)) == 0.0
    assert th.rel_err(torch.tensor([1e-3, 0.0], dtype=torch.float64), torch.zeros(2), scale=2.0) == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="shape mismatch"):
        th.rel_err(torch.zeros(2), torch.zeros(3))
