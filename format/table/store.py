"""What the table format needs from the object store under a table's root.

One family of protocols, each a subset of the next, so a function asks for
no more than it uses: :class:`ObjectReader` (whole small objects: row-id
sequences), :class:`ObjectWriter` (and putting them: zone maps, BTREE
remapping), :class:`RangeSource` (random access: index files), and
:class:`TableStore`, all of it plus the streams new data files are written
to (:class:`OutputStream`).  ``tessera.stores.object_store.ObjectStore``
(local disk, S3) satisfies them structurally; the format layer never
imports the stores.  Paths are relative to the table's root and use ``/``
(see :mod:`.paths`).

A path the store cannot name at all (too long for the file system, a NUL
byte, escaping the root) raises a ``ValueError`` (the stores raise
``InvalidURIError``, a ``ValueError``); a missing object raises a
``FileNotFoundError``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..file.io import RangeReader


class OutputStream(Protocol):
    """A writable stream whose object appears (whole) at ``close()``, and
    never at ``abort()`` (which discards what was written).  As a context
    manager it closes, or aborts when the block raises."""

    def write(self, data: Any) -> int: ...

    def tell(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: Any, *exc: Any) -> None: ...


class ObjectReader(Protocol):
    """Reads whole (small) objects."""

    def read(self, path: str) -> bytes:
        """The whole object at ``path``."""
        ...


class ObjectWriter(ObjectReader, Protocol):
    """Reads and writes whole (small) objects."""

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any object at ``path``."""
        ...


class RangeSource(Protocol):
    """Opens objects for random access."""

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A random-access reader of the object at ``path``; ``size``, when
        the caller knows it (a manifest's ``DataFile.file_size_bytes``), spares
        a remote store the request that would ask."""
        ...


class TableStore(ObjectWriter, RangeSource, Protocol):
    """The object-store methods the table format calls."""

    @property
    def uri(self) -> str:
        """The table's root, for messages."""
        ...

    def open_output(self, path: str) -> OutputStream:
        """A writable stream; the object appears (whole) when it is closed."""
        ...
