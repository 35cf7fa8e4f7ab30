"""The code hash of a computation: the source of every definition its numbers can depend on, and nothing else.

Starting from the functions and classes that compute a result (the *roots*), every name they use that
resolves to a definition of this package — a function, a class, a module-level constant, ``module.attribute``
of a package module, the class named in a parameter's annotation — is followed, and the syntax tree of each
definition reached is hashed. Not hashed, because it cannot change a number:

* docstrings, comments and formatting;
* messages: the arguments of :data:`MESSAGE_CALLS` and of the exception a ``raise`` builds;
* drawing code: functions and methods whose names start with ``plot`` (they read results);
* definitions marked :func:`not_in_code_hash`, each with its reason;
* module-level objects of :data:`CONFIG_MODULES` (the values a result uses are in its hashed configuration);
* anything outside the package (its versions are in each result's provenance), and whatever the roots
  cannot reach (the book tooling, the command line, the bookkeeping in :data:`BOUNDARY_MODULES`).

Moving a definition to another module does not change the hash; renaming or editing one that is reached does.
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib.util
import inspect
import sys
import types
from pathlib import Path

__all__ = ["code_hash", "reached", "not_in_code_hash", "CONFIG_MODULES", "BOUNDARY_MODULES", "MESSAGE_CALLS"]

PACKAGE = __name__.rpartition(".")[0]

# modules whose module-level objects (not functions or classes) are configuration recorded in each result's config
CONFIG_MODULES = (f"{PACKAGE}.config", f"{PACKAGE}.experiments.settings")
# modules that register, cache and look up results: the walk does not enter them (roots may live there)
BOUNDARY_MODULES = (f"{PACKAGE}.experiments", f"{PACKAGE}.experiments.store", f"{PACKAGE}.provenance",
                    f"{PACKAGE}.codehash")
# calls whose arguments are messages (progress lines, warnings), not computation
MESSAGE_CALLS = frozenset({"log", "print", "warn", "write", "info", "debug", "set_description", "set_postfix"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)  # an `async def` is a definition like any other


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
    """sha256 (16 hex digits) of the definitions reachable from ``roots`` (functions or classes; roots may live
    outside the package, what they reach is followed inside it only). ``via``: ``((name, cls), ...)``: an
    attribute ``name.attr`` anywhere in the walk is followed to ``cls.attr`` (``("ctx", Context)``: a computation
    reaches the methods of its context that it calls). Cached per process: it runs the code it imported."""
    dumps = sorted(reached(*roots, via=via).values())
    return hashlib.sha256(b"".join(d.encode() + b"\0" for d in dumps)).hexdigest()[:16]


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


# (normalised dump, normalised tree) per syntax tree, normalised once per process; keyed by the nodes themselves
# (they live as long as :func:`_tree`'s cache), a wrapper ``ast.Module`` (lambdas, constants) by its statements.
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
    members = [inspect.getattr_static(via[n.value.id], n.attr, None) for n in ast.walk(node)
               if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in via]
    return [m for m in members if inspect.isfunction(m) or isinstance(m, (property, staticmethod, classmethod))]


# ------------------------------------------------------------------------------------------ the walk
def _in_package(obj) -> bool:
    m = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
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
        if isinstance(node, (*_FUNCS, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, (ast.If, ast.Try)):
            subs = (node.body, node.orelse, getattr(node, "finalbody", []),
                    *[h.body for h in getattr(node, "handlers", [])])
            for hit in (_find(sub, name) for sub in subs):
                if hit is not None:
                    return hit
    return None


def _binds(node: ast.stmt, name: str) -> bool:
    """Whether the statement ``node`` assigns ``name`` (``=``, ``: T =``, ``+=``)."""
    targets = [n for t in node.targets for n in ast.walk(t)] if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return any(isinstance(n, ast.Name) and n.id == name for n in targets)


def _definition(obj, root: bool = False):
    """(key, syntax-tree node, module) of a package function, class or lambda, or of a constant ``(module, name)``; None
    where the object is not hashed (outside the package, drawing code, marked, or inside a boundary module)."""
    if isinstance(obj, tuple):
        return _constant(*obj)
    for kind, inner in (((staticmethod, classmethod), "__func__"), (property, "fget"), (functools.partial, "func")):
        obj = getattr(obj, inner) if isinstance(obj, kind) else obj
    if callable(obj) and not isinstance(obj, type):
        obj = inspect.unwrap(obj)
    if not (inspect.isfunction(obj) or inspect.isclass(obj)) or getattr(obj, "__not_in_code_hash__", None) is not None \
            or not (root or _in_package(obj) and obj.__module__ not in BOUNDARY_MODULES):
        return None
    modname = obj.__module__
    module = sys.modules[modname]
    tree = _module_tree(module)
    parts = obj.__qualname__.split(".")
    if "<locals>" in parts:  # a nested function or lambda: its enclosing top-level definition holds it
        outer = functools.reduce(lambda o, p: getattr(o, p, None), parts[:parts.index("<locals>")], module)
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


def _constant(module: types.ModuleType, name: str):
    """:func:`_definition` of the module-level non-callable object ``module.name`` of the package: the statements
    that bind it (followed through ``from .x import name``)."""
    if not _in_package(module) or module.__name__ in BOUNDARY_MODULES + CONFIG_MODULES:
        return None
    tree = _module_tree(module)
    hits = [node for node in tree.body if _binds(node, name)]
    if hits:
        return f"{module.__name__}:{name}", ast.Module(body=hits, type_ignores=[]), module
    for node in tree.body:  # imported from a sibling module: follow the import
        orig = next((a.name for a in getattr(node, "names", ()) if isinstance(node, ast.ImportFrom)
                     and (a.asname or a.name) == name), None)
        src = orig and sys.modules.get(
            importlib.util.resolve_name("." * node.level + (node.module or ""), module.__package__))
        if src is not None:
            return _constant(src, orig)
    return None


def _references(node: ast.AST, module: types.ModuleType) -> list:
    """The package definitions ``node`` names: globals of ``module``, ``pkg_module.attr`` chains, and
    classes named in annotations (``ctx: Context``)."""
    g = vars(module)
    out = []

    def add(mod, name):  # a function or class is followed; a package constant through its statement
        if name not in vars(mod):
            return
        v = vars(mod)[name]
        if inspect.isfunction(v) or inspect.isclass(v) or isinstance(v, functools.partial) or (
                callable(v) and inspect.isfunction(inspect.unwrap(v))):
            out.append(v)
        elif not isinstance(v, (types.ModuleType, types.BuiltinFunctionType)) and _in_package(mod):
            out.append((mod, name))

    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in g and not isinstance(n.ctx, ast.Store):  # a bound name is no use
            add(module, n.id)
        elif isinstance(n, ast.Attribute):
            base = _attribute_base(n.value, g)
            if isinstance(base, types.ModuleType) and _in_package(base):
                add(base, n.attr)
        elif isinstance(n, ast.arg) and n.annotation is not None:
            out += _annotation_refs(n.annotation, g)
        elif isinstance(n, _FUNCS) and n.returns is not None:
            out += _annotation_refs(n.returns, g)
    return [o for o in out if isinstance(o, tuple) or _in_package(o)]


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
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval")
        except SyntaxError:
            return []
    return [g[n.id] for n in ast.walk(ann) if isinstance(n, ast.Name) and inspect.isclass(g.get(n.id))]


# ------------------------------------------------------------------------------------- normalising
class _Normalise(ast.NodeTransformer):
    """Drop docstrings, drawing methods, and the arguments of message calls and raised exceptions."""

    def _body(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        body = [b for b in body if not (isinstance(b, _FUNCS) and b.name.lstrip("_").startswith("plot"))]
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

