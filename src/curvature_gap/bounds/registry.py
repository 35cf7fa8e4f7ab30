"""The registry of bounds: the declared bounds (:mod:`.declarations`), every view of them, and their evaluation.

:data:`BOUNDS` holds the declared bounds (:class:`~.bound.Bound`); every other view (:data:`CHECKS`,
:func:`known_failures`, :data:`INEQUALITIES`, the bounds :mod:`.search` searches, those reported at the trained model)
is read from them on every access. :func:`register` adds a bound (the paper's are declared in :mod:`.declarations`).

Each record is ``{"check", "sub", "bound", "exact", "ratio"}``; ``sub`` names the block pair, the LayerNorm input
(``U`` = X + F, ``S`` = Y + FFN(Y), ``X`` = a raw matrix) or the row.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Iterator

from ..exact.instances import Instance
from . import quantities
from ..row import by_id
from .bound import PARTS, RTOL, SYNTHETIC_PARTS, ZERO, Bound, holds, ratio
from .declarations import BOUNDS

__all__ = ["Bound", "BOUNDS", "CHECKS", "INEQUALITIES", "PARTS", "register", "known_failures",
           "records", "evaluate", "ratio", "holds", "RTOL", "ZERO"]


def register(*bounds: Bound) -> tuple[Bound, ...]:
    """Add ``bounds`` to :data:`BOUNDS` (after the paper's); an id declared twice is refused."""
    by_id(*bounds, into=BOUNDS)
    return bounds


class _View(Mapping):
    """A read-only mapping built from :data:`BOUNDS` on every access (so it never lags a registration)."""

    def __init__(self, build: Callable[[], dict]):
        self._build = build

    def __getitem__(self, key):
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


# id -> the row's description (part, ref, what, result, role, claim, expect, errata)
CHECKS: Mapping[str, dict] = _View(lambda: {b.id: b.meta for b in BOUNDS.values()})
# "bounds.<id>" (the row id) -> (title in words, inequality in TeX): what the errata page shows of a bound
INEQUALITIES: Mapping[str, tuple[str, str]] = _View(
    lambda: {f"bounds.{b.id}": (b.title, b.tex) for b in BOUNDS.values() if b.title is not None})


def known_failures() -> frozenset[str]:
    """The bounds the software expects to fail (each with its reason, :attr:`Bound.fails`)."""
    return frozenset(b.id for b in BOUNDS.values() if b.fails is not None)


def records(parts, q: dict, sub: str | None = None, tensors: bool = True, only: str | None = None) -> list[dict]:
    """The records of every bound of ``parts`` (a part or a tuple of parts) from the quantities ``q``, in
    declaration order; ``sub`` replaces each record's own (the LayerNorm input, the sample); ``tensors=False``
    skips the bounds that need the second-derivative tensors; ``only``: the records of that bound alone."""
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    out = []
    for b in list(BOUNDS.values()):
        if b.part not in parts or (b.tensors and not tensors) or (only is not None and b.id != only):
            continue
        if b.applies is not None and not b.applies(q):
            continue
        for s, bound, exact in b.terms(q):
            bound, exact = float(bound), float(exact)
            out.append({"check": b.id, "sub": s if sub is None else sub, "bound": bound, "exact": exact,
                        "ratio": ratio(bound, exact)})
    return out


def evaluate(inst: Instance, parts=SYNTHETIC_PARTS, tensors: bool = True,
             hessian: bool = True, ln_input: str = "block", only: str | None = None, need=None) -> list[dict]:
    """All records of ``parts`` at ``inst``; ``only``: the records of that bound alone, its quantities computed with
    ``need`` (its quantity groups, :func:`.quantities.block_exact`) when given.

    ``ln_input="block"`` evaluates Lemma 4 at the block's two LayerNorm inputs (``sub`` U and S); ``"X"`` at the
    raw matrix ``inst.X`` (the LayerNorm sweep). ``tensors=False`` skips the bounds that need ``ξ``, ``H_tr``,
    ``Φ``; ``hessian=False`` skips the loss Hessians.
    """
    recs: list[dict] = []
    if need is not None and only is None:
        raise ValueError("need restricts the quantities to one bound's: give that bound as only")
    if "sa" in parts:
        recs += records("sa", quantities.sa_exact(inst, hessian=hessian), only=only)
    if "ln" in parts and ln_input == "X":
        recs += records("ln", quantities.layernorm_exact(inst.X), "X", only=only)
    if any(p in parts for p in ("block", "prop")) or ("ln" in parts and ln_input == "block"):
        q = quantities.block_exact(inst, hessian=hessian and "block" in parts, tensors=tensors and "block" in parts,
                                   need=need)
        if "ln" in parts and ln_input == "block":
            recs += records("ln", q["ln_U"], "U", only=only) + records("ln", q["ln_S"], "S", only=only)
        recs += records(tuple(p for p in ("prop", "block") if p in parts), q, tensors=tensors and "block" in parts,
                        only=only)
    return recs
