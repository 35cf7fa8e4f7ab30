"""The check battery: topics, each the declarations (``row.Check``) one runner computes together.

A topic batches what its checks share (random instances, one worst-case search, a layer's configurations);
``checks.TOPICS`` lists them in the order of the rows. A figure's claim rows are declared by the figure itself
(``experiments.spec.FigureSpec.rows``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..row import Check, Row

__all__ = ["Inputs", "Topic"]


@dataclass(frozen=True)
class Inputs:
    """What every runner receives: ``quick`` (fewer instances, no worst-case search; same row ids), ``results``
    (result id -> paper-profile result or None, for the rows that read a trained model) and ``log`` (progress)."""

    quick: bool = False
    results: Mapping[str, object] = field(default_factory=dict)
    log: Callable | None = None


@dataclass(frozen=True)
class Topic:
    """A group of checks computed together: ``run(inputs) -> [Row]`` yields exactly the rows of its declared
    ``checks()`` (:attr:`row_ids`; a figure's declares none: its rows are its ``FigureSpec.rows``); ``reads()`` the
    results its rows read."""

    name: str
    run: Callable[[Inputs], list[Row]]
    checks: Callable[[], tuple[Check, ...]] = tuple
    reads: Callable[[], tuple[str, ...]] = tuple

    def row_ids(self) -> tuple[str, ...]:
        """The ids of the rows its declarations yield, in order."""
        return tuple(i for c in self.checks() for i in c.row_ids)
