"""curvature_gap.theory.notation: the paper's symbols, the code names that keep clashing meanings apart."""
from __future__ import annotations

import importlib
import re

from curvature_gap.theory.notation import NOTATION

_MODULES = {"calculus": "curvature_gap.theory.calculus", "layernorm": "curvature_gap.theory.layernorm",
            "ffn": "curvature_gap.theory.ffn", "attention": "curvature_gap.theory.attention",
            "block": "curvature_gap.theory.block", "exact.forward": "curvature_gap.exact.forward"}


def test_rows_have_the_four_fields_and_fit_a_markdown_table():
    assert len(NOTATION) >= 20
    for d in NOTATION:
        assert set(d) == {"paper", "code", "meaning", "clash"}, d
        for k in ("paper", "meaning", "clash"):
            assert "|" not in (d[k] or ""), (d["code"], k)
            assert (d[k] or "").count("$") % 2 == 0, (d["code"], k)


def test_every_clashing_symbol_is_listed_with_each_meaning():
    clashing = " ".join(d["paper"] for d in NOTATION if d["clash"])
    for sym in ("L", "k", "G", "H", "S", "σ", "M"):
        assert sym in clashing, sym
    assert sum(d["paper"].startswith("$L$") for d in NOTATION) >= 3   # length, blocks, loss bound


def test_the_code_names_exist():
    named = 0
    for d in NOTATION:
        for mod, attr, star in re.findall(r"\b(exact\.forward|calculus|layernorm|ffn|attention|block)\.(\w+)(\*?)",
                                          d["code"]):
            m = importlib.import_module(_MODULES[mod])
            if star:   # a family, e.g. attention.Ho_*
                assert any(n.startswith(attr) for n in dir(m)), f"{d['code']}: no {mod}.{attr}*"
            else:
                assert hasattr(m, attr), f"{d['code']}: {mod}.{attr} does not exist"
            named += 1
    assert named >= 20
