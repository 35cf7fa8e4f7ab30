"""What the closed-form rows share: the check declaration, tolerances, the relative error, the random instances.

A :class:`Group`'s measuring function only measures: it adds errors to the :class:`Accumulator` of each
declaration (``A[check.key]``); every row is then built from its :class:`FormulaCheck` (:meth:`FormulaCheck.row`).

``rel_err`` is ``max|closed − reference| / max|reference|`` over all instances (for analytically zero
objects the denominator is the size of the matching first derivative, stated in the note). Tolerances:
1e-10 against autograd, 1e-6 against finite differences. A printed form counts as wrong when its error
exceeds 1e-3 or when it is ill-dimensioned; the row is then ``corrected`` (the corrected form is what is
implemented and verified) and ``printed_rel_err`` is the printed form's error.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from ...exact.instances import Instance, random_instance
from ...row import ROLES, OneRow, Row, by_id

__all__ = ["TOL", "FD_TOL", "BAD", "SHARPNESS", "EXPECTED", "FormulaCheck", "Group", "rel_err",
           "check_instance", "Accumulator", "try_printed", "block_args", "checked_instances",
           "quiet_single_thread"]

TOL = 1e-10
FD_TOL = 1e-6
BAD = 1e-3
# attention far from uniform in the closed-form checks: W_Q, W_K scaled by 1.5 (scores by 2.25)
SHARPNESS = 2.25


def rel_err(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0) -> float:
    """``max|a - b| / max(max|b|, scale)`` (absolute error when both are zero)."""
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    den = max(float(b.abs().max()) if b.numel() else 0.0, scale)
    return diff / den if den > 0 else diff


def check_instance(L: int, d_V: int, d_K: int, d_ff: int, seed: int, uniform: str | None = None) -> Instance:
    """A closed-form test instance: attention far from uniform, away from ReLU kinks, Assumption 2."""
    return random_instance(L, d_V, d_K, d_ff, seed=seed, sharpness=SHARPNESS, uniform=uniform, away_from_kinks=True)


class Accumulator:
    """The worst error, the shapes and the instances of one check's measurements; the printed form's errors
    (``printed``) and where it cannot be evaluated (``ill``); ``values``: numbers the measurement found that the
    check's note names (its ``{field}``s)."""

    def __init__(self):
        self.err = 0.0
        self.dims: list[tuple] = []
        self.obj = None
        self.printed: list[float] = []
        self.ill: list[str] = []
        self.cases: list = []
        self.values: dict = {}
        self.n = 0  # measurements added

    def add(self, err: float, inst: Instance | tuple | None = None, obj: torch.Tensor | None = None):
        """One measurement on ``inst``: an :class:`Instance`, or a label (a tuple of sizes) of a case that is not
        one (Appendix B's random matrices). The row counts the distinct instances measured."""
        self.n += 1
        self.err = max(self.err, err)
        if inst is not None and not any(inst is c for c in self.cases):
            self.cases.append(inst)
        if isinstance(inst, Instance) and inst.shape not in self.dims:
            self.dims.append(inst.shape)
        if obj is not None and (self.obj is None or obj.numel() > math.prod(self.obj)):
            self.obj = tuple(obj.shape)

    def compare(self, closed: torch.Tensor, ref: torch.Tensor, inst, scale: float = 0.0, obj=None):
        """:meth:`add` the error of ``closed`` against ``ref`` (:func:`rel_err`); the compared object is ``ref``
        unless ``obj`` is given."""
        self.add(rel_err(closed, ref, scale), inst, ref if obj is None else obj)

    def shapes(self, n_inst: int | None = None) -> str:
        """E.g. ``"16 inst: L∈{3,5} dV∈{4,6} dK=3 dff∈{6,8}; compared (900, 30)"``."""
        def axis(name: str, vals) -> str:
            u = sorted(set(vals))
            return f"{name}={u[0]}" if len(u) == 1 else f"{name}∈{{{','.join(map(str, u))}}}"
        dims = (" ".join(axis(n, v) for n, v in zip(("L", "dV", "dK", "dff"), zip(*self.dims))) if self.dims
                else "random matrices")
        k = f"{n_inst} inst: " if n_inst else ""
        return f"{k}{dims}; compared {self.obj}" if self.obj else f"{k}{dims}"


EXPECTED = ("verified", "corrected", "notation")  # what the software expects of a check's row


