"""book/_ext/cg_numbering.py: the proof boxes show the paper's numbers (or T1 …, L1 … for the companion's own)."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import cg_numbering  # noqa: E402


class _App:
    def __init__(self, numbers):
        self.config = SimpleNamespace(cg_paper_numbers=numbers)


def test_the_chapter_numbers_are_replaced_by_the_paper_s(monkeypatch):
    env = SimpleNamespace(toc_fignumbers={"notebooks/self_attention": {
        "theorem": {"thm-a": (4, 1), "thm-b": (4, 2)}, "figure": {"fig-x": (4, 1)}}})
    warnings = []
    monkeypatch.setattr(cg_numbering.logger, "warning", lambda msg, **kw: warnings.append(msg))
    cg_numbering.renumber(_App({"thm-a": "1", "thm-b": "T1"}), env)
    got = env.toc_fignumbers["notebooks/self_attention"]
    assert got["theorem"] == {"thm-a": ("1",), "thm-b": ("T1",)} and got["figure"] == {"fig-x": (4, 1)}
    assert not warnings


def test_a_numbered_box_without_a_paper_number_is_reported(monkeypatch):
    env = SimpleNamespace(toc_fignumbers={"book/x": {"lemma": {"lem-new": (5, 1)}}})
    warnings = []
    monkeypatch.setattr(cg_numbering.logger, "warning", lambda msg, **kw: warnings.append(msg))
    cg_numbering.renumber(_App({}), env)
    assert len(warnings) == 1 and "lem-new" in warnings[0] and "5.1" in warnings[0] and "cg_paper_numbers" in warnings[0]


def test_a_number_that_is_neither_the_paper_s_nor_a_companion_s_is_refused():
    with pytest.raises(ValueError, match="thm-a"):
        cg_numbering.check_numbers({"thm-a": "4.1"})
    # one meaning per label: the errata's C series is no box's, a lemma is no T, and no two lemmas share L2
    with pytest.raises(ValueError, match="E… and C… are the errata's"):
        cg_numbering.check_numbers({"thm-a": "C1"})
    with pytest.raises(ValueError, match="numbered L1, L2"):
        cg_numbering.check_numbers({"lem-a": "T1"})
    with pytest.raises(ValueError, match="both lem L2"):
        cg_numbering.check_numbers({"lem-a": "L2", "lem-b": "L2"})
    cg_numbering.check_numbers({"thm-a": "T1", "lem-a": "L1", "lem-b": "1"})


def test_every_box_of_the_book_has_its_number_and_the_theorems_are_the_paper_s():
    """The configured numbers cover every numbered box in the pages; the paper's seven theorems are 1–7."""
    import json
    import re

    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["cg_paper_numbers"]
    cg_numbering.check_numbers(cfg)
    labels = set()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        for c in json.loads(nb.read_text())["cells"]:
            src = "".join(c["source"])
            for m in re.finditer(r"```\{prf:(\w+)\}[^\n]*\n((?::\w+:[^\n]*\n)*)", src):
                opts = m.group(2)
                if m.group(1) == "proof" or ":nonumber:" in opts:
                    continue
                label = re.search(r":label: (\S+)", opts)
                assert label, f"{nb.name}: a numbered {m.group(1)} box without a label"
                labels.add(label.group(1))
    assert labels == set(cfg), (sorted(labels - set(cfg)), sorted(set(cfg) - labels))
    theorems = sorted(v for k, v in cfg.items() if k.startswith("thm-") and v.isdigit())
    assert theorems == [str(i) for i in range(1, 8)]
