"""tools.book.repository: the repository URL from one place at a time (origin, else CITATION.cff, else
_config.yml), the launch buttons' URLs it gives, and the staged _config.yml (buttons, footer)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tools.book import repository as repo

ROOT = Path(__file__).resolve().parents[2]
SLUG = "curvature-gap/closing-the-curvature-gap"


@pytest.mark.parametrize("given, want", [
    ("git@github.com:owner/name.git", "https://github.com/owner/name"),
    ("ssh://git@github.com/owner/name.git", "https://github.com/owner/name"),
    ("https://github.com/owner/name.git\n", "https://github.com/owner/name"),
    ("https://user:token@github.com/owner/name/", "https://github.com/owner/name"),
    ("https://gitlab.com/group/sub/name", "https://gitlab.com/group/sub/name"),
    ("/srv/git/name.git", None),
    ("", None),
])
def test_normalise(given, want):
    assert repo.normalise(given) == want


def _project(tmp_path: Path, citation: str | None = None, config_url: str = "") -> Path:
    (tmp_path / "_config.yml").write_text(yaml.safe_dump({"repository": {"url": config_url, "branch": "main"}}))
    if citation is not None:
        (tmp_path / "CITATION.cff").write_text(f'cff-version: 1.2.0\nrepository-code: "{citation}"\n')
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_the_url_comes_from_origin_then_citation_then_config(tmp_path):
    root = _project(tmp_path, citation="https://github.com/from/citation", config_url="https://github.com/from/config")
    assert repo.repository_url(root) == ("https://github.com/from/citation", "CITATION.cff repository-code")
    subprocess.run(["git", "-C", str(root), "remote", "add", "origin", "git@github.com:from/origin.git"], check=True)
    assert repo.repository_url(root) == ("https://github.com/from/origin", "git remote origin")
    subprocess.run(["git", "-C", str(root), "remote", "remove", "origin"], check=True)
    (root / "CITATION.cff").unlink()
    assert repo.repository_url(root)[0] == "https://github.com/from/config"
    (root / "_config.yml").write_text("repository: {url: ''}\n")
    url, where = repo.repository_url(root)
    assert url is None and where.startswith("nowhere")


def test_this_checkout_names_a_repository_that_the_repo_itself_shows():
    url, where = repo.repository_url(ROOT)
    shown = subprocess.run(["git", "remote", "get-url", "origin"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode == 0 and repo.normalise(shown.stdout):  # a local-path origin (a clone of a clone) names none
        assert url == repo.normalise(shown.stdout) and where == "git remote origin"
    else:
        cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())["repository-code"]
        assert url == repo.normalise(cff) and where == "CITATION.cff repository-code"


def test_launch_urls_open_the_repositorys_copy_of_the_page():
    """As sphinx-book-theme forms them (header_buttons/launch.py): Binder's gh provider at the branch, the
    classic interface at the notebook; Colab's github path. Both name a notebook the repository holds."""
    urls = repo.launch_urls(f"https://github.com/{SLUG}", "main", "notebooks/self_attention.ipynb")
    assert urls == {
        "binder": f"https://mybinder.org/v2/gh/{SLUG}/main?urlpath=tree/notebooks/self_attention.ipynb",
        "colab": f"https://colab.research.google.com/github/{SLUG}/blob/main/notebooks/self_attention.ipynb"}
    assert (ROOT / "notebooks" / "self_attention.ipynb").is_file()
    assert repo.launch_urls("https://gitlab.com/a/b", "main", "x.ipynb") == {}, "only GitHub gets launch buttons"
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["launch_buttons"]["binderhub_url"] == repo.BINDERHUB and cfg["launch_buttons"]["colab_url"] == repo.COLAB
    assert cfg["repository"]["path_to_book"] == "" and cfg["repository"]["branch"] == "main"
    assert "- -e ." in (ROOT / "environment.yml").read_text(), "Binder's environment installs the package"


def test_apply_fills_the_staged_config_and_switches_off_what_has_no_repository(tmp_path):
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    with_repo = repo.apply(yaml.safe_load((ROOT / "_config.yml").read_text()), ROOT)
    url, _ = repo.repository_url(ROOT)
    assert with_repo["repository"]["url"] == url and with_repo["html"]["use_repository_button"] is True
    footer = with_repo["html"]["extra_footer"]
    assert repo.ARXIV_ABS in footer and repo.ARXIV_SOURCE in footer and f'href="{url}"' in footer
    assert "maintainers.md" not in footer, "the maintainers' notes are linked from the reproducibility chapter only"
    assert cfg["html"]["extra_footer"].strip() in footer, "the footer text of _config.yml follows the links"
    bare = _project(tmp_path)
    without = repo.apply(yaml.safe_load((ROOT / "_config.yml").read_text()), bare)
    assert without["repository"]["url"] == "" and without["html"]["use_repository_button"] is False
    assert without["launch_buttons"]["binderhub_url"] == "" and without["launch_buttons"]["colab_url"] == ""
    assert "names no repository" in without["html"]["extra_footer"] and repo.ARXIV_ABS in without["html"]["extra_footer"]
