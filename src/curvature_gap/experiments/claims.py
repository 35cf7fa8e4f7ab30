"""What every claim row about a figure shares: the verdict rule, the ranking table, the "not run" row.

Each claim is read literally and over every reasonable parameter set and statistic, and the verdict is
derived from that table (``details`` of the row), never from one number. The claims themselves live with
their results: Figs. 3–4 in :mod:`.heatmaps` (``values_larger``, Fig. 3's comparative; ``values_largest``, Fig.
4's superlative and Fig. 3's second reading), Fig. 5 in :mod:`.norms` (``keys_values``, one rule over every reading
of every run), Fig. 6 in :mod:`.convergence` (``convergence_slope``). Verdicts about the experiments come only from
the paper profile; a smoke result gives none.
"""
from __future__ import annotations

from ..row import Row
from .hessians import SETS, STATISTICS

__all__ = ["claim_verdict", "ranking_table", "not_run", "FIGURE_COMMAND"]

FIGURE_COMMAND = "curvature-gap reproduce --only {name} (needs {needs}; trains the model if needed)"


def claim_verdict(support: list[bool], everywhere: bool) -> str:
    """"reproduced" when every reading supports the claim, "partly reproduced" when some do, else "not reproduced"."""
    if everywhere:
        return "reproduced"
    return "partly reproduced" if any(support) else "not reproduced"


def ranking_table(stats: dict) -> dict:
    """``{set: {statistic: [units largest first]}}`` over :data:`SETS` and :data:`STATISTICS`."""
    out = {}
    for set_name, (_, members) in SETS.items():
        members = [u for u in members if u in stats]
        out[set_name] = {st: sorted(members, key=lambda u: -stats[u][st]) for st in STATISTICS}
    return out


def not_run(rid: str, result: str, what: str, name: str, needs: str = "MNIST") -> Row:
    """The row of a claim whose result is not available, with the command that computes it."""
    return Row(id=rid, result=result, kind="claim", claim="reproduced", verdict="not run", what=what, profile="paper",
               command=FIGURE_COMMAND.format(name=name, needs=needs))
