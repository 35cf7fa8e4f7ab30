"""The "Adding a closed-form check" recipe of CONTRIBUTING.md works: its toy check, taken from the file's own code
block, is one declaration per row; the measuring function only fills the declared accumulators; each row (verdict,
result, role, what, tolerance) is built from its declaration; the check joins a group and the rows of verify with
nothing listed anywhere else; its erratum is linked to the row, numbered and counted. And the recipe can fail: a
wrong closed form fails its rows, a printed form that is right is not "corrected", an id declared twice, a key
nobody declared and a declaration nothing measures are refused."""
from __future__ import annotations

import collections
import dataclasses
import re

import pytest
import torch

from cases import REPO
from curvature_gap import checks
from curvature_gap.checks import Inputs
from curvature_gap.checks import theory as th
from curvature_gap.checks.theory import attention, block, calculus, ffn, layernorm
from curvature_gap.checks.theory.common import BAD, FD_TOL, TOL, Group
from curvature_gap.row import by_id
from curvature_gap.findings import RESULTS
from curvature_gap.theory import errata
from curvature_gap.theory.errata import ResultMisprints, label, misprint_counts

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = ["toy.lse_hessian", "toy.lse_hessian.fd"]


def _recipe_code() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    return re.search(r"## Adding a closed-form check.*?```python\n(.*?)```", text, re.S).group(1)


def _run(code: str | None = None) -> dict:
    ns: dict = {"__name__": "contributing_check_recipe"}
    exec(compile(code if code is not None else _recipe_code(), "CONTRIBUTING.md (Adding a closed-form check)",
                 "exec"), ns)
    return ns


def _mutated(*pairs: tuple[str, str]) -> str:
    code = _recipe_code()
    for old, new in pairs:
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    return code


_OWN_ASSERT = "assert [r.verdict for r in rows] =="  # the recipe's own check of its verdicts


def _without_own_assert(*pairs: tuple[str, str]) -> dict:
    """The recipe with ``pairs`` replaced and its own verdict check dropped: the rows as verify would show them."""
    code = _mutated(*pairs)
    code = "\n".join(line for line in code.splitlines() if not line.startswith(_OWN_ASSERT))
    return _run(code)


@pytest.fixture()
def toy() -> dict:
    return _run()


def test_each_row_is_built_from_its_declaration(toy):
    rows, decl = toy["rows"], toy["CHECKS"]
    assert [r.id for r in rows] == [c.id for c in decl] == IDS
    for r, c in zip(rows, decl):
        assert (r.result, r.role, r.what, r.expected, r.tolerance, r.kind) == \
            (c.result, c.role, c.what, c.expected, c.tol, "formula"), r.id
        assert r.verdict == r.expected and r.as_expected and r.rel_err <= r.tolerance, r
        assert r.instances == "2 inst: random matrices; compared (5, 5)", r.instances
    H, fd = rows
    # the declared defaults: a statement of result appB, 1e-10 against autograd, 1e-6 (".fd") against differences
    assert H.result in {k for k, _, _, kind in RESULTS if kind == "theory"} and H.role == fd.role == "statement"
    assert (H.tolerance, fd.tolerance) == (TOL, FD_TOL) and fd.id.endswith(".fd") and not H.id.endswith(".fd")
    # what the comment of the recipe says the rows show
    assert H.verdict == "corrected" and H.rel_err <= 1e-15 and H.printed_rel_err == pytest.approx(10.9, abs=0.05)
    assert H.printed_rel_err > BAD and H.note == "printed: diag(s) + s sᵀ | printed form: max rel err 10.9"
    assert fd.verdict == "verified" and 1e-12 < fd.rel_err <= 1e-9 and fd.printed_rel_err is None and fd.note == ""
    # the full profile measures one size more, with the same verdicts
    full = toy["GROUP"].rows(quick=False, insts=[])
    assert [r.verdict for r in full] == ["corrected", "verified"]
    assert all(r.instances == "3 inst: random matrices; compared (8, 8)" for r in full)


def test_the_closed_form_is_right_on_a_case_known_by_hand(toy):
    """At x = 0, s = 1/n: H = I/n − 1 1ᵀ/n² (what the check's test in tests/theory/ would pin)."""
    n = 4
    want = torch.eye(n, dtype=torch.float64) / n - torch.full((n, n), 1 / n**2, dtype=torch.float64)
    assert torch.allclose(toy["lse_hessian"](torch.zeros(n, dtype=torch.float64)), want, rtol=0, atol=1e-16)


def test_the_check_joins_a_group_and_the_rows_of_verify(toy, monkeypatch):
    """Each group of verify is its module's ``Group`` over that module's ``CHECKS``, so a declaration added to the
    tuple and measured in the module's ``measure`` is a row of verify: here the toy joins the calculus group."""
    modules = (calculus, layernorm, ffn, attention, block)
    groups = {id(v): m for m in modules for v in vars(m).values() if isinstance(v, Group)}
    assert all(id(g) in groups for g in th.GROUPS.values())
    assert th.GROUPS["calculus"] is calculus.GROUP and calculus.GROUP.checks is calculus.CHECKS
    assert list(th.CHECKS) == [c.id for g in th.GROUPS.values() for c in g.checks]

    def measure(quick, insts, A):
        calculus.measure(quick, insts, A)
        toy["measure"](quick, insts, A)

    joined = Group("calculus", calculus.CHECKS + toy["CHECKS"], measure)
    monkeypatch.setattr(th, "GROUPS", {"calculus": joined})
    rows = th.run(Inputs(quick=True))  # what verify's closed-form rows are made by
    assert [r.id for r in rows] == [c.id for c in calculus.CHECKS] + IDS
    assert [(r.id, r.verdict, r.rel_err) for r in rows[-2:]] == [(r.id, r.verdict, r.rel_err) for r in toy["rows"]]
    assert all(r.verdict == r.expected for r in rows)
    # the ids are new: CHECKS, read from the groups, takes them
    assert list(by_id(*th.CHECKS.values(), *toy["CHECKS"]))[-2:] == IDS


