"""The checks of one page at one viewport, in headless Chromium (driven by :func:`.browser.browser_check`): each
evaluates a script of :mod:`.chromium_js` in the page and turns what it measured into problems (one line each,
naming the page and the width). :func:`figure_problem`, the legibility rule of a figure, reads no page and is
tested alone."""
from __future__ import annotations

import base64
from urllib.parse import quote

from curvature_gap.findings import RESULTS
from curvature_gap.notebook import CSS_PX_PER_IN, PHONE_MIN_PT

from . import chromium_js as js
from .html import RAW_LATEX
from .png import png_text_chunks

__all__ = ["DESKTOP", "PHONE", "MIN_DRAWN_PT", "MIN_PHONE_PT", "MATHJAX_TIMEOUT_MS", "PAGE_TIMEOUT_MS", "LANDING",
           "LAST_SCROLLING_MATH", "open_page", "listen", "figure_problem", "desktop_problems", "phone_problems",
           "math_problems", "figure_problems", "whole_figure_problems", "WHOLE_ON_PHONE", "layout_problems",
           "chrome_problems", "first_screen_problems"]

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
MIN_DRAWN_PT = 9.0       # the smallest text of a figure, as drawn on the page, in points
MIN_PHONE_PT = PHONE_MIN_PT  # ... on a phone (390 px): the floor notebook.figure_html draws figures to
MATHJAX_TIMEOUT_MS = 30_000
PAGE_TIMEOUT_MS = 60_000
LANDING = "book/intro.html"
_RESULT_KEYS = {key for key, *_ in RESULTS}
_EXPERIMENT_KEYS = {key for key, _, _, kind in RESULTS if kind == "experiment"}
_EXPERIMENT_PAGES = {page + ".html" for _, _, page, kind in RESULTS if kind == "experiment"}


def open_page(page, base: str, rel: str) -> str:
    """Open ``rel`` and wait for its images and MathJax (:data:`.chromium_js.SETTLE_JS`); returns MathJax's state
    (``"ok"``, ``"none"`` on a page without math, ``"absent"``, ``"timeout"`` or ``"error: …"``)."""
    page.goto(base + quote(rel), wait_until="load", timeout=PAGE_TIMEOUT_MS)
    return page.evaluate(js.SETTLE_JS, MATHJAX_TIMEOUT_MS)


def listen(page, console: list) -> None:
    """Collect the page's console errors and uncaught exceptions into ``console`` (a file that failed to load
    with its URL; the browser's own request for ``/favicon.ico``, which no page asks for, is not one)."""
    def on_console(m):
        if m.type != "error":
            return
        url = (m.location or {}).get("url") or ""
        if m.text.startswith("Failed to load resource"):
            if url.endswith("/favicon.ico"):
                return
            console.append(f"{m.text} ({url})")
        else:
            console.append(m.text)

    page.on("console", on_console)
    page.on("pageerror", lambda e: console.append(f"uncaught {e.name or 'error'}: {e.message}"))


def chrome_problems(page, rel: str, width: int, console: list) -> list[str]:
    """Console errors seen while ``rel`` was open, and its search boxes and (desktop) footer."""
    problems = [f"{rel}: console error at {width} px: {m.splitlines()[0][:200]}" for m in dict.fromkeys(console)]
    console.clear()
    got = page.evaluate(js.CHROME_JS)
    if len(got["search"]) != 1:
        problems.append(f"{rel}: {len(got['search'])} search boxes at {width} px (one is wanted): "
                        f"{', '.join(got['search']) or 'none'}")
    if width == DESKTOP["width"] and not got["paper"]:
        problems.append(f"{rel}: no footer linking the paper on arXiv at {width} px"
                        + (" (a footer is shown, without that link)" if got["footer"] else " (no footer is shown)"))
    return problems


