"""Downloads that read as notebooks: the MyST of a page (``{prf:theorem}`` boxes, ``{cite:t}``, ``{doc}``,
``{prf:ref}``, ``{eq}``, admonitions, equation labels) rewritten as the Markdown that plain Jupyter, JupyterLab
and Colab render: a bold title over a quote, a citation in words, a link to the notebook file.

The book renders the MyST itself; this is applied, after rendering, to the ``.ipynb`` files its download
buttons serve (``_build/html/_sources/notebooks/``), markdown cells and Markdown outputs alike, and a first
cell says what the download shows and how to recompute it. ``make lab`` installs jupyterlab-myst, which renders
the repository's notebooks (MyST) in JupyterLab as the book does.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import yaml

__all__ = ["bib_names", "proof_numbers", "to_markdown", "FIRST_CELL", "plain_download", "plain_downloads"]

FIRST_CELL = (
    "> **This notebook is a page of the companion book to “Closing the Curvature Gap” (arXiv:2510.16927).** "
    "Saved into a clone of the companion's repository (or opened on Binder or Colab) and run from the top, it "
    "shows the page's numbers: it reads the committed results (`published/paper/`), as the book build does, and "
    "computes none of them. To recompute, set `recompute` in the parameters cell: `\"quick\"` runs the checks with "
    "fewer random instances and no adversarial search (about half a minute on two cores; the smallest ratios it "
    "finds are larger than the page's), `\"full\"` with every search (about 3 minutes); on a figure page either "
    "also computes the figure's results (the cache under `results/`, else it trains).")

_KINDS = {"theorem": "Theorem", "lemma": "Lemma", "proposition": "Proposition", "assumption": "Assumption",
          "definition": "Definition", "corollary": "Corollary", "remark": "Remark", "proof": "Proof"}
_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<title>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.S | re.M)
_OPTION = re.compile(r"^:(\w[\w-]*):[ \t]*(.*)$")


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


def proof_numbers(config: Path) -> dict[str, str]:
    """Label -> the number its box shows (``cg_paper_numbers`` of ``_config.yml``, book/_ext/cg_numbering.py)."""
    cfg = yaml.safe_load(Path(config).read_text()) or {}
    return {str(k): str(v) for k, v in (((cfg.get("sphinx") or {}).get("config") or {}).get("cg_paper_numbers")
                                        or {}).items()}


def _quote(text: str) -> str:
    return "\n".join("> " + ln if ln.strip() else ">" for ln in text.strip("\n").splitlines())


def to_markdown(text: str, numbers: dict[str, str], cites: dict[str, str]) -> str:
    """MyST ``text`` as plain Markdown (see the module doc)."""
    kinds = {}  # label -> kind, from the boxes of this text (for {prf:ref})
    for m in _FENCE.finditer(text):
        for ln in m.group("body").splitlines():
            o = _OPTION.match(ln)
            if o and o.group(1) == "label":
                kinds[o.group(2).strip()] = _KINDS.get(m.group("name").split(":")[-1], "")

    def box(m: re.Match) -> str:
        name, title = m.group("name"), m.group("title").strip()
        body, opts = [], {}
        for ln in m.group("body").splitlines():
            o = _OPTION.match(ln)
            if o and not body:
                opts[o.group(1)] = o.group(2).strip()
            else:
                body.append(ln)
        inner = to_markdown("\n".join(body), numbers, cites)
        kind = name.split(":")[-1]
        if name.startswith("prf:"):
            word = _KINDS.get(kind, kind.capitalize())
            num = numbers.get(opts.get("label", ""), "")
            head = f"{word} {num}".strip() if kind != "proof" else word
            head += f" ({title})" if title else ""
        else:  # admonitions: {note}, {warning}, {admonition} Title, …
            head = title or kind.capitalize()
        return f"**{head}.**\n\n{_quote(inner)}" if inner.strip() else f"**{head}.**"

    text = _FENCE.sub(box, text)
    text = re.sub(r"^\$\$[ \t]*\(([\w-]+)\)[ \t]*$", "$$", text, flags=re.M)      # $$ (eq-label)
    text = re.sub(r"^\([\w-]+\)=[ \t]*\n", "", text, flags=re.M)                  # (target)=
    text = re.sub(r"\{cite:t\}`([^`]+)`", lambda m: ", ".join(cites.get(k.strip(), k) for k in m.group(1).split(",")), text)
    text = re.sub(r"\{cite(?::p)?\}`([^`]+)`",
                  lambda m: "(" + "; ".join(cites.get(k.strip(), k).replace(" (", ", ").rstrip(")")
                                            for k in m.group(1).split(",")) + ")", text)

    def doc(m: re.Match) -> str:
        target = m.group(1)
        t = re.match(r"(.*?)\s*<([^>]+)>$", target)
        words, path = (t.group(1), t.group(2)) if t else (None, target)
        if path.startswith("/book/"):
            href = "../book/" + path[len("/book/"):] + ".md"
        else:
            href = path.lstrip("/").replace("notebooks/", "") + ".ipynb"
        return f"[{words or path.rsplit('/', 1)[-1].replace('_', ' ')}]({href})"

    text = re.sub(r"\{doc\}`([^`]+)`", doc, text)
    text = re.sub(r"\{prf:ref\}`([^`]+)`",
                  lambda m: f"{kinds.get(m.group(1), _guess_kind(m.group(1)))} {numbers.get(m.group(1), '')}".strip(), text)
    text = re.sub(r"\{eq\}`([^`]+)`", "the equation above", text)
    text = re.sub(r"\{math\}`([^`]+)`", r"$\1$", text)
    return text


def _guess_kind(label: str) -> str:
    return {"thm": "Theorem", "lem": "Lemma", "asm": "Assumption", "prop": "Proposition"}.get(label.split("-")[0], "")


def plain_download(path: Path, numbers: dict[str, str], cites: dict[str, str]) -> None:
    """Rewrite one downloadable notebook in place: its markdown cells and Markdown outputs as plain Markdown,
    and :data:`FIRST_CELL` first (once)."""
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "markdown":
            c.source = to_markdown(c.source, numbers, cites)
        elif c.cell_type == "code":
            for o in c.get("outputs", []):
                data = o.get("data") or {}
                if "text/markdown" in data:
                    md = data["text/markdown"]
                    data["text/markdown"] = to_markdown("".join(md) if isinstance(md, list) else md, numbers, cites)
    if not (nb.cells and "download-note" in nb.cells[0].metadata.get("tags", [])):
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(FIRST_CELL, metadata={"tags": ["download-note"]}))
    nbformat.write(nb, path)


def plain_downloads(html_dir: Path, root: Path) -> list[Path]:
    """:func:`plain_download` on every ``_sources/notebooks/*.ipynb`` of a built book; returns them."""
    numbers, cites = proof_numbers(Path(root) / "_config.yml"), bib_names(Path(root) / "book" / "references.bib")
    done = sorted((Path(html_dir) / "_sources" / "notebooks").glob("*.ipynb"))
    for p in done:
        plain_download(p, numbers, cites)
    return done
