"""The outputs nbval compares: the committed notebooks keep only the outputs of their checked cells."""
from __future__ import annotations

from pathlib import Path

import nbformat

from .build import CHECKED_TAG, BookError, ensure_kernel, execute_notebook, project_root, toc_notebooks

__all__ = ["refresh_checked_outputs", "strip_outputs", "is_checked"]


def is_checked(cell) -> bool:
    return cell.get("cell_type") == "code" and CHECKED_TAG in cell.get("metadata", {}).get("tags", [])


def refresh_checked_outputs(paths=None, log=print) -> None:
    """Execute each notebook under its default parameters (the ``paper`` profile) and store, in the notebook itself, only
    the stdout of its checked cells (the references nbval compares against); every other output and
    execution count is cleared."""
    root = project_root()
    paths = [root / p for p in (paths or toc_notebooks(root))]
    ensure_kernel(log)
    for p in paths:
        out = root / "_build" / "refresh" / p.name
        log(f"[book] executing {p.relative_to(root)} for its checked outputs")
        execute_notebook(p, out, {}, cwd=root)
        ran = nbformat.read(out, as_version=4)
        ran_code = [c for c in ran.cells if c.cell_type == "code"
                    and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
        nb = nbformat.read(p, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if [c.source for c in code] != [c.source for c in ran_code]:
            raise BookError(f"{out} was executed from a different version of {p.name}")
        for c, r in zip(code, ran_code):
            c.execution_count = None
            c.outputs = []
            if is_checked(c):
                if any(o.get("output_type") == "error" for o in r.outputs):
                    raise BookError(f"{p}: a checked cell raised an error")
                c.outputs = [o for o in r.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"]
                c.execution_count = r.execution_count or 1  # nbval refuses outputs of a cell marked as never run
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, p)
        log(f"[book] stored the checked outputs of {p.relative_to(root)}")


def strip_outputs(paths: list[Path]) -> None:
    """Clear every output except those of checked cells (what the repository holds)."""
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code" and not is_checked(c):
                c.execution_count = None
                c.outputs = []
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, p)
