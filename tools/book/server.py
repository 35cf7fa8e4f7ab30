"""The built book as a browser gets it: its pages, served over HTTP from 127.0.0.1, and the system Chromium.

Used by the browser checks (:mod:`.browser`) and the PDF (:mod:`.pdf`); nothing here opens a page."""
from __future__ import annotations

import functools
import os
import re
import shutil
import threading
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["find_chromium", "book_pages", "serve", "INSTALL_HINT", "CHROMIUM_ARGS"]

INSTALL_HINT = "apt-get install chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
_SKIP_DIRS = {"_static", "_sources"}
_SKIP_STEMS = {"genindex", "search", "py-modindex"}
_REDIRECT = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.I)


def find_chromium() -> str | None:
    """The system Chromium: ``/usr/bin/chromium`` or ``chromium`` on PATH (None if neither)."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def book_pages(html_dir: Path) -> list[str]:
    """The book's pages, relative to ``html_dir`` (posix): every ``.html`` except theme and source files,
    the index and search pages, and redirect stubs (the root ``index.html``)."""
    html_dir = Path(html_dir)
    out = []
    for p in sorted(html_dir.rglob("*.html")):
        rel = p.relative_to(html_dir)
        if _SKIP_DIRS & set(rel.parts[:-1]) or p.stem in _SKIP_STEMS:
            continue
        try:
            head = p.read_text(encoding="utf-8", errors="replace")[:4000]
        except OSError as exc:
            raise OSError(f"{p}: the built page cannot be read ({exc}); rebuild the book with `make book`") from exc
        if _REDIRECT.search(head):
            continue
        out.append(rel.as_posix())
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a reader that hangs up is not a problem
        pass


@contextmanager
def serve(html_dir: Path):
    """Serve ``html_dir`` on 127.0.0.1 (a free port) in a daemon thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="book-check-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
