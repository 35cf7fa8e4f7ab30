"""tools.book.pdf (``make book-pdf``): the whole built book as one PDF, offline, printed by the system
Chromium. Skipped without Chromium (``apt-get install chromium``), except under CI."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cases import GOOD, fake_project, notebook, subprocess_env

from tools.book import build, pdf, server


def test_no_staged_book_is_a_clear_error(tmp_path):
    with pytest.raises(build.BookError, match="run `make book` first"):
        pdf.build_pdf(tmp_path, log=lambda *a: None)


@pytest.mark.slow
def test_a_built_book_prints_to_one_pdf(tmp_path):
    if server.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail(f"Chromium is not installed: `{server.INSTALL_HINT}` — CI must install it")
        pytest.skip(f"Chromium is not installed: `{server.INSTALL_HINT}`")
    fake_project(tmp_path, {"page": notebook(GOOD)})
    run = lambda *a: subprocess.run([sys.executable, "-m", "tools.book", *a], cwd=tmp_path,  # noqa: E731
                                    env=subprocess_env(), capture_output=True, text=True, timeout=900)
    built = run("build", "--profile", "smoke")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    printed = run("pdf")
    assert printed.returncode == 0, printed.stdout[-3000:] + printed.stderr[-3000:]
    out = tmp_path / pdf.PDF
    assert out.read_bytes()[:5] == b"%PDF-" and out.stat().st_size > 10_000