def test_an_id_or_a_key_declared_twice_is_refused(toy):
    H, fd = toy["CHECKS"]
    taken = dataclasses.replace(H, id="appB.vec_r")  # an id a module already declares
    with pytest.raises(ValueError, match="'appB.vec_r' is declared twice"):
        by_id(*th.CHECKS.values(), taken)  # as checks.theory builds CHECKS from the groups, at import
    with pytest.raises(ValueError, match="declared twice"):
        Group("toy", (H, fd, dataclasses.replace(fd, key="other")), toy["measure"])
    with pytest.raises(ValueError, match="key is declared twice"):
        Group("toy", (H, dataclasses.replace(fd, key="H")), toy["measure"])
    with pytest.raises(ValueError, match="'toy.lse_hessian' is declared twice"):  # the recipe's group, one id twice
        again = '\n    FormulaCheck("toy.lse_hessian", "appB", "again", "H2"),'
        _run(_mutated(('"Hfd", tol=FD_TOL),', '"Hfd", tol=FD_TOL),' + again)))


def test_an_undeclared_key_or_an_unmeasured_declaration_is_refused():
    with pytest.raises(KeyError, match="Hd"):  # the measuring function adds to a key nobody declared
        _run(_mutated(('A["Hfd"].add(', 'A["Hd"].add(')))
    with pytest.raises(ValueError, match="nothing was measured"):  # a declaration its group never measures
        idle = '\n    FormulaCheck("toy.idle", "appB", "w", "idle"),'
        _run(_mutated(('"Hfd", tol=FD_TOL),', '"Hfd", tol=FD_TOL),' + idle)))
    with pytest.raises(ValueError, match="measured a printed form"):  # a printed form without expected=
        _run(_mutated((' expected="corrected"),', '),')))


def test_a_wrong_closed_form_fails_its_rows():
    """1 % on the outer product: the recipe's own check fails, and both rows say "fails" (not as expected)."""
    wrong = ("return torch.diag(s) - torch.outer(s, s)", "return torch.diag(s) - 1.01 * torch.outer(s, s)")
    with pytest.raises(AssertionError):
        _run(_mutated(wrong))
    rows = _without_own_assert(wrong)["rows"]
    assert [r.verdict for r in rows] == ["fails", "fails"] and not any(r.as_expected for r in rows)
    assert all(r.rel_err > 1e-4 for r in rows)


def test_a_printed_form_that_is_right_is_not_corrected():
    right = ("return torch.diag(s) + torch.outer(s, s)", "return torch.diag(s) - torch.outer(s, s)")
    with pytest.raises(AssertionError):
        _run(_mutated(right))
    H = _without_own_assert(right)["rows"][0]
    assert H.verdict == "verified" != H.expected and not H.as_expected and H.printed_rel_err <= 1e-15


@pytest.fixture()
def with_toy_erratum(toy, monkeypatch):
    """ERRATA with the recipe's entry appended, as theory/errata.py would have it (every module that reads it)."""
    from tools.book import tables

    original = errata.ERRATA
    extended = [*original, toy["ERRATUM"]]
    for mod in (errata, checks, tables):
        assert mod.ERRATA is original, mod.__name__
        monkeypatch.setattr(mod, "ERRATA", extended)
    return extended


def test_the_erratum_names_the_check_and_verify_links_numbers_and_counts_it(toy, with_toy_erratum, monkeypatch):
    from tools.book.tables import errata_md

    e = toy["ERRATUM"]
    # complete, in the words and MyST math of the other entries, with a new id
    assert set(e) == {"id", "title", "wrong", "where", "printed", "holds", "evidence"}
    assert sum(x["id"] == e["id"] for x in with_toy_erratum) == 1
    assert all("|" not in e[k] and e[k].count("$") % 2 == 0 for k in ("where", "printed", "holds"))
    # the rule of tests/checks/test_checks_theory.py: the evidence expects a printed form wrong, and every check that
    # does is named by an erratum
    declared = {**th.CHECKS, **{c.id: c for c in toy["CHECKS"]}}
    assert declared[e["evidence"]].printed
    named = {i for x in with_toy_erratum for i in (x["evidence"], *x.get("related", []))}
    assert {c.id for c in declared.values() if c.printed} <= named
    # verify: the toy's group as the closed-form rows, the other topics silenced
    monkeypatch.setattr(th, "GROUPS", {"toy": toy["GROUP"]})
    monkeypatch.setattr(checks, "TOPICS", (th.TOPIC,))
    rows = checks.run(quick=True, res=collections.defaultdict(lambda: None))
    assert [r.id for r in rows] == IDS
    H, fd = rows
    assert H.errata == [e["id"]] and fd.errata == []
    k = len(with_toy_erratum)
    assert label(e["id"]) == f"E{k}"
    counts = misprint_counts(rows)
    assert counts.formulas == 1 and counts.rows == 1 and counts.of("appB") == ResultMisprints(statement=1)
    # the errata page: the entry, numbered, with its check's row (the error of the corrected and the printed form)
    md = errata_md(rows)
    assert f"### E{k}. " in md and "Toy: the sign of the outer product" in md and e["holds"] in md
    entry = md.split(f"### E{k}. ")[1]
    (line,) = [x for x in entry.splitlines() if 'title="check toy.lse_hessian"' in x]
    assert line.endswith("| corrected | 2.1 × 10⁻¹⁶ | 11 |"), line
