"""Tessera: a transactional table catalog whose tables are Lance datasets.

The public API::

    import tessera

    cat = tessera.connect(warehouse="/data/wh")      # a catalog (SQLite under the warehouse)
    t = tessera.Table.open("/data/wh/sales/orders")  # or a table by URI
    try:
        ...
    except tessera.errors.TesseraError:              # the root of every Tessera error
        ...

The parts are sub-packages: ``tessera.catalog`` (what users touch),
``tessera.commit`` (the commit protocol), ``tessera.stores`` (object and
manifest stores) and ``tessera.format`` (Lance on disk).
"""

from __future__ import annotations

import os as _os
import sys as _sys
from collections.abc import Sequence as _Sequence
from importlib.machinery import ModuleSpec as _ModuleSpec
from types import ModuleType as _ModuleType

# In a source tree the sub-packages are the repository's top-level folders
# (an installed wheel has them inside this package instead).
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_root, "catalog", "__init__.py")
):
    __path__.append(_root)  # noqa: F821 - the package's own search path

from typing import TYPE_CHECKING as _TYPE_CHECKING  # noqa: E402

from . import errors  # noqa: E402
from .catalog.errors import TesseraError  # noqa: E402
from .catalog.table import Table  # noqa: E402
from .format.file.checksum import checksums  # noqa: E402
from .stores.local import durability  # noqa: E402

if _TYPE_CHECKING:
    from .catalog.catalog import Catalog, connect


def __getattr__(name: str) -> object:
    """``Catalog`` and ``connect`` import SQLAlchemy's ORM (about a third of a
    second): a program that only opens tables by URI never pays for it."""
    if name in ("Catalog", "connect"):
        from .catalog import catalog

        return getattr(catalog, name)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")


class _RegisterNamespace:
    """Registers Tessera's Lance Namespace (``lance_namespace.connect("tessera", ...)``)
    when ``lance_namespace`` is imported, without importing it (it takes half
    a second) for programs that never use it."""

    def find_spec(
        self, name: str, path: _Sequence[str] | None = None, target: _ModuleType | None = None
    ) -> _ModuleSpec | None:
        if name != "lance_namespace":
            return None
        import importlib.util

        _sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            loader = spec.loader
            run = loader.exec_module

            def exec_module(module: _ModuleType) -> None:
                run(module)
                _register(module)

            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _register(module: object) -> None:
    register = getattr(module, "register_namespace_impl", None)
    if register is not None:
        register("tessera", "tessera.catalog.namespace.TesseraNamespace")


if "lance_namespace" in _sys.modules:
    _register(_sys.modules["lance_namespace"])
else:
    _sys.meta_path.insert(0, _RegisterNamespace())

__version__ = "0.1.0"
__all__ = ["Catalog", "Table", "TesseraError", "__version__", "checksums", "connect", "durability", "errors"]
