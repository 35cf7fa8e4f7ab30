"""The companion book: build (papermill + Jupyter Book), generated pages, and checks of the built HTML.

``python -m tools.book build --profile paper|smoke`` (``make book``) and ``python -m tools.book check``
(``make book-check``). Not part of the installed package: it needs the checkout (book/, notebooks/,
_config.yml, _toc.yml).
"""
