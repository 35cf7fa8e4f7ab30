"""The book the tests of tools/ build: one tiny good project (cases.fake_project), built once per test session
by ``python -m tools.book build --profile smoke`` and shared by every test that needs a built book (the build
runs Jupyter Book, about a minute on a busy core). Under pytest-xdist one worker builds it and the others wait for it
(cases.once_per_session); a test that writes into a built book works on a copy."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from cases import GOOD, fake_project, notebook, once_per_session, run_book


@dataclass(frozen=True)
class BuiltBook:
    root: Path  # the project; its _build/ holds the stage and the html
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def good_book(tmp_path_factory) -> BuiltBook:
    """The good one-page project (``fake_project(root, {"page": notebook(GOOD)})``) after
    ``python -m tools.book build --profile smoke``, built once for all workers; read it, do not write into it."""
    def build(root: Path) -> tuple:
        fake_project(root, {"page": notebook(GOOD)})
        r = run_book(root, "build", "--profile", "smoke")
        return root, r.returncode, r.stdout, r.stderr

    return BuiltBook(*once_per_session(tmp_path_factory, "good_book", build))
