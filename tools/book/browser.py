"""Checks of the built book in headless Chromium (Playwright): see ``browser_check``. The pages are served
by :mod:`.server`; a figure's legibility metadata is read by :mod:`.png`.

What a reader sees, rather than what the HTML says: every page is served over HTTP from ``127.0.0.1`` and
opened in the system's Chromium (``/usr/bin/chromium``; never a browser downloaded by Playwright) at a
desktop viewport (1440 × 900) and at a phone's (390 × 844). Problems reported:

* an image that did not load;
* a MathJax error, or raw TeX left in the rendered text (``$…$``, ``\\frac``, ``_{`` …);
* a figure (``img.cg-img``) whose smallest text is drawn below 9 pt at the desktop viewport or 7 pt on the
  phone, from the PNG's ``cg:width_in`` and ``cg:min_font_pt`` text chunks and the width the page shows it
  at; one cut off without the scroll cue (``cg-figures.js``); one that does not link to its full-size PNG;
* on a ``smoke`` build, a verdict (``.cg-verdict``) about an experiment;
* on the phone, a table wider than the screen (or whose columns are cut off);
* an error in the browser's console (a script that fails, a file that does not load), at either width;
* not exactly one search box (a search field or button the reader can see) at either width;
* at the desktop viewport, no visible footer linking the paper on arXiv.

Full-page screenshots of the landing page, Figs. 3 and 4, the transformer block, Theorem 1, the errata and the
reproducibility page at both widths go to
``shots_dir`` (their paths are printed and kept in :data:`LAST_SCREENSHOTS`).
"""
from __future__ import annotations

import base64
import time
from pathlib import Path
from urllib.parse import quote

from curvature_gap.findings import RESULTS
from curvature_gap.notebook import CSS_PX_PER_IN, PHONE_MIN_PT

from .html import RAW_LATEX
from .png import png_text_chunks
from .server import CHROMIUM_ARGS, INSTALL_HINT, book_pages, find_chromium, serve

__all__ = ["browser_check", "SCREENSHOTS", "DESKTOP", "PHONE", "MIN_DRAWN_PT", "MIN_PHONE_PT", "LAST_SCREENSHOTS"]

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
MIN_DRAWN_PT = 9.0       # the smallest text of a figure, as drawn on the page, in points
MATHJAX_TIMEOUT_MS = 30_000
PAGE_TIMEOUT_MS = 60_000
# page -> screenshot stem (written as <stem>-1440.png and <stem>-390.png)
SCREENSHOTS = {"book/intro.html": "landing", "notebooks/fig03_hessian_init.html": "fig03",
               "notebooks/fig04_hessian_trained.html": "fig04", "notebooks/fig06_loss_convergence.html": "fig06",
               "notebooks/fig12_assumption1.html": "fig12", "notebooks/transformer_block.html": "block",
               "notebooks/encoder_layer.html": "beyond",
               "notebooks/self_attention.html": "theorem1", "book/errata.html": "errata",
               "book/reproducibility.html": "reproducibility"}
_RESULT_KEYS = {key for key, *_ in RESULTS}
_EXPERIMENT_KEYS = {key for key, _, _, kind in RESULTS if kind == "experiment"}
_EXPERIMENT_PAGES = {page + ".html" for _, _, page, kind in RESULTS if kind == "experiment"}

LAST_SCREENSHOTS: list[Path] = []  # the screenshots of the latest browser_check


# ---------------------------------------------------------------------------------------------- in the page
_SETTLE_JS = """async (ms) => {
  // every image loaded or failed (lazy ones too), then MathJax's first typeset when MathJax is on the page
  const imgs = [...document.images];
  for (const img of imgs) if (img.loading === 'lazy') img.loading = 'eager';
  await Promise.all(imgs.map(img => img.complete ? null : new Promise(r => {
    img.addEventListener('load', r, {once: true}); img.addEventListener('error', r, {once: true});
    setTimeout(r, 5000); })));
  const hasMath = !!document.querySelector('span.math, div.math');
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) return hasMath ? 'absent' : 'none';
  const timeout = new Promise(r => setTimeout(() => r('timeout'), ms));
  try { return await Promise.race([mj.startup.promise.then(() => 'ok'), timeout]); }
  catch (e) { return 'error: ' + e; }
}"""

