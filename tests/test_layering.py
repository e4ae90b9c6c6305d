"""The layering of Tessera's folders, read from the code's own imports.

Every module under ``catalog/``, ``commit/``, ``stores/``, ``format/`` and
``tessera/`` (and ``pyspark_tessera.py``) is parsed with :mod:`ast`; every
``import`` counts, function-local ones included, relative ones resolved to
the ``tessera.*`` module they name (``from x import y`` is an import of the
module ``x.y`` when there is one, else of ``x``); so do
``importlib.import_module("...")`` with a literal name and a folder's bare
name (``catalog.x``, which only a source tree can import).  The rules:

- **no cycle** between the modules of one folder (``catalog/`` with its
  sub-packages, ``commit/``, ``stores/``, ``format/``).  Only imports that run
  count here: those under ``if TYPE_CHECKING:`` never execute;
- **catalog/ reaches commit/ only through its public face** (and so do
  ``tessera/`` and ``pyspark_tessera.py``): ``tessera.commit`` itself (the
  names ``commit/__init__.py`` exports: its ``__all__``), ``tessera.commit.errors``
  and ``tessera.commit.retry``; never another module of commit/ (``handlers``,
  ``faults``, ...) and never a private name (``_x``);
- **format/ imports nothing above it**: no ``tessera.*`` module outside ``format/``;
- **stores/ imports nothing from commit/ or catalog/** (nor ``tessera`` itself,
  whose ``__init__`` imports the catalog).

:func:`test_the_layering_rules_hold` reports every violation at once, each
with the file and line of the import.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict, deque
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the repository's folders that are packages of ``tessera`` (``catalog/`` is ``tessera.catalog``)
FOLDERS = {
    "catalog": "tessera.catalog",
    "commit": "tessera.commit",
    "stores": "tessera.stores",
    "format": "tessera.format",
}
#: the folders checked for cycles among their own modules
CYCLE_FREE = tuple(FOLDERS.values())
#: the modules of commit/ that the catalog may import (besides ``tessera.commit`` itself)
COMMIT_FACE = ("tessera.commit.errors", "tessera.commit.retry")
#: names never imported from commit/ above it, even if ``tessera.commit`` exported them
COMMIT_INTERNALS = ("faults", "handlers")


@dataclass(frozen=True)
class Import:
    """One name an import statement brings in: ``target`` is the project module it
    names (``name`` the attribute taken from it, ``None`` for the module itself),
    ``node`` the module of the tree that holds it (``target`` itself unless the
    statement names a module that no longer exists)."""

    importer: str
    target: str
    name: str | None
    where: str  # path:line
    typing_only: bool
    node: str


def discover(root: str) -> dict[str, str]:
    """Module name -> repository path of every module of the project under ``root``."""
    modules: dict[str, str] = {}
    packages = {"tessera": "tessera", **FOLDERS}
    for folder, package in packages.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = os.path.relpath(dirpath, os.path.join(root, folder))
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                stem = filename[: -len(".py")]
                name = prefix if stem == "__init__" else f"{prefix}.{stem}"
                modules[name] = os.path.relpath(os.path.join(dirpath, filename), root)
    if os.path.exists(os.path.join(root, "pyspark_tessera.py")):
        modules["pyspark_tessera"] = "pyspark_tessera.py"
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` (any alias ending so) or ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id.endswith("TYPE_CHECKING")
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _in_project(name: str) -> bool:
    return name == "tessera" or name.startswith("tessera.") or name == "pyspark_tessera"


def _absolute(name: str) -> str:
    """A folder's bare name (``catalog.x``, importable only from a source tree) as
    the module it is (``tessera.catalog.x``); any other name unchanged."""
    head = name.split(".", 1)[0]
    return FOLDERS[head] + name[len(head) :] if head in FOLDERS else name


def _is_import_call(node: ast.Call) -> bool:
    """``importlib.import_module("...")`` or ``__import__("...")`` with a literal name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    arg = node.args[0] if node.args else None
    return name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str)


def _owner(name: str, modules: dict[str, str]) -> str:
    """The longest known module that ``name`` lies in (``name`` itself if unknown)."""
    probe = name
    while probe and probe not in modules:
        probe = probe.rpartition(".")[0]
    return probe or name


