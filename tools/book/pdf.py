"""``make book-pdf``: the whole book as one PDF, offline, after ``make book``.

Jupyter Book's own PDF builders do not work here: ``--builder pdfhtml`` asks Playwright for a browser it
downloads itself (``playwright install``, which needs the internet), and ``--builder pdflatex`` needs a
TeX installation and drops every figure and verdict of the pages (they are HTML outputs). This renders the
staged book (``_build/stage``, written by ``make book``) with Sphinx's ``singlehtml`` builder, waits in
the system Chromium until MathJax has typeset it, and prints it to ``_build/pdf/book.pdf`` with the print
style :data:`PRINT_CSS` (a paper's first pages: the title and the findings, no site chrome).
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from . import chromium_js, server
from .build import BookError, jupyter_book_executable, project_root

__all__ = ["build_pdf", "PDF", "PRINT_CSS"]

PDF = Path("_build") / "pdf" / "book.pdf"
_MARGIN = {"top": "15mm", "bottom": "15mm", "left": "12mm", "right": "12mm"}

# The printed book reads like a paper: the text at a paper's size from the first page on (the title, then the
# findings, not a title alone on page 1), none of the site's chrome (sidebars, buttons, the header, the
# search), tables that continue on the next page rather than jump to it, and figures no taller than a third
# of a page, so that a figure does not leave the page before it half empty.
PRINT_CSS = """
@media print {
  html { font-size: 10pt !important; }
  .bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer, .bd-footer-article,
  .prev-next-area, .prev-next-footer, .header-article-items, .article-header-buttons, .headerlink,
  #pst-back-to-top, .search-button, .bd-search, .toggle-secondary-sidebar, .cg-params { display: none !important; }
  .bd-main, .bd-content, .bd-article-container, .bd-article { max-width: 100% !important; padding: 0 !important;
    margin: 0 !important; }
  h1 { font-size: 1.7rem !important; margin: 0 0 0.4rem 0 !important; }
  h2 { font-size: 1.3rem !important; margin-top: 1rem !important; }
  h3 { font-size: 1.1rem !important; }
  h1, h2, h3 { break-after: avoid; }
  p, li { orphans: 3; widows: 3; }
  table { break-inside: auto !important; font-size: 0.9rem; }
  tr, figure, .cg-verdict, .proof, .admonition { break-inside: avoid; }
  img.cg-img, figure img { max-height: 95mm !important; width: auto !important; max-width: 100% !important; }
  .cg-figure-scroll { overflow: visible !important; }
  .cg-figure-scroll.cg-scrolls::before { display: none !important; }
}
"""


def build_pdf(root: Path | None = None, log=print) -> Path:
    """Render ``_build/stage`` as one HTML page and print it with the system Chromium; returns the PDF's path."""
    root = Path(root) if root else project_root()
    stage = root / "_build" / "stage"
    if not (stage / "_config.yml").is_file():
        raise BookError("no staged book in _build/stage: run `make book` first")
    exe = server.find_chromium()
    if exe is None:
        raise BookError(f"the PDF is printed by Chromium, which is not installed: `{server.INSTALL_HINT}`")
    out = root / "_build" / "pdf"
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    cmd = [jupyter_book_executable(), "build", str(stage), "--path-output", str(out), "--builder", "singlehtml", "--keep-going"]
    log("[book-pdf] " + " ".join(["jupyter-book"] + cmd[1:]))
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    (out / "singlehtml.log").write_text(proc.stdout + proc.stderr)
    site = out / "_build" / "singlehtml"
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts and p.stat().st_size > 1000)
    if proc.returncode != 0 or not pages:
        raise BookError(f"the singlehtml build failed (exit {proc.returncode}); see {out / 'singlehtml.log'}")
    # the whole book is the root document's page; its links to _static/ are relative to the site's root
    whole = site / "whole-book.html"
    shutil.copy2(max(pages, key=lambda p: p.stat().st_size), whole)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a dev dependency

    pdf = root / PDF
    with server.serve(site) as base, sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=exe, args=server.CHROMIUM_ARGS)
        try:
            page = chromium.new_page()
            page.goto(base + whole.name, wait_until="load", timeout=300_000)
            state = page.evaluate(chromium_js.SETTLE_JS, 300_000)
            if state not in ("ok", "none"):
                raise BookError(f"MathJax did not typeset the whole book ({state}): no PDF written")
            page.add_style_tag(content=PRINT_CSS)
            # a verdict's folded evidence (notebook.verdict_html) prints in full
            page.evaluate("document.querySelectorAll('details.cg-more').forEach(function (d) { d.open = true; })")
            page.pdf(path=str(pdf), format="A4", print_background=True, margin=_MARGIN)
        finally:
            chromium.close()
    log(f"[book-pdf] {pdf.relative_to(root)} ({pdf.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.0f} s")
    return pdf
