"""Checks of the built book in headless Chromium (Playwright): :func:`browser_check` opens every page at each
viewport and takes the screenshots; the checks of one page are :mod:`.page_checks`, the scripts they run in the
page :mod:`.chromium_js`; the pages are served by :mod:`.server`, a figure's legibility metadata is read by
:mod:`.png`.

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

import time
from pathlib import Path

from . import page_checks as pc
from .page_checks import DESKTOP, LANDING, LAST_SCROLLING_MATH, PAGE_TIMEOUT_MS, PHONE
from .server import CHROMIUM_ARGS, INSTALL_HINT, book_pages, find_chromium, serve

__all__ = ["browser_check", "SCREENSHOTS", "LAST_SCREENSHOTS", "LAST_SCROLLING_MATH"]

# page -> screenshot stem (written as <stem>-1440.png and <stem>-390.png)
SCREENSHOTS = {"book/intro.html": "landing", "notebooks/fig03_hessian_init.html": "fig03",
               "notebooks/fig04_hessian_trained.html": "fig04", "notebooks/fig06_loss_convergence.html": "fig06",
               "notebooks/fig12_assumption1.html": "fig12", "notebooks/transformer_block.html": "block",
               "notebooks/encoder_layer.html": "beyond",
               "notebooks/self_attention.html": "theorem1", "book/errata.html": "errata",
               "book/reproducibility.html": "reproducibility"}

LAST_SCREENSHOTS: list[Path] = []  # the screenshots of the latest browser_check


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
                pc.listen(page, console)
                for rel in rels if viewport is DESKTOP else phone_rels:
                    console.clear()
                    try:
                        if viewport is DESKTOP:
                            problems += pc.desktop_problems(page, base, rel, profile)
                        else:
                            problems += pc.phone_problems(page, base, rel)
                        problems += pc.math_problems(page, rel, viewport["width"])
                        problems += pc.figure_problems(page, rel, viewport["width"])
                        problems += pc.layout_problems(page, rel, viewport["width"])
                        problems += pc.chrome_problems(page, rel, viewport["width"], console)
                        if rel == LANDING:
                            problems += pc.first_screen_problems(page, viewport)
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
                        pc.listen(page, console)
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
