"""tools.book.pdf (``make book-pdf``): the whole built book as one PDF, offline, printed by the system
Chromium. Skipped without Chromium (``apt-get install chromium``), except under CI."""
from __future__ import annotations

import os
import shutil

import pytest

from cases import run_book

from tools.book import build, pdf, server


def test_no_staged_book_is_a_clear_error(tmp_path):
    with pytest.raises(build.BookError, match="run `make book` first"):
        pdf.build_pdf(tmp_path, log=lambda *a: None)


@pytest.mark.slow
def test_a_built_book_prints_to_one_pdf(tmp_path, good_book):
    if server.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is not installed: `{server.INSTALL_HINT}` — CI must install it")
        pytest.skip(f"Chromium is not installed: `{server.INSTALL_HINT}`")
    assert good_book.returncode == 0, good_book.stdout[-3000:] + good_book.stderr[-3000:]
    root = shutil.copytree(good_book.root, tmp_path / "book", symlinks=True)  # the PDF is written into the project
    printed = run_book(root, "pdf", timeout=900)
    assert printed.returncode == 0, printed.stdout[-3000:] + printed.stderr[-3000:]
    out = root / pdf.PDF
    assert out.read_bytes()[:5] == b"%PDF-" and out.stat().st_size > 10_000
