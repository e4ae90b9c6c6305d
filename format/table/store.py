"""What the table format needs from the object store under a table's root.

``tessera.stores.object_store.ObjectStore`` (local disk, S3) satisfies
:class:`TableStore` structurally; the format layer never imports the stores.
Paths are relative to the table's root and use ``/`` (see :mod:`.paths`).
"""

from __future__ import annotations

from typing import BinaryIO, Protocol

from ..io import RangeReader


class TableStore(Protocol):
    """The object-store methods the table format calls.

    A path the store cannot name at all (too long for the file system, a NUL
    byte, escaping the root) raises a ``ValueError`` (the stores raise
    ``InvalidURIError``, a ``ValueError``); a missing object raises a
    ``FileNotFoundError``."""

    @property
    def uri(self) -> str:
        """The table's root, for messages."""
        ...

    def read(self, path: str) -> bytes:
        """The whole object at ``path``."""
        ...

    def open_reader(self, path: str, size: int | None = None) -> RangeReader:
        """A random-access reader of the object at ``path``; ``size``, when
        the caller knows it (a manifest's ``DataFile.file_size_bytes``), spares
        a remote store the request that would ask."""
        ...

    def open_output(self, path: str) -> BinaryIO:
        """A writable stream; the object appears (whole) when it is closed."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any object at ``path``."""
        ...
