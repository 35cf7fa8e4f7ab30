"""What a bound is: :class:`Bound`, one declaration holding everything the software does with one inequality.

Every bound compares a right-hand side ("bound", :mod:`.formulas`) with the exact left-hand side ("exact",
:mod:`.quantities`) on an :class:`~curvature_gap.exact.instances.Instance`; ``ratio = bound / exact`` (≥ 1 means the
inequality holds there). A bound holds on a set of instances when its smallest ratio is at least ``1 − RTOL``;
``RTOL = 1e-9`` absorbs floating-point rounding in inequalities that are equalities (e.g. ``‖S‖ = √d_V``,
``‖∂A/∂T‖ = 1/L`` at uniform attention) and is not a change of any constant. An exact value below ``ZERO = 1e-12``
counts as 0 (ratio ``inf``).

The bounds themselves are declared in :mod:`.declarations`; :mod:`.registry` reads them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

__all__ = ["Bound", "ratio", "holds", "RTOL", "ZERO", "PARTS", "SYNTHETIC_PARTS", "ROLES"]

RTOL = 1e-9
ZERO = 1e-12

# which exact quantities a bound's terms read: "sa" (quantities.sa_exact), "ln" (quantities.layernorm_exact, one
# LayerNorm input), "prop" and "block" (quantities.block_exact), "ce" (bounds.ce.ce_records), "batch"
# (bounds.training.batch_records)
PARTS = ("sa", "ln", "prop", "block", "ce", "batch")
SYNTHETIC_PARTS = PARTS[:4]  # evaluated on synthetic instances; "ce" and "batch" only at the trained model
ROLES = ("statement", "proof", "repair", "reference")

Terms = Callable[[dict], list]  # q -> [(sub, bound, exact), ...]


@dataclass(frozen=True)
class Bound:
    """One bound (or intermediate lemma) of the paper, or of this companion, and everything the software does with it.

    ``terms(q)`` gives ``[(sub, bound, exact), ...]`` from the exact quantities ``q`` of its ``part`` (:data:`PARTS`):
    the one place where the bound's two sides are read, by the rows and by the search alike. ``fails`` is ``None`` for a
    bound expected to hold, else why the software expects it to fail (each such bound is a finding about the paper, with
    a committed counter-example in ``bounds/counterexamples/``); a bound that changes its verdict is a regression either
    way. ``claim`` is what the paper implies ("holds"; ``None`` for the companion's own checks: roles "repair" and
    "reference"); ``errata`` are the ids (:mod:`curvature_gap.theory.errata`) its verdict depends on. ``title`` and
    ``tex`` are what the errata page shows of it (a failing bound with a claim needs both). Every bound of a part with
    synthetic instances is searched by :mod:`.search` (the quantities it needs are read off its terms)."""

    id: str
    part: str
    ref: str  # where the paper states it
    what: str  # the inequality in words (the row's "what")
    result: str  # the paper result it is evidence for: "thm1", "lemma4", "prop", "thm6", "ce"
    terms: Terms
    role: str = "proof"
    claim: str | None = "holds"
    errata: tuple[str, ...] = ()
    fails: str | None = None
    applies: Callable[[dict], bool] | None = None  # evaluated only where applies(q) (default: everywhere)
    tensors: bool = False  # its terms read the second-derivative tensors ξ, H_tr, Φ (expensive at L = 49)
    hessian: bool = False  # its terms read the loss Hessian (every self-attention bound is evaluated with it)
    repairs: str | None = None  # a companion's repair: the id of the bound (of the paper) it repairs
    twin_of: str | None = None  # a bound whose ratio is this one's times a factor of the shape alone (L, d): the
    #                             search finds both minima at the same instances, so it searches that one only
    trained: bool = False  # reported at the trained MNIST block too (rows bounds.mnist.*)
    by_construction: str | None = None  # why it cannot fail with exact ingredients (said on its row)
    title: str | None = None  # in words, for the errata page (the evidence names a step by it)
    tex: str | None = None  # the inequality in TeX

    def __post_init__(self):
        if self.part not in PARTS or self.role not in ROLES or self.claim not in ("holds", None):
            raise ValueError(f"bound {self.id!r}: part {self.part!r} (one of {PARTS}), role {self.role!r} (one of "
                             f"{ROLES}), claim {self.claim!r} (holds or None)")
        if self.role in ("repair", "reference") and self.claim is not None:
            raise ValueError(f"bound {self.id!r}: the companion's own checks ({self.role}) make no claim about the paper")
        if (self.title is None) != (self.tex is None):
            raise ValueError(f"bound {self.id!r}: give both title and tex, or neither")
        if self.fails is not None and not self.fails.strip():
            raise ValueError(f"bound {self.id!r}: a known failure says why it fails")
        if self.repairs is not None and self.role != "repair":
            raise ValueError(f"bound {self.id!r}: only a repair (role 'repair') repairs another bound")

    kind = "bound"  # a row.Check of this kind

    @property
    def row_ids(self) -> tuple[str, ...]:
        """Its rows: ``bounds.<id>`` (synthetic instances, :data:`SYNTHETIC_PARTS`) and, if ``trained``,
        ``bounds.mnist.<id>``."""
        synthetic = (f"bounds.{self.id}",) if self.part in SYNTHETIC_PARTS else ()
        return synthetic + ((f"bounds.mnist.{self.id}",) if self.trained else ())

    @property
    def expect(self) -> str:
        """What the software expects: "fails" for a known failure, else "holds"."""
        return "holds" if self.fails is None else "fails"

    @property
    def meta(self) -> dict:
        """The row's description of the bound (:data:`.registry.CHECKS`)."""
        return dict(part=self.part, ref=self.ref, what=self.what, result=self.result, role=self.role,
                    claim=self.claim, expect=self.expect, errata=list(self.errata))

    def evaluate_options(self) -> dict:
        """The arguments of :func:`.registry.evaluate` that produce this bound's records, and no more than it needs."""
        return dict(parts=(self.part,), tensors=self.tensors, hessian=self.hessian or self.part == "sa",
                    ln_input="X" if self.part == "ln" else "block")


def ratio(bound: float, exact: float) -> float:
    """``bound / exact``; ``inf`` when the exact value is (numerically) zero."""
    if abs(exact) <= ZERO:
        return math.inf
    return bound / exact


def holds(r: float) -> bool:
    return r >= 1 - RTOL
