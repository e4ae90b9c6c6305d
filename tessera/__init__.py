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

# In a source tree the sub-packages are the repository's top-level folders
# (an installed wheel has them inside this package instead).
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_root, "catalog", "__init__.py")
):
    __path__.append(_root)  # noqa: F821 - the package's own search path

from .catalog import errors  # noqa: E402
from .catalog.catalog import Catalog, connect  # noqa: E402
from .catalog.errors import TesseraError  # noqa: E402
from .catalog.table import Table  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Catalog", "Table", "TesseraError", "__version__", "connect", "errors"]
