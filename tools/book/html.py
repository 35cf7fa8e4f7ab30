"""Checks of the built HTML that need no browser: links, offline assets, downloads, verdicts, raw LaTeX."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml

from curvature_gap.row import Row
from curvature_gap.findings import RESULTS, findings

from . import repository
from .build import PAPERMILL_MACHINE_KEYS, PARAMS_CLASS, machine_paths, parameter_names
from .plain import PLAIN_DIR

__all__ = ["Page", "pages", "check_links", "check_offline", "check_downloads", "check_download", "check_verdicts",
           "check_figure_messages", "check_raw_latex", "check_companion_links", "RAW_LATEX", "check_reader_words",
           "check_page_weight", "check_labels", "READER_EXEMPT", "MAX_PAGE_BYTES", "MAX_HTML_BYTES"]

# TeX that must never reach a reader as text (outside rendered math, code and scripts)
RAW_LATEX = re.compile(r"\$[^$\s][^$]*\$|\\(frac|mathbf|otimes|operatorname|sqrt|lVert|sum)\b|[_^]\{")
_SKIP = {"script", "style", "pre", "code", "kbd", "samp", "textarea"}


class Page(HTMLParser):
    """Ids, links, elements with classes and data attributes, table rows and visible text of one page."""

    def __init__(self, path: Path):
        super().__init__(convert_charrefs=True)
        self.path = path
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.marked: list[dict] = []  # elements with a data-verdict attribute
        self.classes: set[str] = set()  # every class any element has
        self.tables: list[list[list[str]]] = []
        self.text: list[str] = []
        self.figures: list[dict] = []  # each figure.cg-figure: its id and whether its caption has a message
        self.reader: list[str] = []  # what a reader reads, code included, but no math, script, code block or .cg-id
        self.boxes: list[tuple[str, str]] = []  # each numbered proof box: (its id, "Theorem T1")
        self._box: list | None = None
        self._hidden = 0
        self._figure: dict | None = None
        self._skip = 0
        self._math = 0
        self._row = self._cell = None
        self._stack: list[tuple[str, bool]] = []
        self.feed(path.read_text(encoding="utf-8", errors="replace"))

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("id", "name"):
            if a.get(k):
                self.ids.add(a[k])
        for k in ("href", "src"):
            if a.get(k) and tag in ("a", "img", "script", "link", "source", "iframe"):
                self.links.append((tag, a[k]))
        if "data-verdict" in a:
            self.marked.append(a)
        cls = a.get("class") or ""
        self.classes.update(cls.split())
        if tag == "figure" and "cg-figure" in cls.split():
            self._figure = {"id": a.get("id") or f"{len(self.figures) + 1}", "message": False}
            self.figures.append(self._figure)
        elif self._figure is not None and "cg-message" in cls.split():
            self._figure["message"] = True
        is_math = tag in ("span", "div") and ("math" in cls.split() or "MathJax" in cls)
        hidden = tag in ("script", "style", "pre", "textarea") or bool({"cg-id", "cg-ref"} & set(cls.split()))
        if tag == "div" and "proof" in cls.split() and a.get("id"):
            self._box = [a["id"], None]
        elif self._box is not None and self._box[1] is None and "caption-number" in cls.split():
            self._box[1] = ""
        void = tag in ("img", "br", "hr", "meta", "link", "input", "source", "wbr", "col", "area", "base")
        if not void:
            self._stack.append((tag, is_math, hidden))
            self._math += is_math
            self._skip += tag in _SKIP
            self._hidden += hidden
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self._row = []
            self.tables[-1].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        if self._box is not None and self._box[1] and tag == "span":
            self.boxes.append((self._box[0], " ".join(self._box[1].split())))
            self._box = None
        while self._stack:
            t, m, h = self._stack.pop()
            self._math -= m
            self._skip -= t in _SKIP
            self._hidden -= h
            if t == tag:
                break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._box is not None and self._box[1] is not None:
            self._box[1] += data
        if not self._skip and not self._math:
            self.text.append(data)
        if not self._hidden and not self._math:
            self.reader.append(data)


def pages(html_dir: Path) -> dict[Path, Page]:
    """The book's pages (every ``.html`` except theme files under ``_static``), parsed."""
    html_dir = Path(html_dir)
    return {p: Page(p) for p in sorted(html_dir.rglob("*.html")) if "_static" not in p.relative_to(html_dir).parts}