# what a reader sees of the page's chrome: its search boxes and its footer
_CHROME_JS = """() => {
  const shown = (e) => {
    if (e.closest('dialog:not([open])')) return false;
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && cs.display !== 'none' && cs.opacity !== '0';
  };
  const search = new Set();
  document.querySelectorAll('input[type=search], .search-button-field, button.search-button').forEach((e) => {
    if (shown(e)) search.add(e);
  });
  const footers = [...document.querySelectorAll('footer, .bd-footer-content, .extra_footer')].filter(shown);
  const paper = footers.some((f) => f.querySelector('a[href^="https://arxiv.org/abs/"]'));
  return {search: [...search].map((e) => e.tagName.toLowerCase() + '.' + [...e.classList].join('.')),
          footer: footers.length > 0, paper};
}"""

_DESKTOP_JS = """async (smoke) => {
  const out = {broken: [], merror: [], verdicts: [], text: ''};
  for (const img of document.images) {
    if (img.naturalWidth > 0) continue;
    const src = img.currentSrc || img.getAttribute('src') || '';
    if (/\\.svg($|[?#])/i.test(src)) {            // an SVG without intrinsic size: ask the server
      try { if ((await fetch(src)).ok) continue; } catch (e) {}
    }
    out.broken.push(src.startsWith('data:') ? src.slice(0, 40) + '…' : (img.getAttribute('src') || '(no src)'));
  }
  for (const e of document.querySelectorAll('mjx-merror')) {
    out.merror.push((e.getAttribute('data-mjx-error') || '') + ' | ' + (e.textContent || '').trim().slice(0, 80));
  }
  if (smoke) for (const e of document.querySelectorAll('.cg-verdict')) {
    out.verdicts.push({result: e.getAttribute('data-result') || '', verdict: e.getAttribute('data-verdict') || '',
                       text: (e.innerText || e.textContent || '').trim().slice(0, 100)});
  }
  // the rendered text, without code, scripts and typeset math
  const style = document.createElement('style');
  style.textContent = 'pre, code, kbd, samp, textarea, script, style, mjx-container { display: none !important; }';
  document.head.appendChild(style);
  try { out.text = document.body ? document.body.innerText : ''; } finally { style.remove(); }
  return out;
}"""

_PHONE_JS = """() => {
  const vw = document.documentElement.clientWidth;
  const out = [];
  const clipped = (el) => {
    // content of el (or of a box around it, up to the article) cut off or scrolled out of sight
    for (let e = el; e && e !== document.body && e !== document.documentElement; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX !== 'visible' && e.scrollWidth > e.clientWidth + 1) return true;
      if (e.matches('article, main, [role=main]')) break;
    }
    return false;
  };
  document.querySelectorAll('table').forEach((t, i) => {
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return;           // not shown on this page
    let right = r.right;
    for (const c of t.querySelectorAll('th, td')) right = Math.max(right, c.getBoundingClientRect().right);
    const wide = r.width > vw + 0.5 || right > vw + 0.5;
    const cut = clipped(t);
    if (!wide && !cut) return;
    const th = t.querySelector('th') || t.querySelector('td');
    out.push({i, header: th ? (th.innerText || th.textContent || '').trim().slice(0, 60) : '',
              width: Math.round(Math.max(r.width, t.scrollWidth)), right: Math.round(right), vw, wide, cut});
  });
  // the page itself wider than the screen: the reader has to scroll sideways (e.g. a long inline formula)
  const page = document.documentElement.scrollWidth;
  let widest = null;
  if (page > vw + 1) {
    const inClippedBox = (e) => {
      for (let a = e.parentElement; a; a = a.parentElement) if (getComputedStyle(a).overflowX !== 'visible') return true;
      return false;
    };
    document.querySelectorAll('article *').forEach((e) => {
      const r = e.getBoundingClientRect();
      if (r.width > 0 && r.right > vw + 1 && !e.closest('table') && !inClippedBox(e) && (!widest || r.right > widest.right))
        widest = {right: Math.round(r.right), tag: e.tagName.toLowerCase(),
                  text: (e.innerText || e.textContent || '').trim().slice(0, 60)};
    });
  }
  return {tables: out, page, vw, widest};
}"""


