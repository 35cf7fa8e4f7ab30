"""The math layers never import plotting; eigenvalue calls live in exact/linalg.py only; the package's imports
form no cycle and the math layers import nothing above them.

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


# One interpreter that loads the heavy third-party libraries (torch, numpy; never matplotlib) and the root
# package, which importing any module of it loads first, then forks a child per module: each child imports
# its module as a new process would, without paying torch's and the root package's import once per module.
# Nothing can hide there: whatever the root package loaded stays in every child's sys.modules, so if it
# pulled in plotting, every module is reported.
_PROBE = """
import importlib, json, os, sys
import numpy, torch
assert not any(m.split(".")[0] in ("matplotlib", "curvature_gap") for m in sys.modules)
import curvature_gap
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
    """Each math module imported in its own child process (one module's imports cannot hide another's)."""
    offenders = {m: loaded for m, loaded in _loaded_after_import(*(m for m, _ in MODULES)).items() if loaded}
    assert not offenders, f"importing these math modules loads plotting: {offenders}"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the probe forks a fresh child per module")
def test_probe_can_fail():
    """The probe sees plotting where a module loads it, and only there (children do not share their imports)."""
    got = _loaded_after_import("curvature_gap.plotting", "curvature_gap.exact.linalg")
    assert "curvature_gap.plotting" in got["curvature_gap.plotting"]
    assert got["curvature_gap.exact.linalg"] == []


def test_eigenvalue_calls_live_only_in_exact_linalg():
    """exact/linalg.py is the one home of spectral norms and extreme eigenvalues: no other
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


# ------------------------------------------------------------------------------------ the import graph
# what the math layers may import besides each other: the package's leaves below them
BELOW_MATH = ("config", "params", "model", "io", "provenance", "precision", "row", "device", "codehash")
ALL_MODULES = {}
for _f in sorted(PKG.rglob("*.py")):
    _rel = _f.relative_to(PKG).with_suffix("")
    ALL_MODULES[".".join(("curvature_gap",) + (_rel.parts[:-1] if _rel.name == "__init__" else _rel.parts))] = _f


def _package_imports(path: Path, module: str) -> set[str]:
    """The modules of the package that ``path`` (module ``module``) imports, at module level or inside a function
    (a lazy import is a dependency too); an import of one of its own parent packages (whose ``__init__`` runs
    first anyway) is not counted."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names += [target] + [f"{target}.{a.name}" for a in node.names]
    out = set()
    for name in names:
        parts = name.split(".")
        found = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in ALL_MODULES), None)
        if found and found != module and not module.startswith(found + "."):
            out.add(found)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan), each sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _room(module: str) -> str:
    """The top-level module or subpackage of the package that ``module`` belongs to."""
    return module.split(".")[1] if "." in module else module


def test_the_package_imports_form_no_cycle():
    graph = {m: _package_imports(f, m) for m, f in ALL_MODULES.items()}
    assert sum(map(len, graph.values())) > 100, "the graph was read"
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def test_the_cycle_check_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_math_layers_import_nothing_above_them():
    """theory, exact, hessian, bounds and landscape import each other and :data:`BELOW_MATH` only: never the
    experiments, the checks, the findings, plotting, the notebooks' helpers or the command line."""
    allowed = set(MATH_LAYERS) | set(BELOW_MATH)
    up = sorted(f"{m} imports {t}" for m, f in ALL_MODULES.items() if _room(m) in MATH_LAYERS
                for t in _package_imports(f, m) if _room(t) not in allowed)
    assert not up, "a math layer imports a module above it:\n" + "\n".join(up)
    assert "curvature_gap.exact.forward" in _package_imports(ALL_MODULES["curvature_gap.bounds.quantities"],
                                                             "curvature_gap.bounds.quantities"), "imports are read"


# ------------------------------------------------------------------------------------ no aliases
def _aliases(path: Path, module: str | None = None) -> list[str]:
    """Module-level ``a = b`` of ``path`` where ``b`` is a function, a class or a module, defined or imported there:
    a second name for one definition (``linear = _linear``). ``module``: its import name, to tell an imported
    function from an imported constant (None: a file outside the package, where only its own definitions count)."""
    import importlib
    import inspect

    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    imported = {a.asname or a.name.split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    pairs = [(n.lineno, n.targets[0].id, n.value.id) for n in tree.body
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
             and isinstance(n.value, ast.Name) and n.value.id in own | imported]
    if not pairs:
        return []
    mod = importlib.import_module(module) if module else None
    return [f"line {line}: {a} = {b}" for line, a, b in pairs
            if b in own or (mod is not None and (inspect.isfunction(obj := getattr(mod, b)) or inspect.isclass(obj)
                                                 or inspect.ismodule(obj)))]


def test_no_function_class_or_module_has_a_second_name():
    bad = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if found := _aliases(f, ".".join(parts)):
            bad[str(rel)] = found
    assert not bad, f"a second name for a function, class or module (call it by its one name): {bad}"


def test_the_alias_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import json\n\n\ndef _linear(x):\n    return x\n\n\nlinear = _linear\nN = 3\nM = N\nj = json\n")
    assert _aliases(f) == ["line 8: linear = _linear"]
