"""A download reproduces its page: the ``.ipynb`` a reader downloads from a built page, run from the root of
the clone with nothing set (no build environment, its own parameters cell), shows the page's numbers.

Outside the build a page reads the committed results by default (``recompute = None``: the rows of
``published/paper/verify.json`` and the published figure results, :mod:`curvature_gap.notebook`), as the paper
book does; so every verdict box, table, sentence and printed line of the re-run download must read as on the
page. ``make book-check`` runs every page's download and reports every output that differs (among them any
raw MyST a page prints: outside the build it prints plain Markdown, :func:`curvature_gap.notebook.show_markdown`).
"""
from __future__ import annotations

import html
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import nbformat
import papermill as pm

from curvature_gap.notebook import NO_COMPUTE_ENV, STATIC_ENV, VERIFY_ENV

__all__ = ["shown", "differences", "run_download", "check_reproduced", "download_pages"]

_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
# What differs between two runs of a page that computes live without being one of its numbers: a value at float64
# rounding (below 1e-12 in magnitude: it depends on the order of a sum, the threads, the BLAS), written as 8.4 × 10⁻¹⁶
# or 8.4e-16, and a wall-clock time the page measures as it runs (0.014 s, 3 ms).
_SCI = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:\s?×\s?10([⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)|e([-+]\d+))")
_TIME = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|s)\b")
_SUPERSCRIPT = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")


def _rounding(m: re.Match) -> str:
    exponent = int((m.group(2) or "").translate(_SUPERSCRIPT) or m.group(3))
    return "(float64 rounding)" if float(m.group(1)) * 10.0 ** exponent < 1e-12 else m.group(0)


def _text(value) -> str:
    value = "".join(value) if isinstance(value, list) else str(value)
    text = _SPACE.sub(" ", html.unescape(_TAG.sub(" ", value))).strip()
    text = _TIME.sub("(time)", _SCI.sub(_rounding, text))
    return text.replace(" · full size · PDF", "")  # a page links its figure files; a notebook has none beside it


def shown(nb) -> list[str]:
    """What a reader reads in a notebook's outputs, in order, as plain text: every Markdown, HTML (verdict
    boxes, figure captions; tags and images dropped: a page links its figure files, a run outside the build
    inlines them) and printed output; a value at float64 rounding and a time measured as the page runs are read
    as such, not as their digits (they differ from run to run). Consecutive printed chunks of one stream are one text: where the kernel
    cuts a printed line into chunks depends on its flush timing (a line of ``self_attention`` came as two chunks
    on a loaded machine and as one otherwise)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        stream = None  # the stream the last output printed to, while its chunks run on
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                text = "".join(o.get("text", ""))
                if stream == o.get("name"):
                    out[-1] += text
                else:
                    out.append(text)
                stream = o.get("name")
                continue
            stream = None
            data = o.get("data") or {}
            for mime in ("text/markdown", "text/html"):
                if mime in data:
                    out.append(data[mime])
                    break
    return [t for t in map(_text, out) if t]


def differences(page: list[str], download: list[str], name: str = "") -> list[str]:
    """Each output the download shows differently from the page (``name: …``), and a count mismatch."""
    head = f"{name}: " if name else ""
    problems = [f"{head}the download shows {b[:300]!r} where its page shows {a[:300]!r}"
                for a, b in zip(page, download) if a != b]
    if len(page) != len(download):
        problems.append(f"{head}the download shows {len(download)} outputs, its page {len(page)}")
    return problems


def run_download(src: Path, root: Path, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """Run a downloaded notebook as a reader would: saved into the clone's root, executed there by papermill
    with no parameter and none of the build's environment. Returns (the executed notebook, seconds)."""
    from .build import KERNEL, book_kernel_manager  # noqa: PLC0415 - build imports this module's users

    work = root / "_build" / f"download-check-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    saved = {k: os.environ.pop(k) for k in (VERIFY_ENV, STATIC_ENV, NO_COMPUTE_ENV) if k in os.environ}
    try:
        dst = work / src.name
        shutil.copy2(src, dst)
        t0 = time.perf_counter()
        pm.execute_notebook(str(dst), str(dst), parameters={}, kernel_name=KERNEL, cwd=str(root), progress_bar=False,
                            log_output=False, execution_timeout=timeout, kernel_manager_class=book_kernel_manager())
        return nbformat.read(dst, as_version=4), time.perf_counter() - t0
    finally:
        os.environ.update(saved)
        shutil.rmtree(work, ignore_errors=True)


def download_pages(html_dir: Path) -> list[str]:
    """Every page of a built book that has a download (``_sources/notebooks/<page>.ipynb``)."""
    return sorted(p.stem for p in (Path(html_dir) / "_sources" / "notebooks").glob("*.ipynb"))


def check_reproduced(html_dir: Path, root: Path, pages=None, log=print) -> list[str]:
    """Problems (empty: none): each of ``pages``' downloads (default: every page's, :func:`download_pages`;
    ``_sources/notebooks/<page>.ipynb``, what the download button serves), run from the root
    (:func:`run_download`), against its page's outputs."""
    pages = download_pages(html_dir) if pages is None else pages
    if not pages:
        return [f"no download to re-run in {Path(html_dir) / '_sources' / 'notebooks'}"]
    problems = []
    for stem in pages:
        src = Path(html_dir) / "_sources" / "notebooks" / f"{stem}.ipynb"
        if not src.is_file():
            problems.append(f"{stem}: no download at {src}")
            continue
        try:
            ran, sec = run_download(src, Path(root))
        except pm.PapermillExecutionError as exc:
            problems.append(f"{stem}: the download stops in cell {exc.exec_count}: {exc.ename}: {exc.evalue}"[:600])
            continue
        log(f"[book-check] {stem}.ipynb re-run from the root in {sec:.0f} s")
        problems += differences(shown(nbformat.read(src, as_version=4)), shown(ran), f"{stem}.ipynb")
    return problems
