"""The math layers never import plotting (tracker issue 21, item 4); eigenvalue calls live in exact/linalg.py
only (item 1).

theory/, exact/, hessian/, bounds/ and landscape/ compute; figures live in :mod:`curvature_gap.plotting` or
with the experiment that draws them. Two checks: statically, no module of a math layer names matplotlib or
``curvature_gap.plotting`` in an import; dynamically, importing each math module in a fresh interpreter
leaves both out of ``sys.modules`` (which also catches an import pulled in through another module).
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "curvature_gap"
MATH_LAYERS = ("theory", "exact", "hessian", "bounds", "landscape")
FORBIDDEN = ("matplotlib", "curvature_gap.plotting")


def _modules() -> list[tuple[str, Path]]:
    out = []
    for layer in MATH_LAYERS:
        for f in sorted((PKG / layer).rglob("*.py")):
            rel = f.relative_to(PKG).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out.append((".".join(("curvature_gap",) + parts), f))
    return out


MODULES = _modules()


def _forbidden_imports(path: Path, module: str) -> list[str]:
    """The imports of ``path`` (module ``module``) that resolve to matplotlib or curvature_gap.plotting."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from .. import plotting` names the module in the alias, not in `module`
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                bad.append(f"line {node.lineno}: {name}")
    return bad


def test_math_layers_are_found():
    names = [m for m, _ in MODULES]
    for layer in MATH_LAYERS:
        assert f"curvature_gap.{layer}" in names
    assert "curvature_gap.theory.block" in names and "curvature_gap.bounds.sweeps" in names


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_plotting_import_in_source(module, path):
    bad = _forbidden_imports(path, module)
    assert not bad, (f"{path.relative_to(PKG.parent)} imports plotting ({'; '.join(bad)}): move the figure "
                     f"function to curvature_gap/plotting.py or to the experiment that draws it")


def test_static_check_catches_a_plotting_import(tmp_path):
    """The static check can fail: each spelling of the import is caught."""
    for src in ("from ..plotting import new_figure\n", "from .. import plotting\n", "import matplotlib.pyplot as plt\n",
                "from matplotlib.figure import Figure\n", "import curvature_gap.plotting\n",
                "def f():\n    from ..plotting import WIDTH\n"):
        f = tmp_path / "mod.py"
        f.write_text(src)
        assert _forbidden_imports(f, "curvature_gap.theory.mod"), src
    f.write_text("from ..exact.linalg import spectral_norm\nimport numpy as np\n")
    assert not _forbidden_imports(f, "curvature_gap.theory.mod")


# One interpreter that loads only the heavy third-party libraries (torch, numpy; never matplotlib), then
# forks a fresh child per module: each child starts with no curvature_gap module loaded, as a new process
# would, without paying torch's import once per module.
_PROBE = """
import importlib, json, os, sys
import numpy, torch
assert not any(m.split(".")[0] in ("matplotlib", "curvature_gap") for m in sys.modules)
for name in sys.argv[1:]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            importlib.import_module(name)
            loaded = sorted(m for m in sys.modules if m.split(".")[0] == "matplotlib" or m == "curvature_gap.plotting")
            print(json.dumps([name, loaded[:3]]))
        except BaseException as e:
            print(json.dumps([name, ["import failed: " + repr(e)]]))
            code = 1
        sys.stdout.flush()
        os._exit(code)
    os.waitpid(pid, 0)
"""


def _loaded_after_import(*modules: str) -> dict[str, list[str]]:
    """For each module, what of matplotlib / curvature_gap.plotting is loaded after importing it fresh."""
    r = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = dict(json.loads(line) for line in r.stdout.splitlines() if line.startswith("["))
    assert sorted(out) == sorted(modules), r.stdout[-2000:] + r.stderr[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the probe forks a fresh child per module")
def test_importing_math_modules_loads_no_plotting():
    """Each math module imported in its own fresh child process (one module's imports cannot hide another's)."""
    offenders = {m: loaded for m, loaded in _loaded_after_import(*(m for m, _ in MODULES)).items() if loaded}
    assert not offenders, f"importing these math modules loads plotting: {offenders}"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the probe forks a fresh child per module")
def test_probe_can_fail():
    """The probe sees plotting where a module loads it, and only there (children are fresh)."""
    got = _loaded_after_import("curvature_gap.plotting", "curvature_gap.exact.linalg")
    assert "curvature_gap.plotting" in got["curvature_gap.plotting"]
    assert got["curvature_gap.exact.linalg"] == []


def test_eigenvalue_calls_live_only_in_exact_linalg():
    """exact/linalg.py is the one home of spectral norms and extreme eigenvalues (issue 21, item 1): no other
    module of the package calls LAPACK's or ARPACK's eigensolvers or the spectral matrix norm itself."""
    calls = re.compile(r"\beigsh\(|\beigvalsh\(|\bsvdvals\(|matrix_norm\([^)]*ord\s*=\s*2|\.eigh\(")
    offenders = []
    for f in sorted(PKG.rglob("*.py")):
        if f == PKG / "exact" / "linalg.py":
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if calls.search(code) and '"' not in code.split("(")[0]:
                offenders.append(f"{f.relative_to(PKG)}:{i}: {line.strip()}")
    assert not offenders, "call exact.linalg instead:\n" + "\n".join(offenders)
