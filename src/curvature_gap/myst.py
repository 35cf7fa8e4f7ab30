"""MyST as plain Markdown: what a page's notebook shows wherever it is opened without the book's renderer.

The book renders its pages' MyST itself (``{prf:theorem}`` boxes with the paper's numbers, ``{cite:t}``,
``{doc}``, ``{prf:ref}``, ``{eq}``, admonitions, equation labels, the macros of its MathJax, ``{{ substitutions }}``).
Plain Jupyter, JupyterLab without jupyterlab-myst, Colab and Binder's classic interface render none of it.
:func:`to_markdown` writes the same text as the Markdown they render: a bold title over a quote, a citation in
words, a link to the notebook file, the macros spelt out (``\\vecr`` as ``\\operatorname{vec}_r``).

It serves the Markdown a notebook prints outside the book build (:func:`curvature_gap.notebook.show_markdown`),
the built book's downloads and the plain copies in ``notebooks/plain/`` that Colab and Binder open (both written
by ``tools/book/plain.py``), so that a page reads the same however a reader gets it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .provenance import checkout_root

__all__ = ["Plain", "bib_names", "from_checkout", "to_markdown", "outside", "BOOK_HREF"]

BOOK_HREF = "../book/{}.md"  # a book chapter, from a notebook in notebooks/ (or saved beside them)


@dataclass(frozen=True)
class Plain:
    """What :func:`to_markdown` needs beyond the text: label -> the number its box shows (``numbers``), BibTeX key
    -> "Surname et al. (year)" (``cites``), macro -> its TeX (``macros``), substitution -> its text
    (``substitutions``), and where a link to a book chapter points (``book_href``, with ``{}`` for its name)."""

    numbers: dict = field(default_factory=dict)
    cites: dict = field(default_factory=dict)
    macros: dict = field(default_factory=dict)
    substitutions: dict = field(default_factory=dict)
    book_href: str = BOOK_HREF


def bib_names(bib: Path) -> dict[str, str]:
    """Key -> "Surname (year)", "Surname and Surname (year)" or "Surname et al. (year)" from a BibTeX file."""
    out = {}
    for key, body in re.findall(r"@\w+\{([^,]+),(.*?)\n\}", Path(bib).read_text(), re.S):
        author = re.search(r"author\s*=\s*\{(.*)\}\s*,?\s*$", body, re.M)
        year = re.search(r"year\s*=\s*\{?(\d{4})", body)
        names = [re.sub(r"[{}\\]", "", a.split(",")[0]).strip() for a in (author.group(1) if author else "").split(" and ")]
        who = (names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2
               else f"{names[0]} et al.")
        out[key.strip()] = f"{who} ({year.group(1) if year else 'n.d.'})"
    return out


@functools.lru_cache(maxsize=4)
def _read_checkout(root: Path) -> Plain:
    """The boxes' numbers (``cg_paper_numbers`` of ``_config.yml``, book/_ext/cg_numbering.py), the macros of the
    book's MathJax (``mathjax3_config.tex.macros``) and the citations of ``book/references.bib``."""
    config, bib = root / "_config.yml", root / "book" / "references.bib"
    doc = (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}
    cfg = (doc.get("sphinx") or {}).get("config") or {}
    tex = (cfg.get("mathjax3_config") or {}).get("tex") or {}
    return Plain(numbers={str(k): str(v) for k, v in (cfg.get("cg_paper_numbers") or {}).items()},
                 cites=bib_names(bib) if bib.is_file() else {},
                 macros={str(k): str(v) for k, v in (tex.get("macros") or {}).items()})


def from_checkout(root=None) -> Plain:
    """:class:`Plain` of the checkout at (or above) ``root`` (default: the current directory); outside a checkout
    (an installed package, no book beside it) an empty one: labels and keys are then written as they are."""
    found = checkout_root(root)
    return _read_checkout(found) if found is not None else Plain()


_KINDS = ("theorem", "lemma", "proposition", "assumption", "definition", "corollary", "remark", "proof")
_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<title>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.S | re.M)
_OPTION = re.compile(r"^:(\w[\w-]*):[ \t]*(.*)$")
_CODE = re.compile(r"^(`{3,}|~{3,})(?!\{).*?^\1[ \t]*$|`[^`\n]*`", re.S | re.M)  # fenced code (not a directive), spans
_SUBSTITUTION = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")


def _guess_kind(label: str) -> str:
    return {"thm": "Theorem", "lem": "Lemma", "asm": "Assumption", "prop": "Proposition"}.get(label.split("-")[0], "")