def imports_of(module: str, path: str, source: str, modules: dict[str, str]) -> list[Import]:
    """The project imports of one module, function-local ones included."""
    tree = ast.parse(source, path)
    is_package = os.path.basename(path) == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def where(node: ast.stmt) -> str:
        return f"{path}:{node.lineno}"

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = _absolute(alias.name)
                if _in_project(name):
                    found.append(Import(module, name, None, where(node), typing_only, _owner(name, modules)))
        elif isinstance(node, ast.Call) and _is_import_call(node):
            name = node.args[0].value  # type: ignore[attr-defined]
            name = _absolute(package + name if name.startswith(".") else name)
            if _in_project(name):
                found.append(Import(module, name, None, where(node), typing_only, _owner(name, modules)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = _absolute(node.module or "")
            if _in_project(base):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        found.append(Import(module, sub, None, where(node), typing_only, sub))
                    else:
                        found.append(Import(module, base, alias.name, where(node), typing_only, _owner(base, modules)))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return found


def _folder_of(module: str) -> str | None:
    return next((p for p in CYCLE_FREE if module == p or module.startswith(p + ".")), None)


def cycles(imports: list[Import]) -> list[str]:
    """One cycle (the shortest through its first module) of every strongly connected
    group of modules that import each other within one folder, with where each import is."""
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for imp in imports:
        folder = _folder_of(imp.importer)
        if imp.typing_only or folder is None or _folder_of(imp.node) != folder or imp.node == imp.importer:
            continue
        edges[imp.importer].setdefault(imp.node, imp.where)
    found = []
    for group in _strongly_connected(edges):
        start = min(group)
        # breadth first from start until an import leads back to it, inside the group
        previous: dict[str, str] = {}
        queue = deque([start])
        while queue and start not in previous:
            node = queue.popleft()
            for t in sorted(edges[node]):
                if t in group and t not in previous:
                    previous[t] = node
                    queue.append(t)
        path = [start]
        node = previous[start]
        while node != start:
            path.append(node)
            node = previous[node]
        path.append(start)
        path.reverse()  # start -> ... -> start
        steps = " -> ".join(f"{a} ({edges[a][b]})" for a, b in zip(path, path[1:], strict=False)) + f" -> {start}"
        more = sorted(set(group) - set(path))
        found.append(f"import cycle: {steps}" + (f"; the same tangle also holds {', '.join(more)}" if more else ""))
    return found


def _strongly_connected(edges: dict[str, dict[str, str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return sorted(groups, key=min)


def _exported(source: str) -> set[str] | None:
    """The names in ``__all__`` of a module's source (None without one)."""
    for node in ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return None


def layer_violations(imports: list[Import], commit_exports: set[str] | None) -> list[str]:
    """Rules (b), (c), (d) of the module docstring: one line per offending
    import statement and module, with the names it takes from it."""
    found: dict[tuple[str, str, str], list[str]] = {}  # (where, complaint, module) -> names

    def flag(imp: Import, complaint: str) -> None:
        names = found.setdefault((imp.where, complaint, imp.target), [])
        if imp.name is not None:
            names.append(imp.name)

    for imp in imports:
        above_commit = imp.importer in ("tessera", "pyspark_tessera") or imp.importer.startswith("tessera.catalog")
        if above_commit and (imp.target == "tessera.commit" or imp.target.startswith("tessera.commit.")):
            if imp.target not in ("tessera.commit", *COMMIT_FACE):
                flag(imp, "catalog reaches past commit's public face")
            elif imp.name is not None and imp.name.startswith("_"):
                flag(imp, "catalog imports a private name of commit")
            elif imp.target == "tessera.commit" and imp.name in COMMIT_INTERNALS:
                flag(imp, "catalog imports commit's internals")
            elif imp.target == "tessera.commit" and imp.name and commit_exports is not None:
                if imp.name not in commit_exports:
                    flag(imp, "catalog imports a name tessera.commit does not export (__all__)")
        if imp.importer.startswith("tessera.format") and not imp.target.startswith("tessera.format"):
            flag(imp, "format imports from above it")
        if imp.importer.startswith("tessera.stores") and (
            imp.target in ("tessera", "pyspark_tessera") or imp.target.startswith(("tessera.commit", "tessera.catalog"))
        ):
            flag(imp, "stores imports from commit or catalog")
    lines = [f"{w}: {c}: {m}" + (f" ({', '.join(n)})" if n else "") for (w, c, m), n in found.items()]
    return sorted(lines, key=_by_place)


def _by_place(problem: str) -> tuple[str, int]:
    path, line, _ = problem.split(":", 2)
    return path, int(line)


def check(root: str) -> list[str]:
    """Every violation of the layering rules in the tree under ``root``."""
    modules = discover(root)
    imports: list[Import] = []
    problems: list[str] = []
    sources: dict[str, str] = {}
    for module, path in modules.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            sources[module] = f.read()
        try:
            imports += imports_of(module, path, sources[module], modules)
        except SyntaxError as exc:
            problems.append(f"{path}: does not parse: {exc}")
    commit_exports = _exported(sources["tessera.commit"]) if "tessera.commit" in sources else None
    return problems + cycles(imports) + layer_violations(imports, commit_exports)


def test_the_layering_rules_hold():
    problems = check(ROOT)
    assert not problems, f"{len(problems)} layering violation(s):\n" + "\n".join(problems)


# -- the checker itself, on small made-up trees ---------------------------------------------


def _tree(tmp_path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("tessera", *FOLDERS):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    return str(tmp_path)


def test_a_cycle_through_a_function_local_relative_import_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "catalog/a.py": "from tessera.catalog import b\n",
            "catalog/sub/__init__.py": "",
            "catalog/b.py": "from .sub import c\n",
            "catalog/sub/c.py": "def f():\n    from .. import a\n",
            "catalog/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import e\n",
            "catalog/e.py": "from . import d\n",
        },
    )
    (problem,) = check(root)
    assert problem == (
        "import cycle: tessera.catalog.a (catalog/a.py:1) -> tessera.catalog.b (catalog/b.py:1)"
        " -> tessera.catalog.sub.c (catalog/sub/c.py:2) -> tessera.catalog.a"
    ), problem


def test_each_layer_rule_is_reported(tmp_path):
    root = _tree(
        tmp_path,
        {
            "commit/__init__.py": "__all__ = ['commit_operation']\ndef commit_operation(): ...\n",
            "commit/errors.py": "",
            "commit/handlers.py": "",
            "catalog/ok.py": "from tessera.commit import commit_operation\nfrom tessera.commit.errors import X\n",
            "catalog/bad.py": (
                "from tessera.commit import handlers\n"
                "def f():\n    from tessera.commit.errors import _private\n"
                "from tessera.commit import faults, other\n"
                "from tessera.commit.gone import a, b\n"
            ),
            "format/f.py": (
                "def g():\n    import tessera.stores.x\nfrom tessera import errors\n"
                "import importlib\nimportlib.import_module('tessera.catalog')\nimport commit.handlers\n"
            ),
            "stores/s.py": "from ..commit import errors\nimport tessera\n",
            "stores/x.py": "",
        },
    )
    assert check(root) == [
        "catalog/bad.py:1: catalog reaches past commit's public face: tessera.commit.handlers",
        "catalog/bad.py:3: catalog imports a private name of commit: tessera.commit.errors (_private)",
        "catalog/bad.py:4: catalog imports commit's internals: tessera.commit (faults)",
        "catalog/bad.py:4: catalog imports a name tessera.commit does not export (__all__): tessera.commit (other)",
        "catalog/bad.py:5: catalog reaches past commit's public face: tessera.commit.gone (a, b)",
        "format/f.py:2: format imports from above it: tessera.stores.x",
        "format/f.py:3: format imports from above it: tessera (errors)",
        "format/f.py:5: format imports from above it: tessera.catalog",
        "format/f.py:6: format imports from above it: tessera.commit.handlers",
        "stores/s.py:1: stores imports from commit or catalog: tessera.commit.errors",
        "stores/s.py:2: stores imports from commit or catalog: tessera",
    ]


@pytest.mark.parametrize("source", ["from . import x\n", "from .x import y\n"])
def test_relative_imports_resolve_from_a_package_and_a_module(tmp_path, source):
    root = _tree(tmp_path, {"format/x.py": "", "format/p/__init__.py": source, "format/p/x.py": ""})
    modules = discover(root)
    (imp,) = imports_of("tessera.format.p", "format/p/__init__.py", source, modules)
    assert imp.target == "tessera.format.p.x"
    (imp,) = imports_of("tessera.format.p.x", "format/p/x.py", source.replace(".", "..", 1), modules)
    assert imp.target == "tessera.format.x"
