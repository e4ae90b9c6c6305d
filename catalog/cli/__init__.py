"""The ``tessera`` command line (click + rich).

Catalog settings come from ``--catalog`` / ``--warehouse``, the environment
(``TESSERA_CATALOG_URI``, ``TESSERA_WAREHOUSE``) or the config file, as for
:func:`tessera.catalog.catalog.connect`.

:mod:`.main` is the group (global options, errors); one module per command
group (:mod:`.namespaces`, :mod:`.tables`, :mod:`.data`, :mod:`.versions`,
:mod:`.indexes`, :mod:`.maintenance`, :mod:`.stores`, :mod:`.serve`);
:mod:`.render` prints, :mod:`.options`, :mod:`.context` and :mod:`.files` are
what commands share.
"""

from .main import main

__all__ = ["main"]
