"""Byte-range I/O: everything the format library reads goes through here.

A :class:`RangeReader` knows its size and returns the byte ranges asked for, as
``pyarrow.Buffer`` objects so local files can be served zero-copy from a memory
map (large reads, or files kept open for repeated reads; small one-off reads
use ``pread``).  Later layers plug object stores in by implementing the same
two methods.  Readers whose whole file is in memory or mapped (local files,
bytes) also have ``whole_buffer()``, so a decoder that reads many small pieces
(a ``take`` of scattered rows) can read them in place instead of asking for
each range; a local file also reads many ranges at once with ``read_joined``.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import pyarrow as pa

if TYPE_CHECKING:
    import numpy as np

from ..errors import ClosedFileError, FileAccessError, MissingFileError, TruncatedFileError

T = TypeVar("T")
R = TypeVar("R")

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


#: per thread: the statistics (dict, lock) reads on it are counted into (see counting_into)
_counted = threading.local()


def counted_into() -> tuple[dict, threading.Lock] | None:
    """The statistics reads on this thread are counted into (None: none)."""
    return getattr(_counted, "target", None)


@contextmanager
def counting_into(stats: dict, lock: threading.Lock) -> Iterator[None]:
    """Name ``stats`` (``bytes_read``, ``reads``) as where the counting readers
    read on this thread while the block runs (and on the threads a reader hands
    its work to: :func:`carried`) count what they read."""
    before = counted_into()
    _counted.target = (stats, lock)
    try:
        yield
    finally:
        _counted.target = before


def carried(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` for a worker thread: it counts into what this thread counts into."""
    target = counted_into()
    if target is None:
        return fn

    def run(arg: T) -> R:
        with counting_into(*target):
            return fn(arg)

    return run