def figure_problem(rel: str, fig: dict, width: int = DESKTOP["width"]) -> str | None:
    """The problem of one figure at a viewport ``width`` (None: legible there): its smallest text drawn below
    :data:`MIN_DRAWN_PT` at the desktop or :data:`MIN_PHONE_PT` on the phone (from the PNG's ``cg:width_in``
    and ``cg:min_font_pt`` chunks and the width it is shown at), cut off without the scroll cue, or without a
    link to its full-size PNG (the problems that do not depend on the width are said at the desktop's only)."""
    name = f"figure #{fig['id']}" if fig["id"] else f"figure {fig['i'] + 1} ({fig['alt'][:40]!r})"
    desktop = width >= DESKTOP["width"]  # what does not depend on the width is said there only
    src = fig["src"]
    if src.startswith("data:image/png;base64,"):
        try:
            chunks = png_text_chunks(base64.b64decode(src.split(",", 1)[1]))
        except ValueError as exc:
            return f"{rel}: {name}: unreadable PNG ({exc})" if desktop else None
    else:  # a figure file (the book's pages): the image element carries the PNG's metadata
        chunks = {k: fig.get(a) for k, a in (("cg:width_in", "widthIn"), ("cg:min_font_pt", "minPt")) if fig.get(a)}
    try:
        width_in = float(chunks["cg:width_in"])
        min_pt = float(chunks["cg:min_font_pt"])
    except (KeyError, ValueError):
        return (f"{rel}: {name} carries no cg:width_in / cg:min_font_pt chunks or data-width-in / data-min-pt "
                "attributes (draw it with curvature_gap.notebook.figure_html)") if desktop else None
    if not fig["shown"] or width_in <= 0 or min_pt == float("inf"):
        return None
    if desktop and not fig.get("link", "").split("#")[0].split("?")[0].endswith(".png"):
        return (f"{rel}: {name} does not link to its full-size PNG (curvature_gap.notebook.show_figure wraps it in "
                "one inside the book build)")
    floor = MIN_DRAWN_PT if desktop else MIN_PHONE_PT
    drawn = min_pt * fig["width"] / (width_in * CSS_PX_PER_IN)
    if drawn < floor - 0.01:
        return (f"{rel}: {name} is unreadably small at {width} px: its smallest text ({min_pt:g} pt in a "
                f"{width_in:g} in wide figure) is drawn at {drawn:.1f} pt (shown {fig['width']:.0f} px wide, "
                f"natural {width_in * CSS_PX_PER_IN:.0f} px); the minimum is {floor:g} pt")
    if fig.get("cut") and not fig.get("cue"):
        return (f"{rel}: {name} is cut off at {width} px with no cue (it is {fig['width']:.0f} px wide); its box "
                "(.cg-figure-scroll) scrolls it with the cue cg-figures.js adds")
    return None


# Figures whose point needs the whole figure: on the phone they are seen without scrolling (the others may scroll
# sideways, with a cue, to keep their text legible). Fig. 12 on the authors' model: where the two sums part (the
# largest k, at the right) and both legend entries (bf16 and float64). Page -> the ids (prefixes) of its figures.
WHOLE_ON_PHONE = {"notebooks/fig12_assumption1.html": ("fig-fig12_authors",)}


def whole_figure_problems(rel: str, figs: list[dict], width: int) -> list[str]:
    """The figures of :data:`WHOLE_ON_PHONE` on page ``rel`` that the phone (``width`` below the desktop's) shows cut
    off, or none of them on the page at all."""
    prefixes = WHOLE_ON_PHONE.get(rel)
    if not prefixes or width >= DESKTOP["width"]:
        return []
    mine = [f for f in figs if f["id"].startswith(prefixes)]
    if not mine:
        return [f"{rel}: no figure {' or '.join(p + '…' for p in prefixes)} to check at {width} px "
                "(page_checks.WHOLE_ON_PHONE names the figures whose point needs the whole figure)"]
    return [f"{rel}: figure #{f['id']} is cut off at {width} px ({f['width']:.0f} px wide): its point (where the "
            "curves part, at the right) and its legend must be seen without scrolling; draw it narrower"
            for f in mine if f["shown"] and f["cut"]]


def figure_problems(page, rel: str, width: int) -> list[str]:
    """:func:`figure_problem` of every figure of the page at this width, and :func:`whole_figure_problems`."""
    figs = page.evaluate(js.FIGURES_JS, MATHJAX_TIMEOUT_MS)
    return [p for p in (figure_problem(rel, f, width) for f in figs) if p] + whole_figure_problems(rel, figs, width)


LAST_SCROLLING_MATH: list[str] = []  # the formulas that scroll, with their cue, in the last check (printed)


def math_problems(page, rel: str, width: int) -> list[str]:
    """Formulas cut off at this width without the cue (problems); those that scroll with it are listed in
    :data:`LAST_SCROLLING_MATH`."""
    problems = []
    for f in page.evaluate(js.MATH_JS, MATHJAX_TIMEOUT_MS):
        kind = "display formula" if f["display"] else "inline formula"
        if f["cue"]:
            LAST_SCROLLING_MATH.append(f"{rel} at {width} px: {kind} {f['content']} px in a {f['box']} px box "
                                       f"(scrolls, with the cue): {f['tex']!r}")
            continue
        where = (f"its content is {f['content']} px wide in a {f['box']} px box" if f["own"]
                 else "a box around it cuts it off")
        problems.append(f"{rel}: a {kind} is cut off at {width} px with no cue ({where}): {f['tex']!r}; break it "
                        "into lines (aligned/multline) or let it scroll in its own box (cg-math.js marks it)")
    return problems


