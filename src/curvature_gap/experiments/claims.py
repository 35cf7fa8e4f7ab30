"""What every claim row about a figure shares: the verdict rule, the ranking table, the "not run" row.

Each claim is read literally over every reasonable parameter set and statistic, and its verdict is derived from
that table (the row's ``details``), never from one number; the claims live with their results (:mod:`.heatmaps`,
:mod:`.norms`, :mod:`.convergence`, :mod:`.assumption`). Verdicts come only from the paper profile.
"""
from __future__ import annotations

from ..row import Row

__all__ = ["claim_verdict", "not_run", "claim_row", "FIGURE_COMMAND"]

FIGURE_COMMAND = "curvature-gap reproduce --only {name} (needs {needs}; trains the model if needed)"


def claim_verdict(support: list[bool], everywhere: bool) -> str:
    """"reproduced" when every reading supports the claim, "partly reproduced" when some do, else "not reproduced"."""
    if everywhere:
        return "reproduced"
    return "partly reproduced" if any(support) else "not reproduced"


def not_run(rid: str, result: str, what: str, name: str, needs: str = "MNIST") -> Row:
    """The row of a claim whose result is not available, with the command that computes it."""
    return Row(id=rid, result=result, kind="claim", claim="reproduced", verdict="not run", what=what, profile="paper",
               command=FIGURE_COMMAND.format(name=name, needs=needs))


def claim_row(result, /, **fields) -> Row:
    """A claim row (``fields``; by default of a claim the paper states) read from ``result``: its profile, its
    file as the evidence."""
    return Row(**{"kind": "claim", "claim": "reproduced", **fields}, profile=result.config["profile"],
               evidence=[str(result.json_path)])