class LocalFileReader(_BaseReader):
    """A local file: small reads use ``pread``, large ones a memory map.

    Mapping a file is cheap, but every page then touched costs a page fault
    and unmapping costs again, which a one-off read of scattered small pieces
    (a ``take`` of a few rows per page, a footer) does not earn back.  So the
    file is mapped only when a read asks for at least ``MAP_MIN_BYTES`` or
    :meth:`map` is called (a reader kept open for repeated reads); from then
    on every read is a zero-copy slice of the mapping.
    """

    #: a read of at least this many bytes maps the file
    MAP_MIN_BYTES = 1 << 20

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = None
        self._fd = open_local_file(self.path)
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                raise FileAccessError(
                    errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.EINVAL,
                    f"cannot read {self.path!r}: it is {kind}",
                )
            self._size = st.st_size
            self._identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        self._whole: pa.Buffer | None = None
        self._lock = threading.Lock()
        #: reads using the descriptor right now, and a descriptor to close when they end:
        #: it is never closed under a read (its number could name another file by then)
        self._users = 0
        self._retired: int | None = None
        #: the descriptor was given back (release_descriptor), not closed: reads map the file
        self._released = False
        if not hasattr(os, "pread"):  # no positional reads here: map at once
            self.map()

    def size(self) -> int:
        return self._size

    def cache_key(self) -> tuple:
        """Who this file is (path, device, inode, mtime, size): readers of the
        same unchanged file share what they parse of it."""
        return ("file", self.path, *self._identity)

    def map(self) -> pa.Buffer | None:
        """Map the file (once); returns the whole file as one zero-copy buffer.
        A zero-length file cannot be mapped (it is never a valid Lance file,
        which the footer check reports): None."""
        if self._whole is None and self._size:
            with self._lock:
                if self._whole is None:
                    if self._fd is None and not self._released:
                        raise ClosedFileError(f"{self.path}: read of a closed file")
                    try:
                        mm = pa.memory_map(self.path, "r")
                    except OSError as exc:  # replaced or removed since it was opened
                        raise FileAccessError(exc.errno or errno.EIO, f"cannot map {self.path!r}: {exc}") from exc
                    try:
                        self._whole = mm.read_buffer(self._size)
                    finally:
                        # the mapping lives as long as a buffer of it does; the file's descriptor
                        # (Arrow keeps one open while the file object is) is not needed by it
                        mm.close()
                    if self._fd is not None:  # the mapping serves every read now: no descriptor
                        self._retire_fd()
        return self._whole

    def read_ranges(self, ranges: Sequence[Range]) -> list[pa.Buffer]:
        self._check(ranges)
        whole = self._whole
        if whole is None:
            if not self._size:
                return [pa.py_buffer(b"") for _ in ranges]
            total = sum(n for _, n in ranges)
            fd = self._use_fd() if total < self.MAP_MIN_BYTES else None
            if fd is not None:
                try:
                    return self._pread(fd, ranges, total)
                finally:
                    self._done_fd()
            whole = self.map()
            if whole is None:  # the file has a size, so only a close() on another thread unmaps it
                raise ClosedFileError(f"{self.path}: read of a closed file")
        return [whole.slice(off, length) for off, length in ranges]

    def read_joined(self, offsets, sizes) -> tuple[np.ndarray, np.ndarray]:
        """``(data, starts)``: the ranges ``offsets``/``sizes`` (integer arrays)
        as one uint8 array and where each starts in it; a mapped file is
        returned whole, with ``starts`` the offsets themselves."""
        import numpy as np

        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        if offsets.size:
            if int(offsets.min()) < 0 or int(sizes.min()) < 0 or int((offsets + sizes).max()) > self._size:
                self._check(list(zip(offsets.tolist(), sizes.tolist())))
        total = int(sizes.sum())
        whole = self._whole
        fd = self._use_fd() if whole is None and total < self.MAP_MIN_BYTES else None
        if fd is None:
            if whole is None and self._size:
                whole = self.map()
            if whole is not None:
                return np.frombuffer(whole, dtype=np.uint8), offsets
            # closed (a zero-length file is never mapped, so close() left nothing to read)
            raise ClosedFileError(f"{self.path}: read of a closed file")
        # one pread per range, joined (cheaper than reading into one new
        # large buffer, whose pages the kernel must first provide)
        pread = os.pread
        try:
            out = b"".join([pread(fd, n, off) for off, n in zip(offsets.tolist(), sizes.tolist())])
        finally:
            self._done_fd()
        if len(out) != total:
            raise TruncatedFileError(self.path, f"read {len(out)} of {total} bytes: the file is shorter than it was")
        return np.frombuffer(out, dtype=np.uint8), np.cumsum(sizes) - sizes

    def _pread(self, fd: int, ranges: Sequence[Range], total: int) -> list[pa.Buffer]:
        """The ranges read into one new buffer, returned as slices of it."""
        pread = os.pread
        out = b"".join([pread(fd, n, off) for off, n in ranges])
        if len(out) != total:
            raise TruncatedFileError(self.path, f"read {len(out)} of {total} bytes: the file is shorter than it was")
        parent = pa.py_buffer(out)
        slices, pos = [], 0
        for _, length in ranges:
            slices.append(parent.slice(pos, length))
            pos += length
        return slices

    def whole_buffer(self) -> pa.Buffer | None:
        """The whole file as one zero-copy buffer if it is mapped, else None."""
        return self._whole

    def release_descriptor(self) -> None:
        """Give the file descriptor back (at once, or when the reads using it
        end): later reads map the file."""
        with self._lock:
            if self._fd is not None:
                self._retire_fd()
                self._released = True

    def _use_fd(self) -> int | None:
        with self._lock:
            if self._fd is not None:
                self._users += 1
            return self._fd

    def _done_fd(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._retired is not None:
                os.close(self._retired)
                self._retired = None

    def _retire_fd(self) -> None:
        """Stop using the descriptor (the lock is held): closed now, or by the last read using it."""
        if self._fd is not None:
            if self._users:
                self._retired = self._fd
            else:
                os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        with self._lock:
            self._released = False
            if self._fd is not None:
                self._retire_fd()
            self._whole = None  # unmapped once no buffer of it is in use

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> LocalFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_local_file(path: str) -> int:
    """A read-only descriptor of the local file ``path``; every way the
    operating system (or Python) refuses the path is a FileAccessError
    (MissingFileError when it does not exist)."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError as exc:
        raise MissingFileError(exc.errno, f"{path!r} does not exist") from exc
    except OSError as exc:  # a directory on some systems, permissions, a name too long, ...
        raise FileAccessError(exc.errno, f"cannot open {path!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # an embedded NUL byte
        raise FileAccessError(errno.EINVAL, f"cannot open {path!r}: {exc}") from exc


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

    def whole_buffer(self) -> pa.Buffer:
        """The whole file as one buffer."""
        return self._buf

    def close(self) -> None:
        pass


def open_reader(source: str | os.PathLike[str] | RangeReader | bytes) -> RangeReader:
    """Turn a path, bytes or an existing reader into a :class:`RangeReader`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesReader(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        return LocalFileReader(source)
    if isinstance(source, _BaseReader):  # ours: no protocol check needed
        return source
    # what ``isinstance(source, RangeReader)`` checks, without the protocol
    # machinery's cost (opened once per data file read)
    if all(hasattr(source, m) for m in ("path", "size", "read_ranges", "close")):
        return source
    raise TypeError(f"cannot read Lance data from {type(source).__name__}")
