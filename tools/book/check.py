"""``make book-check``: every check of the built book, with and without a browser."""
from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

from curvature_gap.row import Row

from . import browser as chromium
from . import downloads, html, numbers, plain
from .build import BookError, project_root, toc_notebooks

__all__ = ["check"]


def check(browser: bool = True, shots=None, html_dir=None, root=None, rerun: bool = True) -> list[str]:
    """Problems of the built book (empty: all good): links, offline assets, downloads that run as downloaded
    (one parameters cell, no path of the build machine, no raw MyST; with ``rerun`` every one re-run from the root
    shows its page's numbers: :mod:`.downloads`), the paper's, the repository's and the launch
    buttons' links, one verdict per result everywhere, no raw TeX, a message in every figure's caption, no number
    in prose that no source backs and the README's numbers current (:mod:`.numbers`), the plain copies Colab and
    Binder open current (:mod:`.plain`), and (headless Chromium) legible figures, tables that fit a phone, rendered
    math, loaded images, no console error, one search box, a footer, Fig. 12's point on a phone;
    screenshots into ``shots`` (default ``_build/screenshots``)."""
    root = Path(root) if root else project_root()
    html_dir = Path(html_dir) if html_dir else root / "_build" / "html"
    report_path = html_dir.parent / "book-report.json"
    if not (html_dir / "index.html").is_file() or not report_path.is_file():
        raise BookError(f"no built book in {html_dir}: run `make book` first")
    profile = json.loads(report_path.read_text())["profile"]
    rows = [Row.from_json(d) for d in json.loads((html_dir / "_static" / "verify.json").read_text())]
    parsed = html.pages(html_dir)
    problems = (html.check_links(html_dir, parsed) + html.check_offline(html_dir, parsed)
                + html.check_downloads(html_dir, parsed, root) + html.check_companion_links(html_dir, parsed, root)
                + html.check_verdicts(html_dir, rows, profile, parsed) + html.check_raw_latex(html_dir, parsed)
                + html.check_figure_messages(html_dir, parsed) + html.check_reader_words(html_dir, rows, parsed)
                + html.check_page_weight(html_dir, parsed) + html.check_labels(html_dir, parsed)
                + numbers.prose_problems(root) + numbers.render_readme(root, check=True)
                + plain.stale_plain_notebooks(root, toc_notebooks(root), numbers.substitutions(root)))
    shots = Path(shots) if shots else root / "_build" / "screenshots"
    if not (rerun and profile == "paper"):  # the paper book's downloads read the committed results, as its pages do
        return problems + (chromium.browser_check(html_dir, profile, shots) if browser else [])
    # the downloads re-run (Jupyter kernels) while Chromium checks the pages: two processes on two cores,
    # 18 s less than one after the other (67.6 s -> 49.2 s here)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reruns = pool.submit(downloads.check_reproduced, html_dir, root)
        seen = chromium.browser_check(html_dir, profile, shots) if browser else []
        return problems + reruns.result() + seen
