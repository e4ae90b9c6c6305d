"""The object-store interface every table location implements.

Paths are relative to the store's root (the table directory) and use ``/``.
``put_if_not_exists`` is the primitive a commit is decided by: exactly one of
several concurrent callers for the same path succeeds.
"""

from __future__ import annotations

import builtins
import os
from typing import BinaryIO, Protocol, runtime_checkable
from urllib.parse import urlparse

from tessera.format.io import RangeReader

from .errors import InvalidURIError


@runtime_checkable
class ObjectStore(Protocol):
    uri: str

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

    def open_output(self, path: str) -> BinaryIO:
        """A writable stream; the object appears (whole) when it is closed."""
        ...

    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst``, replacing ``dst``; ObjectNotFoundError if ``src`` is missing."""
        ...

    def copy_if_not_exists(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` only if ``dst`` is absent; AlreadyExistsError otherwise."""
        ...

    def delete(self, path: str) -> None: ...


def open_object_store(uri: str, storage_options: dict | None = None) -> ObjectStore:
    """The object store for a table URI: a local path, ``file://`` or ``s3://`` (``s3a://``).

    ``storage_options`` configure S3 (see :mod:`stores.s3_options`)."""
    if not isinstance(uri, (str, os.PathLike)):
        raise InvalidURIError(f"table URI must be a string, got {type(uri).__name__}")
    uri = os.fspath(uri)
    if not uri.strip():
        raise InvalidURIError("table URI is empty")
    if "\x00" in uri:
        raise InvalidURIError(f"table URI {uri!r} contains a NUL byte")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        from .local import LocalObjectStore

        path = parsed.path if scheme == "file" else uri
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise InvalidURIError(f"file URI {uri!r} names host {parsed.netloc!r}; use file:///absolute/path")
        return LocalObjectStore(path)
    if scheme in ("s3", "s3a"):
        from .s3 import S3ObjectStore

        return S3ObjectStore(uri, storage_options)
    raise InvalidURIError(
        f"unsupported table URI scheme {scheme!r} in {uri!r} (supported: local paths, file://, s3://)"
    )