def check_links(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """Every internal ``href``/``src`` names an existing file (and anchor); external URLs are not followed."""
    html_dir = Path(html_dir)
    parsed = parsed or pages(html_dir)
    broken = []
    for page, pg in parsed.items():
        for _, target in pg.links:
            u = urlsplit(target)
            if u.scheme or target.startswith("//") or (target.startswith("#") and not target[1:]):
                continue
            path = unquote(u.path)
            dest = page if not path else (page.parent / path).resolve()
            if path and not dest.exists():
                broken.append(f"{page.relative_to(html_dir)}: {target} (no such file)")
                continue
            if dest.is_dir():
                dest = dest / "index.html"
                if not dest.exists():
                    broken.append(f"{page.relative_to(html_dir)}: {target} (directory without index.html)")
                    continue
            if u.fragment and dest.suffix == ".html":
                ids = parsed[dest].ids if dest in parsed else Page(dest).ids
                if unquote(u.fragment) not in ids:
                    broken.append(f"{page.relative_to(html_dir)}: {target} (no anchor #{u.fragment})")
    return broken


def check_offline(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """No page loads a script, stylesheet or image from the network, and MathJax is served locally."""
    html_dir = Path(html_dir)
    problems = []
    if not (html_dir / "_static" / "mathjax" / "tex-chtml.js").is_file():
        problems.append("_static/mathjax/tex-chtml.js is missing: MathJax is not served from the book")
    for page, pg in (parsed or pages(html_dir)).items():
        for tag, target in pg.links:
            if tag in ("script", "img", "link", "source", "iframe") and (
                    urlsplit(target).scheme in ("http", "https") or target.startswith("//")):
                problems.append(f"{page.relative_to(html_dir)}: <{tag}> loads {target} from the network")
    return problems


# MyST that only the book renders: a role, a directive's fence, a substitution
RAW_MYST = re.compile(r"\{[\w:-]+\}`[^`]|^[ \t>]*(?:`{3,}|:{3,})\{[\w:-]+\}|\{\{\s*[\w.-]+\s*\}\}", re.M)


def check_download(path: Path, root: Path, original: Path | None = None) -> list[str]:
    """Problems of one downloadable notebook (empty: it runs as downloaded): one parameters cell, defining
    every name the repository notebook's own parameters cell (``original``) defines; papermill's injected
    cell gone; no absolute path of the build machine (:func:`~tools.book.build.machine_paths`) anywhere in
    it, papermill's metadata included; no raw MyST (:data:`RAW_MYST`) in a markdown cell or a Markdown output."""
    name = path.name
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"{name} is not a notebook ({exc})"]
    problems = []
    mine, others = machine_paths(root)
    for p in mine + others:
        if p in text:
            problems.append(f"{name} carries an absolute path of the build machine: {p}")
    pm = (nb.get("metadata") or {}).get("papermill") or {}
    kept = [k for k in PAPERMILL_MACHINE_KEYS if k in pm]
    if kept:
        problems.append(f"{name} keeps papermill's {', '.join(kept)} (paths of the build machine) in its metadata")
    cells = nb.get("cells") or []
    tags = [(c.get("metadata") or {}).get("tags") or [] for c in cells]
    params = [c for c, t in zip(cells, tags) if "parameters" in t]
    if any("injected-parameters" in t for t in tags):
        problems.append(f"{name} keeps papermill's injected-parameters cell: its parameters are in two cells")
    for i, c in enumerate(cells):  # what plain Jupyter and Colab would show raw (tools/book/plain.py rewrites it)
        texts = ["".join(c.get("source") or "")] if c.get("cell_type") == "markdown" else [
            "".join(md) if isinstance(md, list) else md for o in c.get("outputs") or []
            for md in [((o.get("data") or {}).get("text/markdown"))] if md]
        raw = next((m.group(0) for s in texts for m in [RAW_MYST.search(s)] if m), None)
        if raw:
            problems.append(f"{name}: cell {i} shows raw MyST ({raw!r}) where plain Jupyter and Colab render Markdown")
    if len(params) != 1:
        problems.append(f"{name} has {len(params)} parameters cells (one is needed, holding the values of the build)")
    elif original is not None and original.is_file():
        src = lambda c: "".join(c.get("source") or "")  # noqa: E731
        orig = json.loads(original.read_text())
        want = [n for c in orig.get("cells") or [] if "parameters" in ((c.get("metadata") or {}).get("tags") or [])
                for n in parameter_names(src(c))]
        # `recompute` may be missing: nb.setup then reads the committed results, the default
        missing = [n for n in want if n not in parameter_names(src(params[0])) and n != "recompute"]
        if missing:
            problems.append(f"{name}: its parameters cell does not define {', '.join(missing)}, which "
                            f"{original.name}'s does: the download would stop with a NameError")
    return problems


def check_downloads(html_dir: Path, parsed: dict | None = None, root: Path | None = None) -> list[str]:
    """Every notebook page links to its executed ``.ipynb``, shows the parameters of its build, and the
    download runs as downloaded (:func:`check_download`); every generated page's source download holds its
    text (not an ``{include}`` directive)."""
    html_dir = Path(html_dir)
    root = Path(root) if root else html_dir.parent.parent
    problems = []
    parsed = parsed or pages(html_dir)
    nbpages = [p for p in parsed if p.parent.name == "notebooks"]
    if not nbpages:
        problems.append("no notebook pages in the book")
    for page in nbpages:
        nb = html_dir / "_sources" / "notebooks" / (page.stem + ".ipynb")
        if not nb.is_file():
            problems.append(f"{nb.relative_to(html_dir)} is missing: no notebook to download")
            continue
        if not any(t.split("#")[0].endswith(f"_sources/notebooks/{page.stem}.ipynb") for _, t in parsed[page].links):
            problems.append(f"{page.relative_to(html_dir)} has no download link to its notebook")
        if PARAMS_CLASS not in parsed[page].classes:
            problems.append(f"{page.relative_to(html_dir)} does not show the parameters of its build "
                            f"(no p.{PARAMS_CLASS} line)")
        problems += [f"_sources/notebooks/{m}" for m in check_download(nb, root, root / "notebooks" / nb.name)]
    for src in (html_dir / "_sources" / "book").glob("*.md"):
        if "{include}" in src.read_text():
            problems.append(f"{src.relative_to(html_dir)} holds an {{include}} directive instead of its text")
    return problems


def check_companion_links(html_dir: Path, parsed: dict | None = None, root: Path | None = None) -> list[str]:
    """A companion's links: every page's footer links the paper on arXiv and its LaTeX source; with a
    repository (:func:`~tools.book.repository.repository_url`) every page links it, and every notebook page
    launches Binder and Colab at the repository's plain copy of that notebook (``notebooks/plain/``, which must
    exist: :mod:`tools.book.plain`)."""
    html_dir = Path(html_dir)
    root = Path(root) if root else html_dir.parent.parent
    parsed = parsed or pages(html_dir)
    url, _ = repository.repository_url(root)
    cfg = yaml.safe_load((root / "_config.yml").read_text()) if (root / "_config.yml").is_file() else {}
    repo_cfg = (cfg or {}).get("repository") or {}
    branch, to_book = repo_cfg.get("branch") or "main", repo_cfg.get("path_to_book") or ""
    problems = []
    for page, pg in parsed.items():
        rel = page.relative_to(html_dir)
        if rel.parts[0] == "_sources" or page.name in ("genindex.html", "search.html") or rel.as_posix() == "index.html":
            continue
        hrefs = {t for tag, t in pg.links if tag == "a"}
        for want, what in ((repository.ARXIV_ABS, "the paper on arXiv"), (repository.ARXIV_SOURCE, "the paper's LaTeX source")):
            if want not in hrefs:
                problems.append(f"{rel}: no link to {what} ({want})")
        if url and url not in hrefs:
            problems.append(f"{rel}: no link to the repository {url}")
        if page.parent.name != "notebooks" or not url:
            continue
        notebook = (PLAIN_DIR / f"{page.stem}.ipynb").as_posix()  # the page's plain copy (tools/book/plain.py)
        for kind, want in repository.launch_urls(url, branch, notebook, to_book).items():
            if want not in hrefs:
                found = sorted(h for h in hrefs if kind in h)
                problems.append(f"{rel}: no {kind} launch button opening {want}" + (f" (it opens {found[0]})" if found else ""))
        if repository.github_slug(url) and not (root / to_book / notebook).is_file():
            problems.append(f"{rel}: the launch buttons open {notebook}, which the repository does not hold")
    return problems


def check_verdicts(html_dir: Path, rows: list[Row], profile: str, parsed: dict | None = None) -> list[str]:
    """The landing table, every result page's verdict line and the rows agree (one verdict per result);
    a smoke build states no verdict about an experiment."""
    html_dir = Path(html_dir)
    parsed = parsed or pages(html_dir)
    fs = {f.key: f for f in findings(rows)}
    problems = []
    landing = html_dir / "book" / "intro.html"
    if landing not in parsed:
        return [f"{landing} is missing"]
    marks = {m.get("data-result"): m.get("data-verdict") for m in parsed[landing].marked}
    for key, f in fs.items():
        if marks.get(key) != f.verdict:
            problems.append(f"landing page: {key} shows {marks.get(key)!r}, the rows give {f.verdict!r}")
    pages_of = {}
    for key, _, page, _ in RESULTS:
        pages_of.setdefault(page, []).append(key)
    for page, keys in pages_of.items():
        path = (html_dir / page).with_suffix(".html")
        if path not in parsed:
            problems.append(f"{page}.html is missing")
            continue
        shown = {m.get("data-result"): m.get("data-verdict") for m in parsed[path].marked}
        for key in keys:
            f = fs[key]
            if profile != "paper" and f.kind == "experiment":
                if shown.get(key):
                    problems.append(f"{page}: a smoke build states the verdict {shown[key]!r} for {key}")
                continue
            if key not in shown:
                problems.append(f"{page}: no verdict line for {key}")
            elif shown[key] != f.verdict:
                problems.append(f"{page}: {key} shows {shown[key]!r}, the rows give {f.verdict!r}")
    return problems


def check_figure_messages(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """Every figure's caption opens with its message (``strong.cg-message``: what to see, computed by
    :mod:`curvature_gap.captions`), not only with what is drawn."""
    html_dir = Path(html_dir)
    return [f"{page.relative_to(html_dir)}: figure #{f['id']} has no message in its caption (what the reader should "
            "see; curvature_gap.captions, shown by curvature_gap.notebook.figure_html)"
            for page, pg in (parsed or pages(html_dir)).items() for f in pg.figures if not f["message"]]


def check_raw_latex(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """No TeX reaches a reader as text: ``$…$``, ``\\frac``, ``_{`` outside rendered math, code and scripts."""
    html_dir = Path(html_dir)
    problems = []
    for page, pg in (parsed or pages(html_dir)).items():
        text = " ".join(" ".join(pg.text).split())
        for m in RAW_LATEX.finditer(text):
            a = max(0, m.start() - 40)
            problems.append(f"{page.relative_to(html_dir)}: raw TeX in the text: …{text[a:m.end() + 40]}…")
            break
    return problems


# ---------------------------------------------------------------------------------------------- reader's words
READER_EXEMPT = ("book/all_checks.html", "genindex.html", "search.html")  # the every-check chapter lists the ids
_REPR = re.compile(r"\('[\w ]+', '[\w ]+'\)|(?<![\w.])\d\.\d{9,}|(?<![\w.])\d+(?:\.\d+)?e[+-]\d{2}\b")
_CASE = re.compile(r"\b\w+(?:\.\w+)*@\w[\w=,.-]*")


def check_reader_words(html_dir: Path, rows: list[Row], parsed: dict | None = None) -> list[str]:
    """No check id (a row id of ``curvature-gap verify``, a counter-example name such as
    ``thm1.printed@admissible``) and no Python repr (``('K', 'K')``, ``3.1622776601683795``, ``1.4e+05``) in what
    a reader reads: outside the every-check chapter, an id lives only in a hover or a small ``.cg-id`` or ``.cg-ref``."""
    html_dir = Path(html_dir)
    ids = sorted({r.id for r in rows if "." in r.id}, key=len, reverse=True)
    id_re = re.compile(r"(?<![\w.])(" + "|".join(re.escape(i) for i in ids) + r")(?![\w])") if ids else None
    problems = []
    for page, pg in (parsed or pages(html_dir)).items():
        rel = page.relative_to(html_dir).as_posix()
        if rel.startswith("_sources") or rel in READER_EXEMPT:
            continue
        text = " ".join(" ".join(pg.reader).split())
        found = []
        for pat, what in ((id_re, "check id"), (_CASE, "counter-example name"), (_REPR, "Python repr")):
            if pat is None:
                continue
            for m in pat.finditer(text):
                found.append(f"{what} {m.group(0)!r}")
        if found:
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
            problems.append(f"{rel}: a reader reads {', '.join(found[:3])}{more}: say it in words (the id in a "
                            "hover or a small .cg-id)")
    return problems


# ---------------------------------------------------------------------------------------------- page weight
MAX_PAGE_BYTES = 3_000_000  # a page's first load as transferred: its HTML, the CSS and scripts it loads, its eager images
MAX_HTML_BYTES = 1_000_000  # the HTML alone, uncompressed (an inline figure made one 10.5 MB)
_TEXT_TYPES = {".html", ".js", ".css", ".svg", ".json", ".txt", ".map"}


def _transferred(f: Path) -> int:
    """Bytes a static host sends for ``f``: text gzip-compressed (every common host compresses it; the theme's
    fontawesome.js is 1.5 MB as a file, 0.54 MB sent), images as they are."""
    import gzip  # noqa: PLC0415

    return len(gzip.compress(f.read_bytes(), 6)) if f.suffix in _TEXT_TYPES else f.stat().st_size


def page_weight(html_dir: Path, page: Path, pg: Page) -> tuple[int, int]:
    """(bytes of the HTML file, bytes its first load transfers): the HTML plus every local stylesheet, script
    and image it loads, text compressed (:func:`_transferred`; images marked ``loading="lazy"`` count only when
    scrolled to, so not here)."""
    html_dir = Path(html_dir)
    text = page.read_text(encoding="utf-8", errors="replace")
    lazy = set(re.findall(r'<img[^>]*\bsrc="([^"]+)"[^>]*\bloading="lazy"', text))
    total, seen = _transferred(page), set()
    for tag, target in pg.links:
        if tag not in ("img", "script", "link") or target in lazy:
            continue
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path:
            continue
        f = (page.parent / unquote(parts.path)).resolve()
        if f in seen or not f.is_file() or f.suffix in (".html",):
            continue
        seen.add(f)
        total += _transferred(f)
    return page.stat().st_size, total


def check_page_weight(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """Every page's HTML ≤ :data:`MAX_HTML_BYTES` and its first load ≤ :data:`MAX_PAGE_BYTES` transferred."""
    html_dir = Path(html_dir)
    problems = []
    for page, pg in (parsed or pages(html_dir)).items():
        rel = page.relative_to(html_dir).as_posix()
        if rel.startswith("_sources"):
            continue
        h, total = page_weight(html_dir, page, pg)
        if h > MAX_HTML_BYTES:
            problems.append(f"{rel}: the HTML weighs {h / 1e6:.1f} MB (at most {MAX_HTML_BYTES / 1e6:.0f} MB: figures "
                            "are files, curvature_gap.notebook.show_figure)")
        if total > MAX_PAGE_BYTES:
            problems.append(f"{rel}: its first load transfers {total / 1e6:.1f} MB (at most {MAX_PAGE_BYTES / 1e6:.0f} MB)")
    return problems


# ---------------------------------------------------------------------------------------------- labels
def check_labels(html_dir: Path, parsed: dict | None = None) -> list[str]:
    """One meaning per label: no two proof boxes of the book with different labels show the same companion
    number ("Lemma L2" twice), and no box takes the errata's letters (E…, C…)."""
    html_dir = Path(html_dir)
    seen: dict[str, str] = {}
    problems = []
    for page, pg in (parsed or pages(html_dir)).items():
        if page.relative_to(html_dir).parts[0] == "_sources":
            continue
        for box_id, caption in pg.boxes:
            m = re.match(r"(\w+) ([A-Z]?)(\d+)", caption)
            if not m:
                continue
            if m.group(2) in ("C", "E"):
                problems.append(f"{page.relative_to(html_dir)}: the box {box_id!r} is numbered {caption!r}, a letter of "
                                "the errata's series")
            if m.group(2) and seen.setdefault(caption, box_id) != box_id:
                problems.append(f"{page.relative_to(html_dir)}: {caption!r} names two boxes ({seen[caption]!r} and "
                                f"{box_id!r})")
    return problems
