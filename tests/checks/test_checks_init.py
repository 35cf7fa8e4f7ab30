"""curvature_gap.checks (``curvature-gap verify``): every check as one list of rows.

The quick run (``checks.run(quick=True)``, once per session, with no results of a trained model) is checked
for the rows the book and the findings depend on; ``main`` for its table, JSON and exit status.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from curvature_gap import checks
from curvature_gap.row import ROW_SCHEMA, Row

NAMED = ("thm1.printed@minimiser", "thm1.printed@uniform")


def test_every_row_validates_against_the_schema_and_ids_are_unique(quick_rows):
    ids = [r.id for r in quick_rows]
    assert len(ids) == len(set(ids)) and len(ids) > 200
    validator = jsonschema.Draft202012Validator(ROW_SCHEMA)
    for r in quick_rows:
        errors = list(validator.iter_errors(r.to_json()))
        assert not errors, (r.id, errors[0].message)
    assert all(r.as_expected for r in quick_rows), [r.id for r in quick_rows if not r.as_expected]


def test_each_topic_yields_exactly_the_rows_it_declares(quick_rows):
    """One battery: every row of a topic with declarations is one of its declared row ids and every declared id is a
    row (the figures' rows are declared by the figures); declared check ids are unique across topics."""
    by_topic: dict[str, list[str]] = {}
    from curvature_gap.checks import Inputs

    for t in checks.TOPICS:
        if t is checks.figures.TOPIC:
            continue
        declared = t.row_ids()
        assert declared, t.name
        assert len(declared) == len(set(declared)), t.name
        by_topic[t.name] = list(declared)
    ids = [r.id for r in quick_rows]
    figure_ids = {r.id for r in checks.figures.run(Inputs())}
    other = [i for i in ids if i not in figure_ids]
    declared_all = [i for d in by_topic.values() for i in d]
    assert sorted(other) == sorted(declared_all)
    assert len(checks.CHECKS) == sum(len(t.checks()) for t in checks.TOPICS)
    assert {c.kind for c in checks.CHECKS.values()} >= {"formula", "bound"}


def test_the_battery_refuses_an_id_declared_twice():
    from curvature_gap.row import by_id
    c = next(iter(checks.CHECKS.values()))
    with pytest.raises(ValueError, match="declared twice"):
        by_id(c, c)


def test_theorem1_printed_fails_and_the_repaired_bound_holds(quick_rows):
    by = {r.id: r for r in quick_rows}
    printed, repaired = by["bounds.thm1.printed"], by["bounds.thm1.repaired"]
    assert printed.verdict == "fails" and printed.finding and printed.min_ratio < 1
    assert repaired.verdict == "holds" and repaired.min_ratio >= 1 and repaired.claim is None


def test_every_committed_counterexample_replays_including_the_named_ones(quick_rows):
    by = {r.id: r for r in quick_rows}
    replay = by["bounds.counterexamples.replay"]
    n_files = len(list(checks.bounds.COUNTEREXAMPLES.glob("*.json")))
    assert replay.verdict == "holds" and replay.value == n_files and replay.note == "all replayed"
    evidence = by["bounds.thm1.printed"].evidence
    for name in NAMED:
        assert f"curvature_gap/bounds/counterexamples/{name}.json" in evidence, (name, evidence)


def test_the_phi_bounds_with_and_without_the_loss_factor(quick_rows):
    """Every Φ bound fails as printed (the loss factor 2/(L d_V) of erratum lemma2-phi-loss-factor; Φ_QQ and Φ_KK
    through committed counter-examples at L = 16). Without it Φ_QQ, Φ_KK, Φ_QK and Φ_KQ hold, but Φ_VQ and its mirrors
    VK, QV, KV still fail (their 1/L from ‖∂A/∂T‖ ≤ 1/L; committed counter-examples of the search)."""
    by = {r.id: r for r in quick_rows}
    for kl in ("QQ", "VQ", "QK", "KK", "VK", "QV", "KV", "KQ"):
        with_f, without = by[f"bounds.thm6.Phi.{kl}"], by[f"bounds.thm6.Phi.{kl}.no_loss_factor"]
        assert without.verdict == ("fails" if kl in ("VQ", "VK", "QV", "KV") else "holds"), kl
        assert with_f.verdict == "fails", kl
        assert "lemma2-phi-loss-factor" in with_f.errata and "lemma2-phi-loss-factor" not in without.errata
        # removing the factor 2/(L d_V) multiplies every ratio by L d_V / 2 >= 2
        assert without.min_ratio >= 2 * with_f.min_ratio


def test_rows_that_need_a_trained_model_are_not_run_and_name_the_command(quick_rows):
    by = {r.id: r for r in quick_rows}
    for rid, cmd in (("thm7.vit.exact", "--only theorem7"), ("thm7.vit.thm6_ce", "--only theorem7"),
                     ("assumption1.zero", "--only fig12"), ("fig12.validity_increases", "--only fig12"),
                     ("fig3.values_largest", "--only fig3"), ("bounds.mnist.thm1.printed", "--only trained_bounds")):
        assert by[rid].verdict == "not run" and cmd in by[rid].command, rid
    assert by["thm7.sa.printed"].ran and by["thm7.identity"].ran
    assert {r.result for r in quick_rows} >= {"thm1", "thm6", "lemma4", "thm7", "assumption1", "fig3", "fig6", "software"}


def test_errata_are_linked_to_their_rows(quick_rows):
    by = {r.id: r for r in quick_rows}
    assert "xi12-is-xi21" in by["thm5.xi12_naming"].errata and "loss-normalisation" in by["gn.loss_normalisation"].errata


@pytest.mark.slow
def test_rows_meta_names_what_determines_the_rows():
    a = checks.rows_meta(True)
    assert a == checks.rows_meta(True) and a != checks.rows_meta(False)
    assert set(a) == {"code", "quick", "results"} and set(a["results"]) == set(checks.DATA_RESULTS)
    assert len(a["code"]) == 16


def test_main_prints_table_writes_json_and_exit_code(tmp_path, monkeypatch, capsys, quick_rows):
    rows = list(quick_rows)
    monkeypatch.setattr(checks, "run", lambda *a, **k: rows)
    out = tmp_path / "v.json"
    assert checks.main(json_path=str(out), quick=True) == 0
    text = capsys.readouterr().out
    for r in rows:
        assert r.id in text
    assert "rows not run (they need results of the trained model); to compute them: curvature-gap reproduce" in text
    assert json.loads(out.read_text()) == json.loads(json.dumps([r.to_json() for r in rows]))
    assert [Row.from_json(d).id for d in json.loads(out.read_text())] == [r.id for r in rows]
    bad = [Row.from_json(dict(rows[0].to_json(), verdict="fails"))] + rows[1:]
    monkeypatch.setattr(checks, "run", lambda *a, **k: bad)
    assert checks.main(quick=True) == 1
    assert "UNEXPECTED: " + rows[0].id in capsys.readouterr().out


def _counting_run(monkeypatch):
    """``checks.run`` replaced by a counted stand-in returning two fixed rows (what is tested is the cache)."""
    calls = []

    def fake(quick, results_dir, published_dir, profile="paper", res=None):
        calls.append(sorted(n for n, r in (res or {}).items() if r is not None))
        return [Row(id="a.one", result="sa_hessian", kind="formula", what="x", verdict="verified", rel_err=1e-15, tolerance=1e-10),
                Row(id="a.two", result="sa_hessian", kind="formula", what="y", verdict="verified", rel_err=2e-15, tolerance=1e-10)]

    monkeypatch.setattr(checks, "run", fake)
    return calls


def test_cached_rows_are_computed_once_per_key_and_recomputed_when_a_result_appears(tmp_path, monkeypatch):
    """run_cached computes the rows once for what determines them; the same key reads the file back
    (equal rows); a newly found result, a changed code hash or a damaged file computes them again."""
    calls = _counting_run(monkeypatch)
    pub = tmp_path / "published"
    pub.mkdir()
    first = checks.run_cached(results_dir=tmp_path / "results", published_dir=pub)
    again = checks.run_cached(results_dir=tmp_path / "results", published_dir=pub)
    assert len(calls) == 1 and [r.to_json() for r in again] == [r.to_json() for r in first]
    monkeypatch.setattr(checks, "_found", lambda *where: {n: (object() if n == "fig3" else None)
                                                           for n in checks.DATA_RESULTS})
    checks.run_cached(results_dir=tmp_path / "results", published_dir=pub)
    assert calls[-1] == ["fig3"], "a result found since is a new key: the rows that read it are computed"
    monkeypatch.setattr(checks, "verify_code_hash", lambda: "changed")
    checks.run_cached(results_dir=tmp_path / "results", published_dir=pub)
    assert len(calls) == 3, "other code is another key"
    for f in (tmp_path / "results" / "verify").glob("*.json"):
        f.write_text("{ truncated")
    with pytest.warns(UserWarning, match="cannot be read"):
        checks.run_cached(results_dir=tmp_path / "results", published_dir=pub)
    assert len(calls) == 4


def test_the_quick_note_says_what_the_published_full_run_found(tmp_path):
    """The footer of ``verify --quick`` types no number: it reads how long the published full run took and the
    repaired Theorem 1's smallest ratio from the published rows (and says nothing of them without those rows)."""
    from curvature_gap import checks
    assert checks.quick_note(tmp_path) == checks.QUICK_NOTE + "."
    (tmp_path / "paper").mkdir()
    (tmp_path / "paper" / "verify.json").write_text(json.dumps(
        {"provenance": {"seconds": 312.0}, "rows": [{"id": "bounds.thm1.repaired", "min_ratio": 4.2203}]}))
    note = checks.quick_note(tmp_path)
    assert "5.2 min when published" in note and "4.22" in note and note.startswith(checks.QUICK_NOTE)