def layout_problems(page, rel: str, width: int) -> list[str]:
    """Badges on more than two lines, phone cards without their labels, ids broken mid-word, at this width."""
    got = page.evaluate(js.LAYOUT_JS)
    problems = [f"{rel}: the verdict badge {b['verdict']!r} takes {b['lines']} lines at {width} px (two at most)"
                for b in got["badges"]]
    problems += [f"{rel}: table {c['table']} shows its cells as cards at {width} px without their column's label "
                 f"({c['column']!r} for {c['text']!r}); cg-tables.js labels the cells, custom.css shows the label"
                 for c in got["cards"]]
    problems += [f"{rel}: {i['text']!r} breaks inside a word at {width} px (character {i['at']}); ids may break only "
                 "after . / _ @ - (cg-tables.js)" for i in got["ids"]]
    return problems


def first_screen_problems(page, viewport: dict) -> list[str]:
    """The landing answers in one screen: its verdict tally starts within the first screen."""
    got = page.evaluate(js.FIRST_SCREEN_JS)
    if got["tally"] < 0:
        return [f"{LANDING}: no verdict tally (p.cg-tally) at {viewport['width']} px"]
    if got["tally"] > viewport["height"] * 0.75:
        return [f"{LANDING}: the verdict tally starts at y = {got['tally']:.0f} px at {viewport['width']} px, below "
                f"the first screen ({viewport['height']} px tall)"]
    return []


def desktop_problems(page, base: str, rel: str, profile: str) -> list[str]:
    """Opens ``rel`` at the desktop viewport: MathJax loaded and typeset, images loaded, no MathJax error, no raw TeX
    in the rendered text, and (``smoke`` build) no verdict about an experiment."""
    problems = []
    state = open_page(page, base, rel)
    if state == "absent":
        problems.append(f"{rel}: the page has math but MathJax did not load")
    elif state == "timeout":
        problems.append(f"{rel}: MathJax did not finish typesetting within {MATHJAX_TIMEOUT_MS // 1000} s")
    elif state.startswith("error"):
        problems.append(f"{rel}: MathJax failed: {state[6:].strip()}")
    smoke = profile != "paper"  # experiments state a verdict only in the paper-scale book
    got = page.evaluate(js.DESKTOP_JS, smoke)
    problems += [f"{rel}: image did not load: {src}" for src in got["broken"]]
    problems += [f"{rel}: MathJax error: {m}" for m in got["merror"]]
    text = " ".join(got["text"].split())
    m = RAW_LATEX.search(text)
    if m:
        a = max(0, m.start() - 40)
        problems.append(f"{rel}: raw TeX in the rendered text: …{text[a:m.end() + 40]}…")
    for v in got["verdicts"]:
        # theory results state their verdict in every build; an unknown result on an experiment's page counts
        if v["result"] in _EXPERIMENT_KEYS or (v["result"] not in _RESULT_KEYS and rel in _EXPERIMENT_PAGES):
            problems.append(f"{rel}: a smoke build states a verdict about {v['result'] or 'an experiment'}: "
                            f"{v['verdict'] or v['text']!r} (experiments state no verdict in a smoke build)")
    return problems


def phone_problems(page, base: str, rel: str) -> list[str]:
    """Opens ``rel`` on the phone: the page and each table fit the screen."""
    open_page(page, base, rel)
    problems = []
    got = page.evaluate(js.PHONE_JS)
    w = got["widest"]  # None when only tables (reported below, one by one) widen the page
    if got["page"] > got["vw"] + 1 and w:
        what = f"; widest element: <{w['tag']}> {w['text']!r}, right edge at {w['right']} px"
        problems.append(f"{rel}: the page is {got['page']} px wide on a {PHONE['width']} px phone (the reader has "
                        f"to scroll sideways{what})")
    for t in got["tables"]:
        head = f"the table headed {t['header']!r}" if t["header"] else f"table {t['i'] + 1}"
        why = (f"{t['width']} px wide, its right edge at {t['right']} px" if t["wide"]
               else "its columns are cut off (they scroll out of sight)")
        problems.append(f"{rel}: {head} does not fit a {PHONE['width']} px phone ({why}; the screen is {t['vw']} px)")
    return problems