def outside(pattern: re.Pattern, text: str, rewrite, keep=lambda s: s) -> str:
    """``text`` with ``rewrite`` applied to the parts between the matches of ``pattern`` (each match as ``keep``
    gives it: as it is by default)."""
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [rewrite(text[at:m.start()]), keep(m.group(0))]
        at = m.end()
    return "".join(out + [rewrite(text[at:])])


def to_markdown(text: str, plain: Plain) -> str:
    """MyST ``text`` as plain Markdown (see the module doc)."""
    # the macros of the book's MathJax, spelt out (longer names first)
    names = sorted(map(re.escape, plain.macros), key=len, reverse=True)
    macro = re.compile(r"\\(" + "|".join(names) + r")(?![A-Za-z])")
    kinds = {}  # label -> kind, from the boxes of this text (for {prf:ref})
    for m in _FENCE.finditer(text):
        for ln in m.group("body").splitlines():
            o = _OPTION.match(ln)
            if o and o.group(1) == "label":
                kind = m.group("name").split(":")[-1]
                kinds[o.group(2).strip()] = kind.capitalize() if kind in _KINDS else ""

    def box(m: re.Match) -> str:
        name, title = m.group("name"), m.group("title").strip()
        body, opts = [], {}
        for ln in m.group("body").splitlines():
            o = _OPTION.match(ln)
            if o and not body:
                opts[o.group(1)] = o.group(2).strip()
            else:
                body.append(ln)
        inner = to_markdown("\n".join(body), plain)
        kind = name.split(":")[-1]
        if name.startswith("prf:"):
            num = plain.numbers.get(opts.get("label", ""), "")
            head = f"{kind.capitalize()} {num}".strip() if kind != "proof" else "Proof"
            head += f" ({title})" if title else ""
        else:  # admonitions: {note}, {warning}, {admonition} Title, …
            head = title or kind.capitalize()
        quoted = "\n".join("> " + ln if ln.strip() else ">" for ln in inner.strip("\n").splitlines())
        return f"**{head}.**\n\n{quoted}" if inner.strip() else f"**{head}.**"

    def doc(m: re.Match) -> str:
        target = m.group(1)
        t = re.match(r"(.*?)\s*<([^>]+)>$", target)
        words, path = (t.group(1), t.group(2)) if t else (None, target)
        if path.startswith("/book/"):
            href = plain.book_href.format(path[len("/book/"):])
        else:
            href = path.lstrip("/").replace("notebooks/", "") + ".ipynb"
        return f"[{words or path.rsplit('/', 1)[-1].replace('_', ' ')}]({href})"

    def prose(part: str) -> str:
        part = re.sub(r"^\$\$[ \t]*\(([\w-]+)\)[ \t]*$", "$$", part, flags=re.M)      # $$ (eq-label)
        part = re.sub(r"^\([\w-]+\)=[ \t]*\n", "", part, flags=re.M)                  # (target)=
        part = re.sub(r"\{cite:t\}`([^`]+)`",
                      lambda m: ", ".join(plain.cites.get(k.strip(), k) for k in m.group(1).split(",")), part)
        part = re.sub(r"\{cite(?::p)?\}`([^`]+)`",
                      lambda m: "(" + "; ".join(plain.cites.get(k.strip(), k).replace(" (", ", ").rstrip(")")
                                                for k in m.group(1).split(",")) + ")", part)
        part = re.sub(r"\{doc\}`([^`]+)`", doc, part)
        part = re.sub(r"\{prf:ref\}`([^`]+)`",
                      lambda m: f"{kinds.get(m.group(1), _guess_kind(m.group(1)))} {plain.numbers.get(m.group(1), '')}".strip(),
                      part)
        part = re.sub(r"\{eq\}`([^`]+)`", "the equation above", part)
        part = re.sub(r"\{math\}`([^`]+)`", r"$\1$", part)
        part = _SUBSTITUTION.sub(lambda m: str(plain.substitutions.get(m.group(1), m.group(0))), part)
        return macro.sub(lambda m: plain.macros[m.group(1)], part) if plain.macros else part

    # the roles are rewritten before code spans are set aside: a role's argument is a code span
    text = _FENCE.sub(box, text)
    text = re.sub(r"\{(?:cite(?::[tp])?|doc|prf:ref|eq|math)\}`[^`]+`", lambda m: prose(m.group(0)), text)
    return outside(_CODE, text, prose)  # not in code: fenced blocks, code spans
