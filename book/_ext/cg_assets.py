"""A Sphinx extension of the companion book: each page's scripts once.

Sphinx 7.4 adds a script registered after the builder started (as sphinx-thebe registers its inline
``const THEBE_JS_URL = …`` at ``env-before-read-docs``) twice: once as given (file name ``None``) and again
from the registry when writing starts (file name ``''``). Each page then declares the constant twice and
the browser reports ``Identifier 'THEBE_JS_URL' has already been declared`` on every page. This keeps the
first of the scripts that are the same but for ``None`` against ``''``; ``make book-check`` reads every
page's console, so the error cannot come back unnoticed.
"""
from __future__ import annotations


def _key(js) -> tuple:
    attrs = getattr(js, "attributes", {}) or {}
    return (getattr(js, "filename", js) or "", getattr(js, "priority", None), tuple(sorted(attrs.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, keep = set(), []
    for js in scripts:
        k = _key(js)
        if k not in seen:
            seen.add(k)
            keep.append(js)
    scripts[:] = keep  # the builder's own list: restored after each page, deduplicated again for the next


def setup(app):
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