# every typeset formula whose content is wider than its box: scrolled inside its own box with the cue that
# book/_static/cg-math.js shows (class cg-scrolls, a visible ::before), or cut off (its own box, or a box
# around it, clips it) with no cue; with its TeX source, from MathJax's list of the page's formulas
_MATH_JS = """async (ms) => {
  if (window.cgMathReady) await Promise.race([window.cgMathReady, new Promise((r) => setTimeout(r, ms))]);
  const mj = window.MathJax, doc = mj && mj.startup && mj.startup.document;
  const tex = new Map();
  if (doc && doc.getMathItemsWithin) for (const it of doc.getMathItemsWithin(document.body)) {
    if (it.typesetRoot) tex.set(it.typesetRoot, it.math);
  }
  const out = [];
  document.querySelectorAll('article mjx-container').forEach((m) => {
    const r = m.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return;
    const ox = getComputedStyle(m).overflowX;
    const over = m.scrollWidth > m.clientWidth + 1;      // its content is wider than its own box
    const own = over && ox !== 'visible';                // ... and the box scrolls (or clips) it
    let cut = over;                                      // content spilling out of a visible box is cut too
    if (!over) for (let e = m.parentElement; e && !e.matches('article'); e = e.parentElement) {
      if (getComputedStyle(e).overflowX === 'visible') continue;
      const b = e.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) { cut = true; break; }
    }
    if (!cut) return;
    const before = getComputedStyle(m, '::before');
    const cue = own && ox !== 'hidden' && m.classList.contains('cg-scrolls')
      && before.content.includes('scroll') && before.display !== 'none' && before.visibility !== 'hidden';
    const src = (tex.get(m) || (m.querySelector('mjx-assistive-mml') || m).textContent || '').replace(/\\s+/g, ' ').trim();
    out.push({cue, own, display: m.getAttribute('display') === 'true', tex: src.slice(0, 100),
              content: Math.round(m.scrollWidth), box: Math.round(m.clientWidth)});
  });
  return out;
}"""


# verdict badges on more than two lines; phone cards (cells shown one under another) without their column's
# label; code (ids, file names) broken inside a word, not after one of the joins cg-tables.js marks
_LAYOUT_JS = """() => {
  const out = {badges: [], cards: [], ids: []};
  document.querySelectorAll('article .cg-badge[data-result]').forEach((b) => {
    const r = b.getBoundingClientRect();
    if (r.height === 0) return;
    const lh = parseFloat(getComputedStyle(b).lineHeight) || 16;
    const lines = Math.round(r.height / lh);
    if (lines > 2) out.badges.push({verdict: b.getAttribute('data-verdict'), lines});
  });
  document.querySelectorAll('article table').forEach((t, i) => {
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent.trim());
    t.querySelectorAll('tbody tr').forEach((tr) => [...tr.children].forEach((td, j) => {
      if (getComputedStyle(td).display !== 'block' || !heads[j] || !td.textContent.trim()) return;
      const c = getComputedStyle(td, '::before').content;
      if (!c || c === 'none' || c === 'normal' || c === '""')
        out.cards.push({table: i + 1, column: heads[j], text: td.textContent.trim().slice(0, 40)});
    }));
  });
  const JOIN = /[./_@-]/;
  document.querySelectorAll('article code').forEach((c) => {
    if (c.closest('pre')) return;
    const text = c.textContent;
    if (/\\s/.test(text.trim()) || c.getClientRects().length < 2) return;
    const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
    const chars = [];
    while (walker.nextNode()) { const n = walker.currentNode; for (let k = 0; k < n.length; k++) chars.push([n, k]); }
    let top = null;
    for (let k = 0; k < chars.length; k++) {
      const range = document.createRange();
      range.setStart(chars[k][0], chars[k][1]); range.setEnd(chars[k][0], chars[k][1] + 1);
      const r = range.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (top !== null && r.top > top + 1) {
        const prev = chars[k - 1][0].data[chars[k - 1][1]];
        if (!JOIN.test(prev)) { out.ids.push({text: text.slice(0, 80), at: k}); break; }
      }
      top = r.top;
    }
  });
  return out;
}"""

# ---------------------------------------------------------------------------------------------- checks
def _open(page, base: str, rel: str) -> str:
    page.goto(base + quote(rel), wait_until="load", timeout=PAGE_TIMEOUT_MS)
    return page.evaluate(_SETTLE_JS, MATHJAX_TIMEOUT_MS)


def _listen(page, console: list) -> None:
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


def _chrome_problems(page, rel: str, width: int, console: list) -> list[str]:
    """Console errors seen while ``rel`` was open, and its search boxes and (desktop) footer."""
    problems = [f"{rel}: console error at {width} px: {m.splitlines()[0][:200]}" for m in dict.fromkeys(console)]
    console.clear()
    got = page.evaluate(_CHROME_JS)
    if len(got["search"]) != 1:
        problems.append(f"{rel}: {len(got['search'])} search boxes at {width} px (one is wanted): "
                        f"{', '.join(got['search']) or 'none'}")
    if width == DESKTOP["width"] and not got["paper"]:
        problems.append(f"{rel}: no footer linking the paper on arXiv at {width} px"
                        + (" (a footer is shown, without that link)" if got["footer"] else " (no footer is shown)"))
    return problems


