"""One row of ``curvature-gap verify``: its schema, its text and JSON forms, and the exit rule.

Every check of the package ends as one :class:`Row`; ``curvature-gap verify --json`` writes a list of them
(``Row.to_json``), whose fields are documented on the class and, as a JSON Schema, in :data:`ROW_SCHEMA`.

Two questions are kept apart:

* **Is the software right?** ``expected`` is the verdict the test suite expects of the row; a row
  whose verdict differs from it is a regression and makes ``verify`` exit with status 1.
* **Is the paper right?** ``claim`` is what the paper states for the row; ``finding`` is true when
  the verdict differs from it. Findings are results, not failures.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Row", "Check", "OneRow", "Declared", "by_id", "KINDS", "ROLES", "VERDICTS", "ROW_SCHEMA", "format_table",
           "exit_status", "summary_line"]

KINDS = ("formula", "bound", "identity", "claim", "software")
ROLES = ("statement", "detail", "proof", "repair", "reference")
VERDICTS = {
    "formula": ("verified", "corrected", "notation", "fails"),
    "bound": ("holds", "fails"),
    "identity": ("holds", "fails"),
    "claim": ("reproduced", "partly reproduced", "not reproduced"),
    "software": ("holds", "fails"),
}
NOT_RUN = "not run"
_NUMBERS = ("rel_err", "printed_rel_err", "min_ratio", "median_ratio", "value", "tolerance")  # may be inf/nan


@runtime_checkable
class Check(Protocol):
    """A declared check of any kind (:data:`KINDS`: ``FormulaCheck``, ``Bound``, ``LayerCheck``, :class:`Declared`):
    its ``id``, the ``result`` it is evidence for (a key of ``findings.RESULTS``), its ``role`` (:data:`ROLES`), its
    ``kind`` and ``row_ids``, the ids of the rows it yields."""

    id: str
    result: str
    role: str

    @property
    def kind(self) -> str: ...

    @property
    def row_ids(self) -> tuple[str, ...]: ...


class OneRow:
    """A check that yields one row, with its own id."""

    @property
    def row_ids(self) -> tuple[str, ...]:
        return (self.id,)


@dataclass(frozen=True)
class Declared(OneRow):
    """A check whose one row is measured by hand (an identity, a software trap, a search summary): its declaration,
    and :meth:`row` fills a row's fixed fields from it. ``expected`` is what the software expects of the verdict;
    ``claim`` what the paper states (None for the companion's own checks)."""

    id: str
    result: str
    kind: str
    role: str = "statement"
    claim: str | None = None
    expected: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS or self.role not in ROLES:
            raise ValueError(f"check {self.id!r}: kind {self.kind!r} (one of {KINDS}), role {self.role!r} (one of {ROLES})")

    def row(self, **fields) -> "Row":
        """Its row: ``fields`` (what, verdict, the numbers, ...) beside the declared id, result, kind, role, claim
        and expected."""
        return Row(id=self.id, result=self.result, kind=self.kind, role=self.role, claim=self.claim,
                   expected=self.expected, **fields)


def by_id(*checks, into: dict | None = None) -> dict:
    """``checks`` (any :class:`Check`) added to ``into`` (default: a new dict), keyed by id, in order; an id declared
    twice is refused (the one index of every kind: formula groups, bounds, the battery)."""
    into = {} if into is None else into
    for c in checks:
        if c.id in into:
            raise ValueError(f"check {c.id!r} is declared twice")
        into[c.id] = c
    return into


@dataclass
class Row:
    """One check.

    ``id``              stable identifier, e.g. ``thm2.layernorm.jacobian``, ``bounds.thm1.printed``, ``fig3.values_largest``
    ``result``          the result of the paper it is evidence for (a key of ``curvature_gap.findings.RESULTS``)
    ``kind``            ``formula`` (closed form vs reference), ``bound`` (inequality vs exact value),
                        ``identity`` (an equation measured), ``claim`` (an experiment's claim), ``software``
    ``role``            what part of the result it checks: ``statement``, ``detail`` (the detailed version's
                        formulas), ``proof`` (a step of the proof), ``repair`` (the companion's corrected or
                        repaired version), ``reference`` (the companion's own sanity check)
    ``what``            what was compared with what
    ``verdict``         formula: ``verified`` | ``corrected`` (printed form wrong, corrected form verified) |
                        ``notation`` (printed form differs by a notational convention only) | ``fails``;
                        bound and identity: ``holds`` | ``fails``; claim: ``reproduced`` | ``partly reproduced`` |
                        ``not reproduced``; any kind: ``not run`` (then ``command`` says how to run it)
    ``expected``        the verdict the software expects (regression check); None where it depends on data
    ``claim``           the verdict the paper's statement implies (None for the companion's own checks)
    ``finding``         the verdict differs from ``claim``: a result about the paper
    ``rel_err``         formula rows: max relative error of the implemented (corrected) form vs the reference
    ``printed_rel_err`` formula rows: the same for the form as printed (None where it cannot be evaluated)
    ``min_ratio``       bound rows: smallest bound/exact over every instance evaluated (≥ 1: it held everywhere)
    ``median_ratio``    bound rows: median bound/exact
    ``value``           identity and claim rows: the measured number named in ``what``
    ``tolerance``       the tolerance the verdict was decided with
    ``errata``          ids of the errata (``curvature_gap.theory.errata``) the verdict depends on
    ``evidence``        counter-example files, instances or result files behind the verdict
    ``profile``         where the numbers come from: ``synthetic`` (random instances), ``smoke``, ``paper``
    ``instances``       the instances or shapes evaluated
    ``note``            anything else a reader needs
    ``command``         for ``not run`` rows: the command that computes the row
    ``details``         structured extras (e.g. the per-set, per-statistic ranking of a figure claim)
    """

    id: str
    result: str
    kind: str
    what: str
    verdict: str
    role: str = "statement"
    expected: str | None = None
    claim: str | None = None
    finding: bool = False
    rel_err: float | None = None
    printed_rel_err: float | None = None
    min_ratio: float | None = None
    median_ratio: float | None = None
    value: float | None = None
    tolerance: float | None = None
    errata: list = field(default_factory=list)
    evidence: list = field(default_factory=list)
    profile: str = "synthetic"
    instances: str = ""
    note: str = ""
    command: str | None = None
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row {self.id}: unknown kind {self.kind!r}")
        if self.role not in ROLES:
            raise ValueError(f"row {self.id}: unknown role {self.role!r}")
        allowed = VERDICTS[self.kind] + (NOT_RUN,)
        if self.verdict not in allowed:
            raise ValueError(f"row {self.id}: verdict {self.verdict!r} is not one of {allowed}")
        self.finding = bool(self.claim is not None and self.verdict != NOT_RUN and self.verdict != self.claim)

    @property
    def ran(self) -> bool:
        return self.verdict != NOT_RUN

    @property
    def as_expected(self) -> bool:
        """True unless the software expects another verdict (``not run`` rows are never unexpected)."""
        return not self.ran or self.expected is None or self.verdict == self.expected

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        for k in _NUMBERS:
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = str(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Row":
        d = dict(d)
        for k in _NUMBERS:
            if isinstance(d.get(k), str):
                d[k] = float(d[k])
        d.pop("finding", None)
        return cls(**d)

    def number(self) -> float | None:
        """The row's headline number: the error, the ratio or the value."""
        return next((v for v in (self.rel_err, self.min_ratio, self.value) if v is not None), None)


def _schema() -> dict:
    """Each field of :class:`Row` by its annotation (numbers may be strings: ``"inf"``, ``"nan"``)."""
    types = {"str": {"type": "string"}, "str | None": {"type": ["string", "null"]}, "bool": {"type": "boolean"},
             "float | None": {"type": ["number", "string", "null"]}, "dict": {"type": "object"},
             "list": {"type": "array", "items": {"type": "string"}}}
    props = {f.name: types[f.type] for f in dataclasses.fields(Row)}
    props.update(kind={"enum": list(KINDS)}, role={"enum": list(ROLES)},
                 verdict={"enum": sorted({v for vs in VERDICTS.values() for v in vs} | {NOT_RUN})})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "curvature-gap verify row",
            "type": "object", "properties": props, "required": list(props), "additionalProperties": False}


ROW_SCHEMA = _schema()


def _num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


def format_table(rows: list[Row]) -> str:
    """One aligned line per row: id, verdict, the headline number, finding/regression flags, what."""
    w = max([len(r.id) for r in rows] + [2])
    head = f"{'id':<{w}}  {'verdict':<17}  {'number':>9}  {'':9}  what"
    lines = [head, "-" * len(head)]
    for r in rows:
        flag = f"EXPECTED {r.expected}" if not r.as_expected else "finding" if r.finding else ""
        lines.append(f"{r.id:<{w}}  {r.verdict:<17}  {_num(r.number()):>9}  {flag:9}  {r.what}")
    return "\n".join(lines)


def exit_status(rows: list[Row]) -> int:
    """0 when every row that ran has the verdict the software expects, else 1."""
    return 0 if all(r.as_expected for r in rows) else 1


def summary_line(rows: list[Row]) -> str:
    """``N rows: a verified, b corrected, ...; k findings; m not run -> OK`` (or the unexpected rows)."""
    counts = Counter(r.verdict for r in rows)
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    bad = [r.id for r in rows if not r.as_expected]
    n_find = sum(r.finding for r in rows)
    tail = "OK" if not bad else "UNEXPECTED: " + ", ".join(bad)
    return f"{len(rows)} rows: {parts}; {n_find} findings about the paper -> {tail}"
