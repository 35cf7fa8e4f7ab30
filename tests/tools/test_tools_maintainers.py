"""tools.book.maintainers: docs/maintainers.md, the maintainers' page (the fault table with the tests that
prove each case, the profiles' configuration hashes), is generated, and the committed page is current."""
from __future__ import annotations

from pathlib import Path

from curvature_gap.config import RECIPES
from curvature_gap.faults import FAULTS
from tools.book import __main__ as cli
from tools.book import maintainers, tables
from tools.book.build import fault_tests

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_maintainers_page_is_current():
    """(The book's footer links it in the repository: tools.book.repository.footer_html.)"""
    page = (ROOT / maintainers.PAGE).read_text()
    assert page == maintainers.maintainers_md(ROOT), f"{maintainers.PAGE} is out of date: run `{maintainers.COMMAND}`"


def test_the_page_holds_the_fault_table_with_its_tests_and_the_config_hashes():
    page = maintainers.maintainers_md(ROOT)
    assert tables.faults_md(fault_tests(ROOT)) in page, "the fault table, generated from curvature_gap.faults"
    for f in FAULTS:
        assert f.behaviour.replace("|", "\\|") in page, f.id
    for (model, profile), cfg in RECIPES.items():
        assert f"| {model} {profile} | `{cfg.hash()}` |" in page
    assert "pytest -m reliability" in page and "make reproduce && make publish" in page


def test_write_and_check(tmp_path, monkeypatch, capsys):
    (tmp_path / "tests").mkdir()
    assert maintainers.write(tmp_path, check=True) is False and not (tmp_path / maintainers.PAGE).exists()
    assert maintainers.write(tmp_path) is False and (tmp_path / maintainers.PAGE).is_file()
    assert maintainers.write(tmp_path, check=True) is True
    (tmp_path / maintainers.PAGE).write_text("edited by hand\n")
    monkeypatch.setattr(cli, "project_root", lambda: tmp_path)
    assert cli.main(["maintainers", "--check"]) == 1
    assert f"run `{maintainers.COMMAND}`" in capsys.readouterr().err
    assert cli.main(["maintainers"]) == 0 and cli.main(["maintainers", "--check"]) == 0