# every figure (img.cg-img): the width it is shown at, the full-size PNG it links to, and whether its box
# (.cg-figure-scroll) cuts it off, scrolls it with the cue cg-figures.js adds, or shows all of it
_FIGURES_JS = """async (ms) => {
  if (window.cgFiguresReady) await Promise.race([window.cgFiguresReady, new Promise((r) => setTimeout(r, ms))]);
  const out = [];
  document.querySelectorAll('img.cg-img').forEach((img, i) => {
    const r = img.getBoundingClientRect();
    const fig = img.closest('figure');
    const a = img.closest('a[href]');
    const box = img.closest('.cg-figure-scroll');
    let cut = false, cue = false;
    for (let e = img.parentElement; e && !e.matches('article'); e = e.parentElement) {
      if (getComputedStyle(e).overflowX === 'visible') continue;
      const b = e.getBoundingClientRect();
      if (r.right > b.right + 1 || r.left < b.left - 1) { cut = true; break; }
    }
    if (cut && box) {
      const before = getComputedStyle(box, '::before');
      cue = box.classList.contains('cg-scrolls') && getComputedStyle(box).overflowX !== 'hidden'
        && before.content.includes('scroll') && before.display !== 'none' && before.visibility !== 'hidden';
    }
    out.push({i, id: (fig && fig.id) || img.id || '', alt: img.getAttribute('alt') || '',
              src: img.getAttribute('src') || '', widthIn: img.dataset.widthIn || '', minPt: img.dataset.minPt || '',
              width: r.width, shown: r.width > 0 && r.height > 0,
              link: a ? a.href : '', cut, cue});
  });
  return out;
}"""
MIN_PHONE_PT = PHONE_MIN_PT  # ... on a phone (390 px): the floor notebook.figure_html draws figures to


def _figure_problem(rel: str, fig: dict, width: int = DESKTOP["width"]) -> str | None:
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


def _figure_problems(page, rel: str, width: int) -> list[str]:
    return [p for p in (_figure_problem(rel, f, width) for f in page.evaluate(_FIGURES_JS, MATHJAX_TIMEOUT_MS)) if p]


LAST_SCROLLING_MATH: list[str] = []  # the formulas that scroll, with their cue, in the last check (printed)


def _math_problems(page, rel: str, width: int) -> list[str]:
    """Formulas cut off at this width without the cue (problems); those that scroll with it are listed in
    :data:`LAST_SCROLLING_MATH`."""
    problems = []
    for f in page.evaluate(_MATH_JS, MATHJAX_TIMEOUT_MS):
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


def _layout_problems(page, rel: str, width: int) -> list[str]:
    """Badges on more than two lines, phone cards without their labels, ids broken mid-word, at this width."""
    got = page.evaluate(_LAYOUT_JS)
    problems = [f"{rel}: the verdict badge {b['verdict']!r} takes {b['lines']} lines at {width} px (two at most)"
                for b in got["badges"]]
    problems += [f"{rel}: table {c['table']} shows its cells as cards at {width} px without their column's label "
                 f"({c['column']!r} for {c['text']!r}); cg-tables.js labels the cells, custom.css shows the label"
                 for c in got["cards"]]
    problems += [f"{rel}: {i['text']!r} breaks inside a word at {width} px (character {i['at']}); ids may break only "
                 "after . / _ @ - (cg-tables.js)" for i in got["ids"]]
    return problems


LANDING = "book/intro.html"
# the landing's first screen: the verdict tally and the top of the claims table (tools/book/tables.claims_md)
_FIRST_SCREEN_JS = """() => {
  const top = (sel) => { const e = document.querySelector(sel);
    return e ? e.getBoundingClientRect().top + window.scrollY : -1; };
  return {tally: top('p.cg-tally'), claims: top('p.cg-tally ~ * table, p.cg-tally + * table, table')};
}"""


def _first_screen_problems(page, viewport: dict) -> list[str]:
    """The landing answers in one screen: its verdict tally starts within the first screen."""
    got = page.evaluate(_FIRST_SCREEN_JS)
    if got["tally"] < 0:
        return [f"{LANDING}: no verdict tally (p.cg-tally) at {viewport['width']} px"]
    if got["tally"] > viewport["height"] * 0.75:
        return [f"{LANDING}: the verdict tally starts at y = {got['tally']:.0f} px at {viewport['width']} px, below "
                f"the first screen ({viewport['height']} px tall)"]
    return []


