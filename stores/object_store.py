"""The object-store interface every table location implements.

Paths are relative to the store's root (the table directory) and use ``/``.
``put_if_not_exists`` is the primitive a commit is decided by: exactly one of
several concurrent callers for the same path succeeds.  A store declares what
it is (``remote``, ``probe_scope``) as attributes; stores are opened by
:func:`stores.registry.open_object_store`.
"""

from __future__ import annotations

import builtins
from typing import Protocol, runtime_checkable

from tessera.format.file.io import RangeReader
from tessera.format.table.store import OutputStream


@runtime_checkable
class ObjectStore(Protocol):
    uri: str
    #: one request costs a network round trip (readers fetch ahead, in parallel and
    #: in few large requests); False for a local disk
    remote: bool

    @property
    def probe_scope(self) -> tuple[str, ...] | None:
        """What a conditional-put probe verdict holds for (:mod:`stores.probe`):
        (endpoint, bucket) on S3; None where a conditional put needs no probe
        (local disk)."""
        ...

    def read(self, path: str) -> bytes: ...

    def open_reader(self, path: str, size: int | None = None) -> RangeReader: ...

    def size(self, path: str) -> int: ...

    def read_tail(self, path: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes of the object (all of it when shorter) and
        its total size, in one request; ObjectNotFoundError if it is missing."""
        ...

    def exists(self, path: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Names (not paths) of the objects directly under ``prefix/``."""
        ...

    def walk(self, prefix: str) -> builtins.list[tuple[str, int, float]]:  # `list` is the method here
        """Every object under ``prefix/`` as (relative path, size, mtime)."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Write ``data``, replacing any object at ``path`` atomically."""
        ...

    def put_if_not_exists(self, path: str, data: bytes) -> None:
        """Create ``path`` only if absent; raises AlreadyExistsError otherwise."""
        ...

    def open_output(self, path: str) -> OutputStream:
        """A writable stream; the object appears (whole) when it is closed,
        and never when it is aborted (:class:`tessera.format.table.store.OutputStream`)."""
        ...

    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst``, replacing ``dst``; ObjectNotFoundError if ``src`` is missing."""
        ...

    def copy_if_not_exists(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` only if ``dst`` is absent; AlreadyExistsError otherwise."""
        ...

    def delete(self, path: str) -> None: ...
