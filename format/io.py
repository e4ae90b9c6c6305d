"""Byte-range I/O: everything the format library reads goes through here.

A :class:`RangeReader` knows its size and returns the byte ranges asked for, as
``pyarrow.Buffer`` objects so local files can be served zero-copy from a memory
map.  Later layers plug object stores in by implementing the same two methods.
"""

from __future__ import annotations

import os
from typing import Protocol, Sequence, runtime_checkable

import pyarrow as pa

from .errors import TruncatedFileError

Range = tuple[int, int]  # (offset, length)


@runtime_checkable
class RangeReader(Protocol):
    """A random-access source of bytes."""

    path: str

    def size(self) -> int:
        """Total size in bytes."""

    def read_ranges(self, ranges: Sequence[Range]) -> list[pa.Buffer]:
        """Return one buffer per ``(offset, length)``, in the order asked."""

    def close(self) -> None:
        """Release any resource held."""


class _BaseReader:
    path: str

    def size(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _check(self, ranges: Sequence[Range]) -> None:
        size = self.size()
        for off, length in ranges:
            if off < 0 or length < 0 or off + length > size:
                raise TruncatedFileError(
                    self.path,
                    f"byte range [{off}, {off + length}) lies outside the file of {size} bytes",
                )


class LocalFileReader(_BaseReader):
    """A local file, memory-mapped so reads are zero-copy slices."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._size = os.path.getsize(self.path)
        # A zero-length file cannot be memory-mapped; it is also never a valid
        # Lance file, which the footer check reports.
        self._mm = pa.memory_map(self.path, "r") if self._size else None
        # one zero-copy view of the whole mapping; reads are slices of it
        self._whole = self._mm.read_buffer(self._size) if self._mm is not None else None

    def size(self) -> int:
        return self._size

    def read_ranges(self, ranges: Sequence[Range]) -> list[pa.Buffer]:
        self._check(ranges)
        if self._whole is None:
            return [pa.py_buffer(b"") for _ in ranges]
        return [self._whole.slice(off, length) for off, length in ranges]

    def close(self) -> None:
        if self._mm is not None:
            self._whole = None
            self._mm.close()
            self._mm = None

    def __enter__(self) -> "LocalFileReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BytesReader(_BaseReader):
    """An in-memory file (tests, small objects already fetched)."""

    def __init__(self, data: bytes | pa.Buffer, path: str = "<memory>") -> None:
        self._buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        self.path = path

    def size(self) -> int:
        return self._buf.size

    def read_ranges(self, ranges: Sequence[Range]) -> list[pa.Buffer]:
        self._check(ranges)
        return [self._buf.slice(off, length) for off, length in ranges]

    def close(self) -> None:
        pass


def open_reader(source: "str | os.PathLike[str] | RangeReader | bytes") -> RangeReader:
    """Turn a path, bytes or an existing reader into a :class:`RangeReader`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesReader(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        return LocalFileReader(source)
    if isinstance(source, RangeReader):
        return source
    raise TypeError(f"cannot read Lance data from {type(source).__name__}")
