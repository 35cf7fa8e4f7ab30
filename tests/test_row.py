"""curvature_gap.row: the Row schema, its text and JSON forms, and the exit rule."""
from __future__ import annotations

import math

import jsonschema
import pytest

from curvature_gap.row import KINDS, ROW_SCHEMA, VERDICTS, Row, exit_status, format_table, summary_line


def _row(**kw):
    base = dict(id="thm2.layernorm.jacobian", result="thm2", kind="formula", what="J vs jacrev", verdict="verified",
                expected="verified", claim="verified", rel_err=2e-16, tolerance=1e-10)
    return Row(**{**base, **kw})


def test_invalid_kind_role_or_verdict_is_refused():
    with pytest.raises(ValueError, match="unknown kind"):
        _row(kind="guess")
    with pytest.raises(ValueError, match="unknown role"):
        _row(role="vibe")
    with pytest.raises(ValueError, match="verdict 'holds' is not one of"):
        _row(verdict="holds")                       # a formula is verified/corrected/notation/fails
    assert set(KINDS) == set(VERDICTS)


def test_finding_expected_and_not_run():
    assert not _row().finding and _row().as_expected and _row().ran
    f = _row(verdict="corrected", expected="corrected")
    assert f.finding and f.as_expected, "a finding about the paper is not a failure of the software"
    reg = _row(verdict="fails")
    assert reg.finding and not reg.as_expected
    nr = _row(kind="claim", verdict="not run", claim="reproduced", expected="reproduced", rel_err=None, command="c")
    assert not nr.ran and nr.as_expected and not nr.finding
    assert _row(expected=None, verdict="fails").as_expected


def test_json_round_trip_with_non_finite_numbers_validates_against_the_schema():
    r = _row(kind="bound", result="thm1", verdict="holds", expected="holds", claim="holds", rel_err=None,
             min_ratio=math.inf, median_ratio=2.0, errata=["e1"], evidence=["f.json"], details={"a": [1]})
    d = r.to_json()
    assert d["min_ratio"] == "inf"
    jsonschema.validate(d, ROW_SCHEMA)
    back = Row.from_json(d)
    assert back == r and back.min_ratio == math.inf and back.number() == math.inf
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**d, "verdict": "probably"}, ROW_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**d, "extra": 1}, ROW_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in d.items() if k != "errata"}, ROW_SCHEMA)


def test_number_table_exit_status_and_summary():
    rows = [_row(), _row(id="a.b", verdict="corrected", expected="corrected", printed_rel_err=0.4),
            _row(id="bounds.x", result="thm1", kind="bound", verdict="fails", expected="holds", claim="holds",
                 rel_err=None, min_ratio=0.25)]
    assert rows[0].number() == 2e-16 and rows[2].number() == 0.25
    assert _row(rel_err=None).number() is None
    table = format_table(rows).splitlines()
    assert table[0].split()[:3] == ["id", "verdict", "number"] and len(table) == 5
    assert "finding" in table[3] and "EXPECTED holds" in table[4] and "0.25" in table[4]
    assert exit_status(rows[:2]) == 0 and exit_status(rows) == 1
    s = summary_line(rows)
    assert s.startswith("3 rows: ") and "2 findings about the paper" in s and s.endswith("UNEXPECTED: bounds.x")
    assert summary_line(rows[:2]).endswith("-> OK")
