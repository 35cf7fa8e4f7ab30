"""Where the book is published from, and the links derived from it: the repository button, the Binder and
Colab launch buttons, the paper on arXiv (its abstract and its LaTeX source) and the footer that shows them.

The repository URL comes from one place at a time, in this order (:func:`repository_url`):

1. ``git remote get-url origin`` — the repository this checkout is pushed to (a fork gets its own links);
2. ``repository-code`` of ``CITATION.cff``;
3. ``repository.url`` of ``_config.yml``.

With none of them the book has no repository button and no launch buttons, and says so in its footer.
Only GitHub repositories get launch buttons (Binder's ``gh`` provider and Colab's ``github`` path).
"""
from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from urllib.parse import quote

import yaml

__all__ = ["ARXIV_ID", "ARXIV_ABS", "ARXIV_SOURCE", "BINDERHUB", "COLAB", "repository_url", "normalise",
           "github_slug", "launch_urls", "footer_html", "apply"]

ARXIV_ID = "2510.16927"
ARXIV_ABS = f"https://arxiv.org/abs/{ARXIV_ID}"
ARXIV_SOURCE = f"https://arxiv.org/src/{ARXIV_ID}"   # the paper's LaTeX source, as arXiv serves it
BINDERHUB = "https://mybinder.org"
COLAB = "https://colab.research.google.com"
_SCP = re.compile(r"^(?:[\w.-]+@)?([\w.-]+):(?!//)(.+)$")   # git@github.com:owner/name.git


def normalise(url: str) -> str | None:
    """An https URL for a git remote or repository URL (``git@host:o/n.git``, ``ssh://git@host/o/n``,
    ``https://host/o/n.git``), without ``.git``, credentials or a trailing slash; None for a local path."""
    url = (url or "").strip()
    if not url:
        return None
    m = _SCP.match(url)
    if m and "://" not in url:
        host, path = m.groups()
    else:
        m = re.match(r"^(?:https?|ssh|git)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+)$", url)
        if not m:
            return None
        host, path = m.groups()
    path = re.sub(r"\.git$", "", path.strip("/"))
    return f"https://{host}/{path}" if path else None


def _origin(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return normalise(out.stdout) if out.returncode == 0 else None


def _citation(root: Path) -> str | None:
    p = Path(root) / "CITATION.cff"
    if not p.is_file():
        return None
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError:
        return None
    return normalise(str(doc.get("repository-code") or ""))


def _configured(root: Path) -> str | None:
    p = Path(root) / "_config.yml"
    if not p.is_file():
        return None
    cfg = yaml.safe_load(p.read_text()) or {}
    return normalise(str((cfg.get("repository") or {}).get("url") or ""))


def repository_url(root: Path) -> tuple[str | None, str]:
    """(the repository's https URL or None, where it came from)."""
    for where, get in (("git remote origin", _origin), ("CITATION.cff repository-code", _citation),
                       ("_config.yml repository.url", _configured)):
        url = get(Path(root))
        if url:
            return url, where
    return None, "nowhere (no origin remote, no repository-code in CITATION.cff, no repository.url in _config.yml)"


def github_slug(url: str | None) -> str | None:
    """``owner/name`` of a GitHub repository URL, else None."""
    m = re.match(r"^https://github\.com/([^/]+)/([^/]+)$", url or "")
    return f"{m.group(1)}/{m.group(2)}" if m else None


def launch_urls(url: str, branch: str, notebook: str, path_to_book: str = "") -> dict[str, str]:
    """The URLs the launch buttons of ``notebook`` (a path relative to the book, e.g. ``notebooks/x.ipynb``)
    open, as sphinx-book-theme forms them: Binder (the classic interface, at that notebook) and Colab."""
    slug = github_slug(url)
    if not slug:
        return {}
    path = "/".join(p for p in (path_to_book.strip("/"), notebook) if p)
    return {"binder": f"{BINDERHUB}/v2/gh/{slug}/{branch}?urlpath=tree/{path}",
            "colab": f"{COLAB}/github/{slug}/blob/{branch}/{path}"}


def footer_html(url: str | None, branch: str, text: str = "") -> str:
    """The footer of every page: the paper (its arXiv abstract and LaTeX source), this companion's repository
    (its maintainers' notes are linked from the reproducibility chapter, not from every reader's page), then ``text`` (``html.extra_footer`` of ``_config.yml``)."""
    paper = (f'The paper: <a href="{ARXIV_ABS}">arXiv:{ARXIV_ID}</a> (<a href="{ARXIV_SOURCE}">its LaTeX '
             "source</a>, where the formulas quoted here are printed).")
    if url:
        u = html.escape(url)
        repo = f' This companion: <a href="{u}">{html.escape(url.split("://", 1)[1])}</a>.'
    else:
        repo = " This build names no repository: the README says how to set one."
    return f'<p class="cg-footer">{paper}{repo}</p>' + (f'<p class="cg-footer">{text.strip()}</p>' if text.strip() else "")


def apply(cfg: dict, root: Path) -> dict:
    """Fill the staged ``_config.yml`` (a dict, changed in place and returned) with the repository URL
    (:func:`repository_url`) and the footer; without a repository, or with one not on GitHub, the buttons
    that need it (repository, Binder, Colab) are switched off rather than left pointing nowhere."""
    url, _ = repository_url(root)
    repo = cfg.setdefault("repository", {})
    branch = repo.get("branch") or "main"
    repo.update(url=url or "", branch=branch)
    htmlc = cfg.setdefault("html", {})
    htmlc["use_repository_button"] = bool(url and htmlc.get("use_repository_button", True))
    htmlc["extra_footer"] = footer_html(url, branch, htmlc.get("extra_footer") or "")
    if not github_slug(url):
        launch = cfg.setdefault("launch_buttons", {})
        launch.update(binderhub_url="", colab_url="")
    return cfg
