"""A Sphinx extension of the companion book: the paper's own numbers on its theorems, lemmas and assumptions.

sphinx-proof numbers its boxes per chapter, as Sphinx numbers figures ("Theorem 4.1" for the first theorem of
the fourth chapter). A reader of a companion then reads "Theorem 4.1" where the paper says "Theorem 1", and a
cross-reference such as "Theorem 5.2" cannot be looked up in the paper. This extension replaces the number of
every numbered proof box by the one the configuration value ``cg_paper_numbers`` gives for its label:

* a result of the paper gets the paper's number ("1" for the paper's Theorem 1);
* a result of the companion's own gets a number with its own series' letter: ``T`` for a theorem ("T1", the
  repaired Theorem 1), ``L`` for a lemma ("L1"), which the paper never uses, so the two cannot be confused; the
  errata have their own series (E…, and C… for the inequalities with a counter-example), which no box uses.

The replacement is made in the numbers Sphinx assigns (``env.toc_fignumbers``), which both the box's heading
and every ``{prf:ref}`` read, so headings and cross-references agree. A numbered box whose label is not in
``cg_paper_numbers`` is reported as a warning (the book is built with ``-W``, so it fails the build): it would
otherwise show a chapter number. A box that should carry no number takes sphinx-proof's ``:nonumber:``.
"""
from __future__ import annotations

from sphinx.util import logging

logger = logging.getLogger(__name__)

COMPANION_PREFIXES = {"theorem": "T", "lemma": "L"}  # the companion's series, one per kind of box
RESERVED = "EC"  # the errata's series (E1 …, C1 …): never a box's number


def _proof_types() -> set[str]:
    from sphinx_proof.proof_type import PROOF_TYPES

    return set(PROOF_TYPES)


def check_numbers(numbers: dict) -> None:
    """Every value is a paper number (digits) or a companion number (``T`` or ``L`` then digits: a label
    ``thm-…`` takes T, ``lem-…`` L), and no two of the companion's boxes of one series share a number."""
    prefixes = set(COMPANION_PREFIXES.values())
    seen: dict[tuple, str] = {}
    for label, number in numbers.items():
        n = str(number)
        kind = label.split("-")[0]
        if not (n.isdigit() or (n[:1] in prefixes and n[1:].isdigit())):
            raise ValueError(f"cg_paper_numbers[{label!r}] = {number!r}: give the paper's number (e.g. '1') or a "
                             "companion number ('T1' for a theorem, 'L1' for a lemma; E… and C… are the errata's)")
        want = {"thm": "T", "lem": "L"}.get(kind)
        if not n.isdigit() and want and n[0] != want:
            raise ValueError(f"cg_paper_numbers[{label!r}] = {number!r}: a companion {kind} is numbered {want}1, {want}2, …")
        key = (kind, n)
        if not n.isdigit() and key in seen:  # the paper's own may be quoted twice (Assumption 1 on two pages)
            raise ValueError(f"cg_paper_numbers: {seen[key]!r} and {label!r} are both {kind} {n}")
        seen[key] = label


def renumber(app, env) -> list:
    numbers = {k: str(v) for k, v in (app.config.cg_paper_numbers or {}).items()}
    check_numbers(numbers)
    types = _proof_types()
    for docname, by_type in env.toc_fignumbers.items():
        for typ, ids in by_type.items():
            if typ not in types:
                continue
            for label in list(ids):
                if label in numbers:
                    ids[label] = (numbers[label],)
                else:
                    logger.warning(f"{docname}: the {typ} box {label!r} would show Sphinx's chapter number "
                                   f"{'.'.join(map(str, ids[label]))}; give it the paper's number in "
                                   f"cg_paper_numbers (_config.yml), a companion number "
                                   f"('T1' for a theorem, 'L1' for a lemma), or mark it :nonumber:",
                                   location=docname)
    return []


def setup(app):
    app.add_config_value("cg_paper_numbers", {}, "env")
    # after Sphinx's TocTreeCollector has assigned the chapter numbers (its handler has the default priority 500)
    app.connect("env-get-updated", renumber, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
