"""The reproduction report: each published number beside the recomputed one.

``compare`` puts the published value of each key number (``FigureSpec.key_numbers``) beside the value just
computed, with the relative difference, and says what differs: nothing, the numbers (beyond ``RTOL``), or the
configuration (another setting, seed or code: then the numbers are not expected to agree).
"""
from __future__ import annotations


from . import SPECS  # filled by the package as it imports the result modules; read at call time

__all__ = ["key_numbers", "compare", "report_md", "RTOL"]

RTOL = 1e-4  # CPU runs of the same code and settings agree to rounding; GPU runs to about float32 precision


def key_numbers(name: str, result) -> dict:
    """The numbers of result ``name`` a reader would cite (its module's ``FigureSpec.key_numbers``), as floats."""
    fn = SPECS[name].key_numbers if name in SPECS else None
    if fn is None:
        raise KeyError(f"{name} declares no key numbers: add key_numbers= to its FigureSpec")
    return {k: (float(v) if v is not None else None) for k, v in fn(result).items()}


def _rel(a, b) -> float | None:
    if a is None or b is None:
        return None
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b), 1e-300)


def _published_numbers(name: str, published) -> tuple[dict | None, str]:
    """(key numbers of the published result, "") — or (None, why) when the current code cannot read them: a
    result published under this name by other code, with another layout (it is of another configuration)."""
    try:
        return key_numbers(name, published), ""
    except (KeyError, IndexError, TypeError) as exc:
        return None, (f"the published result has another layout ({type(exc).__name__}: {exc}), so it is of another "
                      "configuration; `make publish` replaces it")


def compare(name: str, published, recomputed, status: str = "ok", message: str = "") -> dict:
    """One report entry: the key numbers side by side and what differs."""
    entry = {"result": name, "status": status, "numbers": []}
    old, unreadable = _published_numbers(name, published) if published is not None else (None, "")
    if recomputed is None:
        # "not recomputed", never a verdict's word: a result skipped here says nothing about the paper's claim
        entry["differs"] = (f"not recomputed: {message}" if message else "not recomputed") + (
            f"; {unreadable}" if unreadable else "")
        if old is not None:
            entry["numbers"] = [dict(name=k, published=v, recomputed=None, rel_diff=None) for k, v in old.items()]
        return entry
    pub = old or {}  # nothing published, or unreadable: every number alone
    entry["numbers"] = [dict(name=k, published=pub.get(k), recomputed=v, rel_diff=_rel(pub.get(k), v))
                        for k, v in key_numbers(name, recomputed).items()]
    if old is None:
        entry["differs"] = unreadable or "nothing published to compare with"
        return entry
    same_config = published.config_hash == recomputed.config_hash
    worst = max((n["rel_diff"] for n in entry["numbers"] if n["rel_diff"] is not None), default=0.0)
    if not same_config:
        entry["differs"] = "the configuration (settings, training or code) differs from the published one"
    elif worst > RTOL:
        entry["differs"] = f"numbers differ by up to {worst:.1e} relative (same configuration: another machine?)"
    else:
        entry["differs"] = "nothing" if worst == 0 else f"nothing beyond rounding (≤ {worst:.0e})"
    return entry


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.6g}"


def report_md(entries: list[dict], header: str = "") -> str:
    """The report as Markdown: one section per result, a table of its key numbers."""
    lines = ["# Reproduction report", ""]
    if header:
        lines += [header, ""]
    lines += ["| result | status | what differs |", "|---|---|---|"]
    lines += [f"| {e['result']} | {e['status']} | {e['differs'].replace('|', '/')} |" for e in entries]
    for e in entries:
        if not e["numbers"]:
            continue
        lines += ["", f"## {e['result']}", "", "| number | published | recomputed | rel. diff. |", "|---|---|---|---|"]
        for n in e["numbers"]:
            rd = "—" if n["rel_diff"] is None else f"{n['rel_diff']:.1e}"
            lines.append(f"| {n['name']} | {_fmt(n['published'])} | {_fmt(n['recomputed'])} | {rd} |")
    return "\n".join(lines) + "\n"
