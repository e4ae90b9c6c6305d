"""Every error Tessera raises, under one root, :class:`TesseraError`.

``from tessera.errors import TesseraError, CommitConflictError`` - the same
classes as ``tessera.catalog.errors``, which re-exports the errors of the
layers below (format, commit, stores) so one module names them all.
"""

from __future__ import annotations

from tessera.catalog.errors import *  # noqa: F403 - the one module users import errors from

__all__ = sorted(
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
)
