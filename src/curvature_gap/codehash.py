"""The code hash of a computation: the source of every definition its numbers can depend on, and nothing else.

A result's numbers are determined by its settings, its training run and the code that computes them.
The last is found here by walking the code itself, not from a hand-kept list of files: starting from
the functions and classes that compute a result (the *roots*), every name they use that resolves to a
definition of this package — a function, a class, a module-level constant, ``module.attribute`` of a
package module, the class named in a parameter's annotation — is followed, and the source of each
definition reached is hashed.

What is **not** part of the hash, because it cannot change a number:

* docstrings, comments and formatting (the hash is taken over the syntax tree);
* messages: the arguments of ``log``/``print``/``warn``/``write`` calls and of the exception a ``raise``
  builds (progress lines and error texts);
* drawing code: functions and methods whose names start with ``plot`` (they read results);
* definitions marked :func:`not_in_code_hash`, each with its reason (for example the code that
  *obtains* the datasets: the files it brings are md5-checked, so how they arrive cannot change them);
* module-level configuration objects of :data:`CONFIG_MODULES` (the profiles): the values a result
  uses are recorded in its configuration, which is hashed with the code;
* anything outside the package (torch, numpy: their versions are recorded in each result's provenance),
  and whatever the roots cannot reach (the book tooling, the command line, the cache's bookkeeping
  in :data:`BOUNDARY_MODULES`).

Moving a definition to another module does not change the hash (definitions are hashed by their
source, not their address); renaming or editing one that is reached does.
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import inspect
import sys
import types
from pathlib import Path

__all__ = ["code_hash", "reached", "not_in_code_hash", "CONFIG_MODULES", "BOUNDARY_MODULES", "MESSAGE_CALLS"]

PACKAGE = __name__.rpartition(".")[0]

# modules whose module-level *objects* (not functions or classes) are configuration recorded in each
# result's config (profile settings, training configurations)
CONFIG_MODULES = (f"{PACKAGE}.config", f"{PACKAGE}.experiments.settings")
# modules that register, cache and look up results: the walk does not enter their definitions (the
# roots themselves may live there)
BOUNDARY_MODULES = (f"{PACKAGE}.experiments", f"{PACKAGE}.experiments.store", f"{PACKAGE}.provenance",
                    f"{PACKAGE}.codehash")
# calls whose arguments are messages (progress lines, warnings), not computation
MESSAGE_CALLS = frozenset({"log", "print", "warn", "write", "info", "debug", "set_description", "set_postfix"})


def not_in_code_hash(reason: str):
    """Mark a function or class as outside every code hash, for the stated ``reason`` (shown in
    :func:`reached`'s report): a change to it cannot change a number."""
    if not reason or not isinstance(reason, str):
        raise ValueError("not_in_code_hash needs the reason why the definition cannot change a number")

    def mark(obj):
        obj.__not_in_code_hash__ = reason
        return obj

    return mark


@functools.lru_cache(maxsize=256)
def code_hash(*roots, via: tuple = ()) -> str:
    """sha256 (16 hex digits) of the definitions reachable from ``roots`` (functions or classes, lambdas
    included; roots may live outside the package, what they reach is followed inside it only) — see the
    module docstring for what counts. ``via``: ``((name, cls), ...)``: an attribute ``name.attr`` anywhere
    in the walk is followed to ``cls.attr`` (``("ctx", Context)``: a computation reaches the methods of its
    context that it calls, and only those). Cached per process: the code a process runs is the code it
    imported."""
    h = hashlib.sha256()
    for dump in sorted(reached(*roots, via=via).values()):
        h.update(dump.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def reached(*roots, via: tuple = ()) -> dict[str, str]:
    """``{"module:qualname": normalised syntax tree}`` of every definition the ``roots`` reach (``via``: as
    :func:`code_hash`)."""
    seen: dict[str, str] = {}
    todo = list(roots)
    via = dict(via)
    for r in roots:
        if not (inspect.isfunction(inspect.unwrap(r)) or inspect.isclass(r)):
            raise ValueError(f"code_hash roots must be functions or classes, got {r!r}")
    skip = set(map(id, via.values()))  # a context class is followed method by method, never as a whole
    while todo:
        obj = todo.pop()
        if id(obj) in skip:
            continue
        found = _definition(obj, root=any(obj is r for r in roots))
        if found is None:
            continue
        key, node, module = found
        if key in seen:
            continue
        seen[key], node = _normalised(node)
        todo.extend(_references(node, module))
        todo.extend(_via_references(node, via))
    return seen


# (normalised dump, normalised tree) per definition's syntax tree: a definition reached by several roots, or by
# several code hashes of a process, is copied and normalised once. Keyed by the nodes themselves (identity), which
# live as long as :func:`_tree`'s cache; a wrapper ``ast.Module`` (lambdas, constants) is keyed by its statements.
_NORMALISED: dict = {}


def _normalised(node: ast.AST) -> tuple[str, ast.AST]:
    key = tuple(node.body) if type(node) is ast.Module else node
    hit = _NORMALISED.get(key)
    if hit is None:
        norm = _Normalise().visit(copy.deepcopy(node))
        hit = _NORMALISED[key] = (ast.dump(norm), norm)
    return hit


def _via_references(node: ast.AST, via: dict) -> list:
    """``cls.attr`` for every ``name.attr`` in ``node`` whose ``name`` is a key of ``via`` (a method, property
    or static/class method of that class)."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            cls = via.get(n.value.id)
            if cls is not None:
                member = inspect.getattr_static(cls, n.attr, None)
                if member is not None and (inspect.isfunction(member) or isinstance(member, (property, staticmethod,
                                                                                         classmethod))):
                    out.append(member)
    return out


# ------------------------------------------------------------------------------------------ the walk
def _module_of(obj) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return getattr(obj, "__module__", None)


def _in_package(obj) -> bool:
    m = _module_of(obj)
    return isinstance(m, str) and (m == PACKAGE or m.startswith(PACKAGE + "."))


@functools.lru_cache(maxsize=None)
def _tree(path: str, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(path).read_text())


def _module_tree(module: types.ModuleType) -> ast.Module:
    p = Path(module.__file__)
    return _tree(str(p), p.stat().st_mtime_ns)


def _find(body: list, name: str):
    """The definition of ``name`` among ``body``'s statements (looking inside if/try blocks too)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, (ast.If, ast.Try)):
            for sub in (node.body, node.orelse, getattr(node, "finalbody", []),
                        *[h.body for h in getattr(node, "handlers", [])]):
                hit = _find(sub, name)
                if hit is not None:
                    return hit
    return None


def _assignment(tree: ast.Module, name: str):
    """The top-level statement(s) binding ``name`` (assignment, or ``from .x import name``)."""
    hits = []
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = [n for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            targets = [node.target]
        if any(t.id == name for t in targets):
            hits.append(node)
    return hits


def _definition(obj, root: bool = False):
    """(key, syntax-tree node, module) of a package function, class or lambda; None where the object is
    not hashed (outside the package, drawing code, marked, or inside a boundary module)."""
    if isinstance(obj, _Constant):
        return obj.definition()
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, functools.partial):
        obj = obj.func
    if callable(obj) and not isinstance(obj, type):
        obj = inspect.unwrap(obj)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not (root or _in_package(obj)):
        return None
    if getattr(obj, "__not_in_code_hash__", None) is not None:
        return None
    modname = obj.__module__
    if modname in BOUNDARY_MODULES and not root:
        return None
    module = sys.modules[modname]
    tree = _module_tree(module)
    parts = obj.__qualname__.split(".")
    if "<locals>" in parts:  # a nested function or lambda: its enclosing top-level definition holds it
        outer = _resolve_qualname(module, parts[:parts.index("<locals>")])
        if outer is None or outer is obj:
            return None
        return _definition(outer, root=root)
    if parts == ["<lambda>"]:
        line = obj.__code__.co_firstlineno
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
        if not nodes:
            raise RuntimeError(f"cannot find the source of the lambda at {module.__file__}:{line}")
        return f"{modname}:<lambda>@{line}", ast.Module(body=[ast.Expr(n) for n in nodes], type_ignores=[]), module
    if parts[-1].lstrip("_").startswith("plot"):
        return None
    body, node = tree.body, None
    for p in parts:
        node = _find(body, p)
        if node is None:
            raise RuntimeError(f"cannot find the source of {modname}.{obj.__qualname__} in {module.__file__}")
        body = node.body
    return f"{modname}:{obj.__qualname__}", node, module


def _resolve_qualname(module, parts):
    obj = module
    for p in parts:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


class _Constant:
    """A module-level non-callable object of the package, hashed through the statement that binds it."""

    def __init__(self, module: types.ModuleType, name: str):
        self.module, self.name = module, name

    def definition(self):
        if not _in_package(self.module) or self.module.__name__ in BOUNDARY_MODULES + CONFIG_MODULES:
            return None
        tree = _module_tree(self.module)
        hits = _assignment(tree, self.name)
        if hits:
            return f"{self.module.__name__}:{self.name}", ast.Module(body=hits, type_ignores=[]), self.module
        for node in tree.body:  # imported from a sibling module: follow the import
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == self.name for a in node.names):
                src = _imported_module(self.module, node)
                orig = next(a.name for a in node.names if (a.asname or a.name) == self.name)
                if src is not None:
                    return _Constant(src, orig).definition()
        return None


def _imported_module(module: types.ModuleType, node: ast.ImportFrom):
    pkg = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    base = pkg
    for _ in range(max(node.level - 1, 0)):
        base = base.rpartition(".")[0]
    name = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
    return sys.modules.get(name)


def _classify(module: types.ModuleType, name: str, value):
    """What a name of ``module`` bound to ``value`` contributes to the walk."""
    if isinstance(value, types.ModuleType):
        return None
    if inspect.isfunction(value) or inspect.isclass(value) or isinstance(value, functools.partial):
        return value
    if callable(value) and inspect.isfunction(inspect.unwrap(value)):
        return value
    if not _in_package(module) or isinstance(value, (types.BuiltinFunctionType,)):
        return None
    return _Constant(module, name)


def _references(node: ast.AST, module: types.ModuleType) -> list:
    """The package definitions ``node`` names: globals of ``module``, ``pkg_module.attr`` chains, and
    classes named in annotations (``ctx: Context``)."""
    g = vars(module)
    out = []

    def add(mod, name):
        if name in vars(mod):
            v = vars(mod)[name]
            if isinstance(v, types.ModuleType):
                return
            got = _classify(mod, name, v)
            if got is not None:
                out.append(got)

    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in g and not isinstance(n.ctx, ast.Store):  # a bound name is no use
            add(module, n.id)
        elif isinstance(n, ast.Attribute):
            base = _attribute_base(n.value, g)
            if isinstance(base, types.ModuleType) and _in_package(base):
                add(base, n.attr)
        elif isinstance(n, ast.arg) and n.annotation is not None:
            out += _annotation_refs(n.annotation, g)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None:
            out += _annotation_refs(n.returns, g)
    return [o for o in out if isinstance(o, _Constant) or _in_package(o)]


def _attribute_base(value: ast.AST, g: dict):
    """The object an attribute chain's base names (``a`` or ``a.b`` of modules), else None."""
    if isinstance(value, ast.Name):
        return g.get(value.id)
    if isinstance(value, ast.Attribute):
        base = _attribute_base(value.value, g)
        if isinstance(base, types.ModuleType):
            return getattr(base, value.attr, None)
    return None


def _annotation_refs(ann: ast.AST, g: dict) -> list:
    """Package classes named in an annotation (a string under ``from __future__ import annotations``)."""
    names = []
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval")
        except SyntaxError:
            return []
    for n in ast.walk(ann):
        if isinstance(n, ast.Name) and inspect.isclass(g.get(n.id)):
            names.append(g[n.id])
    return names


# ------------------------------------------------------------------------------------- normalising
class _Normalise(ast.NodeTransformer):
    """Drop docstrings, drawing methods, and the arguments of message calls and raised exceptions."""

    def _body(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        body = [b for b in body if not (isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                                        and b.name.lstrip("_").startswith("plot"))]
        node.body = body or [ast.Pass()]
        return self.generic_visit(node)

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _body

    def visit_Call(self, node: ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name in MESSAGE_CALLS:
            node.args, node.keywords = [], []
        return self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise):
        if isinstance(node.exc, ast.Call):
            node.exc.args, node.exc.keywords = [], []
        return self.generic_visit(node)