@dataclass(frozen=True)
class FormulaCheck(OneRow):
    """One closed-form check, and everything its row says that is not measured.

    ``key`` names its :class:`Accumulator`. ``expected`` is ``verified`` for a formula the paper prints right;
    ``corrected`` (a real error) or ``notation`` (a notational convention) for one it prints wrongly, whose printed
    form is also measured (:func:`try_printed`) and which an erratum names. ``note`` may name numbers the
    measurement finds (``{field}``, from ``Accumulator.values``)."""

    id: str
    result: str  # the paper result it is evidence for (a key of curvature_gap.findings.RESULTS)
    what: str  # what is compared with what (the row's "what")
    key: str
    role: str = "statement"  # or "detail" (a detailed version's formula), "proof" (a proof step), "reference"
    tol: float = TOL
    note: str = ""
    expected: str = "verified"

    def __post_init__(self):
        if self.role not in ROLES or self.role == "repair" or self.expected not in EXPECTED or not self.tol > 0:
            raise ValueError(f"check {self.id!r}: role {self.role!r} (one of {ROLES}, not repair), expected "
                             f"{self.expected!r} (one of {EXPECTED}), tolerance {self.tol!r} (> 0)")
        if not (self.id and self.result and self.what and self.key):
            raise ValueError(f"check {self.id!r}: id, result, what and key are required")

    kind = "formula"  # a row.Check of this kind

    @property
    def printed(self) -> bool:
        """Whether the paper prints it wrongly (the software expects the printed form to be measured wrong)."""
        return self.expected != "verified"

    def row(self, acc: Accumulator) -> Row:
        """The row of this check from its measurements ``acc``."""
        if not acc.n:
            raise ValueError(f"check {self.id!r}: nothing was measured (its group adds nothing to {self.key!r})")
        if not self.printed and (acc.printed or acc.ill):
            raise ValueError(f"check {self.id!r} measured a printed form: declare what it expects (expected=)")
        note = self.note.format(**acc.values) if acc.values else self.note
        printed = max(acc.printed) if acc.printed else None
        wrong = (printed is not None and printed > BAD) or bool(acc.ill)
        verdict = "fails" if acc.err > self.tol else self.expected if wrong else "verified"
        parts = [note] if note else []
        if printed is not None:
            parts.append(f"printed form: max rel err {printed:.3g}")
        if acc.ill:
            ill = sorted(set(acc.ill))
            more = f" (and {len(ill) - 1} more)" if len(ill) > 1 else ""
            parts.append(f"printed form not evaluable as written: {ill[0]}{more}")
        return Row(id=self.id, result=self.result, kind="formula", role=self.role, what=self.what,
                   verdict=verdict, expected=self.expected, claim="verified", rel_err=acc.err,
                   printed_rel_err=printed, tolerance=self.tol, instances=acc.shapes(len(acc.cases)),
                   note=" | ".join(parts))


@dataclass(frozen=True)
class Group:
    """The checks one measuring function serves: ``measure(quick, insts, A)`` adds to ``A[check.key]`` for each
    declared check (a key it was not declared cannot be measured), and each row is built from its declaration."""

    name: str
    checks: tuple[FormulaCheck, ...]
    measure: Callable[[bool, list, dict], None]  # (quick, instances, key -> Accumulator) -> None

    def __post_init__(self):
        by_id(*self.checks)
        keys = [c.key for c in self.checks]
        if len(set(keys)) != len(keys):
            raise ValueError(f"group {self.name!r}: an accumulator key is declared twice")

    def rows(self, quick: bool, insts: list) -> list[Row]:
        A = {c.key: Accumulator() for c in self.checks}
        self.measure(quick, insts, A)
        return [c.row(A[c.key]) for c in self.checks]


def try_printed(acc: Accumulator, fn: Callable[[], torch.Tensor], ref: torch.Tensor, inst: Instance | None,
                 scale: float = 0.0):
    """Evaluate a printed form; record its error, or record that it is ill-dimensioned."""
    try:
        val = fn()
        acc.printed.append(rel_err(val, ref, scale))
    except (RuntimeError, ValueError):
        acc.ill.append(("ill-dimensioned at " + inst.shape_str()) if inst is not None else "ill-dimensioned")


def block_args(inst: Instance) -> list:
    return [inst.X, *inst.weights]


def checked_instances(quick: bool) -> list:
    if quick:
        grid = [((3, 4, 3, 6), 0), ((5, 6, 3, 8), 1)]
    else:
        grid = [((L, dV, 3, dff), s) for L in (3, 5) for dV in (4, 6) for dff in (6, 8) for s in (0, 1)]
    return [check_instance(*shape, seed=s) for shape, s in grid]


@contextlib.contextmanager
def quiet_single_thread():
    """The checks are many small dense products: run them on one thread (restored afterwards),
    which is much faster than contended multi-threading, and silence torch's deprecation chatter."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\..*")
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
            yield
    finally:
        torch.set_num_threads(n)