def _desktop_problems(page, base: str, rel: str, profile: str) -> list[str]:
    problems = []
    state = _open(page, base, rel)
    if state == "absent":
        problems.append(f"{rel}: the page has math but MathJax did not load")
    elif state == "timeout":
        problems.append(f"{rel}: MathJax did not finish typesetting within {MATHJAX_TIMEOUT_MS // 1000} s")
    elif state.startswith("error"):
        problems.append(f"{rel}: MathJax failed: {state[6:].strip()}")
    smoke = profile != "paper"  # experiments state a verdict only in the paper-scale book
    got = page.evaluate(_DESKTOP_JS, smoke)
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


def _phone_problems(page, base: str, rel: str) -> list[str]:
    _open(page, base, rel)
    problems = []
    got = page.evaluate(_PHONE_JS)
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


def browser_check(html_dir: Path, profile: str, shots_dir: Path) -> list[str]:
    """Problems of the built book as headless Chromium shows it (empty: all good); full-page screenshots of
    a few pages at 1440 and 390 px into ``shots_dir`` (printed, and kept in :data:`LAST_SCREENSHOTS`)."""
    html_dir, shots_dir = Path(html_dir), Path(shots_dir)
    LAST_SCREENSHOTS.clear()
    LAST_SCROLLING_MATH.clear()
    exe = find_chromium()
    if exe is None:
        return [f"Chromium is not installed, so the browser checks cannot run: install it with `{INSTALL_HINT}` "
                "(Debian/Ubuntu, as root), or skip them with `python -m tools.book check --no-browser`"]
    try:
        from playwright.sync_api import Error as PlaywrightError  # noqa: PLC0415 - a dev dependency
        from playwright.sync_api import sync_playwright  # noqa: PLC0415
    except ModuleNotFoundError:
        return ["Playwright for Python is not installed: pip install -e '.[dev]' (it drives the system Chromium; "
                "no `playwright install` is needed)"]
    rels = book_pages(html_dir)
    if not rels:
        return [f"no pages to check in {html_dir}"]
    # on the phone, tables, formulas and figures are checked: pages with none are opened there only for a screenshot
    phone_rels = [r for r in rels if r in SCREENSHOTS
                  or any(k in (html_dir / r).read_text(errors="replace") for k in ("<table", "math notranslate", "cg-img"))]
    problems: list[str] = []
    t0 = time.perf_counter()
    with serve(html_dir) as base, sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        except PlaywrightError as exc:
            return [f"Chromium ({exe}) did not start: {str(exc).splitlines()[0]}"]
        try:
            for viewport in (DESKTOP, PHONE):
                ctx = browser.new_context(viewport=viewport, device_scale_factor=1)
                ctx.set_default_timeout(PAGE_TIMEOUT_MS)
                console: list[str] = []
                page = ctx.new_page()
                _listen(page, console)
                for rel in rels if viewport is DESKTOP else phone_rels:
                    console.clear()
                    try:
                        if viewport is DESKTOP:
                            problems += _desktop_problems(page, base, rel, profile)
                        else:
                            problems += _phone_problems(page, base, rel)
                        problems += _math_problems(page, rel, viewport["width"])
                        problems += _figure_problems(page, rel, viewport["width"])
                        problems += _layout_problems(page, rel, viewport["width"])
                        problems += _chrome_problems(page, rel, viewport["width"], console)
                        if rel == LANDING:
                            problems += _first_screen_problems(page, viewport)
                        if rel in SCREENSHOTS:
                            shots_dir.mkdir(parents=True, exist_ok=True)
                            shot = shots_dir / f"{SCREENSHOTS[rel]}-{viewport['width']}.png"
                            page.screenshot(path=str(shot), full_page=True)
                            LAST_SCREENSHOTS.append(shot)
                    except PlaywrightError as exc:
                        problems.append(f"{rel}: the browser could not check the page at {viewport['width']} px: "
                                        f"{str(exc).splitlines()[0]}")
                        page.close()
                        page = ctx.new_page()
                        _listen(page, console)
                ctx.close()
        finally:
            browser.close()
    print(f"[book-check] Chromium checked {len(rels)} pages at {DESKTOP['width']} and {PHONE['width']} px "
          f"in {time.perf_counter() - t0:.1f} s")
    for shot in LAST_SCREENSHOTS:
        print(f"[book-check] screenshot {shot}")
    for m in LAST_SCROLLING_MATH:
        print(f"[book-check] {m}")
    return problems
