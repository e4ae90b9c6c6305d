"""``format`` is the bottom layer: no module under format/ may import
``tessera.stores``, ``tessera.commit`` or ``tessera.catalog`` - at module
level, inside a function, under ``if TYPE_CHECKING:``, relatively, or through
``importlib.import_module``."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORMAT = os.path.join(ROOT, "format")
ABOVE = ("tessera.stores", "tessera.commit", "tessera.catalog")
# the folders' own names: importable only from a source tree, and as wrong there
BARE = ("stores", "commit", "catalog")


def _modules() -> list[str]:
    out = []
    for folder, dirs, files in os.walk(FORMAT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return sorted(out)


def imported_names(path: str, format_root: str = FORMAT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it is;
    ``from m import a`` gives both ``m`` and ``m.a`` (``a`` may be a module)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    rel = os.path.relpath(os.path.dirname(path), format_root)
    package = ["tessera", "format"] + ([] if rel == "." else rel.split(os.sep))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: max(len(package) - node.level + 1, 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0] if node.args else None
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((node.lineno, arg.value))
    return out


def _above(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in ABOVE + BARE)


def test_every_format_module_is_checked():
    mods = _modules()
    assert os.path.join(FORMAT, "table", "fragments.py") in mods
    assert os.path.join(FORMAT, "table", "paths.py") in mods
    assert len(mods) > 20


@pytest.mark.parametrize("path", _modules(), ids=lambda p: os.path.relpath(p, ROOT))
def test_format_imports_nothing_above_it(path):
    bad = [f"line {line}: {name}" for line, name in imported_names(path) if _above(name)]
    assert not bad, f"{os.path.relpath(path, ROOT)} imports a layer above format: {bad}"


def _file_modules() -> list[str]:
    return [p for p in _modules() if p.startswith(os.path.join(FORMAT, "file") + os.sep)]


@pytest.mark.parametrize("path", _file_modules(), ids=lambda p: os.path.relpath(p, ROOT))
def test_the_file_format_imports_nothing_of_the_table_format(path):
    """format/file/ is below format/table/: a data file knows nothing of its table."""
    table = "tessera.format.table"
    names = imported_names(path)
    bad = [f"line {line}: {name}" for line, name in names if name == table or name.startswith(table + ".")]
    assert not bad, f"{os.path.relpath(path, ROOT)} imports the table format: {bad}"


def test_the_file_format_modules_are_checked():
    mods = _file_modules()
    assert os.path.join(FORMAT, "file", "datafile.py") in mods
    assert os.path.join(FORMAT, "file", "v21", "read", "decoder.py") in mods


@pytest.mark.parametrize(
    "source, above",
    [
        ("import tessera.stores.object_store", True),
        ("from tessera.commit import store", True),
        ("from tessera import catalog", True),
        ("import catalog.table", True),
        ("def f():\n    from tessera.catalog.errors import TesseraError\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tessera.stores.errors import X\n", True),
        ("import importlib\nimportlib.import_module('tessera.commit.store')\n", True),
        ("from ...stores import errors", True),  # from format/table/: three dots reach tessera
        ("from ... import commit", True),
        ("from ..manifest import manifest_name", False),
        ("from .. import errors", False),
        ("from tessera.format.errors import FormatError", False),
        ("import pyarrow as pa", False),
    ],
)
def test_the_check_sees_every_kind_of_import(tmp_path, source, above):
    folder = tmp_path / "format" / "table"
    folder.mkdir(parents=True)
    path = folder / "x.py"
    path.write_text(source)
    names = imported_names(str(path), str(tmp_path / "format"))
    assert any(_above(name) for _, name in names) is above, names
